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
// no re-encoding.
func (g *Gateway) canonicalise(c call, tool Tool, args map[string]any) (call, map[string]any, error) {
	n, ok := g.drivers[tool.Driver].(drivers.Normalizer)
	if !ok {
		return c, args, nil
	}
	canon, changed, err := normalize(n, tool.Target, args)
	if err != nil {
		var argErr *drivers.ArgError
		if errors.As(err, &argErr) {
			return c, nil, invalidf("args.%s: %v", argErr.Arg, argErr.Err)
		}
		return c, nil, invalidf("args: %v", err)
	}
	if !changed {
		return c, args, nil
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

// normalize turns a normaliser's panic into an error, as runDriver does for
// Run: a bug in one driver must not take the gateway down.
func normalize(n drivers.Normalizer, target string, args map[string]any) (canon map[string]any, changed bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("normaliser panicked: %v", p)
		}
	}()
	return n.Normalize(target, args)
}
