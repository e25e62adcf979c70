package oauth_test

import (
	"context"
	"testing"

	"github.com/toolgate/toolgate/gateway/frontdoor/oauth"
	"github.com/toolgate/toolgate/gateway/frontdoor/oauth/oauthtest"
)

// BenchmarkVerify is the cost of one token check per algorithm, keys
// cached: what an OAuth caller adds to each request.
func BenchmarkVerify(b *testing.B) {
	iss := oauthtest.New(b, issuerURL)
	path := b.TempDir() + "/jwks.json"
	iss.WriteJWKS(b, path)
	v, err := oauth.NewVerifier(context.Background(), &oauth.Config{Resource: resource, Issuer: issuerURL, JWKSFile: path}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, alg := range []string{"ES256", "RS256", "EdDSA"} {
		token := iss.SignWith(b, alg, iss.Claims(resource, "alice"))
		b.Run(alg, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(context.Background(), token); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
