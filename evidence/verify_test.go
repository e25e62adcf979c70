package evidence

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// verifyBackends are the stores verification is tested on. Verification
// uses nothing but the Reader interface, whose conformance store_test.go
// checks on every backend, so the two quick ones suffice here.
var verifyBackends = []struct {
	name string
	new  func(t testing.TB) Store
}{
	{"file", func(t testing.TB) Store { return newTestFileStore(t, t.TempDir()) }},
	{"memory", func(testing.TB) Store { return NewMemoryStore() }},
}

// artifactOrder is the order in which test requests store their artifacts.
var artifactOrder = []string{ArtifactRequest, ArtifactPolicyDecision, ArtifactToolResult, ArtifactResponse, "extra.json"}

// putArtifacts stores the named artifacts of a request.
func putArtifacts(t testing.TB, s Store, id string, artifacts map[string]string) {
	t.Helper()
	for _, name := range artifactOrder {
		if data, ok := artifacts[name]; ok {
			mustPut(t, s, Key(id, name), []byte(data))
		}
	}
}

// putManifest stores a manifest of request id listing the given artifacts,
// signed by signer unless it is nil, and returns the stored bytes.
func putManifest(t testing.TB, s Store, id string, listed map[string]string, signer *Signer) []byte {
	t.Helper()
	m := Manifest{
		Version:   ManifestVersion,
		RequestID: id,
		EngineRef: "test",
		Outcome:   OutcomeCompleted,
		CreatedAt: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for _, name := range artifactOrder {
		if data, ok := listed[name]; ok {
			m.Artifacts = append(m.Artifacts, Digest(Key(id, name), []byte(data)))
		}
	}
	if signer != nil {
		if err := signer.Sign(&m); err != nil {
			t.Fatal(err)
		}
	}
	data, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, Key(id, ArtifactManifest), data)
	return data
}

// writeRequest stores a request's artifacts and an unsigned manifest
// describing listed, which may differ from what is stored.
func writeRequest(t testing.TB, s Store, id string, stored, listed map[string]string) {
	t.Helper()
	putArtifacts(t, s, id, stored)
	putManifest(t, s, id, listed, nil)
}

// writeSigned is writeRequest with a manifest signed by signer.
func writeSigned(t testing.TB, s Store, id string, stored, listed map[string]string, signer *Signer) {
	t.Helper()
	putArtifacts(t, s, id, stored)
	putManifest(t, s, id, listed, signer)
}

var completeRequest = map[string]string{
	ArtifactRequest:        `{"tool":"read"}`,
	ArtifactPolicyDecision: `{"decision":"allow"}`,
	ArtifactToolResult:     `{"out":"hello"}`,
	ArtifactResponse:       `{"ok":true}`,
}

func with(base map[string]string, name, data string) map[string]string {
	out := map[string]string{name: data}
	for k, v := range base {
		if k != name {
			out[k] = v
		}
	}
	return out
}

func without(base map[string]string, names ...string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		if !slices.Contains(names, k) {
			out[k] = v
		}
	}
	return out
}

func only(base map[string]string, names ...string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		out[n] = base[n]
	}
	return out
}

