package gateway

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/lease"
)

// holdsInstance refuses a new call with UNAVAILABLE unless this process
// holds its instance name's lease: once a newer process holds it, this one
// starts nothing. Without a lease (a gateway built in code) every call
// passes.
func (g *Gateway) holdsInstance(ctx context.Context) error {
	if g.lease == nil {
		return nil
	}
	err := g.lease.Held(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lease.ErrFenced):
		return status.Errorf(codes.Unavailable, "%v; nothing was executed", err)
	}
	return status.Errorf(codes.Unavailable, "this gateway cannot renew its lease on instance name %q, so it starts nothing "+
		"(retry later, or with another gateway): %v", g.instance, err)
}

// InstanceFenced is closed when a newer process takes this gateway's
// instance name over: from then on it refuses every call, and its server
// should say it is not serving. Never closed without a lease.
func (g *Gateway) InstanceFenced() <-chan struct{} {
	if g.lease == nil {
		return nil
	}
	return g.lease.Fenced()
}

// confirmInstance makes sure, in the store, that this process still holds
// its instance name before recovery writes for a request it did not run
// itself.
func (g *Gateway) confirmInstance(ctx context.Context) error {
	if g.lease == nil {
		return nil
	}
	return g.lease.Confirm(ctx)
}

// owns reports whether the gateway named gatewayName (a record's
// "gateway") belongs to this process's instance and to an epoch of its
// lease not newer than this process's: its own, or an earlier process of
// the name, which this one took the name from. A newer epoch's requests
// belong to the process that holds the name now.
func (g *Gateway) owns(gatewayName string) bool {
	inst, epoch := evidence.ParseGatewayName(gatewayName)
	return inst == g.instance && (g.lease == nil || epoch <= g.lease.Epoch())
}

// recoveryFenced reports whether recovery must stop for good: a newer
// process holds the instance name.
func (g *Gateway) recoveryFenced(ctx context.Context) bool {
	if g.lease == nil {
		return false
	}
	err := g.lease.Held(ctx)
	return errors.Is(err, lease.ErrFenced)
}

// gatewayName is how a gateway names itself in evidence:
// "toolgate/<version>@<instance>".
func gatewayName(instance string) string { return fmt.Sprintf("toolgate/%s@%s", Version, instance) }
