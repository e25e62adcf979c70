package gateway

import (
	"context"
	"errors"
)

// Identity is what a front door learned about a caller beyond its name,
// when the caller proved who it is with something other than an API key
// of auth.keys (an OAuth access token). Cedar sees its groups and roles
// joined to those auth.keys gives the same caller name; request.json
// records where it came from, outside the canonical request hash, so a
// retry under a refreshed token is the same request. It never holds the
// credential itself.
type Identity struct {
	// Method is how the caller authenticated: "oauth".
	Method string `json:"method"`
	// Issuer, Subject and TokenID are the token's iss, sub and jti.
	Issuer  string `json:"issuer,omitempty"`
	Subject string `json:"subject,omitempty"`
	TokenID string `json:"jti,omitempty"`
	// Groups and Roles are added to the caller's Cedar attributes.
	Groups []string `json:"-"`
	Roles  []string `json:"-"`
}

// errNotYetWired is returned by the seam until its implementation lands.
var errNotYetWired = errors.New("gateway: not wired yet")

// ToolsAllowedAs returns those of ids (catalog tool ids, in order) that
// policy could allow caller, with identity's attributes, to run under
// policyRef ("" for the default set): the filter of ListToolsAs applied to
// a page a door already holds, with no limit of its own.
func (g *Gateway) ToolsAllowedAs(ctx context.Context, caller string, identity *Identity, policyRef string, ids []string) ([]string, error) {
	return nil, errNotYetWired
}

// SubscribePolicyChanges returns a channel that receives a value after
// each policy reload that swapped the sets in (a pending value is never
// doubled: a slow reader sees one change for many), and a function that
// ends the subscription.
func (g *Gateway) SubscribePolicyChanges() (<-chan struct{}, func()) {
	ch := make(chan struct{})
	return ch, func() {}
}
