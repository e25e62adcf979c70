package evidence

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleManifest() Manifest {
	return Manifest{
		Version:              ManifestVersion,
		RequestID:            "r1",
		CanonicalRequestHash: "sha256:abc",
		EngineRef:            "cedar-go@v1",
		PolicySetDigest:      "sha256:def",
		Outcome:              OutcomeCompleted,
		Artifacts: []ArtifactDigest{
			Digest(Key("r1", ArtifactRequest), []byte("req")),
			Digest(Key("r1", ArtifactResponse), []byte("resp")),
		},
		Redactions: []Redaction{{Rule: "aws-key", Artifact: ArtifactRequest, Path: "args.token", Offset: 3}},
		CreatedAt:  time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
	}
}

func TestDigest(t *testing.T) {
	t.Parallel()
	got := Digest("k", []byte("abc"))
	want := ArtifactDigest{Key: "k", SHA256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", Size: 3}
	if got != want {
		t.Fatalf("Digest = %+v, want %+v", got, want)
	}
}

func TestManifestJSON(t *testing.T) {
	t.Parallel()
	t.Run("empty lists encode as []", func(t *testing.T) {
		data, err := json.Marshal(Manifest{Version: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`"artifacts":[]`, `"redactions":[]`} {
			if !strings.Contains(string(data), want) {
				t.Errorf("Marshal = %s, want it to contain %s", data, want)
			}
		}
		if strings.Contains(string(data), `"error"`) {
			t.Errorf("Marshal = %s, want no error field when Error is empty", data)
		}
	})
	t.Run("snake_case field names", func(t *testing.T) {
		data, err := json.Marshal(sampleManifest())
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`"request_id":"r1"`, `"canonical_request_hash"`, `"engine_ref"`, `"policy_set_digest"`,
			`"created_at":"2025-01-02T03:04:05.000000006Z"`, `"sha256":`, `"size":3`, `"rule":"aws-key"`, `"offset":3`} {
			if !strings.Contains(string(data), want) {
				t.Errorf("Marshal = %s, want it to contain %s", data, want)
			}
		}
	})
	t.Run("round trip through ParseManifest", func(t *testing.T) {
		m := sampleManifest()
		data, err := json.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseManifest(data)
		if err != nil {
			t.Fatalf("ParseManifest = %v", err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("ParseManifest = %+v, want %+v", got, m)
		}
	})
}

func TestParseManifestRejects(t *testing.T) {
	t.Parallel()
	encode := func(edit func(m map[string]any)) string {
		var m map[string]any
		data, _ := json.Marshal(sampleManifest())
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	artifact := func(key, sum string, size int) []any {
		return []any{map[string]any{"key": key, "sha256": sum, "size": size}}
	}
	goodSum := strings.Repeat("ab", 32)
	goodKeyID := "ed25519:0123456789abcdef"
	goodSig := base64.StdEncoding.EncodeToString(make([]byte, 64))
	tests := []struct {
		name    string
		data    string
		wantErr string
	}{
		{"not JSON", "{", "unexpected end"},
		{"not an object", "[]", "cannot unmarshal"},
		{"no version", "{}", "version is missing"},
		{"newer version", `{"version":2,"something_new":true}`, "version 2 is not supported"},
		{"unknown field", encode(func(m map[string]any) { m["extra"] = 1 }), "unknown field"},
		{"trailing data", encode(func(map[string]any) {}) + "{}", "after top-level value"},
		{"bad request id", encode(func(m map[string]any) { m["request_id"] = "../r1" }), "request_id"},
		{"empty request id", encode(func(m map[string]any) { m["request_id"] = "" }), "request_id"},
		{"bad outcome", encode(func(m map[string]any) { m["outcome"] = "maybe" }), "outcome"},
		{"no created_at", encode(func(m map[string]any) { delete(m, "created_at") }), "created_at"},
		{"artifact outside the request", encode(func(m map[string]any) { m["artifacts"] = artifact("requests/r2/request.json", goodSum, 1) }), "is not under"},
		{"artifact with invalid key", encode(func(m map[string]any) { m["artifacts"] = artifact("requests/r1/../r2/x", goodSum, 1) }), "not a valid key"},
		{"manifest lists itself", encode(func(m map[string]any) { m["artifacts"] = artifact("requests/r1/manifest.json", goodSum, 1) }), "manifest itself"},
		{"uppercase digest", encode(func(m map[string]any) { m["artifacts"] = artifact("requests/r1/x", strings.ToUpper(goodSum), 1) }), "sha256"},
		{"short digest", encode(func(m map[string]any) { m["artifacts"] = artifact("requests/r1/x", "abcd", 1) }), "sha256"},
		{"negative size", encode(func(m map[string]any) { m["artifacts"] = artifact("requests/r1/x", goodSum, -1) }), "negative"},
		{"duplicate artifact", encode(func(m map[string]any) {
			a := artifact("requests/r1/x", goodSum, 1)
			m["artifacts"] = append(a, a...)
		}), "listed twice"},
		{"negative redaction offset", encode(func(m map[string]any) { m["redactions"] = []any{map[string]any{"offset": -1}} }), "offset"},
		{"field given twice", strings.Replace(encode(func(map[string]any) {}), `"outcome":"completed"`, `"outcome":"failed","outcome":"completed"`, 1), `field "outcome" is given more than once`},
		{"field given twice in another case", strings.Replace(encode(func(map[string]any) {}), `"outcome":"completed"`, `"OUTCOME":"failed","outcome":"completed"`, 1), `field "outcome" is given more than once`},
		{"artifact field given twice, once case-folded", strings.Replace(encode(func(map[string]any) {}), `"size":3`, `"ſize":4,"size":3`, 1), `field "size" is given more than once`},
		{"field given twice, once escaped", strings.Replace(encode(func(map[string]any) {}), `"outcome":"completed"`, `"outc\u006fme":"failed","outcome":"completed"`, 1), `field "outcome" is given more than once`},
		{"signature without algorithm", encode(func(m map[string]any) { m["signature"] = map[string]any{"key_id": goodKeyID, "value": goodSig} }), "signature.algorithm"},
		{"signature by another algorithm", encode(func(m map[string]any) {
			m["signature"] = map[string]any{"algorithm": "rsa", "key_id": goodKeyID, "value": goodSig}
		}), `signature.algorithm "rsa"`},
		{"signature with a malformed key id", encode(func(m map[string]any) {
			m["signature"] = map[string]any{"algorithm": "ed25519", "key_id": "ed25519:ABCDEF0123456789", "value": goodSig}
		}), "signature.key_id"},
		{"signature without value", encode(func(m map[string]any) { m["signature"] = map[string]any{"algorithm": "ed25519", "key_id": goodKeyID} }), "signature.value"},
		{"signature value not base64", encode(func(m map[string]any) {
			m["signature"] = map[string]any{"algorithm": "ed25519", "key_id": goodKeyID, "value": "!!" + goodSig[2:]}
		}), "signature.value"},
		// The same signature respelled: a line break inside it, or the
		// spare bits of its last character set. Either would still verify
		// while the manifest's bytes, and every hash of them, changed.
		{"signature value with a line break", encode(func(m map[string]any) {
			m["signature"] = map[string]any{"algorithm": "ed25519", "key_id": goodKeyID, "value": goodSig[:40] + "\n" + goodSig[40:]}
		}), "signature.value"},
		{"signature value with its spare bits set", encode(func(m map[string]any) {
			m["signature"] = map[string]any{"algorithm": "ed25519", "key_id": goodKeyID, "value": goodSig[:len(goodSig)-3] + "B=="}
		}), "signature.value"},
		{"signature value too short", encode(func(m map[string]any) {
			m["signature"] = map[string]any{"algorithm": "ed25519", "key_id": goodKeyID, "value": goodSig[:64]}
		}), "signature.value"},
		{"unknown signature field", encode(func(m map[string]any) {
			m["signature"] = map[string]any{"algorithm": "ed25519", "key_id": goodKeyID, "value": goodSig, "signed_at": "now"}
		}), "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseManifest([]byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseManifest(%s) = %v, want an error containing %q", tt.data, err, tt.wantErr)
			}
		})
	}
}

