package evidence

import (
	"context"
	"crypto/ed25519"
	"reflect"
	"testing"
)

// TestVerificationNeedsOnlyAReader hands every verification entry point a
// store and a spool stripped down to Reader, as an auditor with read-only
// access has them, and checks that it finds what it finds with the full
// stores.
func TestVerificationNeedsOnlyAReader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	signer := testSigner(t, 1)
	s, spool := NewMemoryStore(), NewMemoryStore()
	writeSigned(t, s, "a", completeRequest, completeRequest, signer)
	writeRequest(t, s, "b", with(completeRequest, ArtifactToolResult, "{}"), completeRequest)
	putArtifacts(t, s, "c", only(completeRequest, ArtifactRequest))
	mustPut(t, s, AttemptKey("c", 1, ArtifactDispatch), []byte(dispatchJSON(t, "c", 1, NotDispatched)))
	writeSigned(t, spool, "d", completeRequest, completeRequest, signer)

	type result struct {
		reports  []VerifyReport
		walked   map[string][]string
		attempts []Attempt
	}
	run := func(s, spool Reader) result {
		var r result
		opts := VerifyOptions{TrustedKeys: []ed25519.PublicKey{signer.PublicKey()}, Spool: spool}
		if err := VerifyAll(ctx, s, opts, func(rep VerifyReport) error {
			r.reports = append(r.reports, rep)
			return nil
		}); err != nil {
			t.Fatalf("VerifyAll = %v", err)
		}
		rep, err := Verify(ctx, s, "d", opts)
		if err != nil {
			t.Fatalf("Verify = %v", err)
		}
		r.reports = append(r.reports, rep)
		r.walked = map[string][]string{}
		if err := WalkRequests(ctx, s, func(id string, keys []string) error {
			r.walked[id] = append([]string(nil), keys...)
			return nil
		}); err != nil {
			t.Fatalf("WalkRequests = %v", err)
		}
		if r.attempts, err = ReadAttempts(ctx, s, "c", r.walked["c"]); err != nil {
			t.Fatalf("ReadAttempts = %v", err)
		}
		return r
	}
	full := run(s, spool)
	readOnly := run(plainReader{s}, plainReader{spool})
	if !reflect.DeepEqual(readOnly, full) {
		t.Fatalf("through Readers:\n%+v\nwith the full stores:\n%+v", readOnly, full)
	}
	if len(full.reports) != 5 || full.reports[4].Verdict() != StatusPending || !NeverDispatched(full.attempts) {
		t.Fatalf("unexpected results %+v: want 4 requests and d pending, c never dispatched", full)
	}
}
