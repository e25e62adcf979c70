package evidence

import (
	"crypto/ed25519"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fastManifestSeeds are manifests as a gateway writes them (indented, and
// compact), and the ways a hostile store could bend them.
func fastManifestSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		tb.Fatal(err)
	}
	signer, err := NewSigner(priv)
	if err != nil {
		tb.Fatal(err)
	}
	m := Manifest{Version: ManifestVersion, RequestID: "r1", CanonicalRequestHash: "sha256:" + strings.Repeat("ab", 32),
		EngineRef: "cedar-go@v1", PolicySetDigest: "sha256:" + strings.Repeat("cd", 32), Outcome: OutcomeCompleted,
		Error: "tool said: café", Recovered: "",
		Artifacts: []ArtifactDigest{Digest("requests/r1/request.json", []byte(`{}`)), Digest("requests/r1/response.json", []byte(`{"ok":true}`))},
		Redactions: []Redaction{{Rule: "aws", Artifact: "request.json", Path: "$.args.key", Offset: 3, Fingerprint: strings.Repeat("0f", 32)},
			{Rule: "jwt", Artifact: "response.json", Omitted: 4}},
		FingerprintKeyID: "fp1", CreatedAt: time.Date(2026, 11, 1, 12, 0, 0, 123456789, time.FixedZone("", 3600))}
	if err := signer.Sign(&m); err != nil {
		tb.Fatal(err)
	}
	indented, err := EncodeManifest(m)
	if err != nil {
		tb.Fatal(err)
	}
	compact, err := m.MarshalJSON()
	if err != nil {
		tb.Fatal(err)
	}
	c := string(compact)
	seeds := [][]byte{indented, compact, []byte(`{"version":1}`), []byte(`{}`), []byte(`[]`), []byte(``)}
	for _, edit := range [][2]string{
		{`"version":1`, `"version":2`},
		{`"version":1`, `"version":1.0`},
		{`"version":1`, `"version":1e0`},
		{`"version":1`, `"version":01`},
		{`"version":1`, `"version":-1`},
		{`"version":1`, `"Version":1`},
		{`"version":1`, `"version":1,"version":1`},
		{`"version":1`, `"version":null`},
		{`"request_id":"r1"`, `"request_id":"r\u0031"`},
		{`"request_id":"r1"`, `"request_id":"r1","extra":true`},
		{`"request_id":"r1"`, `"request_id":"r1","Request_ID":"r2"`},
		{`"request_id":"r1"`, `"request_id":"r1\xff"`},
		{`"size":2`, `"size":-2`},
		{`"size":2`, `"size":2000000000000000000000`},
		{`"size":2`, `"size":"2"`},
		{`"offset":3`, `"offset":3.5`},
		{`"signature":{`, `"signature":null,"x":{`},
		{`"artifacts":[`, `"artifacts":null,"a":[`},
		{`"redactions":[`, `"redactions":[],"r":[`},
		{`"created_at":"2026`, `"created_at":"x2026`},
		{`"created_at":"2026-11-01T12:00:00.123456789+01:00"`, `"created_at":"2026-11-01T12:00:00Z"`},
		{`}`, `} `},
		{`}`, `}}`},
		{`,`, `,,`},
		{`"key":`, `"Key":`},
		{`"algorithm":"ed25519"`, `"algorithm":"ed25519","algorithm":"ed25519"`},
	} {
		if strings.Contains(c, edit[0]) {
			seeds = append(seeds, []byte(strings.Replace(c, edit[0], edit[1], 1)))
		}
	}
	return append(seeds, []byte(c+"x"), []byte(c[:len(c)-1]), []byte(" \n"+c+"\t\r\n"))
}

// FuzzManifestFastDecode checks ParseManifest's fast path against the
// strict decode on whatever a store holds: any manifest the fast path
// accepts, the strict decode accepts too and reads to the same manifest,
// and both accept or refuse it alike (refused by the same check, with the
// same words); whatever it declines goes to the strict decode. So
// ParseManifest accepts and rejects exactly what it did before the fast
// path existed.
func FuzzManifestFastDecode(f *testing.F) {
	for _, seed := range fastManifestSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ok := decodeManifestFast(data)
		got, gotErr := ParseManifest(data)
		want, wantErr := parseManifestStrict(data)
		if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
			t.Fatalf("ParseManifest(%q): error %v, the strict decode's %v", data, gotErr, wantErr)
		}
		if !sameManifest(got, want) {
			t.Fatalf("ParseManifest(%q) = %+v, the strict decode reads %+v", data, got, want)
		}
		if !ok {
			return
		}
		strict, err := decodeManifestStrict(data)
		if err != nil {
			t.Fatalf("the fast path accepts %q, which the strict decode refuses: %v", data, err)
		}
		if !sameManifest(fast, strict) {
			t.Fatalf("the fast path reads %q as %+v, the strict decode as %+v", data, fast, strict)
		}
	})
}

// sameManifest compares manifests field by field, created_at by instant
// and offset: each parse makes its own time zone.
func sameManifest(a, b Manifest) bool {
	_, ao := a.CreatedAt.Zone()
	_, bo := b.CreatedAt.Zone()
	if !a.CreatedAt.Equal(b.CreatedAt) || ao != bo {
		return false
	}
	a.CreatedAt, b.CreatedAt = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// TestManifestFastDecodeTakesGatewayManifests checks that the manifests
// a gateway writes, and only well-formed ones, take the fast path: were
// it to decline them all, it would be correct and useless.
func TestManifestFastDecodeTakesGatewayManifests(t *testing.T) {
	t.Parallel()
	seeds := fastManifestSeeds(t)
	for _, tc := range []struct {
		name string
		data []byte
		fast bool
	}{
		{"indented", seeds[0], true},
		{"compact", seeds[1], true},
		{"empty object", []byte(`{}`), false},
		{"unknown field", []byte(strings.Replace(string(seeds[1]), `"request_id":"r1"`, `"request_id":"r1","extra":true`, 1)), false},
		{"escaped", []byte(strings.Replace(string(seeds[1]), `"request_id":"r1"`, `"request_id":"r\u0031"`, 1)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, ok := decodeManifestFast(tc.data); ok != tc.fast {
				t.Fatalf("decodeManifestFast took the fast path: %v, want %v", ok, tc.fast)
			}
		})
	}
}
