package oidc

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
)

// FuzzFinish: whatever query and cookie a callback carries, it signs no
// one in without a state this client began, and never panics.
func FuzzFinish(f *testing.F) {
	f.Add("state=abc&code=xyz", "abc")
	f.Add("code=x&state=&iss=https://evil.example", "")
	f.Add("error=access_denied&error_description=%3Cscript%3E", "x")
	f.Add("state=%00%ff&state=a&code="+string(make([]byte, 3000)), "\x00")
	cfg := Config{Issuer: "http://127.0.0.1:1", ClientID: "console", ClientSecret: ClientSecret{SecretSource: config.SecretSource{Env: "S"}},
		RedirectURL: "http://127.0.0.1:8470" + CallbackPath}
	c, err := New(cfg, func(string) string { return "secret" }, nil, Options{Now: time.Now})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, query, cookie string) {
		r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8470"+CallbackPath, nil)
		r.URL.RawQuery = query
		r.Header.Set("Cookie", StateCookie+"="+cookie)
		if _, _, err := c.Finish(httptest.NewRecorder(), r); !errors.Is(err, ErrRefused) {
			t.Fatalf("Finish(%q): %v, want a refusal", query, err)
		}
	})
}
