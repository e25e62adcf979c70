package evidence

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/toolgate/toolgate/evidence/evidencetest"
)

// The view's time: the store's clock, kept within a grace of the
// auditor's.
func TestViewClock(t *testing.T) {
	t.Parallel()
	const grace = time.Minute
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	tests := []struct {
		name   string
		newest time.Time // the latest storage time in the view
		stored time.Time
		recent bool
	}{
		{"live bucket, stored a moment ago", now, ago(time.Second), true},
		{"live bucket, stored just within the grace", now, ago(59 * time.Second), true},
		{"live bucket, stored a grace ago", now, ago(grace), false},
		// The store's clock lags the auditor's by 40s: measured against
		// the auditor's clock, an artifact 30s old would look 70s old.
		{"store clock 40s behind, stored 30s before its newest", ago(40 * time.Second), ago(70 * time.Second), true},
		{"store clock 40s behind, stored 70s before its newest", ago(40 * time.Second), ago(110 * time.Second), false},
		{"store clock 40s ahead, stored a moment ago by it", now.Add(40 * time.Second), now.Add(39 * time.Second), true},
		{"store clock 40s ahead, stored 70s before its newest", now.Add(40 * time.Second), ago(30 * time.Second), false},
		// A quiet bucket: what was put in it last is the newest, and is
		// on its way for two graces at most.
		{"quiet bucket, its newest put 90s ago", ago(90 * time.Second), ago(90 * time.Second), true},
		{"quiet bucket, its newest put three minutes ago", ago(3 * time.Minute), ago(3 * time.Minute), false},
		{"quiet bucket, its newest put an hour ago", ago(time.Hour), ago(time.Hour), false},
		{"a storage time far in the future", now.Add(time.Hour), now.Add(time.Hour), false},
		{"no storage time", now, time.Time{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := newViewClock(tc.newest, now, grace).recent(tc.stored); got != tc.recent {
				t.Fatalf("recent = %v, want %v", got, tc.recent)
			}
		})
	}
}

func TestLogGraceFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		interval, opTimeout, want time.Duration
	}{
		{time.Second, DefaultOpTimeout, DefaultLogGrace}, // a gateway's defaults
		{100 * time.Millisecond, time.Second, DefaultLogGrace},
		{10 * time.Second, time.Minute, 200 * time.Second},
	}
	for _, tc := range tests {
		if got := LogGraceFor(tc.interval, tc.opTimeout); got != tc.want {
			t.Errorf("LogGraceFor(%v, %v) = %v, want %v", tc.interval, tc.opTimeout, got, tc.want)
		}
	}
}

// The listing's records carry size and storage time through the spill,
// and a time the store did not tell stays unknown.
func TestListingInfoRoundTrips(t *testing.T) {
	t.Parallel()
	for _, ki := range []KeyInfo{
		{Key: "requests/r1/request.json", Size: 123, ModTime: time.Unix(1_800_000_000, 123456789)},
		{Key: "requests/r1/manifest.json", Size: 0},
		{Key: "requests/r1/x", Size: -1, ModTime: time.Unix(-5, 0)},
	} {
		got, err := decodeInfo(ki.Key, appendInfo(nil, ki))
		if err != nil || got.Key != ki.Key || got.Size != ki.Size || !got.ModTime.Equal(ki.ModTime) || got.ModTime.IsZero() != ki.ModTime.IsZero() {
			t.Errorf("round trip of %+v = %+v, %v", ki, got, err)
		}
	}
	for _, b := range [][]byte{nil, {0x80}, {2, 0x80}, {2, 2, 2}} {
		if _, err := decodeInfo("k", b); err == nil {
			t.Errorf("decodeInfo(%x) = nil error, want damaged", b)
		}
	}
}

// An unlogged request within the grace is on its way; older, it is
// unlogged, and --require-log fails it. A claim without a manifest is in
// flight while recent, incomplete after. Time is the bubble's: the
// memory store stamps what it stores with it.
func TestVerifyAllGraceOverTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := NewMemoryStore()
		signer := newSigner(t)
		l, logged := openLogged(t, mem, signedLogConfig(t, mem, signer))
		signedCall(t, logged, "logged", signer)
		storeClaim(t, logged, "in-flight", "toolgate/test@gw-1")
		if err := l.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		signedCall(t, mem, "inserted", signer) // behind the log's back
		epoch := time.Now()

		want := map[string]verdictWant{"logged": {"ok", false}, "in-flight": {"pending", false}, "inserted": {"pending", false}}
		// On a quiet bucket the view's time trails the bubble's clock by
		// a grace at most: one grace later they are still on their way,
		// two graces later they are not.
		for _, wait := range []time.Duration{0, DefaultLogGrace + time.Second, DefaultLogGrace} {
			time.Sleep(wait)
			if time.Since(epoch) > 2*DefaultLogGrace {
				want["in-flight"] = verdictWant{"incomplete", false}
				want["inserted"] = verdictWant{"unlogged", true}
			}
			reps := auditView(t, mem, signer, VerifyOptions{})
			for id, w := range want {
				if got := reps[id]; got.Verdict() != w.verdict || got.Failed() != w.failed {
					t.Errorf("after %v: %s: verdict %s, failed %v; want %s, %v (%+v)", wait, id, got.Verdict(), got.Failed(), w.verdict, w.failed, got)
				}
			}
		}
	})
}

