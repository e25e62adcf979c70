package console

import (
	"net/http"

	"github.com/toolgate/toolgate/gateway/frontdoor/console/browse"
	"github.com/toolgate/toolgate/gateway/frontdoor/console/oidc"
)

// oidcSignIn is the OpenID Connect flow as the console's pages use it:
// the caller the ID token proves becomes a person with the groups of
// auth.keys for that name and of the token, as a token sign-in does, and
// the session ends no later than the token.
type oidcSignIn struct {
	client *oidc.Client
	access *access
}

func (o oidcSignIn) Label() string { return o.client.Label() }

func (o oidcSignIn) Begin(w http.ResponseWriter, r *http.Request) error { return o.client.Begin(w, r) }

func (o oidcSignIn) Finish(w http.ResponseWriter, r *http.Request) (browse.Person, error) {
	who, expires, err := o.client.Finish(w, r)
	if err != nil {
		return browse.Person{}, err
	}
	return browse.Person{Name: who.Caller, Identity: who.Identity, Expires: expires,
		Groups: o.access.attrs(who.Caller, who.Identity).Groups}, nil
}
