package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/drivers"
)

// canonicalise puts the arguments that name resources in the form the
// tool's driver defines (drivers.Normalizer), before anything else sees
// them: the canonical request hash, request.json, Cedar's context and the
// driver all get the same values, so policy decides on exactly what runs
// and two spellings of one call are one request. A value with no canonical
// form is an invalidArgument naming the argument and the rule. A tool whose
// driver has no normaliser costs one type assertion; canonical input costs
// no re-encoding. Null arguments are left out first, for every driver.
func (g *Gateway) canonicalise(c call, tool Tool, args map[string]any) (call, map[string]any, error) {
	// A null argument is an absent one (drivers.OmitNulls): {"x": null}
	// and {} are one call, with one hash, one record and one decision.
	args, dropped := drivers.OmitNulls(args)
	canon, changed := args, false
	if n, ok := g.drivers[tool.Driver].(drivers.Normalizer); ok {
		var err error
		if canon, changed, err = normalize(n, tool.Target, args); err != nil {
			var argErr *drivers.ArgError
			if errors.As(err, &argErr) {
				return c, nil, invalidf("args.%s: %v", argErr.Arg, argErr.Err)
			}
			return c, nil, invalidf("args: %v", err)
		}
	}
	if !changed && !dropped {
		return c, args, nil
	}
	if !changed {
		canon = args
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(canon); err != nil {
		return c, nil, fmt.Errorf("gateway: encode canonical args: %w", err)
	}
	c.Args = bytes.TrimRight(buf.Bytes(), "\n")
	return c, canon, nil
}

// normalize turns a normaliser's panic into an error, as callDriver does for
// Run: a bug in one driver must not take the gateway down.
func normalize(n drivers.Normalizer, target string, args map[string]any) (canon map[string]any, changed bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("normaliser panicked: %v", p)
		}
	}()
	return n.Normalize(target, args)
}
