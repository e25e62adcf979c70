package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/workspace"
	"github.com/toolgate/toolgate/policy"
)

// canonicalWorkspaceArgs gives a dry-run decision the arguments the gateway
// would decide on: for a tool of the built-in workspace driver (the
// embedded default catalog's "workspace.<operation>" ids), the path or cwd
// in canonical form. A value with no canonical form is an error naming the
// argument, as the gateway answers INVALID_ARGUMENT.
func canonicalWorkspaceArgs(req policy.Request) (policy.Request, error) {
	op, ok := strings.CutPrefix(req.ToolID, policy.WorkspaceDriver+".")
	if !ok || req.Driver != policy.WorkspaceDriver {
		return req, nil
	}
	canon, _, err := workspace.NormalizeArgs(op, req.Args)
	if err != nil {
		var argErr *drivers.ArgError
		if errors.As(err, &argErr) {
			return req, fmt.Errorf("args.%s: %w (the gateway refuses the call with INVALID_ARGUMENT)", argErr.Arg, argErr.Err)
		}
		return req, err
	}
	req.Args = canon
	return req, nil
}