func TestVerify(t *testing.T) {
	t.Parallel()
	gateway, attacker := testSigner(t, 1), testSigner(t, 2)
	trusted := []ed25519.PublicKey{gateway.PublicKey()}
	tests := []struct {
		name          string
		setup         func(t *testing.T, s, spool Store)
		useSpool      bool
		trusted       []ed25519.PublicKey
		wantStatus    string
		wantSignature string
		wantTampered  bool
		wantProblems  []string // substrings, one per expected problem, in order
		wantSpooled   []string
	}{
		{
			name:          "complete evidence, unsigned",
			setup:         func(t *testing.T, s, _ Store) { writeRequest(t, s, "r1", completeRequest, completeRequest) },
			wantStatus:    StatusOK,
			wantSignature: SignatureUnsigned,
		},
		{
			name:          "unsigned while keys are trusted",
			setup:         func(t *testing.T, s, _ Store) { writeRequest(t, s, "r1", completeRequest, completeRequest) },
			trusted:       trusted,
			wantStatus:    StatusOK,
			wantSignature: SignatureUnsigned,
		},
		{
			name:          "signed by a trusted key",
			setup:         func(t *testing.T, s, _ Store) { writeSigned(t, s, "r1", completeRequest, completeRequest, gateway) },
			trusted:       trusted,
			wantStatus:    StatusOK,
			wantSignature: SignatureValid,
		},
		{
			name:          "signed by one of several trusted keys",
			setup:         func(t *testing.T, s, _ Store) { writeSigned(t, s, "r1", completeRequest, completeRequest, gateway) },
			trusted:       []ed25519.PublicKey{attacker.PublicKey(), gateway.PublicKey()},
			wantStatus:    StatusOK,
			wantSignature: SignatureValid,
		},
		{
			name:          "signed, no trusted keys given",
			setup:         func(t *testing.T, s, _ Store) { writeSigned(t, s, "r1", completeRequest, completeRequest, gateway) },
			wantStatus:    StatusOK,
			wantSignature: SignatureUnchecked,
		},
		{
			name: "other requests do not interfere",
			setup: func(t *testing.T, s, _ Store) {
				writeRequest(t, s, "r1", completeRequest, completeRequest)
				writeRequest(t, s, "r10", with(completeRequest, "extra.json", "x"), without(completeRequest, ArtifactResponse))
			},
			wantStatus:    StatusOK,
			wantSignature: SignatureUnsigned,
		},
		{
			name: "tampered byte",
			setup: func(t *testing.T, s, _ Store) {
				writeSigned(t, s, "r1", with(completeRequest, ArtifactToolResult, `{"out":"hellO"}`), completeRequest, gateway)
			},
			trusted:       trusted,
			wantStatus:    StatusMismatch,
			wantSignature: SignatureValid,
			wantTampered:  true,
			wantProblems:  []string{"requests/r1/tool_result.json: sha256 is "},
		},
		{
			name: "truncated artifact",
			setup: func(t *testing.T, s, _ Store) {
				writeRequest(t, s, "r1", with(completeRequest, ArtifactResponse, `{}`), completeRequest)
			},
			wantStatus:    StatusMismatch,
			wantSignature: SignatureUnsigned,
			wantTampered:  true,
			wantProblems:  []string{"requests/r1/response.json: size is 2, manifest says 11", "requests/r1/response.json: sha256"},
		},
		{
			name: "missing artifact",
			setup: func(t *testing.T, s, _ Store) {
				writeSigned(t, s, "r1", without(completeRequest, ArtifactToolResult), completeRequest, gateway)
			},
			trusted:       trusted,
			wantStatus:    StatusMismatch,
			wantSignature: SignatureValid,
			wantTampered:  true,
			wantProblems:  []string{"requests/r1/tool_result.json: listed in the manifest but missing"},
		},
		{
			name: "unlisted artifact",
			setup: func(t *testing.T, s, _ Store) {
				writeSigned(t, s, "r1", with(completeRequest, "extra.json", "{}"), completeRequest, gateway)
			},
			trusted:       trusted,
			wantStatus:    StatusMismatch,
			wantSignature: SignatureValid,
			wantTampered:  true,
			wantProblems:  []string{"requests/r1/extra.json: present but not listed"},
		},
		{
			name: "no manifest",
			setup: func(t *testing.T, s, _ Store) {
				mustPut(t, s, Key("r1", ArtifactRequest), []byte("{}"))
			},
			wantStatus:   StatusIncomplete,
			wantProblems: []string{"requests/r1/manifest.json: missing"},
		},
		{
			name:         "nothing stored",
			setup:        func(*testing.T, Store, Store) {},
			wantStatus:   StatusIncomplete,
			wantProblems: []string{"requests/r1/manifest.json: missing"},
		},
		{
			name: "corrupt manifest",
			setup: func(t *testing.T, s, _ Store) {
				mustPut(t, s, Key("r1", ArtifactManifest), []byte(`{"version":1,`))
			},
			wantStatus:   StatusMismatch,
			wantTampered: true,
			wantProblems: []string{"requests/r1/manifest.json: evidence: manifest: "},
		},
		{
			name: "manifest of another request",
			setup: func(t *testing.T, s, _ Store) {
				writeRequest(t, s, "r2", completeRequest, completeRequest)
				data := mustGet(t, s, Key("r2", ArtifactManifest))
				mustPut(t, s, Key("r1", ArtifactManifest), data)
			},
			wantStatus:    StatusMismatch,
			wantSignature: SignatureUnsigned,
			wantTampered:  true,
			wantProblems:  []string{`requests/r1/manifest.json: request_id is "r2"`},
		},
		{
			// Two genuinely signed manifests, each stored under the other
			// request: every signature holds, the placement does not.
			name: "signed manifests of two requests swapped",
			setup: func(t *testing.T, s, _ Store) {
				other := with(completeRequest, ArtifactToolResult, `{"out":"bye"}`)
				scratch := NewMemoryStore()
				m1 := putManifest(t, scratch, "r1", completeRequest, gateway)
				m2 := putManifest(t, scratch, "r2", other, gateway)
				putArtifacts(t, s, "r1", completeRequest)
				putArtifacts(t, s, "r2", other)
				mustPut(t, s, Key("r1", ArtifactManifest), m2)
				mustPut(t, s, Key("r2", ArtifactManifest), m1)
			},
			trusted:       trusted,
			wantStatus:    StatusMismatch,
			wantSignature: SignatureValid,
			wantTampered:  true,
			wantProblems:  []string{`requests/r1/manifest.json: request_id is "r2"`},
		},
		{
			// Someone with bucket access rewrites a result and re-signs
			// the manifest with a key of their own.
			name: "re-signed by an untrusted key",
			setup: func(t *testing.T, s, _ Store) {
				forged := with(completeRequest, ArtifactToolResult, `{"out":"forged"}`)
				writeSigned(t, s, "r1", forged, forged, attacker)
			},
			trusted:       trusted,
			wantStatus:    StatusOK,
			wantSignature: SignatureUnknownKey,
			wantTampered:  true,
			wantProblems:  []string{"requests/r1/manifest.json: signed by an untrusted key, " + attacker.KeyID() + ": not among the trusted keys, so nothing shows a trusted gateway wrote it"},
		},
		{
			// The digest in the manifest is updated to match a forged
			// artifact, but the signature cannot be.
			name: "signed manifest's digest rewritten",
			setup: func(t *testing.T, s, _ Store) {
				forged := with(completeRequest, ArtifactToolResult, `{"out":"jello"}`) // same size
				putArtifacts(t, s, "r1", forged)
				scratch := NewMemoryStore()
				genuine := putManifest(t, scratch, "r1", completeRequest, gateway)
				oldSum := Digest("", []byte(completeRequest[ArtifactToolResult])).SHA256
				newSum := Digest("", []byte(forged[ArtifactToolResult])).SHA256
				mustPut(t, s, Key("r1", ArtifactManifest), bytes.Replace(genuine, []byte(oldSum), []byte(newSum), 1))
			},
			trusted:       trusted,
			wantStatus:    StatusOK,
			wantSignature: SignatureBad,
			wantTampered:  true,
			wantProblems:  []string{"requests/r1/manifest.json: signature by key " + gateway.KeyID() + " does not match"},
		},
		{
			name: "signed manifest's outcome altered",
			setup: func(t *testing.T, s, _ Store) {
				putArtifacts(t, s, "r1", completeRequest)
				genuine := putManifest(t, NewMemoryStore(), "r1", completeRequest, gateway)
				mustPut(t, s, Key("r1", ArtifactManifest), bytes.Replace(genuine, []byte(`"completed"`), []byte(`"failed"`), 1))
			},
			trusted:       trusted,
			wantStatus:    StatusOK,
			wantSignature: SignatureBad,
			wantTampered:  true,
			wantProblems:  []string{"does not match the manifest's content"},
		},
		{
			name: "artifacts waiting in the spool",
			setup: func(t *testing.T, s, spool Store) {
				putArtifacts(t, s, "r1", only(completeRequest, ArtifactRequest, ArtifactPolicyDecision))
				putManifest(t, s, "r1", completeRequest, gateway)
				putArtifacts(t, spool, "r1", only(completeRequest, ArtifactToolResult, ArtifactResponse))
			},
			useSpool:      true,
			trusted:       trusted,
			wantStatus:    StatusPending,
			wantSignature: SignatureValid,
			wantSpooled:   []string{"requests/r1/tool_result.json", "requests/r1/response.json"},
		},
		{
			name: "manifest waiting in the spool",
			setup: func(t *testing.T, s, spool Store) {
				putArtifacts(t, s, "r1", only(completeRequest, ArtifactRequest))
				writeSigned(t, spool, "r1", without(completeRequest, ArtifactRequest), completeRequest, gateway)
			},
			useSpool:      true,
			trusted:       trusted,
			wantStatus:    StatusPending,
			wantSignature: SignatureValid,
			wantSpooled: []string{"requests/r1/manifest.json", "requests/r1/policy_decision.json",
				"requests/r1/tool_result.json", "requests/r1/response.json"},
		},
		{
			// A flush stopped between the upload and the removal.
			name: "artifact in both the store and the spool",
			setup: func(t *testing.T, s, spool Store) {
				writeSigned(t, s, "r1", completeRequest, completeRequest, gateway)
				putArtifacts(t, spool, "r1", only(completeRequest, ArtifactResponse))
			},
			useSpool:      true,
			trusted:       trusted,
			wantStatus:    StatusOK,
			wantSignature: SignatureValid,
		},
		{
			name: "spooled artifact tampered",
			setup: func(t *testing.T, s, spool Store) {
				putArtifacts(t, s, "r1", without(completeRequest, ArtifactResponse))
				putManifest(t, s, "r1", completeRequest, gateway)
				putArtifacts(t, spool, "r1", map[string]string{ArtifactResponse: `{"ok":false}`})
			},
			useSpool:      true,
			trusted:       trusted,
			wantStatus:    StatusMismatch,
			wantSignature: SignatureValid,
			wantTampered:  true,
			wantProblems:  []string{"requests/r1/response.json: size in the spool is 12, manifest says 11", "requests/r1/response.json: sha256 in the spool"},
			wantSpooled:   []string{"requests/r1/response.json"},
		},
		{
			name: "spool copy conflicts with the store's",
			setup: func(t *testing.T, s, spool Store) {
				writeSigned(t, s, "r1", completeRequest, completeRequest, gateway)
				putArtifacts(t, spool, "r1", map[string]string{ArtifactResponse: `{"ok":fals}`})
			},
			useSpool:      true,
			trusted:       trusted,
			wantStatus:    StatusMismatch,
			wantSignature: SignatureValid,
			wantTampered:  true,
			wantProblems:  []string{"requests/r1/response.json: sha256 in the spool is "},
		},
		{
			name: "unlisted artifact in the spool",
			setup: func(t *testing.T, s, spool Store) {
				writeSigned(t, s, "r1", completeRequest, completeRequest, gateway)
				putArtifacts(t, spool, "r1", map[string]string{"extra.json": "{}"})
			},
			useSpool:      true,
			trusted:       trusted,
			wantStatus:    StatusMismatch,
			wantSignature: SignatureValid,
			wantTampered:  true,
			wantProblems:  []string{"requests/r1/extra.json: in the spool but not listed"},
		},
		{
			name: "no manifest anywhere, artifacts in the spool",
			setup: func(t *testing.T, s, spool Store) {
				putArtifacts(t, s, "r1", only(completeRequest, ArtifactRequest))
				putArtifacts(t, spool, "r1", only(completeRequest, ArtifactPolicyDecision))
			},
			useSpool:     true,
			wantStatus:   StatusIncomplete,
			wantProblems: []string{"requests/r1/manifest.json: missing"},
		},
	}
	for _, factory := range verifyBackends {
		for _, tt := range tests {
			t.Run(factory.name+"/"+tt.name, func(t *testing.T) {
				s := factory.new(t)
				var spool Store
				if tt.useSpool {
					spool = factory.new(t)
				}
				tt.setup(t, s, spool)
				rep, err := Verify(context.Background(), s, "r1", VerifyOptions{TrustedKeys: tt.trusted, Spool: spool})
				if err != nil {
					t.Fatalf("Verify = %v", err)
				}
				if rep.RequestID != "r1" || rep.Status != tt.wantStatus || rep.Signature != tt.wantSignature {
					t.Fatalf("Verify = %+v, want request r1 with status %q, signature %q", rep, tt.wantStatus, tt.wantSignature)
				}
				if rep.Tampered() != tt.wantTampered {
					t.Errorf("Tampered() = %v, want %v (report %+v)", rep.Tampered(), tt.wantTampered, rep)
				}
				if len(rep.Problems) != len(tt.wantProblems) {
					t.Fatalf("Problems = %q, want %d matching %q", rep.Problems, len(tt.wantProblems), tt.wantProblems)
				}
				for i, want := range tt.wantProblems {
					if !strings.Contains(rep.Problems[i], want) {
						t.Errorf("Problems[%d] = %q, want it to contain %q", i, rep.Problems[i], want)
					}
				}
				if !slices.Equal(rep.Spooled, tt.wantSpooled) {
					t.Errorf("Spooled = %q, want %q", rep.Spooled, tt.wantSpooled)
				}
				if signed := rep.Signature != "" && rep.Signature != SignatureUnsigned; signed != (rep.KeyID != "") {
					t.Errorf("KeyID = %q with signature %q", rep.KeyID, rep.Signature)
				}
			})
		}
	}
}

