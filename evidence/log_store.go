package evidence

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence/tlog"
)

// WithLog returns a Store that logs what it stores of each request: the
// claim when a request.json is stored, the completion when a manifest.json
// is, the approval when an approval.json is. Every writer of those
// artifacts (a call, a retry, recovery, the spool's upload, an approver's
// decision, an expiry) goes through the store, so wrapping the store is
// what makes every one of them logged, and nothing on a call's path waits
// for the log. Before storing a claim or an approval it asks the log
// whether it can take it: a call the log cannot record must not start,
// and a human's decision must not be stored unlogged.
func WithLog(s StoreCloser, l *LogWriter) StoreCloser {
	return &loggedStore{StoreCloser: s, log: l}
}

type loggedStore struct {
	StoreCloser
	log *LogWriter
}

// WalkInfo passes listing times through, which the log's catch-up and
// audits of the store use.
func (s *loggedStore) WalkInfo(ctx context.Context, prefix string, fn func(KeyInfo) error) error {
	return WalkInfo(ctx, s.StoreCloser, prefix, fn)
}

func (s *loggedStore) Put(ctx context.Context, key string, data []byte) error {
	kind := loggedKind(key)
	if kind == "" {
		return s.StoreCloser.Put(ctx, key, data)
	}
	if kind == tlog.KindClaim || kind == tlog.KindApproval {
		if err := s.log.Ready(); err != nil {
			return fmt.Errorf("evidence: put %q: %w", key, err)
		}
	}
	err := s.StoreCloser.Put(ctx, key, data)
	if err == nil {
		// A logged record is durable before the log hears of it: the
		// log must never commit to a name a crash could still undo.
		err = chainOf(ctx).Wait(ctx)
	}
	switch {
	case err == nil:
		// The entry is built by the sequencer, off the call's path.
		s.log.appendArtifact(kind, bytes.Clone(data))
	case !errors.Is(err, ErrExist):
		// The write may have landed all the same; the log finds out.
		s.log.uncertain(key, kind, bytes.Clone(data))
	}
	return err
}

// loggedKind says which log entry storing key makes, if any.
func loggedKind(key string) string {
	rest, ok := strings.CutPrefix(key, "requests/")
	if !ok {
		return ""
	}
	_, name, ok := strings.Cut(rest, "/")
	switch {
	case !ok:
		return ""
	case name == ArtifactRequest:
		return tlog.KindClaim
	case name == ArtifactManifest:
		return tlog.KindCompletion
	case name == ArtifactApproval:
		return tlog.KindApproval
	}
	return ""
}

// logEntry builds the entry that commits to a stored request.json
// (claim), manifest.json (completion, written by gateway) or approval.json
// (approval). It depends on the artifact's bytes alone, so that the live
// path, catch-up and verification all compute the same entry. It reads
// only the fields the entry takes.
func logEntry(kind string, data []byte, gateway string) ([]byte, error) {
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	var e tlog.Entry
	switch kind {
	case tlog.KindClaim:
		var r struct {
			RequestID            string    `json:"request_id"`
			ReceivedAt           time.Time `json:"received_at"`
			CanonicalRequestHash string    `json:"canonical_request_hash"`
			Gateway              string    `json:"gateway"`
		}
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("request record: %w", err)
		}
		e = tlog.Entry{Kind: kind, RequestID: r.RequestID, CanonicalRequestHash: r.CanonicalRequestHash,
			RequestSHA256: digest, ReceivedAt: r.ReceivedAt, Gateway: r.Gateway}
	case tlog.KindCompletion:
		var m struct {
			RequestID string     `json:"request_id"`
			Outcome   string     `json:"outcome"`
			Signature *Signature `json:"signature"`
		}
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		e = tlog.Entry{Kind: kind, RequestID: m.RequestID, ManifestSHA256: digest, Outcome: m.Outcome, Gateway: gateway}
		if m.Signature != nil {
			e.KeyID = m.Signature.KeyID
		}
	case tlog.KindApproval:
		var v struct {
			RequestID  string    `json:"request_id"`
			ApprovalID string    `json:"approval_id"`
			Decision   string    `json:"decision"`
			Approver   string    `json:"approver"`
			DecidedAt  time.Time `json:"decided_at"`
			Gateway    string    `json:"gateway"`
		}
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("approval record: %w", err)
		}
		e = tlog.Entry{Kind: kind, RequestID: v.RequestID, ApprovalID: v.ApprovalID, ApprovalSHA256: digest,
			Decision: v.Decision, Approver: v.Approver, DecidedAt: v.DecidedAt, Gateway: v.Gateway}
	default:
		return nil, fmt.Errorf("no log entry of kind %q", kind)
	}
	return e.Marshal()
}

// uncertainPut is a logged artifact whose write failed in a way that
// leaves its outcome unknown.
type uncertainPut struct {
	key, kind string
	data      []byte
}

// uncertain remembers a write of unknown outcome; resolveUncertain logs
// its entry once the store shows the write landed.
func (l *LogWriter) uncertain(key, kind string, data []byte) {
	l.mu.Lock()
	l.unsure = append(l.unsure, uncertainPut{key, kind, data})
	l.mu.Unlock()
}

// resolveUncertain reads back each write of unknown outcome: landed with
// these bytes, it is logged; absent or holding another writer's bytes, it
// is dropped; unreadable, it is asked again at the next flush.
func (l *LogWriter) resolveUncertain(ctx context.Context) {
	l.mu.Lock()
	unsure := l.unsure
	l.unsure = nil
	l.mu.Unlock()
	var keep []uncertainPut
	for _, u := range unsure {
		stored, err := l.store.Get(ctx, u.key)
		switch {
		case err == nil && bytes.Equal(stored, u.data):
			l.appendArtifact(u.kind, u.data)
		case err != nil && !errors.Is(err, ErrNotExist):
			keep = append(keep, u)
		}
	}
	l.mu.Lock()
	l.unsure = append(keep, l.unsure...)
	l.mu.Unlock()
}