// verdictWant is what an audit should say of one request.
type verdictWant struct {
	verdict string
	failed  bool
}

// auditView runs VerifyAll as an auditor with every requirement does and
// returns each request's report.
func auditView(t *testing.T, s Reader, signer *Signer, opts VerifyOptions) map[string]VerifyReport {
	t.Helper()
	opts.TrustedKeys = []ed25519.PublicKey{signer.PublicKey()}
	opts.RequireLog, opts.RequireSignature = true, true
	opts.TempDir = t.TempDir()
	reps := map[string]VerifyReport{}
	err := VerifyAll(context.Background(), s, opts, func(r VerifyReport) error {
		if _, dup := reps[r.RequestID]; dup {
			t.Errorf("%s reported twice", r.RequestID)
		}
		reps[r.RequestID] = r
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return reps
}

// duringListing is a store whose listing of the requests calls then once
// it has passed the key after: a gateway writing while an auditor lists.
type duringListing struct {
	Store
	after string
	then  func()
	once  sync.Once
}

func (s *duringListing) WalkInfo(ctx context.Context, prefix string, fn func(KeyInfo) error) error {
	return WalkInfo(ctx, s.Store, prefix, func(ki KeyInfo) error {
		if err := fn(ki); err != nil {
			return err
		}
		if prefix == requestsRoot && ki.Key == s.after {
			s.once.Do(s.then)
		}
		return nil
	})
}

// startCall stores a call's claim and decision, and returns what stores
// its signed manifest.
func startCall(t *testing.T, s Store, id string, signer *Signer) func(Store) {
	t.Helper()
	req, _ := json.Marshal(RequestRecord{
		RequestID: id, Caller: "c", ToolID: "t", Args: json.RawMessage(`{}`),
		ReceivedAt:           time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		CanonicalRequestHash: "sha256:" + strings.Repeat("ab", 32), Gateway: "toolgate/test@gw-1",
	})
	dec, _ := json.Marshal(DecisionRecord{RequestID: id, Decision: "allow", Gateway: "toolgate/test@gw-1"})
	artifacts := map[string]string{ArtifactRequest: string(req), ArtifactPolicyDecision: string(dec)}
	putArtifacts(t, s, id, artifacts)
	return func(s Store) { putManifest(t, s, id, artifacts, signer) }
}

// liveBucket is a store a logged gateway writes, and a way to delete from
// it as a bucket owner can.
type liveBucket struct {
	raw    StoreCloser
	logged Store
	log    *LogWriter
	signer *Signer
	remove func(t *testing.T, key string)
}

func (b *liveBucket) flush(t *testing.T) {
	t.Helper()
	if err := b.log.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func newLiveBucket(t *testing.T, raw StoreCloser, remove func(t *testing.T, key string)) *liveBucket {
	t.Helper()
	b := &liveBucket{raw: raw, signer: newSigner(t), remove: remove}
	b.log, b.logged = openLogged(t, raw, signedLogConfig(t, raw, b.signer))
	signedCall(t, b.logged, "r1", b.signer)
	b.flush(t)
	return b
}

// TestVerifyAllJudgesOneViewOfALiveStore: verify --all run while a
// gateway writes judges each request as its listing found it, and a
// request whose entries may still be on their way is pending, not
// unlogged; on the file store and on a real MinIO.
func TestVerifyAllJudgesOneViewOfALiveStore(t *testing.T) {
	t.Parallel()
	m := evidencetest.StartMinIO(t)
	kinds := []struct {
		name string
		open func(t *testing.T, bucket string) *liveBucket
	}{
		{"file", func(t *testing.T, _ string) *liveBucket {
			dir := t.TempDir()
			return newLiveBucket(t, newTestFileStore(t, dir), func(t *testing.T, key string) {
				if err := os.Remove(filepath.Join(dir, key)); err != nil {
					t.Fatal(err)
				}
			})
		}},
		{"minio", func(t *testing.T, bucket string) *liveBucket {
			m.CreateBucket(t, bucket, false)
			s := newTestS3Store(t, m, S3Options{Bucket: bucket, Prefix: "tg"})
			return newLiveBucket(t, s, func(t *testing.T, key string) {
				_, err := m.Client().DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("tg/" + key)})
				if err != nil {
					t.Fatal(err)
				}
			})
		}},
	}
	tests := []struct {
		name string
		// run writes to the bucket, and returns the store the auditor
		// reads and the options beyond every requirement.
		run  func(t *testing.T, b *liveBucket) (Reader, VerifyOptions)
		want map[string]verdictWant
	}{
		{
			name: "a manifest stored after the listing is not read",
			run: func(t *testing.T, b *liveBucket) (Reader, VerifyOptions) {
				finish := startCall(t, b.logged, "r2", b.signer)
				b.flush(t)
				signedCall(t, b.logged, "r3", b.signer)
				b.flush(t)
				return &duringListing{Store: b.raw, after: Key("r2", ArtifactRequest), then: func() {
					finish(b.logged)
					b.flush(t)
				}}, VerifyOptions{}
			},
			want: map[string]verdictWant{"r1": {"ok", false}, "r2": {"pending", false}, "r3": {"ok", false}},
		},
		{
			name: "a request claimed and logged after the listing is not missing",
			run: func(t *testing.T, b *liveBucket) (Reader, VerifyOptions) {
				return &duringListing{Store: b.raw, after: Key("r1", ArtifactRequest), then: func() {
					signedCall(t, b.logged, "r0", b.signer)
					b.flush(t)
				}}, VerifyOptions{}
			},
			want: map[string]verdictWant{"r1": {"ok", false}},
		},
		{
			name: "a request in flight is pending",
			run: func(t *testing.T, b *liveBucket) (Reader, VerifyOptions) {
				startCall(t, b.logged, "r2", b.signer)
				b.flush(t)
				return b.raw, VerifyOptions{}
			},
			want: map[string]verdictWant{"r1": {"ok", false}, "r2": {"pending", false}},
		},
		{
			name: "a fresh request not yet sequenced is pending",
			run: func(t *testing.T, b *liveBucket) (Reader, VerifyOptions) {
				signedCall(t, b.logged, "r2", b.signer)
				return b.raw, VerifyOptions{}
			},
			want: map[string]verdictWant{"r1": {"ok", false}, "r2": {"pending", false}},
		},
		{
			name: "an unlogged request older than the grace fails",
			run: func(t *testing.T, b *liveBucket) (Reader, VerifyOptions) {
				signedCall(t, b.raw, "r2", b.signer) // behind the log's back
				// The auditor comes ten minutes later; nothing was stored
				// since.
				later := func() time.Time { return time.Now().Add(10 * time.Minute) }
				return b.raw, VerifyOptions{Now: later}
			},
			want: map[string]verdictWant{"r1": {"ok", false}, "r2": {"unlogged", true}},
		},
		{
			name: "a logged request deleted before the listing is missing",
			run: func(t *testing.T, b *liveBucket) (Reader, VerifyOptions) {
				signedCall(t, b.logged, "r2", b.signer)
				b.flush(t)
				b.remove(t, Key("r1", ArtifactManifest))
				for _, name := range []string{ArtifactRequest, ArtifactPolicyDecision, ArtifactManifest} {
					b.remove(t, Key("r2", name))
				}
				return b.raw, VerifyOptions{}
			},
			want: map[string]verdictWant{"r1": {"missing", true}, "r2": {"missing", true}},
		},
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			for i, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					b := kind.open(t, "live-"+string(rune('a'+i)))
					s, opts := tc.run(t, b)
					reps := auditView(t, s, b.signer, opts)
					for id, w := range tc.want {
						rep, ok := reps[id]
						if !ok || rep.Verdict() != w.verdict || rep.Failed() != w.failed {
							t.Errorf("%s: verdict %q, failed %v; want %q, %v (%+v)", id, rep.Verdict(), rep.Failed(), w.verdict, w.failed, rep)
						}
					}
					for id, rep := range reps {
						if _, ok := tc.want[id]; !ok {
							t.Errorf("%s reported, but is not in the view: %+v", id, rep)
						}
					}
				})
			}
		})
	}
}

