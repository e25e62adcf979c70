package gateway

import (
	"context"
	"time"
)

// policyReloader is a Decider that can follow its policy folder.
type policyReloader interface {
	Reload(force bool) (bool, error)
	Watch(ctx context.Context, interval time.Duration, report func(swapped bool, err error))
}

// ReloadPolicies loads the policy folder again, even if it looks unchanged,
// and swaps the new sets in when all of them are valid. It reports whether
// it swapped, and tells SubscribePolicyChanges' subscribers when it did;
// an error means the running sets stay.
func (g *Gateway) ReloadPolicies() (bool, error) {
	r, ok := g.decider.(policyReloader)
	if !ok {
		return false, nil
	}
	swapped, err := r.Reload(true)
	g.telemetry.PolicyReload(err == nil)
	if swapped {
		g.changes.fire()
	}
	return swapped, err
}

// WatchPolicies reloads the policy folder whenever its files change,
// checking every interval until ctx ends, logs each outcome and tells
// SubscribePolicyChanges' subscribers of each swap.
func (g *Gateway) WatchPolicies(ctx context.Context, interval time.Duration) {
	r, ok := g.decider.(policyReloader)
	if !ok || interval <= 0 {
		return
	}
	r.Watch(ctx, interval, g.logReload)
}

func (g *Gateway) logReload(swapped bool, err error) {
	g.telemetry.PolicyReload(err == nil)
	switch {
	case err != nil:
		g.log.Error("policy change rejected; the running policies stay in force", "err", err)
	case swapped:
		g.log.Info("policies reloaded")
	}
	if swapped {
		g.changes.fire()
	}
}
