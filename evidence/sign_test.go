package evidence

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// testKey returns a deterministic Ed25519 key, different for each n.
func testKey(n byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{n}, ed25519.SeedSize))
}

func testSigner(t testing.TB, n byte) *Signer {
	t.Helper()
	s, err := NewSigner(testKey(n))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pemBlock(t testing.TB, typ string, der []byte) []byte {
	t.Helper()
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func TestSignRoundTrip(t *testing.T) {
	t.Parallel()
	signer := testSigner(t, 1)
	m := sampleManifest()
	if err := signer.Sign(&m); err != nil {
		t.Fatal(err)
	}
	data, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	// The stored manifest stays readable: indented JSON, the signature a
	// plain object beside the fields it covers.
	for _, want := range []string{
		"{\n  \"version\": 1,\n",
		`"request_id": "r1"`,
		`"signature": {` + "\n" + `    "algorithm": "ed25519",` + "\n" + `    "key_id": "` + signer.KeyID() + `",` + "\n" + `    "value": "`,
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("EncodeManifest =\n%s\nwant it to contain %q", data, want)
		}
	}
	if !bytes.HasSuffix(data, []byte("}\n")) {
		t.Errorf("EncodeManifest does not end in a newline:\n%s", data)
	}
	parsed, err := ParseManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(parsed, m) {
		t.Fatalf("ParseManifest(EncodeManifest(m)) = %+v, want %+v", parsed, m)
	}
	if !verifySignature(signer.PublicKey(), parsed) {
		t.Fatal("the signature of a freshly signed manifest does not verify")
	}
	if verifySignature(testSigner(t, 2).PublicKey(), parsed) {
		t.Fatal("the signature verifies with another key")
	}
	// Re-indenting the stored file changes no content, so the signature
	// still holds.
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		t.Fatal(err)
	}
	reparsed, err := ParseManifest(compact.Bytes())
	if err != nil || !verifySignature(signer.PublicKey(), reparsed) {
		t.Fatalf("compacted manifest: parse %v, signature verifies %v; want it to verify", err, err == nil && verifySignature(signer.PublicKey(), reparsed))
	}
}

func TestSignReplacesSignature(t *testing.T) {
	t.Parallel()
	a, b := testSigner(t, 1), testSigner(t, 2)
	m := sampleManifest()
	if err := a.Sign(&m); err != nil {
		t.Fatal(err)
	}
	if err := b.Sign(&m); err != nil {
		t.Fatal(err)
	}
	if m.Signature.KeyID != b.KeyID() || !verifySignature(b.PublicKey(), m) {
		t.Fatalf("after re-signing, signature = %+v, want a valid one by %s", m.Signature, b.KeyID())
	}
}

func TestSignRefusesInvalidManifest(t *testing.T) {
	t.Parallel()
	m := sampleManifest()
	m.Outcome = "maybe"
	err := testSigner(t, 1).Sign(&m)
	if err == nil || !strings.Contains(err.Error(), "outcome") {
		t.Fatalf("Sign = %v, want an error naming the outcome", err)
	}
	if m.Signature != nil {
		t.Fatalf("Sign left a signature on a refused manifest: %+v", m.Signature)
	}
}

