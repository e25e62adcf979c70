package evidence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence/tlog"
)

// Per-request log states, in VerifyReport.Log.
const (
	// LogLogged: the request's claim is in a log, and so is its
	// completion if it has a manifest and its approval if it has an
	// approval.json, each with the stored bytes' digest.
	LogLogged = "logged"
	// LogUnlogged: a stored request.json, manifest.json or approval.json
	// that no log records. Only a gateway without a log (signing_key: none), an
	// instance that never came back to catch up, or an insertion into the
	// bucket leaves one.
	LogUnlogged = "unlogged"
	// LogPending: unlogged, but stored so recently (within LogGrace of the
	// time VerifyAll took its view of the store) that its entry may still
	// be on its way.
	LogPending = "log-pending"
)

// DefaultLogGrace is how long after its artifact is stored a log entry may
// still be unsequenced, for a gateway with the default checkpoint interval
// (1s) and operation timeout (DefaultOpTimeout): see LogGraceFor.
const DefaultLogGrace = time.Minute

// spillRecords is how many log entries verification holds in memory
// while sorting them by request.
const spillRecords = 16 << 10

// logRecord is what a log says of one request.
type logRecord struct {
	kind, digest, origin string
	index                uint64
}

func (r logRecord) where() string { return fmt.Sprintf("%s#%d", r.origin, r.index) }

func encodeRecord(e tlog.Entry, origin string, index uint64) []byte {
	return fmt.Appendf(nil, "%s %s %d %s", e.Kind, entryDigest(e), index, origin)
}

func decodeRecord(v []byte) (logRecord, error) {
	f := strings.Fields(string(v))
	if len(f) != 4 {
		return logRecord{}, fmt.Errorf("evidence: verify: damaged spill record %q", v)
	}
	index, err := strconv.ParseUint(f[2], 10, 64)
	return logRecord{kind: f[0], digest: f[1], index: index, origin: f[3]}, err
}

// logJoin sorts every log's entries by request and hands them out in the
// order VerifyAll walks the requests.
type logJoin struct {
	sorter    *spillSorter
	next      func() (string, []byte, bool)
	stop      func()
	head      string // key of the record next returned, "" at the end
	headValue []byte
	err       error
	// clock tells an unlogged artifact stored recently, LogPending, from
	// one no log will record.
	clock viewClock
	// sizeBefore is, by origin, the size of the log's newest checkpoint
	// listed before the requests were: its entries were sequenced, and so
	// their artifacts stored, before the listing began.
	sizeBefore map[string]uint64
}

// newLogJoin returns an empty join; its clock is set once the view's is
// known, before the join is read.
func newLogJoin(tempDir string) (*logJoin, error) {
	if tempDir == "" {
		tempDir = os.TempDir()
	}
	s, err := newSpillSorter(tempDir, spillRecords)
	if err != nil {
		return nil, err
	}
	return &logJoin{sorter: s, sizeBefore: map[string]uint64{}}, nil
}

func (j *logJoin) add(e tlog.Entry, origin string, index uint64) error {
	return j.sorter.add(RequestPrefix(e.RequestID), encodeRecord(e, origin, index))
}

