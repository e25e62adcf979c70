package replay

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// recorded is one call as a test writes its evidence.
type recorded struct {
	id, caller, tool, decision, rule string
	args                             string
	groups                           []string
	history                          *evidence.DecisionHistory
	approval                         *evidence.DecisionApproval
	redactions                       []evidence.Redaction
	noAttrs                          bool
	// signer, if set, signs the manifest.
	signer *evidence.Signer
}

var recordedAt = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func (r recorded) requestRecord() evidence.RequestRecord {
	args := r.args
	if args == "" {
		args = `{"path":"hello.txt"}`
	}
	return evidence.RequestRecord{RequestID: r.id, Caller: r.caller, ToolID: r.tool, Args: json.RawMessage(args),
		Ctx: evidence.RequestContext{RunID: "run-1"}, ReceivedAt: recordedAt, CanonicalRequestHash: recordedHash, Gateway: "toolgate/test@t"}
}

func (r recorded) decisionRecord() evidence.DecisionRecord {
	d := evidence.DecisionRecord{RequestID: r.id, Attempt: 1, Caller: r.caller, Action: "RunTool", ToolID: r.tool,
		Driver: "workspace", Decision: r.decision, RuleID: r.rule, PolicyRef: "policy.default", Errors: []string{},
		DecidedAt: recordedAt, History: r.history, Approval: r.approval}
	if !r.noAttrs {
		d.Principal = &evidence.DecisionPrincipal{Groups: r.groups, Roles: []string{}}
		d.Tool = &evidence.DecisionTool{Tags: []string{}}
	}
	return d
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// putRecorded stores r's request, decision and a manifest over both in s.
func putRecorded(t testing.TB, s interface {
	Put(context.Context, string, []byte) error
}, r recorded) {
	t.Helper()
	ctx := context.Background()
	arts := map[string][]byte{
		evidence.Key(r.id, evidence.ArtifactRequest):        mustJSON(t, r.requestRecord()),
		evidence.Key(r.id, evidence.ArtifactPolicyDecision): mustJSON(t, r.decisionRecord()),
		evidence.Key(r.id, evidence.ArtifactResponse):       []byte(`{"ok":true}`),
	}
	if r.decision == "allow" {
		arts[evidence.Key(r.id, evidence.ArtifactDispatch)] = mustJSON(t, evidence.DispatchRecord{
			RequestID: r.id, Attempt: 1, State: evidence.Dispatched, Gateway: "toolgate/test@t", At: recordedAt})
	}
	m := evidence.Manifest{Version: evidence.ManifestVersion, RequestID: r.id, CanonicalRequestHash: recordedHash, EngineRef: "test",
		Outcome: evidence.OutcomeCompleted, CreatedAt: recordedAt, Redactions: r.redactions}
	for key, data := range arts {
		if err := s.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
		m.Artifacts = append(m.Artifacts, evidence.Digest(key, data))
	}
	if r.signer != nil {
		if err := r.signer.Sign(&m); err != nil {
			t.Fatal(err)
		}
	}
	data, err := m.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, evidence.Key(r.id, evidence.ArtifactManifest), data); err != nil {
		t.Fatal(err)
	}
}

// writePolicies writes text as the default set of a new folder and loads it.
func writePolicies(t testing.TB, text string) *Policies {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.default.cedar"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := LoadPolicies(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fileStoreOf returns a file store in a new folder holding n calls (see
// storeCall) with manifests signed by a new key, and the options that
// require that key's signature.
func fileStoreOf(t testing.TB, n int) (*evidence.FileStore, evidence.VerifyOptions) {
	t.Helper()
	dir := t.TempDir()
	w := layoutWriter{dir}
	signer := newSigner(t)
	for i := range n {
		putRecorded(t, w, storeCall(i, signer))
	}
	s, err := evidence.NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, evidence.VerifyOptions{TrustedKeys: []ed25519.PublicKey{signer.PublicKey()}, RequireSignature: true}
}

// newSigner returns a signer with a new key.
func newSigner(t testing.TB) *evidence.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := evidence.NewSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	return signer
}

// storeCall is the i-th call of a benchmark's store, signed by signer:
// every third one denied by no-secret, the rest allowed by read.
func storeCall(i int, signer *evidence.Signer) recorded {
	r := recorded{id: fmt.Sprintf("req-%07d", i), caller: "alice", tool: "workspace.readFile", decision: "allow", rule: "read",
		groups: []string{"dev"}, signer: signer}
	if i%3 == 0 {
		r.args, r.decision, r.rule = `{"path":"secret/k"}`, "deny", "no-secret"
	}
	return r
}

// layoutWriter writes artifacts in a file store's layout without the
// store's fsyncs, to build large stores for benchmarks quickly.
type layoutWriter struct{ dir string }

func (w layoutWriter) Put(_ context.Context, key string, data []byte) error {
	name := filepath.Join(w.dir, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return err
	}
	return os.WriteFile(name, data, 0o600)
}

// storeRecorded is the policy fileStoreOf's calls were decided by.
const storeRecorded = `@id("read") permit (principal, action, resource == Tool::"workspace.readFile");
@id("no-secret") forbid (principal, action, resource) when { context.args has path && context.args.path like "secret/*" };
`

// recordedHash is the canonical request hash of every recorded call.
var recordedHash = "sha256:" + strings.Repeat("ab", 32)