// TestSignatureBindsEveryField changes each field of a signed manifest in
// turn; every change must break the signature.
func TestSignatureBindsEveryField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		field  string // the JSON path of the field changed
		change func(m *Manifest)
	}{
		{"version", func(m *Manifest) { m.Version = 2 }},
		{"request_id", func(m *Manifest) { m.RequestID = "r2" }},
		{"canonical_request_hash", func(m *Manifest) { m.CanonicalRequestHash = "sha256:abd" }},
		{"engine_ref", func(m *Manifest) { m.EngineRef = "cedar-go@v2" }},
		{"policy_set_digest", func(m *Manifest) { m.PolicySetDigest = "sha256:deg" }},
		{"outcome", func(m *Manifest) { m.Outcome = OutcomeFailed }},
		{"error", func(m *Manifest) { m.Error = "boom" }},
		{"recovered", func(m *Manifest) { m.Recovered = "written by recovery" }},
		{"artifacts", func(m *Manifest) { m.Artifacts = m.Artifacts[:1] }},
		{"artifacts order", func(m *Manifest) { m.Artifacts[0], m.Artifacts[1] = m.Artifacts[1], m.Artifacts[0] }},
		{"artifacts.key", func(m *Manifest) { m.Artifacts[0].Key = Key("r1", "other.json") }},
		{"artifacts.sha256", func(m *Manifest) { m.Artifacts[0].SHA256 = Digest("", []byte("forged")).SHA256 }},
		{"artifacts.size", func(m *Manifest) { m.Artifacts[0].Size++ }},
		{"redactions", func(m *Manifest) { m.Redactions = nil }},
		{"redactions.rule", func(m *Manifest) { m.Redactions[0].Rule = "jwt" }},
		{"redactions.artifact", func(m *Manifest) { m.Redactions[0].Artifact = ArtifactResponse }},
		{"redactions.path", func(m *Manifest) { m.Redactions[0].Path = "args.other" }},
		{"redactions.offset", func(m *Manifest) { m.Redactions[0].Offset++ }},
		{"redactions.fingerprint", func(m *Manifest) { m.Redactions[0].Fingerprint = "00" + m.Redactions[0].Fingerprint }},
		{"redactions.omitted", func(m *Manifest) { m.Redactions[0].Omitted = 1000 }},
		{"fingerprint_key_id", func(m *Manifest) { m.FingerprintKeyID = "other" }},
		{"created_at", func(m *Manifest) { m.CreatedAt = m.CreatedAt.Add(time.Nanosecond) }},
		{"signature", func(m *Manifest) { m.Signature = nil }},
		{"signature.algorithm", func(m *Manifest) { m.Signature.Algorithm = "ed448" }},
		{"signature.key_id", func(m *Manifest) { m.Signature.KeyID = KeyID(testSigner(t, 2).PublicKey()) }},
	}
	signer := testSigner(t, 1)
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			m := sampleManifest()
			if err := signer.Sign(&m); err != nil {
				t.Fatal(err)
			}
			sig := m.Signature.Value
			tt.change(&m)
			if m.Signature == nil {
				// Dropping the signature object must not let its value be
				// reattached to an unsigned message.
				m.Signature = &Signature{Value: sig}
			}
			if verifySignature(signer.PublicKey(), m) {
				t.Fatalf("signature still verifies after changing %s", tt.field)
			}
		})
	}

	// Every JSON field of the manifest (signature.value aside) must have a
	// case above, so a field added later gets one too.
	covered := map[string]bool{"signature.value": true}
	for _, tt := range tests {
		covered[tt.field] = true
	}
	for _, name := range jsonFieldNames(reflect.TypeFor[Manifest](), "") {
		if !covered[name] {
			t.Errorf("no case changes manifest field %s", name)
		}
	}
}

// jsonFieldNames lists the JSON paths of t's fields, descending into
// structs, pointers to structs and slices of structs.
func jsonFieldNames(t reflect.Type, prefix string) []string {
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		path := prefix + name
		names = append(names, path)
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]() {
			names = append(names, jsonFieldNames(ft, path+".")...)
		}
	}
	return names
}

