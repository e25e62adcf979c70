package evidence

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeRequest stores a request's artifacts and a manifest describing
// listed, which may differ from what is stored.
func writeRequest(t *testing.T, s Store, id string, stored, listed map[string]string) {
	t.Helper()
	m := Manifest{
		Version:   ManifestVersion,
		RequestID: id,
		EngineRef: "test",
		Outcome:   OutcomeCompleted,
		CreatedAt: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for _, name := range []string{ArtifactRequest, ArtifactPolicyDecision, ArtifactToolResult, ArtifactResponse, "extra.json"} {
		if data, ok := stored[name]; ok {
			mustPut(t, s, Key(id, name), []byte(data))
		}
		if data, ok := listed[name]; ok {
			m.Artifacts = append(m.Artifacts, Digest(Key(id, name), []byte(data)))
		}
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, Key(id, ArtifactManifest), data)
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

func without(base map[string]string, name string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		if k != name {
			out[k] = v
		}
	}
	return out
}

func TestVerify(t *testing.T) {
	tests := []struct {
		name         string
		setup        func(t *testing.T, s Store)
		wantStatus   string
		wantProblems []string // substrings, one per expected problem, in order
	}{
		{
			name:       "complete evidence",
			setup:      func(t *testing.T, s Store) { writeRequest(t, s, "r1", completeRequest, completeRequest) },
			wantStatus: StatusOK,
		},
		{
			name: "other requests do not interfere",
			setup: func(t *testing.T, s Store) {
				writeRequest(t, s, "r1", completeRequest, completeRequest)
				writeRequest(t, s, "r10", with(completeRequest, "extra.json", "x"), without(completeRequest, ArtifactResponse))
			},
			wantStatus: StatusOK,
		},
		{
			name: "tampered byte",
			setup: func(t *testing.T, s Store) {
				writeRequest(t, s, "r1", with(completeRequest, ArtifactToolResult, `{"out":"hellO"}`), completeRequest)
			},
			wantStatus:   StatusMismatch,
			wantProblems: []string{"requests/r1/tool_result.json: sha256 is "},
		},
		{
			name: "truncated artifact",
			setup: func(t *testing.T, s Store) {
				writeRequest(t, s, "r1", with(completeRequest, ArtifactResponse, `{}`), completeRequest)
			},
			wantStatus:   StatusMismatch,
			wantProblems: []string{"requests/r1/response.json: size is 2, manifest says 11", "requests/r1/response.json: sha256"},
		},
		{
			name: "missing artifact",
			setup: func(t *testing.T, s Store) {
				writeRequest(t, s, "r1", without(completeRequest, ArtifactToolResult), completeRequest)
			},
			wantStatus:   StatusMismatch,
			wantProblems: []string{"requests/r1/tool_result.json: listed in the manifest but missing"},
		},
		{
			name: "unlisted artifact",
			setup: func(t *testing.T, s Store) {
				writeRequest(t, s, "r1", with(completeRequest, "extra.json", "{}"), completeRequest)
			},
			wantStatus:   StatusMismatch,
			wantProblems: []string{"requests/r1/extra.json: present but not listed"},
		},
		{
			name: "no manifest",
			setup: func(t *testing.T, s Store) {
				mustPut(t, s, Key("r1", ArtifactRequest), []byte("{}"))
			},
			wantStatus:   StatusIncomplete,
			wantProblems: []string{"requests/r1/manifest.json: missing"},
		},
		{
			name:         "nothing stored",
			setup:        func(*testing.T, Store) {},
			wantStatus:   StatusIncomplete,
			wantProblems: []string{"requests/r1/manifest.json: missing"},
		},
		{
			name: "corrupt manifest",
			setup: func(t *testing.T, s Store) {
				mustPut(t, s, Key("r1", ArtifactManifest), []byte(`{"version":1,`))
			},
			wantStatus:   StatusMismatch,
			wantProblems: []string{"requests/r1/manifest.json: evidence: manifest: "},
		},
		{
			name: "manifest of another request",
			setup: func(t *testing.T, s Store) {
				writeRequest(t, s, "r2", completeRequest, completeRequest)
				data := mustGet(t, s, Key("r2", ArtifactManifest))
				mustPut(t, s, Key("r1", ArtifactManifest), data)
			},
			wantStatus:   StatusMismatch,
			wantProblems: []string{`requests/r1/manifest.json: request_id is "r2"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewMemoryStore()
			tt.setup(t, s)
			rep, err := Verify(context.Background(), s, "r1")
			if err != nil {
				t.Fatalf("Verify = %v", err)
			}
			if rep.RequestID != "r1" || rep.Status != tt.wantStatus {
				t.Fatalf("Verify = %+v, want request r1 with status %q", rep, tt.wantStatus)
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

// TestVerifyDetectsTamperingOnDisk flips one byte of a stored file behind
// the store's back, as an attacker with bucket access would.
func TestVerifyDetectsTamperingOnDisk(t *testing.T) {
	dir := t.TempDir()
	s := newTestFileStore(t, dir)
	writeRequest(t, s, "r1", completeRequest, completeRequest)
	ctx := context.Background()
	if rep, err := Verify(ctx, s, "r1"); err != nil || rep.Status != StatusOK {
		t.Fatalf("Verify before tampering = %+v, %v; want ok", rep, err)
	}

	file := filepath.Join(dir, "requests", "r1", ArtifactRequest)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x01
	if err := os.WriteFile(file, data, 0o640); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(ctx, s, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Status != StatusMismatch || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "requests/r1/request.json: sha256") {
		t.Fatalf("Verify after tampering = %+v, want one sha256 mismatch for request.json", rep)
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
	ctx := context.Background()
	mem := NewMemoryStore()
	writeRequest(t, mem, "r1", completeRequest, completeRequest)
	tests := []struct {
		name      string
		store     Store
		requestID string
		want      error
	}{
		{"manifest unreadable", failingStore{mem, Key("r1", ArtifactManifest)}, "r1", errStoreDown},
		{"artifact unreadable", failingStore{mem, Key("r1", ArtifactResponse)}, "r1", errStoreDown},
		{"request id escapes", mem, "..", ErrInvalidKey},
		{"request id with slash", mem, "r1/x", ErrInvalidKey},
		{"empty request id", mem, "", ErrInvalidKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Verify(ctx, tt.store, tt.requestID); !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
}
