package evidence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/evidence/trust"
)

// catchUp logs what the previous process of this instance stored but
// died before sequencing: the entries still in its queue. It runs only
// when that process did not close its lease.
//
// Which requests to look at is bounded by time, with the store's own
// clock on both sides. The previous process put each batch in one try
// bounded by OpTimeout, with everything queued at the time, and queued
// each entry as soon as its artifact's Put returned, which is at most
// OpTimeout after the artifact's storage time. So an entry it lost
// belongs to an artifact stored after its last batch's storage time
// minus two OpTimeouts and an Interval: only those artifacts are read,
// and only the batches stored since are read to tell logged from lost.
func (l *LogWriter) catchUp(ctx context.Context) ([][]byte, error) {
	since, logged, err := l.loggedSince(ctx)
	if err != nil {
		return nil, fmt.Errorf("evidence: log catch-up: %w", err)
	}
	var found [][]byte
	skip := func(string) error { return nil }
	err = walkRequestInfos(ctx, l.store, func(id string, infos []KeyInfo) error {
		entries, err := l.lostEntries(ctx, id, infos, since, logged)
		found = append(found, entries...)
		return err
	}, skip)
	if err != nil {
		return nil, fmt.Errorf("evidence: log catch-up: %w", err)
	}
	return found, nil
}

// adoptCaught queues the entries a catch-up found while calls were
// running, one Interval after it found them, less those the live path
// logged meanwhile: an artifact the catch-up saw may have been stored by
// this very process, whose entry follows its Put by microseconds. By one
// Interval later that entry is queued, or sequenced since l.seen started
// recording. Live and caught entries of one artifact are byte for byte
// the same, as logEntry depends on the artifact alone.
func (l *LogWriter) adoptCaught() {
	if l.caught == nil || time.Since(l.caughtAt) < l.cfg.Interval {
		return
	}
	l.buildEntries()
	l.mu.Lock()
	for _, e := range l.queue {
		l.seen[string(e)] = true
	}
	for _, e := range l.caught {
		if !l.seen[string(e)] {
			l.queue = append(l.queue, e)
		}
	}
	l.mu.Unlock()
	l.caught, l.seen = nil, nil
}

// loggedSince returns the time from which artifacts may have lost their
// entries, and the entries of the batches stored from then on.
func (l *LogWriter) loggedSince(ctx context.Context) (time.Time, map[string]bool, error) {
	var batches []KeyInfo
	var last time.Time
	err := WalkInfo(ctx, l.store, l.prefix+batchDir, func(ki KeyInfo) error {
		batches = append(batches, ki)
		if ki.ModTime.After(last) {
			last = ki.ModTime
		}
		return nil
	})
	if err != nil || last.IsZero() {
		// No batch, or a store that cannot tell: every artifact is read.
		since := time.Time{}
		logged, err := l.batchEntries(ctx, batches, since)
		return since, logged, err
	}
	since := last.Add(-2*l.cfg.OpTimeout - l.cfg.Interval)
	logged, err := l.batchEntries(ctx, batches, since.Add(-l.cfg.OpTimeout))
	return since, logged, err
}

func (l *LogWriter) batchEntries(ctx context.Context, batches []KeyInfo, since time.Time) (map[string]bool, error) {
	logged := map[string]bool{}
	for _, ki := range batches {
		if !ki.ModTime.IsZero() && ki.ModTime.Before(since) {
			continue
		}
		data, err := l.store.Get(ctx, ki.Key)
		if err != nil {
			return nil, err
		}
		// A batch that does not authenticate vouches for nothing: what it
		// lists is not taken as logged.
		b, err := l.openBatch(ki.Key, data)
		if err != nil {
			l.legacyOrTampered(err)
			continue
		}
		for _, e := range b.Entries {
			logged[entryKey(e)] = true
		}
	}
	return logged, nil
}

// entryKey identifies what an entry commits to: its kind, request and the
// digest of the artifact.
func entryKey(entry []byte) string {
	e, err := tlog.ParseEntry(entry)
	if err != nil {
		return "unparsable/" + string(entry)
	}
	return e.Kind + "/" + e.RequestID + "/" + entryDigest(e)
}

// entryDigest returns the digest of the artifact an entry commits to:
// exactly one of its kind's digests is set.
func entryDigest(e tlog.Entry) string {
	return e.RequestSHA256 + e.ManifestSHA256 + e.ApprovalSHA256
}

