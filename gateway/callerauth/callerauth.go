// Package callerauth maps the bearer API key of a call onto a caller name
// and the attributes auth.keys gives it. It never imports gateway.
package callerauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/policy"
)

// Authenticator maps the bearer API key of a call onto a caller name.
type Authenticator struct {
	keys  []apiKey // empty: authentication is off
	attrs map[string]policy.CallerAttributes
}

type apiKey struct {
	caller string
	digest [sha256.Size]byte
}

// New builds an Authenticator from the configured keys, reading
// environment-held keys through getenv. With no keys, every call is made by
// config.AnonymousCaller; config.Config.Validate makes sure that only happens on loopback.
func New(keys []config.KeyConfig, getenv func(string) string) (*Authenticator, error) {
	a := &Authenticator{attrs: map[string]policy.CallerAttributes{}}
	for i, k := range keys {
		attrs := a.attrs[k.Caller]
		attrs.Groups = union(attrs.Groups, k.Groups)
		attrs.Roles = union(attrs.Roles, k.Roles)
		a.attrs[k.Caller] = attrs
		var d [sha256.Size]byte
		switch {
		case k.SHA256 != "":
			b, err := hex.DecodeString(k.SHA256)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("auth.keys[%d].sha256: must be 64 hex digits", i)
			}
			copy(d[:], b)
		case k.Env != "":
			v := getenv(k.Env)
			if v == "" {
				return nil, fmt.Errorf("auth.keys[%d].env: environment variable %s is empty or unset", i, k.Env)
			}
			d = sha256.Sum256([]byte(v))
		default:
			return nil, fmt.Errorf("auth.keys[%d]: give sha256 or env", i)
		}
		a.keys = append(a.keys, apiKey{caller: k.Caller, digest: d})
	}
	return a, nil
}

// Enabled reports whether callers must present a key.
func (a *Authenticator) Enabled() bool { return len(a.keys) > 0 }

// Authenticate returns the caller name for the call in ctx, or an
// UNAUTHENTICATED status.
func (a *Authenticator) Authenticate(ctx context.Context) (string, error) {
	if !a.Enabled() {
		return config.AnonymousCaller, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	values := md.Get("authorization")
	if len(values) != 1 {
		return "", status.Error(codes.Unauthenticated, `authorization: send exactly one "authorization: Bearer <key>" metadata entry`)
	}
	scheme, key, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(key) == "" {
		return "", status.Error(codes.Unauthenticated, `authorization: expected "Bearer <key>"`)
	}
	caller, ok := a.CallerForKey(key)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "authorization: unknown API key")
	}
	return caller, nil
}

// CallerForKey returns the caller whose API key is key, compared exactly
// as Authenticate compares a bearer key: surrounding white space trimmed,
// then the SHA-256 of the key against every configured digest in constant
// time. It is for front doors, whose protocols carry the key elsewhere (a
// path prefix). With authentication off every key, or none, is
// config.AnonymousCaller. The key is neither logged nor kept.
func (a *Authenticator) CallerForKey(key string) (string, bool) {
	if !a.Enabled() {
		return config.AnonymousCaller, true
	}
	key = strings.TrimSpace(key)
	if key == "" {
		return "", false
	}
	presented := sha256.Sum256([]byte(key))
	// Compare against every key without stopping early, so the time taken
	// does not tell which key (or how much of one) matched.
	caller := ""
	for _, k := range a.keys {
		if subtle.ConstantTimeCompare(presented[:], k.digest[:]) == 1 {
			caller = k.caller
		}
	}
	return caller, caller != ""
}

// Attributes returns what the configuration says about a caller, for
// policy. Unknown callers, the anonymous one included, have none.
func (a *Authenticator) Attributes(caller string) policy.CallerAttributes {
	return a.attrs[caller]
}

// union returns the sorted union of two lists, without repeats.
func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}
