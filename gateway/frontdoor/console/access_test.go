package console

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/console/browse"
	"github.com/toolgate/toolgate/policy"
)

// fakeVerifier accepts one token, as the identity it names.
type fakeVerifier struct {
	token string
	p     frontdoor.Principal
}

func (f fakeVerifier) VerifyBearer(_ context.Context, token string) (frontdoor.Principal, error) {
	if token != f.token {
		return frontdoor.Principal{}, errors.New("refused")
	}
	return f.p, nil
}

// jwtWithExp is a token-shaped string whose payload says exp.
func jwtWithExp(exp int64) string {
	payload := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"carol","exp":` + strconv.FormatInt(exp, 10) + `}`))
	return "eyJhbGciOiJFUzI1NiJ9." + payload + ".c2ln"
}

func TestSignInByKeyOrToken(t *testing.T) {
	t.Parallel()
	auth, err := callerauth.New([]config.KeyConfig{{Caller: "bob", Env: "K", Groups: []string{"ops"}}},
		func(string) string { return "k-bob-0123456789" })
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rules := `@id("team") permit (principal, action == Action::"ReadEvidence", resource) when { context.requesterGroups.containsAny(principal.groups) };`
	if err := os.WriteFile(filepath.Join(dir, "policy.default.cedar"), []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := policy.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(10 * time.Minute).Unix()
	token := jwtWithExp(exp)
	v := fakeVerifier{token: token, p: frontdoor.Principal{Caller: "carol", Identity: &gateway.Identity{Method: "oauth", Subject: "carol", Groups: []string{"dev"}}}}
	anon := fakeVerifier{token: "anon-token", p: frontdoor.Principal{Caller: gateway.AnonymousCaller}}
	a := newAccess(fakeKeys{auth}, fixedPolicies{e}, "", v, anon)
	ctx := context.Background()

	tests := []struct {
		name, key, want string
		groups          []string
		expires         bool
	}{
		{name: "an API key", key: "k-bob-0123456789", want: "bob", groups: []string{"ops"}},
		{name: "an access token the issuer signed", key: token, want: "carol", groups: []string{"dev"}, expires: true},
		{name: "an unknown key", key: "k-nobody"},
		{name: "an empty key", key: ""},
		{name: "a token naming the anonymous caller", key: "anon-token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := a.SignIn(ctx, tc.key)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("signed in as %+v", p)
				}
				return
			}
			if err != nil || p.Name != tc.want || len(p.Groups) != len(tc.groups) || (len(tc.groups) > 0 && p.Groups[0] != tc.groups[0]) {
				t.Fatalf("SignIn = %+v, %v; want %s in %v", p, err, tc.want, tc.groups)
			}
			if tc.expires != !p.Expires.IsZero() || (tc.expires && p.Expires.Unix() != exp) {
				t.Fatalf("expires %v, want the token's exp %v", p.Expires, tc.expires)
			}
		})
	}
	// A token's groups reach Cedar: carol is in ops by her token alone.
	opsToken := jwtWithExp(exp + 1)
	b := newAccess(fakeKeys{auth}, fixedPolicies{e}, "", v,
		fakeVerifier{token: opsToken, p: frontdoor.Principal{Caller: "carol", Identity: &gateway.Identity{Method: "oauth", Groups: []string{"ops"}}}})
	opsCall := &browse.Summary{ID: "r2", Caller: "bob", Tool: "t"}
	devCarol, err := b.SignIn(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	opsCarol, err := b.SignIn(ctx, opsToken)
	if err != nil {
		t.Fatal(err)
	}
	if b.MayRead(ctx, devCarol, opsCall) {
		t.Fatal("carol in dev by her token reads an ops member's call")
	}
	if !b.MayRead(ctx, opsCarol, opsCall) {
		t.Fatal("carol in ops by her token may not read an ops member's call")
	}
}
