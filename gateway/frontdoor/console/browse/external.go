package browse

import (
	"net/http"
)

// Paths of a sign-in with an identity provider.
const (
	ExternalStartPath    = "/signin/oidc"
	ExternalCallbackPath = "/signin/oidc/callback"
)

// ExternalSignIn signs people in with an identity provider (package
// console/oidc's flow): Begin sends the browser there, Finish takes it
// back and returns who signed in, with Person.Expires no later than the
// credential the provider issued.
type ExternalSignIn interface {
	// Label is the sign-in link's text.
	Label() string
	Begin(w http.ResponseWriter, r *http.Request) error
	Finish(w http.ResponseWriter, r *http.Request) (Person, error)
}

func (s *Server) externalBegin(w http.ResponseWriter, r *http.Request) {
	if s.opts.External == nil || s.opts.Access == nil {
		http.NotFound(w, r)
		return
	}
	if err := s.opts.External.Begin(w, r); err != nil {
		s.log.Warn("console: sign-in with the identity provider could not begin", "err", err)
		s.render(w, http.StatusBadRequest, "signin", nil, "The sign-in with the identity provider could not begin: "+err.Error())
	}
}

// externalCallback finishes a sign-in and starts the same server-side
// session as an API key does. Where the browser goes next is fixed: no
// parameter of the callback names a place.
func (s *Server) externalCallback(w http.ResponseWriter, r *http.Request) {
	if s.opts.External == nil || s.opts.Access == nil {
		http.NotFound(w, r)
		return
	}
	addr := clientAddr(r)
	if !s.throttle.allowed(addr) {
		s.render(w, http.StatusTooManyRequests, "signin", nil, "Too many failed sign-ins from your address: wait a minute.")
		return
	}
	p, err := s.opts.External.Finish(w, r)
	if err != nil {
		s.throttle.failed(addr)
		s.log.Info("console: sign-in with the identity provider refused", "err", err)
		s.render(w, http.StatusUnauthorized, "signin", nil, "The sign-in with the identity provider was refused.")
		return
	}
	if !p.Expires.IsZero() && !s.opts.Now().Before(p.Expires) {
		s.render(w, http.StatusUnauthorized, "signin", nil, "The identity provider's sign-in has already expired.")
		return
	}
	if !s.startSession(w, p) {
		return
	}
	// A page, not a redirect: the browser came here from the provider's
	// site, and a browser that judges SameSite by the whole redirect chain
	// (as the cookie specification's draft asks; Chromium only behind an
	// option) would not send the Strict session cookie on a redirect. The
	// link and the refresh are a navigation from this origin.
	s.render(w, http.StatusOK, "signedin", nil, p.Name)
}
