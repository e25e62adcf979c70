package evidence

import (
	"context"
	"crypto/ed25519"
	"os"
	"testing"
)

// TestVerifyAllReadsLogsAsTheyStandAfterTheListing checks that deriving
// the logs while the requests are listed changes nothing of what VerifyAll
// finds: a log that grew during the listing is read as it stands after it,
// not as it stood when the derivation began.
func TestVerifyAllReadsLogsAsTheyStandAfterTheListing(t *testing.T) {
	t.Parallel()
	b := newLiveBucket(t, newTestFileStore(t, t.TempDir()), nil)
	logSize := func(s Reader) (uint64, map[string]VerifyReport) {
		t.Helper()
		var sizes []uint64
		opts := VerifyOptions{OnLog: func(r LogReport) error {
			if r.Status != LogOK {
				t.Errorf("log %s: %s %v", r.Origin, r.Status, r.Problems)
			}
			sizes = append(sizes, r.Size)
			return nil
		}}
		reps := auditView(t, s, b.signer, opts)
		if len(sizes) != 1 {
			t.Fatalf("%d log reports, want 1", len(sizes))
		}
		return sizes[0], reps
	}

	before, _ := logSize(b.raw)
	grown := &duringListing{Store: b.raw, after: Key("r1", ArtifactRequest), then: func() {
		signedCall(t, b.logged, "r0", b.signer)
		b.flush(t)
	}}
	during, reps := logSize(grown)
	after, _ := logSize(b.raw)
	if during <= before || during != after {
		t.Errorf("log size %d before, %d when it grew during the listing, %d after: want the size after the listing", before, during, after)
	}
	if len(reps) != 1 || reps["r1"].Verdict() != "ok" {
		t.Errorf("reports %+v, want r1 ok and nothing stored after the listing", reps)
	}
}

// TestVerifyAllEarlyLogsLeaveNothingBehind checks that VerifyAll returns
// only once the logs' derivation beside the listing has ended, on every
// path: a listing that fails, and one cut off by its context.
func TestVerifyAllEarlyLogsLeaveNothingBehind(t *testing.T) {
	t.Parallel()
	b := newLiveBucket(t, newTestFileStore(t, t.TempDir()), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	failing := &duringListing{Store: b.raw, after: Key("r1", ArtifactRequest), then: cancel}
	tmp := t.TempDir()
	opts := VerifyOptions{TrustedKeys: []ed25519.PublicKey{b.signer.PublicKey()}, RequireLog: true, TempDir: tmp}
	err := VerifyAll(ctx, failing, opts, func(VerifyReport) error { return nil })
	if err == nil {
		t.Fatal("VerifyAll cut off during its listing reported no error")
	}
	// The derivation's temporary files are gone: it ended and was
	// released before VerifyAll returned.
	if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
		t.Errorf("left in the temporary folder: %v %v", left, err)
	}
}
