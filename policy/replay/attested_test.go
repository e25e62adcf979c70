package replay

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/evidence"
)

// TestReplayLoggedStoreTampered: in a file store whose calls a signed
// transparency log records, a manifest's authenticity may come from the
// log (the completion entry commits to its bytes) instead of its own
// signature; a manifest an attacker rewrote is not vouched for by the
// log, and its own signature is checked, so each such call is reported
// unverified, never replayed, its signature's problem listed first as
// it always was (before the log's word that the bytes differ from those
// it logged). The calls left alone are replayed.
func TestReplayLoggedStoreTampered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	signer := newSigner(t)
	attacker := newSigner(t)
	dir := t.TempDir()
	fs, err := evidence.NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	l, _ := openLog(t, fs, "gw-a", signer)
	logged := evidence.WithLog(fs, l)
	for i := range 6 {
		putRecorded(t, logged, storeCall(i, signer))
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	w := layoutWriter{dir}
	// rewrite replaces a logged call's manifest with one changed by
	// change, as an attacker with write access to the folder would.
	rewrite := func(id string, change func(m *evidence.Manifest)) {
		t.Helper()
		key := evidence.Key(id, evidence.ArtifactManifest)
		data, err := fs.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		m, err := evidence.ParseManifest(data)
		if err != nil {
			t.Fatal(err)
		}
		change(&m)
		out, err := evidence.EncodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Put(ctx, key, out); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		id     string
		why    string // how the report starts to say why
		tamper func()
	}{
		{"req-0000001", "(mismatch): requests/req-0000001/manifest.json: signed by an untrusted key", func() {
			rewrite("req-0000001", func(m *evidence.Manifest) {
				m.Outcome = evidence.OutcomeFailed
				if err := attacker.Sign(m); err != nil {
					t.Fatal(err)
				}
			})
		}},
		{"req-0000002", "(mismatch): requests/req-0000002/manifest.json: signature by key " + signer.KeyID() + " does not match", func() {
			// The gateway's key id on a signature it never made.
			rewrite("req-0000002", func(m *evidence.Manifest) {
				m.Outcome = evidence.OutcomeFailed
				m.Signature.Value = strings.Repeat("A", 86) + "=="
			})
		}},
		{"req-0000004", "(mismatch): requests/req-0000004/manifest.json: signature by key " + signer.KeyID() + " does not match", func() {
			// Nothing changed but the signature: the bytes still differ
			// from the logged ones.
			rewrite("req-0000004", func(m *evidence.Manifest) { m.Signature.Value = "B" + strings.Repeat("A", 85) + "==" })
		}},
		{"req-0000009", "(bad-signature): requests/req-0000009/manifest.json: signature by key " + signer.KeyID() + " does not match", func() {
			// A call stored behind the log's back with a forged signature.
			c := storeCall(9, nil)
			putRecorded(t, w, c)
			rewrite(c.id, func(m *evidence.Manifest) {
				m.Signature = &evidence.Signature{Algorithm: evidence.SignatureAlgorithm, KeyID: signer.KeyID(), Value: "C" + strings.Repeat("A", 85) + "=="}
			})
		}},
	}
	for _, tc := range tests {
		tc.tamper()
	}
	r := &Replayer{Candidate: writePolicies(t, storeRecorded)}
	opts := evidence.VerifyOptions{TrustedKeys: []ed25519.PublicKey{signer.PublicKey()}, RequireSignature: true, TempDir: t.TempDir()}
	for _, concurrency := range []int{1, 4} {
		opts.Concurrency = concurrency
		rep, err := Replay(ctx, fs, opts, Filter{}, r)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Replayed != 3 || rep.Unchanged != 3 || rep.Unverified != len(tests) {
			t.Errorf("concurrency %d: replayed %d, unchanged %d, unverified %d; want 3, 3, %d: %+v",
				concurrency, rep.Replayed, rep.Unchanged, rep.Unverified, len(tests), rep.NotReplayable)
		}
		why := map[string]string{}
		for _, s := range rep.NotReplayable {
			why[s.RequestID] = s.Why
		}
		for _, tc := range tests {
			if !strings.HasPrefix(why[tc.id], "evidence fails verification "+tc.why) {
				t.Errorf("concurrency %d: %s: %q, want it to start %q", concurrency, tc.id, why[tc.id], tc.why)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "log")); err != nil {
		t.Fatalf("the store has no log: %v", err)
	}
}