// start ends adding and begins handing out records.
func (j *logJoin) start(ctx context.Context) {
	seq := func(yield func(string, []byte) bool) {
		errStop := errors.New("stop")
		err := j.sorter.sorted(ctx, func(k string, v []byte) error {
			if !yield(k, v) {
				return errStop
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			j.err = err
		}
	}
	j.next, j.stop = iter.Pull2(iter.Seq2[string, []byte](seq))
	j.advance()
}

func (j *logJoin) advance() {
	k, v, ok := j.next()
	if !ok {
		j.head, j.headValue = "", nil
		return
	}
	j.head, j.headValue = k, v
}

// take returns the records of the request with the given prefix, first
// calling absent with those of every request ordered before it: requests
// a log records and the bucket no longer has.
func (j *logJoin) take(prefix string, absent func(prefix string, recs []logRecord) error) ([]logRecord, error) {
	for j.head != "" && j.head < prefix {
		key := j.head
		recs, err := j.group(key)
		if err != nil {
			return nil, err
		}
		if err := absent(key, recs); err != nil {
			return nil, err
		}
	}
	if j.head != prefix {
		return nil, j.err
	}
	return j.group(prefix)
}

func (j *logJoin) group(key string) ([]logRecord, error) {
	var recs []logRecord
	for j.head == key {
		r, err := decodeRecord(j.headValue)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
		j.advance()
	}
	return recs, j.err
}

// finish hands out the records left after the last request.
func (j *logJoin) finish(absent func(prefix string, recs []logRecord) error) error {
	_, err := j.take("\xff", absent)
	return err
}

func (j *logJoin) close() error {
	if j.stop != nil {
		j.stop()
	}
	return j.sorter.close()
}

// missingReport is the report of a request a log records but the bucket
// has nothing of.
func missingReport(prefix string, recs []logRecord) VerifyReport {
	id := strings.TrimSuffix(strings.TrimPrefix(prefix, requestsRoot), "/")
	rep := VerifyReport{RequestID: id, Status: StatusMissing, Log: LogLogged}
	for _, r := range recs {
		rep.Logged = append(rep.Logged, LogPosition{Kind: r.kind, Origin: r.origin, Index: r.index})
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s: its %s is logged at %s, but nothing of the request is stored", prefix, r.kind, r.where()))
	}
	return rep
}

// beforeView returns the records sequenced before the listing began. Only
// they can show an artifact the listing lacks was deleted: the others may
// record one stored after the listing.
func (j *logJoin) beforeView(recs []logRecord) []logRecord {
	var out []logRecord
	for _, r := range recs {
		if r.index < j.sizeBefore[r.origin] {
			out = append(out, r)
		}
	}
	return out
}

// loggedArtifacts pairs each kind of entry with the artifact it commits
// to.
var loggedArtifacts = []struct{ kind, name string }{
	{tlog.KindClaim, ArtifactRequest}, {tlog.KindCompletion, ArtifactManifest}, {tlog.KindApproval, ArtifactApproval},
}

// judge compares what the logs record of a request with what the view
// holds of it: the claim with request.json, the completion with
// manifest.json, the approval with approval.json, each by the digest of
// the stored bytes. The entries of an artifact the view lacks that were
// sequenced after the listing began are left out: they record what this
// run did not see.
func (j *logJoin) judge(ctx context.Context, rep *VerifyReport, r *requestCopies, recs []logRecord, infos []KeyInfo) error {
	rep.Log = LogLogged
	var seen []logRecord
	for _, a := range loggedArtifacts {
		key := Key(rep.RequestID, a.name)
		stored, err := r.storeCopy(ctx, key)
		if err != nil {
			return err
		}
		of := recordsOf(recs, a.kind)
		if stored == nil {
			of = j.beforeView(of)
		}
		seen = append(seen, of...)
		j.judgeArtifact(rep, key, stored, of, infos)
	}
	for _, rec := range recs {
		if slices.Contains(seen, rec) {
			rep.Logged = append(rep.Logged, LogPosition{Kind: rec.kind, Origin: rec.origin, Index: rec.index})
		}
	}
	j.judgeUsedApproval(rep, recs, infos)
	return nil
}

func recordsOf(recs []logRecord, kind string) []logRecord {
	var out []logRecord
	for _, r := range recs {
		if r.kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// judgeArtifact judges one logged artifact: stored is nil when the store
// lacks it.
func (j *logJoin) judgeArtifact(rep *VerifyReport, key string, stored []byte, recs []logRecord, infos []KeyInfo) {
	switch {
	case stored == nil && len(recs) > 0:
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s: logged at %s but gone from the store", key, recs[0].where()))
		if rep.Status != StatusMismatch {
			rep.Status = StatusMissing
		}
	case stored == nil:
	case len(recs) == 0:
		if rep.Log != LogUnlogged {
			rep.Log = j.unloggedState(key, infos)
		}
	default:
		sum := sha256.Sum256(stored)
		digest := hex.EncodeToString(sum[:])
		for _, rec := range recs {
			if rec.digest != digest {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: differs from the one logged at %s", key, rec.where()))
				rep.Status = StatusMismatch
			}
		}
	}
}

// unloggedState tells a recent artifact, whose entry may still be on its
// way, from one no log will ever record: a request a gateway stored
// without a log (signing_key: none), one an instance stored just before it
// died and never came back to catch up, or one put into the bucket behind
// the gateway's back. Recent is judged by the store's clock (see
// viewClock).
func (j *logJoin) unloggedState(key string, infos []KeyInfo) string {
	for _, ki := range infos {
		if ki.Key == key && j.clock.recent(ki.ModTime) {
			return LogPending
		}
	}
	return LogUnlogged
}
