package evidence

import (
	"crypto/ed25519"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence/trust"
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

// sameRecord compares two decodes of a record field by field, the time
// at names by instant and offset: each parse makes its own time zone.
func sameRecord[T any](a, b T, at func(*T) *time.Time) bool {
	ta, tb := at(&a), at(&b)
	_, ao := ta.Zone()
	_, bo := tb.Zone()
	if !ta.Equal(*tb) || ao != bo {
		return false
	}
	*ta, *tb = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func sameManifest(a, b Manifest) bool {
	return sameRecord(a, b, func(m *Manifest) *time.Time { return &m.CreatedAt })
}

// TestFastDecodeTakesGatewayRecords checks that the manifests, decision
// and request records a gateway writes, sealed or not, and only well-formed
// ones, take the fast paths: were they to decline them all, they would be
// correct and useless.
func TestFastDecodeTakesGatewayRecords(t *testing.T) {
	t.Parallel()
	manifest := func(data []byte) bool { _, ok := decodeManifestFast(data); return ok }
	decision := func(data []byte) bool {
		body, _, _ := trust.Split(data)
		_, ok := decodeDecisionFast(body)
		return ok
	}
	request := func(data []byte) bool {
		body, _, _ := trust.Split(data)
		_, ok := decodeRequestFast(body)
		return ok
	}
	m, d, r := fastManifestSeeds(t), fastDecisionSeeds(t), fastRequestSeeds(t)
	edit := func(seed []byte, from, to string) []byte { return []byte(strings.Replace(string(seed), from, to, 1)) }
	for _, tc := range []struct {
		name   string
		decode func([]byte) bool
		data   []byte
		fast   bool
	}{
		{"manifest, indented", manifest, m[0], true},
		{"manifest, compact", manifest, m[1], true},
		{"manifest, empty object", manifest, []byte(`{}`), false},
		{"manifest, unknown field", manifest, edit(m[1], `"request_id":"r1"`, `"request_id":"r1","extra":true`), false},
		{"manifest, escaped", manifest, edit(m[1], `"request_id":"r1"`, `"request_id":"r\u0031"`), false},
		{"decision, compact", decision, d[0], true},
		{"decision, indented", decision, d[1], true},
		{"decision, sealed", decision, d[2], true},
		{"decision, empty object", decision, []byte(`{}`), true},
		{"decision, null", decision, []byte(`null`), false},
		{"decision with a shadow decision", decision, edit(d[0], `"tool":{`, `"shadow":{"decision":"deny"},"tool":{`), false},
		{"decision, escaped", decision, edit(d[0], `"request_id":"r1"`, `"request_id":"r\u0031"`), false},
		{"request, compact", request, r[0], true},
		{"request, indented", request, r[1], true},
		{"request, sealed", request, r[2], true},
		{"request authenticated by a front door", request, edit(r[0], `"ctx":{`, `"auth":{"method":"oauth"},"ctx":{`), false},
		{"request, names the decoder takes for one", request, edit(r[0], `"path":"notes.txt"`, `"path":"notes.txt","PATH":"x"`), false},
		{"request, escaped argument", request, edit(r[0], `"path":"notes.txt"`, `"path":"n\u006ftes"`), false},
		{"request, nested too deep", request, r[len(r)-1], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if ok := tc.decode(tc.data); ok != tc.fast {
				t.Errorf("fast path taken %v, want %v", ok, tc.fast)
			}
		})
	}
}