// TestVerifyDetectsTamperingOnDisk changes stored files behind the store's
// back, as an attacker with bucket access would.
func TestVerifyDetectsTamperingOnDisk(t *testing.T) {
	t.Parallel()
	signer := testSigner(t, 1)
	opts := VerifyOptions{TrustedKeys: []ed25519.PublicKey{signer.PublicKey()}}
	tests := []struct {
		name          string
		file          string
		edit          func(data []byte) []byte
		wantStatus    string
		wantSignature string
		wantProblem   string
	}{
		{"artifact byte flipped", ArtifactRequest, func(d []byte) []byte { d[len(d)/2] ^= 0x01; return d },
			StatusMismatch, SignatureValid, "requests/r1/request.json: sha256"},
		{"manifest engine_ref edited", ArtifactManifest, func(d []byte) []byte { return bytes.Replace(d, []byte(`"test"`), []byte(`"tesT"`), 1) },
			StatusOK, SignatureBad, "requests/r1/manifest.json: signature"},
		{"manifest re-indented", ArtifactManifest, func(d []byte) []byte { return bytes.ReplaceAll(d, []byte("\n  "), []byte("\n\t")) },
			StatusOK, SignatureValid, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newTestFileStore(t, dir)
			writeSigned(t, s, "r1", completeRequest, completeRequest, signer)
			ctx := context.Background()
			if rep, err := Verify(ctx, s, "r1", opts); err != nil || rep.Verdict() != StatusOK {
				t.Fatalf("Verify before tampering = %+v, %v; want ok", rep, err)
			}
			file := filepath.Join(dir, "requests", "r1", tt.file)
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, tt.edit(data), 0o640); err != nil {
				t.Fatal(err)
			}
			rep, err := Verify(ctx, s, "r1", opts)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Status != tt.wantStatus || rep.Signature != tt.wantSignature {
				t.Fatalf("Verify after tampering = %+v, want status %q, signature %q", rep, tt.wantStatus, tt.wantSignature)
			}
			if tt.wantProblem == "" {
				if len(rep.Problems) != 0 {
					t.Fatalf("Problems = %q, want none", rep.Problems)
				}
				return
			}
			if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], tt.wantProblem) {
				t.Fatalf("Problems = %q, want one containing %q", rep.Problems, tt.wantProblem)
			}
		})
	}
}

