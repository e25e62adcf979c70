package mcpdoor

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/oauth"
)

// The door as an OAuth 2.1 resource server (front_doors.mcp.oauth): the
// plumbing gives it the bearer tokens that are no API key (VerifyBearer),
// a refused request gets the challenge that points the client at the
// protected-resource metadata, and the metadata is served to anyone.

// AuthenticatesCallers reports whether the door verifies OAuth access
// tokens; it implements frontdoor.CallerAuthenticator, so that the
// address counts as authenticated even without auth.keys.
func (c *Config) AuthenticatesCallers() bool { return c.OAuth != nil }

// validateOAuth checks the oauth key; its errors start with "oauth.".
func (c *Config) validateOAuth() error {
	if c.OAuth == nil {
		return nil
	}
	if err := c.OAuth.Validate(); err != nil {
		return fmt.Errorf("oauth.%w", err)
	}
	return nil
}

// openOAuth makes the door's verifier when oauth is set, and routes
// refusals to its challenge. Groups and roles auth.keys gives a caller
// name are joined by the gateway itself, so none are passed here.
func (d *Door) openOAuth(cfg *oauth.Config) error {
	if cfg == nil {
		return nil
	}
	v, err := oauth.NewVerifier(context.Background(), cfg, nil, oauth.WithLogger(d.log))
	if err != nil {
		return fmt.Errorf("mcpdoor: %w", err)
	}
	d.verifier = v
	d.challenge = v.Challenge
	return nil
}

// errNoOAuth is VerifyBearer's answer when oauth is not set.
var errNoOAuth = errors.New("mcpdoor: oauth is not configured: bearer tokens other than API keys are not accepted")

// VerifyBearer verifies an OAuth access token; it implements
// frontdoor.BearerVerifier. The token is neither kept nor logged.
func (d *Door) VerifyBearer(ctx context.Context, token string) (frontdoor.Principal, error) {
	if d.verifier == nil {
		return frontdoor.Principal{}, errNoOAuth
	}
	return d.verifier.Verify(ctx, token)
}

// oauthRoutes serves the protected-resource metadata (RFC 9728) at the
// path-insertion form of oauth.resource and at the root well-known path.
// The plumbing marks a request without a credential, and this handler
// serves it all the same: clients read the metadata to get a token.
func (d *Door) oauthRoutes(mux *http.ServeMux) {
	if d.verifier == nil {
		return
	}
	h := d.verifier.MetadataHandler()
	for _, p := range d.verifier.MetadataPaths() {
		mux.Handle(p, h)
	}
}

// The door is a verifier and its settings say when.
var (
	_ frontdoor.BearerVerifier      = (*Door)(nil)
	_ frontdoor.CallerAuthenticator = (*Config)(nil)
)
