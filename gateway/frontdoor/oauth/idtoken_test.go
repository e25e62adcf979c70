package oauth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolgate/toolgate/gateway/frontdoor/oauth"
	"github.com/toolgate/toolgate/gateway/frontdoor/oauth/oauthtest"
)

func TestIDTokenVerifier(t *testing.T) {
	t.Parallel()
	iss := oauthtest.New(t, "https://id.example.com")
	v, err := oauth.NewIDTokenVerifier(context.Background(), oauth.Config{Issuer: iss.URL, JWKSURL: iss.JWKSURL(t), GroupsClaim: "groups"}, "console", nil)
	if err != nil {
		t.Fatal(err)
	}
	token := func(change func(jwt.MapClaims)) string {
		c := iss.Claims("console", "alice")
		c["nonce"], c["groups"] = "n-1", []string{"dev"}
		if change != nil {
			change(c)
		}
		return iss.Sign(t, c)
	}
	tests := []struct {
		name, token, nonce string
		ok                 bool
	}{
		{"a token for this client with its nonce", token(nil), "n-1", true},
		{"several audiences, authorized for this client", token(func(c jwt.MapClaims) { c["aud"], c["azp"] = []string{"console", "api"}, "console" }), "n-1", true},
		{"another client", token(func(c jwt.MapClaims) { c["aud"] = "other" }), "n-1", false},
		{"several audiences without azp", token(func(c jwt.MapClaims) { c["aud"] = []string{"console", "api"} }), "n-1", false},
		{"authorized for another client", token(func(c jwt.MapClaims) { c["azp"] = "other" }), "n-1", false},
		{"another issuer", token(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" }), "n-1", false},
		{"expired", token(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() }), "n-1", false},
		{"no exp", token(func(c jwt.MapClaims) { delete(c, "exp") }), "n-1", false},
		{"another nonce", token(nil), "n-2", false},
		{"no nonce expected", token(func(c jwt.MapClaims) { delete(c, "nonce") }), "", false},
		{"signed by another key", oauthtest.New(t, iss.URL).Sign(t, iss.Claims("console", "alice")), "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, exp, err := v.Verify(context.Background(), tc.token, tc.nonce)
			if tc.ok != (err == nil) {
				t.Fatalf("Verify: %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok {
				if !errors.Is(err, oauth.ErrInvalidToken) {
					t.Fatalf("Verify: %v, want ErrInvalidToken", err)
				}
				return
			}
			if p.Caller != "oauth:alice" || p.Identity.Method != "oidc" || len(p.Identity.Groups) != 1 || exp.Before(time.Now()) {
				t.Fatalf("Verify = %+v %+v, %v", p, p.Identity, exp)
			}
		})
	}
}