func TestVerdict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status, signature string
		want              string
		wantTampered      bool
	}{
		{StatusOK, SignatureValid, "ok", false},
		{StatusOK, SignatureUnsigned, "unsigned", false},
		{StatusOK, SignatureUnchecked, "unchecked-signature", false},
		{StatusOK, SignatureBad, "bad-signature", true},
		{StatusOK, SignatureUnknownKey, "unknown-key", true},
		{StatusPending, SignatureValid, "pending", false},
		{StatusPending, SignatureUnsigned, "pending", false},
		{StatusPending, SignatureBad, "bad-signature", true},
		{StatusIncomplete, "", "incomplete", false},
		{StatusNotDispatched, "", "not-dispatched", false},
		{StatusMismatch, "", "mismatch", true},
		{StatusMismatch, SignatureValid, "mismatch", true},
		{StatusMismatch, SignatureBad, "mismatch", true},
	}
	for _, tt := range tests {
		t.Run(tt.status+"/"+tt.signature, func(t *testing.T) {
			rep := VerifyReport{Status: tt.status, Signature: tt.signature}
			if got := rep.Verdict(); got != tt.want {
				t.Errorf("Verdict() = %q, want %q", got, tt.want)
			}
			if got := rep.Tampered(); got != tt.wantTampered {
				t.Errorf("Tampered() = %v, want %v", got, tt.wantTampered)
			}
		})
	}
}

// failingStore fails every Get of one key, like a store that is down.
type failingStore struct {
	Store
	key string
}

var errStoreDown = errors.New("store is down")

func (s failingStore) Get(ctx context.Context, key string) ([]byte, error) {
	if key == s.key {
		return nil, errStoreDown
	}
	return s.Store.Get(ctx, key)
}

func TestVerifyErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := NewMemoryStore()
	writeRequest(t, mem, "r1", completeRequest, completeRequest)
	spool := NewMemoryStore()
	putArtifacts(t, spool, "r1", only(completeRequest, ArtifactResponse))
	tests := []struct {
		name      string
		store     Store
		requestID string
		opts      []VerifyOptions
		want      string
		wantErr   error
	}{
		{"manifest unreadable", failingStore{mem, Key("r1", ArtifactManifest)}, "r1", nil, "", errStoreDown},
		{"artifact unreadable", failingStore{mem, Key("r1", ArtifactResponse)}, "r1", nil, "", errStoreDown},
		{"spool unreadable", mem, "r1", []VerifyOptions{{Spool: failingStore{spool, Key("r1", ArtifactResponse)}}}, "spool", errStoreDown},
		{"request id escapes", mem, "..", nil, "", ErrInvalidKey},
		{"request id with slash", mem, "r1/x", nil, "", ErrInvalidKey},
		{"empty request id", mem, "", nil, "", ErrInvalidKey},
		{"short trusted key", mem, "r1", []VerifyOptions{{TrustedKeys: []ed25519.PublicKey{make([]byte, 31)}}}, "TrustedKeys[0] is 31 bytes", nil},
		{"two options", mem, "r1", []VerifyOptions{{}, {}}, "at most one", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Verify(ctx, tt.store, tt.requestID, tt.opts...)
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Verify = %v, want an error wrapping %v containing %q", err, tt.wantErr, tt.want)
			}
		})
	}
}

