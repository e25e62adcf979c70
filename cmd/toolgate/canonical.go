package main

import (
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/policy"
)

// canonicalArgs gives a dry-run decision the arguments the gateway would
// decide on: for a tool of the embedded default catalog whose driver's
// section normalizes arguments (drivers.Normalizer, such as the workspace
// driver's path and cwd), the arguments in canonical form. A value with no
// canonical form is an error naming the argument, as the gateway answers
// INVALID_ARGUMENT.
func canonicalArgs(req policy.Request) (policy.Request, error) {
	cfg, err := gateway.DefaultConfig()
	if err != nil {
		return req, err
	}
	driver, target, ok := catalogTool(cfg, req.ToolID)
	if !ok || driver != req.Driver {
		return req, nil
	}
	n, ok := cfg.Drivers[driver].Config.(drivers.Normalizer)
	if !ok {
		return req, nil
	}
	canon, _, err := n.Normalize(target, req.Args)
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

// catalogTool finds the driver and target of tool id in cfg's catalog: a
// tools entry, else a tool a driver publishes as "<driver>.<target>".
func catalogTool(cfg gateway.Config, id string) (driver, target string, ok bool) {
	if t, ok := cfg.Tools[id]; ok {
		return t.Driver, t.Target, true
	}
	for name, sec := range cfg.Drivers {
		p, ok := sec.Config.(drivers.Publisher)
		if !ok {
			continue
		}
		for _, pt := range p.Published() {
			if name+"."+pt.Target == id {
				return name, pt.Target, true
			}
		}
	}
	return "", "", false
}
