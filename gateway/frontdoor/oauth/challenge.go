package oauth

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// wellKnown is RFC 9728's well-known path segment.
const wellKnown = "/.well-known/oauth-protected-resource"

// UnauthorizedCode is the JSON-RPC error code of a refused request: in
// the range the MCP specification leaves to implementations.
const UnauthorizedCode = -32001

// MetadataURL is where the resource's metadata is served: RFC 9728's
// well-known path inserted between the host and the path of resource.
func (v *Verifier) MetadataURL() string {
	u, _ := url.Parse(v.cfg.Resource) // validated
	return u.Scheme + "://" + u.Host + v.MetadataPaths()[0]
}

// MetadataPaths are the paths MetadataHandler is to be routed on: the
// path-insertion form of resource first, then the root well-known path
// (one path when resource has none).
func (v *Verifier) MetadataPaths() []string {
	u, _ := url.Parse(v.cfg.Resource) // validated
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	if p == "" {
		return []string{wellKnown}
	}
	return []string{wellKnown + p, wellKnown}
}

// MetadataHandler serves the protected-resource metadata (RFC 9728) to
// anyone: it is public, and clients read it before they hold a token.
func (v *Verifier) MetadataHandler() http.Handler {
	meta := v.meta
	return auth.ProtectedResourceMetadataHandler(&meta)
}

// Challenge answers a request refused for err: 403 with
// error="insufficient_scope" when err wraps ErrInsufficientScope, else 401,
// with error="invalid_token" when err wraps ErrInvalidToken (a token was
// sent and proved nothing) and no error code when there was no token.
// WWW-Authenticate points at the metadata and names the required scopes;
// the body is a JSON-RPC error with a null id. err is logged at debug
// level; it never holds the token.
func (v *Verifier) Challenge(w http.ResponseWriter, r *http.Request, err error) {
	status, code, message := http.StatusUnauthorized, "", "unauthorized"
	switch {
	case errors.Is(err, ErrInsufficientScope):
		status, code, message = http.StatusForbidden, "insufficient_scope", "insufficient scope"
	case errors.Is(err, ErrInvalidToken):
		code = "invalid_token"
	}
	params := []string{fmt.Sprintf("resource_metadata=%q", v.MetadataURL())}
	if len(v.cfg.RequiredScopes) > 0 {
		params = append(params, fmt.Sprintf("scope=%q", strings.Join(v.cfg.RequiredScopes, " ")))
	}
	if code != "" {
		params = append(params, fmt.Sprintf("error=%q", code))
	}
	v.log.Debug("oauth: request refused", "status", status, "err", err)
	h := w.Header()
	h.Set("WWW-Authenticate", "Bearer "+strings.Join(params, ", "))
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":null,"error":{"code":%d,"message":%q}}`+"\n", UnauthorizedCode, message)
}
