package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/policy"
)

// catalog is the embedded default configuration's catalog, for decisions
// made without a gateway (toolgate policy authorize and policy test): it
// names the driver of a tool given without one (policy.Catalog) and puts
// arguments in the canonical form the gateway decides on.
type catalog struct{ cfg config.Config }

// defaultCatalog returns the catalog of the embedded default
// configuration.
func defaultCatalog() (catalog, error) {
	cfg, err := config.DefaultConfig()
	return catalog{cfg}, err
}

// DriverOf implements policy.Catalog: the driver of a tools entry, or
// the driver whose name prefixes the id when it publishes tools of its own
// ("workspace.readFile"), whether or not the target exists: the gateway
// refuses an unknown one, a dry run decides it all the same.
func (c catalog) DriverOf(toolID string) (string, bool) {
	if t, ok := c.cfg.Tools[toolID]; ok {
		return t.Driver, true
	}
	name, _, ok := strings.Cut(toolID, ".")
	if !ok {
		return "", false
	}
	sec, ok := c.cfg.Drivers[name]
	if !ok {
		return "", false
	}
	_, publishes := sec.Config.(drivers.Publisher)
	return name, publishes
}

// tool finds the driver and target of a tool id: a tools entry, else a
// tool a driver publishes as "<driver>.<target>".
func (c catalog) tool(id string) (driver, target string, ok bool) {
	if t, ok := c.cfg.Tools[id]; ok {
		return t.Driver, t.Target, true
	}
	for name, sec := range c.cfg.Drivers {
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

// canonical gives a dry-run decision the arguments the gateway would
// decide on: for a tool whose driver's section normalizes arguments
// (drivers.Normalizer, such as the workspace driver's path and cwd), the
// arguments in canonical form. A value with no canonical form is an error
// naming the argument, as the gateway answers INVALID_ARGUMENT.
func (c catalog) canonical(req policy.Request) (policy.Request, error) {
	driver, target, ok := c.tool(req.ToolID)
	if !ok || driver != req.Driver {
		return req, nil
	}
	n, ok := c.cfg.Drivers[driver].Config.(drivers.Normalizer)
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