// lostEntries returns the entries this instance owed for a request's
// artifacts stored since a time: its claim if this instance stored
// request.json, its completion if this instance owned the last attempt,
// the only one that writes a manifest, and its approval if this instance
// stored approval.json, less those logged already. The store is
// untrusted, so only artifacts the writer can authenticate are logged
// (see catchUpRequest.authentic).
func (l *LogWriter) lostEntries(ctx context.Context, id string, infos []KeyInfo, since time.Time, logged map[string]bool) ([][]byte, error) {
	r := catchUpRequest{l: l, id: id, logged: logged}
	var out [][]byte
	recent := func(ki KeyInfo) bool { return ki.ModTime.IsZero() || !ki.ModTime.Before(since) }
	for _, ki := range infos {
		if !recent(ki) {
			continue
		}
		var e []byte
		var err error
		switch ki.Key {
		case Key(id, ArtifactRequest):
			e, err = r.ownEntry(ctx, ki.Key, tlog.KindClaim, ki.Key)
		case Key(id, ArtifactManifest):
			e, err = r.ownEntry(ctx, ki.Key, tlog.KindCompletion, lastDecisionKey(id, infos))
		case Key(id, ArtifactApproval):
			e, err = r.ownEntry(ctx, ki.Key, tlog.KindApproval, ki.Key)
		}
		if err != nil {
			return out, err
		}
		if e != nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// catchUpRequest reads one request's artifacts for the catch-up.
type catchUpRequest struct {
	l      *LogWriter
	id     string
	logged map[string]bool // the entries of the recent batches
	// covered holds the digests of the artifacts the request's manifest
	// lists, once read, when a trusted key signed it.
	covered map[string]string
	read    bool
}

// ownEntry returns the entry of the artifact at key when the record at
// ownerKey names this instance as its gateway and both authenticate, else
// nil. A record that names this instance but does not authenticate was
// planted or altered: it is reported as tampering and not logged.
func (r *catchUpRequest) ownEntry(ctx context.Context, key, kind, ownerKey string) ([]byte, error) {
	l := r.l
	owner, err := l.store.Get(ctx, ownerKey)
	if errors.Is(err, ErrNotExist) {
		return nil, nil // a layout verification reports, not the log's business
	}
	if err != nil {
		return nil, err
	}
	var rec struct {
		Gateway string `json:"gateway"`
	}
	body, _, _ := trust.Split(owner)
	if json.Unmarshal(body, &rec) != nil {
		return nil, nil
	}
	if inst, _ := ParseGatewayName(rec.Gateway); inst != l.cfg.Instance {
		return nil, nil
	}
	data := owner
	if key != ownerKey {
		if data, err = l.store.Get(ctx, key); err != nil {
			return nil, err
		}
	}
	e, err := logEntry(kind, data, l.cfg.Gateway)
	if err != nil {
		l.cfg.Logger.Warn("transparency log catch-up: artifact not logged", "key", key, "err", err)
		return nil, nil
	}
	if r.logged[entryKey(e)] {
		return nil, nil // logged already: nothing is done with it
	}
	err = r.authentic(ctx, key, data)
	if err == nil && key != ownerKey {
		err = r.authentic(ctx, ownerKey, owner)
	}
	if err != nil {
		l.legacyOrTampered(fmt.Errorf("transparency log catch-up: %w", err))
		return nil, nil
	}
	return e, nil
}

// authentic checks a stored artifact of the request: a manifest must be
// signed by a trusted key; any other record must carry a seal the
// keyring opens, or be listed, with its exact digest, by the request's
// manifest so signed. Every error wraps trust.ErrTampered.
func (r *catchUpRequest) authentic(ctx context.Context, key string, data []byte) error {
	if key == Key(r.id, ArtifactManifest) {
		// The bytes the entry is built from are the ones checked.
		r.useManifest(data)
		if r.covered == nil {
			return fmt.Errorf("%w: %s: not signed by a trusted key", trust.ErrTampered, key)
		}
		return nil
	}
	_, _, openErr := r.l.cfg.Trusted.Open(key, data)
	if openErr == nil {
		return nil
	}
	if err := r.readManifest(ctx); err != nil {
		return err
	}
	if want, ok := r.covered[key]; ok && want == Digest(key, data).SHA256 {
		return nil
	}
	return openErr
}

// readManifest reads the request's manifest once (see useManifest).
func (r *catchUpRequest) readManifest(ctx context.Context) error {
	if r.read {
		return nil
	}
	data, err := r.l.store.Get(ctx, Key(r.id, ArtifactManifest))
	if errors.Is(err, ErrNotExist) {
		r.read = true
		return nil
	}
	if err != nil {
		return err
	}
	r.useManifest(data)
	return nil
}

// useManifest keeps the digests the manifest data lists when a trusted
// key signed it for this request.
func (r *catchUpRequest) useManifest(data []byte) {
	r.read, r.covered = true, nil
	m, err := ParseManifest(data)
	if err != nil || m.RequestID != r.id || m.Signature == nil {
		return
	}
	for _, pub := range r.l.cfg.Trusted.PublicKeys() {
		if KeyID(pub) == m.Signature.KeyID && CheckSignature(pub, m) == nil {
			r.covered = map[string]string{}
			for _, a := range m.Artifacts {
				r.covered[a.Key] = a.SHA256
			}
			return
		}
	}
}

// lastDecisionKey returns the key of the decision of a request's last
// attempt: attempts/<n>/policy_decision.json with the largest n, else the
// first attempt's.
func lastDecisionKey(id string, infos []KeyInfo) string {
	best, last := 1, Key(id, ArtifactPolicyDecision)
	for _, ki := range infos {
		rest, ok := strings.CutPrefix(ki.Key, RequestPrefix(id)+"attempts/")
		n, name, _ := strings.Cut(rest, "/")
		num, err := strconv.Atoi(n)
		if ok && err == nil && name == ArtifactPolicyDecision && num > best {
			best, last = num, ki.Key
		}
	}
	return last
}