// A listing that comes in pages can miss an artifact that sorts before
// the manifest and was stored while an earlier page was read: the
// manifest names it, so it is read, and the request is not a mismatch.
func TestVerifyAllReadsWhatAListedManifestNames(t *testing.T) {
	t.Parallel()
	mem := NewMemoryStore()
	signer := newSigner(t)
	l, logged := openLogged(t, mem, signedLogConfig(t, mem, signer))
	signedCall(t, logged, "r1", signer)
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	missed := Key("r1", ArtifactPolicyDecision)
	reps := auditView(t, hidingListing{mem, missed}, signer, VerifyOptions{})
	if rep := reps["r1"]; rep.Verdict() != StatusOK {
		t.Fatalf("r1: verdict %s, want ok (%+v)", rep.Verdict(), rep)
	}
	// Gone from the store for real, it is a mismatch as ever.
	mem.remove(missed)
	if rep := auditView(t, hidingListing{mem, missed}, signer, VerifyOptions{})["r1"]; rep.Verdict() != StatusMismatch {
		t.Fatalf("r1 without its decision: verdict %s, want mismatch (%+v)", rep.Verdict(), rep)
	}
}

// hidingListing lists every key but one.
type hidingListing struct {
	*MemoryStore
	hidden string
}

func (s hidingListing) WalkInfo(ctx context.Context, prefix string, fn func(KeyInfo) error) error {
	return s.MemoryStore.WalkInfo(ctx, prefix, func(ki KeyInfo) error {
		if ki.Key == s.hidden {
			return nil
		}
		return fn(ki)
	})
}