func TestNewSignerRejects(t *testing.T) {
	t.Parallel()
	corrupt := bytes.Clone(testKey(1))
	corrupt[ed25519.PrivateKeySize-1] ^= 1
	tests := []struct {
		name    string
		key     ed25519.PrivateKey
		wantErr string
	}{
		{"nil", nil, "0 bytes"},
		{"seed only", testKey(1).Seed(), "32 bytes"},
		{"public half altered", corrupt, "corrupt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewSigner(tt.key); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NewSigner = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestKeyID(t *testing.T) {
	t.Parallel()
	pub := testKey(1).Public().(ed25519.PublicKey)
	// Pinned (computed independently with openssl and sha256sum): key ids
	// are stored in manifests, so they must never change.
	const want = "ed25519:34750f98bd59fcfc"
	if got := KeyID(pub); got != want {
		t.Fatalf("KeyID = %s, want %s", got, want)
	}
	if got := testSigner(t, 1).KeyID(); got != want {
		t.Fatalf("Signer.KeyID = %s, want %s", got, want)
	}
	if other := KeyID(testKey(2).Public().(ed25519.PublicKey)); other == want || !validKeyID(other) {
		t.Fatalf("KeyID of another key = %s, want a different, well-formed id", other)
	}
}

func TestSignerPublicKeyIsACopy(t *testing.T) {
	t.Parallel()
	s := testSigner(t, 1)
	s.PublicKey()[0] ^= 1
	if !bytes.Equal(s.PublicKey(), testKey(1).Public().(ed25519.PublicKey)) {
		t.Fatal("changing the returned public key changed the Signer's")
	}
}

func TestEncodeManifestRefusesInvalid(t *testing.T) {
	t.Parallel()
	m := sampleManifest()
	m.Artifacts = append(m.Artifacts, Digest(Key("r2", ArtifactRequest), nil))
	if _, err := EncodeManifest(m); err == nil || !strings.Contains(err.Error(), "is not under") {
		t.Fatalf("EncodeManifest = %v, want an error for an artifact of another request", err)
	}
}

func TestParsePrivateKey(t *testing.T) {
	t.Parallel()
	key := testKey(7)
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	opensslKey, err := os.ReadFile("testdata/openssl-ed25519-key.pem")
	if err != nil {
		t.Fatal(err)
	}
	seed := base64.StdEncoding.EncodeToString(key.Seed())
	tests := []struct {
		name string
		data string
		want ed25519.PrivateKey
	}{
		{"PEM PKCS #8", string(pemBlock(t, "PRIVATE KEY", pkcs8)), key},
		{"PEM after a comment", "# signing key\n" + string(pemBlock(t, "PRIVATE KEY", pkcs8)), key},
		{"base64 seed", seed, key},
		{"base64 seed with white space", "\n  " + seed + "\n", key},
		{"written by openssl genpkey", string(opensslKey), ed25519.NewKeyFromSeed(mustBase64(t, "ERS3l6UZojNnSwiN+GBHKOEipvPm7Q8fJFgyF5PM/YM="))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePrivateKey([]byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("ParsePrivateKey returned another key")
			}
		})
	}
}

func TestParsePrivateKeyRejects(t *testing.T) {
	t.Parallel()
	key := testKey(7)
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPKCS8, err := x509.MarshalPKCS8PrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	good := string(pemBlock(t, "PRIVATE KEY", pkcs8))
	withHeader := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: pkcs8})
	tests := []struct {
		name    string
		data    string
		wantErr string
	}{
		{"empty", "", "empty"},
		{"white space", " \n\t", "empty"},
		{"garbage", "not a key at all", "neither a PEM"},
		{"base64 of 64 bytes", base64.StdEncoding.EncodeToString(key), "64 bytes, want 32"},
		{"unpadded base64 seed", base64.RawStdEncoding.EncodeToString(key.Seed()), "neither a PEM"},
		{"public key", string(pemBlock(t, "PUBLIC KEY", pub)), `type is "PUBLIC KEY"`},
		{"encrypted", string(pemBlock(t, "ENCRYPTED PRIVATE KEY", pkcs8)), "encrypted"},
		{"PEM headers", string(withHeader), "headers"},
		{"ECDSA key", string(pemBlock(t, "PRIVATE KEY", ecPKCS8)), "want an Ed25519 key"},
		{"PKCS #8 garbage", string(pemBlock(t, "PRIVATE KEY", []byte("0123456789"))), "not valid PKCS #8"},
		{"two keys", good + good, "after the PEM block"},
		{"truncated PEM", good[:len(good)-10], "malformed"},
	}
	secret := base64.StdEncoding.EncodeToString(pkcs8)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePrivateKey([]byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParsePrivateKey = %v, want an error containing %q", err, tt.wantErr)
			}
			for _, leak := range []string{secret[10:30], base64.StdEncoding.EncodeToString(key.Seed())[:20], "not a key"} {
				if strings.Contains(err.Error(), leak) {
					t.Fatalf("error %q echoes the input", err)
				}
			}
		})
	}
}

func TestParsePublicKey(t *testing.T) {
	t.Parallel()
	pub := testKey(7).Public().(ed25519.PublicKey)
	pkix, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	opensslPub, err := os.ReadFile("testdata/openssl-ed25519-pub.pem")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data string
		want ed25519.PublicKey
	}{
		{"PEM PKIX", string(pemBlock(t, "PUBLIC KEY", pkix)), pub},
		{"PEM after a key id line", "# key id: " + KeyID(pub) + "\n" + string(pemBlock(t, "PUBLIC KEY", pkix)), pub},
		{"base64", base64.StdEncoding.EncodeToString(pub), pub},
		{"written by openssl pkey -pubout", string(opensslPub), mustBase64(t, "cwcHGqSRzsly1h7aIGgKeIejFHn3M7AMdWsFvHtQaYA=")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePublicKey([]byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("ParsePublicKey = %x, want %x", got, tt.want)
			}
		})
	}
}