// TestParseManifestAcceptsAwkwardStrings makes sure that quotes, commas
// and brackets inside strings are not mistaken for structure when looking
// for duplicate fields.
func TestParseManifestAcceptsAwkwardStrings(t *testing.T) {
	t.Parallel()
	m := sampleManifest()
	m.Error = `failed: "a", {"outcome": "completed"}, [x] \ \"`
	m.EngineRef = "outcome"
	m.Redactions = append(m.Redactions, Redaction{Rule: "rule", Artifact: ArtifactRequest, Path: `args["rule"]`})
	data, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseManifest(data)
	if err != nil {
		t.Fatalf("ParseManifest = %v\n%s", err, data)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("ParseManifest = %+v, want %+v", got, m)
	}
}

func TestParseManifestNormalisesNullLists(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte(`{"version":1,"request_id":"r1","outcome":"failed","error":"boom","artifacts":null,"created_at":"2025-01-01T00:00:00Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Artifacts == nil || m.Redactions == nil {
		t.Fatalf("ParseManifest left nil lists: %+v", m)
	}
}

// FuzzParseManifest checks that ParseManifest never panics and that what it
// accepts re-encodes to a manifest it accepts again, unchanged, with the
// same signed message.
func FuzzParseManifest(f *testing.F) {
	good, err := json.Marshal(sampleManifest())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"request_id":"r1","outcome":"failed","artifacts":null,"redactions":[],"created_at":"2025-01-01T00:00:00+01:00"}`))
	f.Add([]byte(`{"version":1,"request_id":"r1","outcome":"completed","artifacts":[{"key":"requests/r1/x","sha256":"","size":0}],"created_at":"2025-01-01T00:00:00Z"}`))
	f.Add([]byte(`null`))
	signed := sampleManifest()
	signer, err := NewSigner(testKey(1))
	if err != nil {
		f.Fatal(err)
	}
	if err := signer.Sign(&signed); err != nil {
		f.Fatal(err)
	}
	signedData, err := EncodeManifest(signed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(signedData)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		if m.Version != ManifestVersion || m.Artifacts == nil || m.Redactions == nil {
			t.Fatalf("accepted manifest breaks the documented guarantees: %+v", m)
		}
		for _, a := range m.Artifacts {
			if err := ValidKey(a.Key); err != nil || !strings.HasPrefix(a.Key, RequestPrefix(m.RequestID)) {
				t.Fatalf("accepted artifact key %q outside %q (%v)", a.Key, RequestPrefix(m.RequestID), err)
			}
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("Marshal of an accepted manifest = %v", err)
		}
		m2, err := ParseManifest(again)
		if err != nil {
			t.Fatalf("ParseManifest(%s) = %v after round trip", again, err)
		}
		// Verification re-derives the signed message from the parsed
		// manifest, so the message must survive a store round trip.
		msg, err := signedMessage(m)
		if err != nil {
			t.Fatalf("signed message of an accepted manifest = %v", err)
		}
		msg2, err := signedMessage(m2)
		if err != nil || !bytes.Equal(msg, msg2) {
			t.Fatalf("signed message changed in round trip (%v):\n%s\n%s", err, msg, msg2)
		}
		if m.Signature != nil && (!validKeyID(m.Signature.KeyID) || m.Signature.Algorithm != SignatureAlgorithm) {
			t.Fatalf("accepted a malformed signature: %+v", m.Signature)
		}
		if !m2.CreatedAt.Equal(m.CreatedAt) {
			t.Fatalf("created_at changed in round trip: %v -> %v", m.CreatedAt, m2.CreatedAt)
		}
		m.CreatedAt, m2.CreatedAt = time.Time{}, time.Time{}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed the manifest:\n%+v\n%+v", m, m2)
		}
	})
}