func TestVerifyAll(t *testing.T) {
	t.Parallel()
	signer := testSigner(t, 1)
	opts := func(spool Store) VerifyOptions {
		// Verified an hour after it was written, so that "c", claimed and
		// never finished, is incomplete rather than in flight.
		later := func() time.Time { return time.Now().Add(time.Hour) }
		return VerifyOptions{TrustedKeys: []ed25519.PublicKey{signer.PublicKey()}, Spool: spool, Now: later}
	}
	for _, factory := range verifyBackends {
		t.Run(factory.name, func(t *testing.T) {
			s, spool := factory.new(t), factory.new(t)
			// Ids chosen so that id order and key order differ: "a-" and
			// "a.b" sort before "a" as prefixes ("requests/a-/" < "requests/a/").
			writeSigned(t, s, "a", completeRequest, completeRequest, signer)
			writeSigned(t, s, "a.b", completeRequest, completeRequest, signer)
			writeRequest(t, s, "b", with(completeRequest, ArtifactToolResult, "{}"), completeRequest)
			putArtifacts(t, s, "c", only(completeRequest, ArtifactRequest))
			putArtifacts(t, s, "e", without(completeRequest, ArtifactResponse))
			putManifest(t, s, "e", completeRequest, signer)
			// Only in the spool so far: "a-", "bb" and "d"; "e" is in both.
			writeSigned(t, spool, "a-", completeRequest, completeRequest, signer)
			writeSigned(t, spool, "bb", completeRequest, completeRequest, signer)
			putArtifacts(t, spool, "d", only(completeRequest, ArtifactRequest))
			putArtifacts(t, spool, "e", only(completeRequest, ArtifactResponse))

			type seen struct{ id, verdict string }
			var got []seen
			err := VerifyAll(context.Background(), s, opts(spool), func(rep VerifyReport) error {
				got = append(got, seen{rep.RequestID, rep.Verdict()})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want := []seen{
				{"a-", StatusPending}, {"a.b", StatusOK}, {"a", StatusOK}, {"b", StatusMismatch},
				{"bb", StatusPending}, {"c", StatusIncomplete}, {"d", StatusIncomplete}, {"e", StatusPending},
			}
			if !slices.Equal(got, want) {
				t.Fatalf("VerifyAll visited\n%v\nwant\n%v", got, want)
			}

			// Without the spool, only the store's requests are visited.
			got = nil
			if err := VerifyAll(context.Background(), s, opts(nil), func(rep VerifyReport) error {
				got = append(got, seen{rep.RequestID, rep.Verdict()})
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			want = []seen{{"a.b", StatusOK}, {"a", StatusOK}, {"b", StatusMismatch}, {"c", StatusIncomplete}, {"e", StatusMismatch}}
			if !slices.Equal(got, want) {
				t.Fatalf("VerifyAll without the spool visited\n%v\nwant\n%v", got, want)
			}
		})
	}
}

func TestVerifyAllEmptyStore(t *testing.T) {
	t.Parallel()
	calls := 0
	err := VerifyAll(context.Background(), NewMemoryStore(), VerifyOptions{}, func(VerifyReport) error { calls++; return nil })
	if err != nil || calls != 0 {
		t.Fatalf("VerifyAll on an empty store = %v after %d calls, want nil after none", err, calls)
	}
}

func TestVerifyAllStrayKey(t *testing.T) {
	t.Parallel()
	s := NewMemoryStore()
	mustPut(t, s, "requests/notes.txt", []byte("hi"))
	writeRequest(t, s, "r1", completeRequest, completeRequest)
	var got []VerifyReport
	if err := VerifyAll(context.Background(), s, VerifyOptions{}, func(rep VerifyReport) error {
		got = append(got, rep)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Status != StatusMismatch || !got[0].Tampered() ||
		len(got[0].Problems) != 1 || got[0].Problems[0] != "requests/notes.txt: stored outside any request's folder" {
		t.Fatalf("VerifyAll = %+v, want the stray key reported as a mismatch, then r1", got)
	}
	if got[1].RequestID != "r1" || got[1].Status != StatusOK {
		t.Fatalf("VerifyAll reported r1 as %+v", got[1])
	}
}

func TestWalkRequests(t *testing.T) {
	t.Parallel()
	for _, factory := range verifyBackends {
		t.Run(factory.name, func(t *testing.T) {
			s := factory.new(t)
			putArtifacts(t, s, "b", only(completeRequest, ArtifactRequest, ArtifactResponse))
			putArtifacts(t, s, "a", only(completeRequest, ArtifactRequest))
			putArtifacts(t, s, "a.x", only(completeRequest, ArtifactPolicyDecision))
			mustPut(t, s, "requests/stray.json", []byte("{}"))
			mustPut(t, s, "other/a/request.json", []byte("{}"))
			var got []string
			err := WalkRequests(context.Background(), s, func(id string, keys []string) error {
				got = append(got, id+": "+strings.Join(keys, " "))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want := []string{
				"a.x: requests/a.x/policy_decision.json",
				"a: requests/a/request.json",
				"b: requests/b/request.json requests/b/response.json",
			}
			if !slices.Equal(got, want) {
				t.Fatalf("WalkRequests visited\n%q\nwant\n%q", got, want)
			}
		})
	}
}

// walkFailingStore fails its walk after the first key.
type walkFailingStore struct{ Store }

func (s walkFailingStore) Walk(ctx context.Context, prefix string, fn func(string) error) error {
	first := true
	return s.Store.Walk(ctx, prefix, func(key string) error {
		if !first {
			return errStoreDown
		}
		first = false
		return fn(key)
	})
}

func TestVerifyAllStops(t *testing.T) {
	t.Parallel()
	s := NewMemoryStore()
	for i := range 3 {
		writeRequest(t, s, fmt.Sprintf("r%d", i), completeRequest, completeRequest)
	}
	errStop := errors.New("stop")
	tests := []struct {
		name      string
		store     Store
		opts      VerifyOptions
		fnErr     error
		want      error
		wantCalls int
	}{
		{"fn fails", s, VerifyOptions{}, errStop, errStop, 1},
		{"walk fails", walkFailingStore{s}, VerifyOptions{}, nil, errStoreDown, 0},
		{"artifact unreadable", failingStore{s, Key("r1", ArtifactResponse)}, VerifyOptions{}, nil, errStoreDown, 1},
		{"spool walk fails", s, VerifyOptions{Spool: walkFailingStore{s}}, nil, errStoreDown, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := VerifyAll(context.Background(), tt.store, tt.opts, func(VerifyReport) error {
				calls++
				return tt.fnErr
			})
			if !errors.Is(err, tt.want) || calls != tt.wantCalls {
				t.Fatalf("VerifyAll = %v after %d calls, want %v after %d", err, calls, tt.want, tt.wantCalls)
			}
		})
	}
}

// fillStore stores n small, complete, unsigned requests.
func fillStore(t testing.TB, s Store, n int) {
	t.Helper()
	for i := range n {
		writeRequest(t, s, fmt.Sprintf("req-%06d", i), completeRequest, completeRequest)
	}
}

// TestVerifyAllMemoryIsFlat verifies 10,000 requests and checks that the
// live heap does not grow between the 1,000th and the 9,000th report: the
// walk must not keep anything of the requests it has finished with.
func TestVerifyAllMemoryIsFlat(t *testing.T) {
	const n = 10_000
	s := NewMemoryStore()
	fillStore(t, s, n)
	liveHeap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var at1k, at9k uint64
	count := 0
	err := VerifyAll(context.Background(), s, VerifyOptions{}, func(rep VerifyReport) error {
		if rep.Status != StatusOK {
			return fmt.Errorf("request %s: %s %q", rep.RequestID, rep.Status, rep.Problems)
		}
		count++
		switch count {
		case 1_000:
			at1k = liveHeap()
		case 9_000:
			at9k = liveHeap()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if count != n {
		t.Fatalf("VerifyAll reported %d requests, want %d", count, n)
	}
	// Keeping even one small value per finished request (8,000 of them)
	// would take several hundred KiB.
	const slack = 128 << 10
	if at9k > at1k+slack {
		t.Fatalf("live heap grew from %d to %d bytes over 8,000 requests; want at most %d bytes of growth", at1k, at9k, slack)
	}
}

func BenchmarkVerifyAll(b *testing.B) {
	const n = 1_000
	s := NewMemoryStore()
	fillStore(b, s, n)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := VerifyAll(ctx, s, VerifyOptions{}, func(VerifyReport) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/request")
}

// dispatchJSON is a dispatch record of attempt n of request id.
func dispatchJSON(t testing.TB, id string, n int, state string) string {
	t.Helper()
	d := DispatchRecord{RequestID: id, Attempt: n, State: state, Gateway: "toolgate/test@a", At: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	if state == NotDispatched {
		d.Reason = "executor unreachable"
	}
	data, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// storeNamed stores artifacts of request id by their name within its
// folder, such as "attempts/2/dispatch.json".
func storeNamed(t testing.TB, s Store, id string, artifacts map[string]string) {
	t.Helper()
	for name, data := range artifacts {
		mustPut(t, s, Key(id, name), []byte(data))
	}
}

// manifestNamed stores a manifest of request id with the given outcome
// listing artifacts by their name within the request's folder.
func manifestNamed(t testing.TB, s Store, id, outcome string, artifacts map[string]string) {
	t.Helper()
	m := Manifest{Version: ManifestVersion, RequestID: id, EngineRef: "test", Outcome: outcome, CreatedAt: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	names := make([]string, 0, len(artifacts))
	for name := range artifacts {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		m.Artifacts = append(m.Artifacts, Digest(Key(id, name), []byte(artifacts[name])))
	}
	data, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, Key(id, ArtifactManifest), data)
}

// merged returns the union of artifact maps, later ones winning.
func merged(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func TestVerifyAttempts(t *testing.T) {
	t.Parallel()
	claim := map[string]string{ArtifactRequest: `{"request_id":"r1"}`, ArtifactPolicyDecision: `{"decision":"allow"}`}
	closedBeforeMarker := merged(claim, map[string]string{ArtifactDispatch: dispatchJSON(t, "r1", 1, NotDispatched)})
	ran := map[string]string{ArtifactToolResult: `{"exit_code":0}`, ArtifactResponse: `{"ok":true}`}
	retried := merged(closedBeforeMarker, map[string]string{
		"attempts/2/policy_decision.json": `{"decision":"allow","attempt":2}`,
		"attempts/2/dispatch.json":        dispatchJSON(t, "r1", 2, Dispatched),
	}, ran)
	dispatched := merged(claim, map[string]string{ArtifactDispatch: dispatchJSON(t, "r1", 1, Dispatched)})

	type attempt struct {
		n     int
		state string
	}
	tests := []struct {
		name         string
		stored       map[string]string // by name within r1's folder
		spooled      map[string]string
		manifest     map[string]string // listed artifacts; nil: no manifest
		outcome      string
		wantStatus   string
		wantOutcome  string
		wantAttempts []attempt
		wantProblems []string // substrings, one per problem, in order
	}{
		{
			name:         "a retry after a not_dispatched first attempt verifies ok and lists both attempts",
			stored:       retried,
			manifest:     retried,
			outcome:      OutcomeCompleted,
			wantStatus:   StatusOK,
			wantOutcome:  OutcomeCompleted,
			wantAttempts: []attempt{{1, NotDispatched}, {2, Dispatched}},
		},
		{
			name:         "an attempt closed before its marker is not-dispatched, not incomplete",
			stored:       closedBeforeMarker,
			wantStatus:   StatusNotDispatched,
			wantAttempts: []attempt{{1, NotDispatched}},
		},
		{
			name:         "an attempt the driver proved undispatched after its marker is not-dispatched",
			stored:       merged(dispatched, map[string]string{ArtifactNotDispatched: dispatchJSON(t, "r1", 1, NotDispatched)}),
			wantStatus:   StatusNotDispatched,
			wantAttempts: []attempt{{1, NotDispatched}},
		},
		{
			name: "two attempts both closed not_dispatched are not-dispatched",
			stored: merged(closedBeforeMarker, map[string]string{
				"attempts/2/policy_decision.json": `{}`,
				"attempts/2/dispatch.json":        dispatchJSON(t, "r1", 2, NotDispatched),
			}),
			wantStatus:   StatusNotDispatched,
			wantAttempts: []attempt{{1, NotDispatched}, {2, NotDispatched}},
		},
		{
			name:         "a not_dispatched record still in the spool counts",
			stored:       claim,
			spooled:      map[string]string{ArtifactDispatch: dispatchJSON(t, "r1", 1, NotDispatched)},
			wantStatus:   StatusNotDispatched,
			wantAttempts: []attempt{{1, NotDispatched}},
		},
		{
			name:         "a dispatched request without a manifest stays incomplete",
			stored:       merged(dispatched, ran),
			wantStatus:   StatusIncomplete,
			wantAttempts: []attempt{{1, Dispatched}},
			wantProblems: []string{"requests/r1/manifest.json: missing"},
		},
		{
			name:         "a decided attempt without a dispatch record stays incomplete",
			stored:       claim,
			wantStatus:   StatusIncomplete,
			wantAttempts: []attempt{{1, AttemptOpen}},
			wantProblems: []string{"requests/r1/manifest.json: missing"},
		},
		{
			name: "a retry whose new attempt is open stays incomplete",
			stored: merged(closedBeforeMarker, map[string]string{
				"attempts/2/policy_decision.json": `{}`,
			}),
			wantStatus:   StatusIncomplete,
			wantAttempts: []attempt{{1, NotDispatched}, {2, AttemptOpen}},
			wantProblems: []string{"requests/r1/manifest.json: missing"},
		},
		{
			name:         "a manifest with outcome interrupted verifies like any other",
			stored:       dispatched,
			manifest:     dispatched,
			outcome:      OutcomeInterrupted,
			wantStatus:   StatusOK,
			wantOutcome:  OutcomeInterrupted,
			wantAttempts: []attempt{{1, Dispatched}},
		},
		{
			name:         "a dispatch record forged for another request is a mismatch",
			stored:       merged(claim, map[string]string{ArtifactDispatch: dispatchJSON(t, "r2", 1, NotDispatched)}),
			wantStatus:   StatusMismatch,
			wantProblems: []string{`requests/r1/dispatch.json: evidence: dispatch record: request_id is "r2"`},
		},
		{
			name:         "a dispatch record that is not JSON is a mismatch",
			stored:       merged(claim, map[string]string{ArtifactDispatch: `{"state":`}),
			wantStatus:   StatusMismatch,
			wantProblems: []string{"requests/r1/dispatch.json: evidence: dispatch record: "},
		},
		{
			name: "a dispatch record of the wrong attempt is a mismatch",
			stored: merged(closedBeforeMarker, map[string]string{
				"attempts/2/dispatch.json": dispatchJSON(t, "r1", 1, NotDispatched),
			}),
			wantStatus:   StatusMismatch,
			wantProblems: []string{"requests/r1/attempts/2/dispatch.json: evidence: dispatch record: attempt is 1, want 2"},
		},
		{
			name:         "a dispatch record with an unknown state is a mismatch",
			stored:       merged(claim, map[string]string{ArtifactDispatch: strings.Replace(dispatchJSON(t, "r1", 1, NotDispatched), NotDispatched, "skipped", 1)}),
			wantStatus:   StatusMismatch,
			wantProblems: []string{`requests/r1/dispatch.json: evidence: dispatch record: state "skipped"`},
		},
		{
			name:         "a not_dispatched.json that says dispatched is a mismatch",
			stored:       merged(dispatched, map[string]string{ArtifactNotDispatched: dispatchJSON(t, "r1", 1, Dispatched)}),
			wantStatus:   StatusMismatch,
			wantProblems: []string{`requests/r1/not_dispatched.json: state is "dispatched"`},
		},
		{
			name:         "an attempt folder with a leading zero is a mismatch",
			stored:       merged(closedBeforeMarker, map[string]string{"attempts/02/dispatch.json": dispatchJSON(t, "r1", 2, Dispatched)}),
			wantStatus:   StatusMismatch,
			wantAttempts: []attempt{{1, NotDispatched}},
			wantProblems: []string{"requests/r1/attempts/02/dispatch.json: not an attempt's artifact"},
		},
		{
			name:         "an attempt folder numbered 1 is a mismatch",
			stored:       merged(claim, map[string]string{"attempts/1/dispatch.json": dispatchJSON(t, "r1", 1, NotDispatched)}),
			wantStatus:   StatusMismatch,
			wantAttempts: []attempt{{1, AttemptOpen}},
			wantProblems: []string{"requests/r1/attempts/1/dispatch.json: not an attempt's artifact"},
		},
		{
			name:         "a tool result inside an attempt's folder is a mismatch",
			stored:       merged(closedBeforeMarker, map[string]string{"attempts/2/tool_result.json": `{}`}),
			wantStatus:   StatusMismatch,
			wantAttempts: []attempt{{1, NotDispatched}},
			wantProblems: []string{"requests/r1/attempts/2/tool_result.json: not an attempt's artifact: an attempt's folder holds only"},
		},
		{
			name: "a second attempt after a dispatched first one is a mismatch, even when listed",
			stored: merged(dispatched, map[string]string{
				"attempts/2/dispatch.json": dispatchJSON(t, "r1", 2, Dispatched),
			}, ran),
			manifest: merged(dispatched, map[string]string{
				"attempts/2/dispatch.json": dispatchJSON(t, "r1", 2, Dispatched),
			}, ran),
			outcome:      OutcomeCompleted,
			wantStatus:   StatusMismatch,
			wantOutcome:  OutcomeCompleted,
			wantAttempts: []attempt{{1, Dispatched}, {2, Dispatched}},
			wantProblems: []string{"requests/r1/attempts/2/: attempt 2 opened while attempt 1 is dispatched, not not_dispatched"},
		},
		{
			name: "an attempt after a gap is a mismatch",
			stored: merged(closedBeforeMarker, map[string]string{
				"attempts/3/dispatch.json": dispatchJSON(t, "r1", 3, NotDispatched),
			}),
			wantStatus:   StatusMismatch,
			wantAttempts: []attempt{{1, NotDispatched}, {3, NotDispatched}},
			wantProblems: []string{"requests/r1/attempts/3/: attempt 3 without attempt 2"},
		},
	}
	for _, factory := range verifyBackends {
		for _, tt := range tests {
			t.Run(factory.name+"/"+tt.name, func(t *testing.T) {
				s, spool := factory.new(t), factory.new(t)
				storeNamed(t, s, "r1", tt.stored)
				storeNamed(t, spool, "r1", tt.spooled)
				if tt.manifest != nil {
					manifestNamed(t, s, "r1", tt.outcome, tt.manifest)
				}
				rep, err := Verify(context.Background(), s, "r1", VerifyOptions{Spool: spool})
				if err != nil {
					t.Fatalf("Verify = %v", err)
				}
				if rep.Status != tt.wantStatus || rep.Outcome != tt.wantOutcome {
					t.Fatalf("Verify = %+v, want status %q, outcome %q", rep, tt.wantStatus, tt.wantOutcome)
				}
				if rep.Tampered() != (tt.wantStatus == StatusMismatch) {
					t.Errorf("Tampered() = %v for status %q", rep.Tampered(), rep.Status)
				}
				var got []attempt
				for _, a := range rep.Attempts {
					got = append(got, attempt{a.Number, a.State})
				}
				if !slices.Equal(got, tt.wantAttempts) {
					t.Errorf("Attempts = %v, want %v", got, tt.wantAttempts)
				}
				if len(rep.Problems) != len(tt.wantProblems) {
					t.Fatalf("Problems = %q, want %d matching %q", rep.Problems, len(tt.wantProblems), tt.wantProblems)
				}
				for i, want := range tt.wantProblems {
					if !strings.Contains(rep.Problems[i], want) {
						t.Errorf("Problems[%d] = %q, want it to contain %q", i, rep.Problems[i], want)
					}
				}
			})
		}
	}
}

// TestVerifyReadsDispatchRecordsOnce checks that a dispatch record listed
// in the manifest is fetched once, for both the attempts and the digest
// check: on S3 every Get is a round trip.
func TestVerifyReadsDispatchRecordsOnce(t *testing.T) {
	t.Parallel()
	s := &countingStore{Store: NewMemoryStore(), gets: map[string]int{}}
	artifacts := map[string]string{ArtifactRequest: `{}`, ArtifactDispatch: dispatchJSON(t, "r1", 1, Dispatched), ArtifactResponse: `{}`}
	storeNamed(t, s, "r1", artifacts)
	manifestNamed(t, s, "r1", OutcomeCompleted, artifacts)
	rep, err := Verify(context.Background(), s, "r1")
	if err != nil || rep.Status != StatusOK {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
	for key, n := range s.gets {
		if n != 1 {
			t.Errorf("%s read %d times, want once", key, n)
		}
	}
}

// countingStore counts the Gets of each key.
type countingStore struct {
	Store
	gets map[string]int
}

func (s *countingStore) Get(ctx context.Context, key string) ([]byte, error) {
	s.gets[key]++
	return s.Store.Get(ctx, key)
}

func TestVerifyAttemptsStoreFailureIsAnError(t *testing.T) {
	t.Parallel()
	s := NewMemoryStore()
	storeNamed(t, s, "r1", map[string]string{ArtifactRequest: `{}`, ArtifactDispatch: dispatchJSON(t, "r1", 1, NotDispatched)})
	_, err := Verify(context.Background(), failingStore{s, Key("r1", ArtifactDispatch)}, "r1")
	if err == nil || !strings.Contains(err.Error(), errStoreDown.Error()) {
		t.Fatalf("Verify with the dispatch record unreadable = %v, want the store's error", err)
	}
}