func TestParsePublicKeyRejects(t *testing.T) {
	t.Parallel()
	key := testKey(7)
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPub, err := x509.MarshalPKIXPublicKey(ecKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		data    string
		wantErr string
	}{
		{"empty", "", "empty"},
		{"garbage", "ssh-ed25519 AAAA", "neither a PEM"},
		{"base64 of 31 bytes", base64.StdEncoding.EncodeToString(make([]byte, 31)), "31 bytes, want 32"},
		{"private key", string(pemBlock(t, "PRIVATE KEY", pkcs8)), `type is "PRIVATE KEY"`},
		{"ECDSA key", string(pemBlock(t, "PUBLIC KEY", ecPub)), "want an Ed25519 key"},
		{"PKIX garbage", string(pemBlock(t, "PUBLIC KEY", []byte{0x30, 0x00})), "not a valid PKIX"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePublicKey([]byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParsePublicKey = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func mustBase64(t testing.TB, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzParsePrivateKey checks that ParsePrivateKey never panics and accepts
// only the two documented forms, yielding a consistent key.
func FuzzParsePrivateKey(f *testing.F) {
	key := testKey(3)
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pemBlock(f, "PRIVATE KEY", pkcs8))
	f.Add([]byte(base64.StdEncoding.EncodeToString(key.Seed())))
	f.Add(pemBlock(f, "PRIVATE KEY", []byte{0x30, 0x03, 0x02, 0x01, 0x00}))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParsePrivateKey(data)
		if err != nil {
			return
		}
		if len(got) != ed25519.PrivateKeySize {
			t.Fatalf("accepted a key of %d bytes", len(got))
		}
		if _, err := NewSigner(got); err != nil {
			t.Fatalf("accepted key cannot sign: %v", err)
		}
		assertKeyForm(t, data, "PRIVATE KEY", got.Seed())
	})
}

// FuzzParsePublicKey checks that ParsePublicKey never panics and accepts
// only the two documented forms.
func FuzzParsePublicKey(f *testing.F) {
	pub := testKey(3).Public().(ed25519.PublicKey)
	pkix, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pemBlock(f, "PUBLIC KEY", pkix))
	f.Add([]byte("# key id\n" + string(pemBlock(f, "PUBLIC KEY", pkix))))
	f.Add([]byte(base64.StdEncoding.EncodeToString(pub)))
	f.Add([]byte("MCowBQYDK2VwAyEA"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParsePublicKey(data)
		if err != nil {
			return
		}
		if len(got) != ed25519.PublicKeySize {
			t.Fatalf("accepted a key of %d bytes", len(got))
		}
		assertKeyForm(t, data, "PUBLIC KEY", got)
	})
}

// assertKeyForm fails unless data is one PEM block of blockType, or the
// base64 of raw.
func assertKeyForm(t *testing.T, data []byte, blockType string, raw []byte) {
	t.Helper()
	data = bytes.TrimSpace(data)
	if block, _ := pem.Decode(data); block != nil {
		if block.Type != blockType {
			t.Fatalf("accepted a PEM block of type %q", block.Type)
		}
		return
	}
	decoded, err := base64.StdEncoding.DecodeString(string(data))
	if err != nil || !bytes.Equal(decoded, raw) {
		t.Fatalf("accepted %q, which is neither PEM nor the base64 of the key (%v)", data, err)
	}
}

// TestCheckSignature: only a manifest signed by the given key, with its
// content unchanged since, passes.
func TestCheckSignature(t *testing.T) {
	t.Parallel()
	signer := testSigner(t, 1)
	signed := sampleManifest()
	if err := signer.Sign(&signed); err != nil {
		t.Fatal(err)
	}
	other := sampleManifest()
	if err := testSigner(t, 2).Sign(&other); err != nil {
		t.Fatal(err)
	}
	altered := signed
	altered.Outcome = OutcomeFailed
	tests := []struct {
		name    string
		m       Manifest
		wantErr string
	}{
		{"signed by the key", signed, ""},
		{"unsigned", sampleManifest(), "not signed"},
		{"signed by another key", other, "signed by key " + testSigner(t, 2).KeyID()},
		{"altered after signing", altered, "does not match the manifest's content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckSignature(signer.PublicKey(), tt.m)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("CheckSignature: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("CheckSignature = %v, want an error mentioning %q", err, tt.wantErr)
			}
		})
	}
	if err := CheckSignature(nil, signed); err == nil {
		t.Error("CheckSignature accepted an empty public key")
	}
}

func TestEncodePrivateKeyRoundTrips(t *testing.T) {
	t.Parallel()
	key := testKey(9)
	data, err := EncodePrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("-----BEGIN PRIVATE KEY-----\n")) {
		t.Fatalf("EncodePrivateKey wrote %q, want a PEM PRIVATE KEY block", data)
	}
	got, err := ParsePrivateKey(data)
	if err != nil || !bytes.Equal(got, key) {
		t.Fatalf("ParsePrivateKey(EncodePrivateKey(key)) = another key (%v)", err)
	}
	if _, err := EncodePrivateKey(key[:10]); err == nil {
		t.Fatal("a truncated key was encoded")
	}
}
