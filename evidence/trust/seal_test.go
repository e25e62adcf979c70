package trust

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
)

func testSealer(t testing.TB, seed byte) *Sealer {
	t.Helper()
	seedBytes := make([]byte, 32)
	seedBytes[0] = seed
	mac := make([]byte, 32)
	mac[0] = seed
	s, err := NewSealer(ed25519.NewKeyFromSeed(seedBytes), mac)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSealOpenRoundTrip(t *testing.T) {
	t.Parallel()
	s := testSealer(t, 1)
	ring, err := NewKeyring([]ed25519.PublicKey{s.PublicKey()}, s.MACKey())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, body string }{
		{"object", `{"a":1,"b":"x"}`},
		{"indented with newline", "{\n  \"a\": 1\n}\n"},
		{"empty object", `{}`},
		{"text that looks like a seal", `{"note":"\"seal\":{}"}`},
	} {
		for _, alg := range []string{AlgEd25519, AlgHMAC} {
			t.Run(tc.name+"/"+alg, func(t *testing.T) {
				seal := s.Sign
				if alg == AlgHMAC {
					seal = s.MAC
				}
				sealed, err := seal("requests/r1/x.json", []byte(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				body, got, err := ring.Open("requests/r1/x.json", sealed)
				if err != nil {
					t.Fatalf("Open: %v (sealed %s)", err, sealed)
				}
				if string(body) != tc.body || got.Algorithm != alg {
					t.Fatalf("Open = %q, %s; want %q, %s", body, got.Algorithm, tc.body, alg)
				}
			})
		}
	}
}

func TestOpenRefusesTampering(t *testing.T) {
	t.Parallel()
	s := testSealer(t, 1)
	other := testSealer(t, 2)
	ring, _ := NewKeyring([]ed25519.PublicKey{s.PublicKey()}, s.MACKey())
	const key = "requests/r1/approval.json"
	good, _ := s.Sign(key, []byte(`{"decision":"deny"}`))
	mac, _ := s.MAC(key, []byte(`{"decision":"deny"}`))
	foreign, _ := other.Sign(key, []byte(`{"decision":"approve"}`))
	foreignMAC, _ := other.MAC(key, []byte(`{"decision":"approve"}`))
	for _, tc := range []struct {
		name, key string
		data      []byte
		want      error
	}{
		{"unsealed", key, []byte(`{"decision":"approve"}`), ErrUnsealed},
		{"content changed", key, []byte(strings.Replace(string(good), "deny", "allo", 1)), nil},
		{"moved to another request", "requests/r2/approval.json", good, nil},
		{"signed by an untrusted key", key, foreign, ErrUntrustedKey},
		{"MAC by an unknown key", key, foreignMAC, ErrUntrustedKey},
		{"MAC changed", key, []byte(strings.Replace(string(mac), "deny", "dent", 1)), nil},
		{"signature respelled with a line break", key, respellValue(t, good), nil},
		{"MAC respelled with a line break", key, respellValue(t, mac), nil},
		{"seal value not base64", key, []byte(`{"decision":"approve","seal":{"alg":"ed25519","key_id":"x","value":"!!"}}`), nil},
		{"unknown algorithm", key, []byte(`{"decision":"approve","seal":{"alg":"none","key_id":"x","value":""}}`), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ring.Open(tc.key, tc.data)
			if !errors.Is(err, ErrTampered) {
				t.Fatalf("Open = %v, want ErrTampered", err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Open = %v, want %v", err, tc.want)
			}
		})
	}
	if _, _, err := ring.OpenSigned(key, mac); !errors.Is(err, ErrTampered) {
		t.Fatalf("OpenSigned of a MAC = %v, want ErrTampered", err)
	}
}

// respellValue puts an escaped line break inside a sealed record's seal
// value: the same bytes to a lenient base64 decoder, another record to
// anyone who hashes it.
func respellValue(t *testing.T, sealed []byte) []byte {
	t.Helper()
	const field = `"value":"`
	i := strings.Index(string(sealed), field)
	if i < 0 {
		t.Fatalf("no seal value in %s", sealed)
	}
	i += len(field) + 8
	return []byte(string(sealed[:i]) + `\n` + string(sealed[i:]))
}

func TestSealRefusesNonObjectsAndDoubleSeals(t *testing.T) {
	t.Parallel()
	s := testSealer(t, 1)
	for _, body := range []string{``, `[]`, `"x"`, `{"a":1`} {
		if _, err := s.Sign("k", []byte(body)); err == nil {
			t.Errorf("Sign(%q) succeeded", body)
		}
	}
	once, _ := s.Sign("k", []byte(`{"a":1}`))
	if _, err := s.MAC("k", once); err == nil {
		t.Error("sealing a sealed record succeeded")
	}
}

func FuzzOpen(f *testing.F) {
	s := testSealer(f, 1)
	ring, _ := NewKeyring([]ed25519.PublicKey{s.PublicKey()}, s.MACKey())
	good, _ := s.Sign("k", []byte(`{"a":1}`))
	f.Add(good)
	f.Add([]byte(`{"seal":{"alg":"ed25519","key_id":"","value":""}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		body, seal, err := ring.Open("k", data)
		if err != nil {
			if !errors.Is(err, ErrTampered) {
				t.Fatalf("Open error %v does not wrap ErrTampered", err)
			}
			return
		}
		// Whatever opens must be what the sealer made of body.
		resealed, err := s.Sign("k", body)
		if seal.Algorithm == AlgHMAC {
			resealed, err = s.MAC("k", body)
		}
		if err != nil || string(resealed) != string(data) {
			t.Fatalf("opened %q to %q, which seals to %q (%v)", data, body, resealed, err)
		}
	})
}

// BenchmarkSeal is what sealing costs a record of a typical claim's size:
// the MAC every call pays three or four times, beside the signature paid
// only on the rare records another replica must believe.
func BenchmarkSeal(b *testing.B) {
	s := testSealer(b, 1)
	ring, _ := NewKeyring([]ed25519.PublicKey{s.PublicKey()}, s.MACKey())
	body := []byte(`{"request_id":"bench-1","caller":"alice","tool_id":"fs.read","args":{"path":"docs/readme.md","limit":10,"verbose":true},` +
		`"ctx":{"run_id":"run-1","step_id":"step-1","policy_ref":"policy.default"},"received_at":"2026-11-28T02:27:20.123456789Z",` +
		`"canonical_request_hash":"sha256:` + strings.Repeat("ab", 32) + `","gateway":"toolgate/dev@bench"}`)
	for _, alg := range []struct {
		name string
		seal func(string, []byte) ([]byte, error)
	}{{AlgHMAC, s.MAC}, {AlgEd25519, s.Sign}} {
		sealed, _ := alg.seal("requests/bench-1/request.json", body)
		b.Run("seal/"+alg.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := alg.seal("requests/bench-1/request.json", body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("open/"+alg.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := ring.Open("requests/bench-1/request.json", sealed); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
