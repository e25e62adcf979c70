package evidence

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/evidence/trust"
	"golang.org/x/mod/sumdb/note"
)

// Verification statuses reported in VerifyReport.Status. They say whether
// the stored artifacts agree with the manifest; whether the manifest itself
// is authentic is VerifyReport.Signature.
const (
	// StatusOK: every artifact matches the manifest and nothing unlisted
	// is stored.
	StatusOK = "ok"
	// StatusPending: the artifacts match, but some of them, or the
	// manifest, are so far only in the spool (VerifyOptions.Spool),
	// waiting to be uploaded to the store. It is also the verdict (see
	// VerifyReport.Verdict) of a request on its way: in flight and
	// recent, or with log entries not yet sequenced (LogPending).
	StatusPending = "pending"
	// StatusIncomplete: the request has no manifest, neither in the store
	// nor in the spool. It is in flight, or a crash or failure left it.
	StatusIncomplete = "incomplete"
	// StatusNotDispatched: the request has no manifest and every attempt
	// at it was closed not_dispatched: nothing of it ran, and a retry with
	// the same request id may still run it. Nothing signs this state: it
	// rests on the dispatch records alone.
	StatusNotDispatched = "not-dispatched"
	// StatusAwaitingApproval: the request has no manifest, every attempt
	// at it was closed not_dispatched, and it asked for a human's approval
	// (approval_request.json) that is either not decided yet or approved
	// and not used yet: nothing of it ran, and a retry with the same
	// request id runs it once approved. Like StatusNotDispatched it is not
	// a failure, and nothing signs it.
	StatusAwaitingApproval = "awaiting-approval"
	// StatusMismatch: the artifacts and the manifest disagree: a digest or
	// size differs, a listed artifact is missing, an unlisted one is
	// present, or the manifest is unreadable or belongs to another
	// request. It is also the status of a request whose attempts
	// contradict the layout: a key under "attempts/" that is not an
	// attempt's artifact (attempt numbers are 2, 3, … without leading
	// zeros), a dispatch record that is unreadable or belongs to another
	// request, attempt or state, or an attempt that follows a gap or an
	// attempt not closed not_dispatched. Approval evidence that
	// contradicts itself or the attempts (see VerifyReport.Approval) is a
	// mismatch too: a malformed approval_request.json or approval.json, or
	// one of another request or call, a decision outside the approval's
	// lifetime, or a run the approval does not cover.
	StatusMismatch = "mismatch"
	// StatusMissing: a transparency log records the request's claim,
	// completion or approval, but the store no longer has the artifact it
	// commits to (request.json, manifest.json or approval.json), or nothing
	// of the request at all.
	// Only VerifyAll, which reads the logs, reports it.
	StatusMissing = "missing"
)

// Signature states reported in VerifyReport.Signature.
const (
	// SignatureValid: signed by one of VerifyOptions.TrustedKeys.
	SignatureValid = "valid"
	// SignatureUnsigned: the manifest carries no signature, so nothing
	// shows who wrote it.
	SignatureUnsigned = "unsigned"
	// SignatureUnchecked: the manifest is signed but no trusted keys were
	// given to check it with.
	SignatureUnchecked = "unchecked"
	// SignatureUnknownKey: signed by a key that is not trusted.
	SignatureUnknownKey = "unknown-key"
	// SignatureBad: the signature does not match the manifest's content.
	SignatureBad = "bad"
)

// VerifyOptions adjusts Verify and VerifyAll. The zero value checks digests
// only: signed manifests are reported as SignatureUnchecked.
type VerifyOptions struct {
	// TrustedKeys are the public keys whose signatures are accepted, on
	// manifests, approval records and the logs' checkpoints.
	TrustedKeys []ed25519.PublicKey
	// Spool, if set, is a local store with the same layout from which a
	// gateway uploads artifacts to the store later. An artifact (or
	// manifest) missing from the store but present in the spool is
	// verified from the spool and makes the request StatusPending.
	Spool Reader
	// RequireSignature makes a manifest not signed by a trusted key a
	// failure (VerifyReport.Failed).
	RequireSignature bool
	// RequireLog makes a request no log records (LogUnlogged) a failure.
	RequireLog bool
	// Kept are signed checkpoints an auditor kept from an earlier
	// verification (see ParseCheckpoints), at most one per log counts:
	// the largest. VerifyAll reports a log that no longer reaches a kept
	// checkpoint, or has another root at its size, as LogInconsistent,
	// and a kept log that is gone altogether too.
	Kept [][]byte
	// Witnesses are the witnesses' cosignature verifier keys (see
	// tlog.ParseWitnessKey); WitnessThreshold of them must have cosigned
	// a checkpoint of each log, or the log is LogUnwitnessed.
	Witnesses        []note.Verifier
	WitnessThreshold int
	// LogGrace is how recently, before the time VerifyAll took its view
	// of the store, an artifact no log records must have been stored to
	// count as LogPending rather than LogUnlogged, and a request without
	// a manifest to count as in flight (VerifyReport.Recent). See
	// LogGraceFor; 0 means DefaultLogGrace.
	LogGrace time.Duration
	// Now is the auditor's clock, nil for time.Now. VerifyAll judges
	// storage times by the store's clock and uses this one only to bound
	// the view's time (see viewClock).
	Now func() time.Time
	// TempDir holds the sorted runs of log entries VerifyAll spills to
	// disk to keep its memory flat; "" means os.TempDir().
	TempDir string
	// OnLog, if set, is called by VerifyAll with the report of each log,
	// before the first request's report.
	OnLog func(LogReport) error
	// Concurrency is how many requests VerifyAll verifies at once; their
	// reports still come in order. 0 or 1 verifies one at a time. Each
	// request in flight holds its artifacts in memory.
	Concurrency int
	// History, if set, recomputes the session history facts each
	// decision recorded from the caller's history records (sessions/),
	// and a decision whose facts do not follow from them is a mismatch.
	History HistoryChecker
}

// LogPosition locates one entry of a transparency log.
type LogPosition struct {
	Kind   string `json:"kind"` // "claim", "completion" or "approval"
	Origin string `json:"origin"`
	Index  uint64 `json:"index"`
}

// VerifyReport is the result of verifying one request.
type VerifyReport struct {
	RequestID string `json:"request_id"`
	// Status is StatusOK, StatusPending, StatusIncomplete,
	// StatusNotDispatched, StatusAwaitingApproval or StatusMismatch.
	Status string `json:"status"`
	// Approval is set when the request asked for a human's approval
	// (its approval_request.json parses): the approval's id, its state
	// and who decided it.
	Approval *ApprovalSummary `json:"approval,omitempty"`
	// Outcome is the manifest's outcome (OutcomeCompleted, OutcomeFailed
	// or OutcomeInterrupted), empty when there is no readable manifest.
	Outcome string `json:"outcome,omitempty"`
	// Attempts are the request's attempts in order, as ReadAttempts
	// derives them from the store and the spool. It is empty only when a
	// dispatch record cannot be read, which Problems then names.
	Attempts []Attempt `json:"attempts,omitempty"`
	// Signature is one of the Signature* states, or empty when there is no
	// readable manifest to carry one.
	Signature string `json:"signature,omitempty"`
	// KeyID names the key the manifest says signed it.
	KeyID string `json:"key_id,omitempty"`
	// Problems has one line per finding, each starting with the key of
	// the artifact concerned. It is empty unless Tampered reports true or
	// Status is StatusIncomplete.
	Problems []string `json:"problems,omitempty"`
	// Spooled lists the keys verified from the spool because the store
	// does not have them yet.
	Spooled []string `json:"spooled,omitempty"`
	// Log is LogLogged, LogUnlogged or LogPending when VerifyAll read the
	// store's transparency logs, empty otherwise.
	Log string `json:"log,omitempty"`
	// Recent: the request has no manifest (StatusIncomplete), and
	// VerifyAll found its newest artifact stored within
	// VerifyOptions.LogGrace of the time it took its view of the store:
	// it is in flight, and its verdict "pending" rather than
	// "incomplete".
	Recent bool `json:"recent,omitempty"`
	// Logged lists where the logs record the request: each claim, approval and
	// completion entry, by log origin and index.
	Logged []LogPosition `json:"logged,omitempty"`

	// The requirements the report was made under (VerifyOptions).
	signatureRequired, logRequired bool
}

// Tampered reports whether the evidence shows signs of tampering: the
// artifacts disagree with the manifest or the attempts with the layout
// (StatusMismatch), a logged artifact is gone (StatusMissing), or the
// manifest's signature is bad or made by an untrusted key. Incomplete,
// not-dispatched, pending, unsigned, unchecked and unlogged requests are
// not tampered with as far as can be told.
func (r VerifyReport) Tampered() bool {
	return r.Status == StatusMismatch || r.Status == StatusMissing ||
		r.Signature == SignatureBad || r.Signature == SignatureUnknownKey
}

// Failed reports whether the request fails verification: it was tampered
// with, or lacks what VerifyOptions required (a trusted signature on its
// manifest, its entries in a log).
func (r VerifyReport) Failed() bool {
	switch r.Verdict() {
	case StatusMismatch, StatusMissing, "bad-signature", SignatureUnknownKey, "unsigned-required":
		return true
	case LogUnlogged:
		return r.logRequired
	}
	return false
}

// Verdict folds Status, Signature and Log into the one word an auditor
// reads first, worst first: "mismatch", "missing", "bad-signature",
// "unknown-key", "unsigned-required" (with RequireSignature, a manifest
// not signed by a trusted key), "unlogged" (with RequireLog), "pending"
// (in flight: no manifest, and Recent), "incomplete", "not-dispatched",
// "awaiting-approval", "pending" (in the spool, or with log entries not
// yet sequenced: LogPending), "unlogged", "unchecked-signature",
// "unsigned", "ok". Only "ok" means verified, signed by a trusted key,
// and logged when logs were read.
//
// "not-dispatched" ranks below "incomplete", which may hide a tool that
// ran without a record of its outcome, and above "pending", whose manifest
// is complete and merely waits in the spool: a not-dispatched request is
// settled (nothing ran), but no manifest, and so no signature, vouches for
// the dispatch records that say so. "awaiting-approval" is a
// not-dispatched request that waits for a human or for its retry.
func (r VerifyReport) Verdict() string {
	unsignable := r.Status == StatusIncomplete || r.Status == StatusNotDispatched || r.Status == StatusAwaitingApproval
	switch {
	case r.Status == StatusMismatch || r.Status == StatusMissing:
		return r.Status
	case r.Signature == SignatureBad:
		return "bad-signature"
	case r.Signature == SignatureUnknownKey:
		return SignatureUnknownKey
	case r.signatureRequired && !unsignable && r.Signature != SignatureValid:
		return "unsigned-required"
	case r.logRequired && r.Log == LogUnlogged:
		return LogUnlogged
	case r.Status == StatusIncomplete && r.Recent:
		return StatusPending
	case r.Status == StatusIncomplete || r.Status == StatusNotDispatched || r.Status == StatusAwaitingApproval ||
		r.Status == StatusPending:
		return r.Status
	case r.Log == LogPending:
		return StatusPending
	case r.Log == LogUnlogged:
		return r.Log
	case r.Signature == SignatureUnchecked:
		return "unchecked-signature"
	case r.Signature == SignatureUnsigned:
		return SignatureUnsigned
	default:
		return StatusOK
	}
}

// Verify checks the evidence of one request: every artifact the manifest
// lists must be present with the recorded size and SHA-256, every artifact
// under the request's prefix must be listed, and the manifest's signature,
// if any, is checked against opts' trusted keys. Status and Signature are
// reported separately, so an intact unsigned request has Status StatusOK
// and Signature SignatureUnsigned; Tampered and Verdict combine them.
//
// Verify also lists the request's attempts (see ReadAttempts) and checks
// them against the layout, with or without a manifest: a request without
// one whose every attempt was closed not_dispatched is
// StatusNotDispatched rather than StatusIncomplete, and an attempt record
// that contradicts the layout is a StatusMismatch.
//
// A request that asked for a human's approval is checked against it (see
// VerifyReport.Approval): one that waits for it, or for its retry once
// approved, is StatusAwaitingApproval; approval evidence that contradicts
// itself, the claim or the attempts is a StatusMismatch, and so, with
// TrustedKeys, is an approval record none of them signed (see
// ApprovalSummary.Signature).
//
// At most one VerifyOptions may be given; none means the zero value.
// Verify returns an error only for an invalid request id or options, or
// when a store itself fails.
func Verify(ctx context.Context, s Reader, requestID string, opts ...VerifyOptions) (VerifyReport, error) {
	if len(opts) > 1 {
		return VerifyReport{}, fmt.Errorf("evidence: verify: %d VerifyOptions given, want at most one", len(opts))
	}
	var o VerifyOptions
	if len(opts) == 1 {
		o = opts[0]
	}
	if err := validRequestID(requestID); err != nil {
		return VerifyReport{}, err
	}
	v, err := newVerifier(s, o)
	if err != nil {
		return VerifyReport{}, err
	}
	defer v.close()
	// The spool first: an artifact uploaded meanwhile is then in one
	// listing or the other (see view).
	var inSpool []string
	if o.Spool != nil {
		if inSpool, err = o.Spool.List(ctx, RequestPrefix(requestID)); err != nil {
			return VerifyReport{}, fmt.Errorf("evidence: verify %q: spool: %w", requestID, err)
		}
	}
	present, err := s.List(ctx, RequestPrefix(requestID))
	if err != nil {
		return VerifyReport{}, fmt.Errorf("evidence: verify %q: %w", requestID, err)
	}
	rep, _, err := v.verifyCopies(ctx, requestID, present, inSpool)
	return v.required(rep), err
}

// VerifyAll verifies every request in s, calling fn with each report in
// ascending order of the request's key prefix, and stops at the first
// error of fn or of a store.
//
// It judges one view of the store, so that a bucket a gateway is writing
// verifies as cleanly as a quiet one: it lists the spool, the logs, then
// every request's keys with their storage times, then the logs' newest
// checkpoints again, and reads nothing the view lacks. A request is
// judged as listed: a manifest stored after the listing is not read, so
// the request is in flight, not tampered with; the logs are read as they
// stood after the listing, and an entry they sequenced after the listing
// began does not make an artifact the listing lacks missing. An artifact
// no log records, stored within VerifyOptions.LogGrace of the view's time
// (see viewClock), is LogPending, and a request without a manifest whose
// newest artifact is that recent is Recent: both are on their way, not
// failures.
//
// The listing is kept on disk past 16Ki keys (in VerifyOptions.TempDir)
// and each request's keys are held only while it is verified, so memory
// stays flat however many requests the store holds; with a spool it also
// holds the spool's keys.
//
// A key directly under "requests/", outside any request's folder, is
// reported as a StatusMismatch report whose RequestID is the key's last
// segment.
func VerifyAll(ctx context.Context, s Reader, opts VerifyOptions, fn func(VerifyReport) error) error {
	return VerifyAllRead(ctx, s, opts, func(rep VerifyReport, _ Verified) error { return fn(rep) })
}

// Verified hands out the artifacts of one request exactly as its
// verification read them, so that a reader acting on a verified request
// reads the bytes that were checked, not a second copy fetched later. It
// is valid only during the call it is passed to.
type Verified struct{ r *requestCopies }

// Get returns the copy of key the verification read: the store's, or the
// spool's when the store has none. ok is false when the verification read
// no copy of key (it was not listed, or the request has no readable
// manifest naming it).
func (a Verified) Get(key string) (data []byte, ok bool) {
	if a.r == nil {
		return nil, false
	}
	copies := a.r.cached[key]
	if len(copies) == 0 {
		return nil, false
	}
	return copies[0].data, true
}

// Decision returns decision record key as DecodeRecord decodes the copy
// the verification read; ok is false when the verification decoded no
// such record, or one that DecodeRecord refuses.
func (a Verified) Decision(key string) (d DecisionRecord, ok bool) {
	if a.r == nil {
		return DecisionRecord{}, false
	}
	d, ok = a.r.decisions[key]
	return d, ok
}

// Manifest returns the request's manifest as the verification parsed it;
// ok is false when it read none, or none that parses.
func (a Verified) Manifest() (m Manifest, ok bool) {
	if a.r == nil || a.r.manifest == nil || a.r.manifest.err != nil {
		return Manifest{}, false
	}
	return a.r.manifest.m, true
}

// VerifyAllRead is VerifyAll handing fn, with each report, the artifacts
// its verification read (see Verified). Reports of keys outside any
// request's folder and of requests only a log records come with an empty
// Verified.
func VerifyAllRead(ctx context.Context, s Reader, opts VerifyOptions, fn func(VerifyReport, Verified) error) error {
	return verifyAllRead(ctx, s, opts, nil, func(rep VerifyReport, got Verified, _ any) error { return fn(rep, got) })
}

// VerifyAllPrepared is VerifyAllRead with a first step run beside the
// verification: prepare is called with each request's report and the
// artifacts its verification read as soon as the request is verified, in
// the goroutine that verified it (up to VerifyOptions.Concurrency at
// once, in any order), and fn, in order, with the final report and what
// prepare returned. The work a reader does with a request's bytes then
// spreads over the cores the verification uses.
//
// The report prepare sees is not the final one: the logs are judged
// later, in order, and may still fail the request. prepare must therefore
// decide nothing a failed verification forbids; fn reads the final
// report (VerifyReport.Failed) before acting on what prepare made.
// Reports of keys outside any request's folder and of requests only a
// log records reach fn with the zero T, prepare never having seen them.
func VerifyAllPrepared[T any](ctx context.Context, s Reader, opts VerifyOptions,
	prepare func(VerifyReport, Verified) T, fn func(VerifyReport, T) error) error {
	prep := func(rep VerifyReport, got Verified) any { return prepare(rep, got) }
	return verifyAllRead(ctx, s, opts, prep, func(rep VerifyReport, _ Verified, made any) error {
		t, _ := made.(T)
		return fn(rep, t)
	})
}

// verifyAllRead is VerifyAllRead calling prepare, if set, in each
// verifying goroutine (see VerifyAllPrepared).
func verifyAllRead(ctx context.Context, s Reader, opts VerifyOptions, prepare func(VerifyReport, Verified) any,
	fn func(VerifyReport, Verified, any) error) error {
	v, err := newVerifier(s, opts)
	if err != nil {
		return err
	}
	defer v.close()
	if err := v.keptCheckpoints(opts.Kept); err != nil {
		return err
	}
	var early *earlyLogs
	vw, err := v.takeView(ctx, opts, func(logs []*logObjects) {
		early = v.deriveEarly(ctx, opts.TempDir, logs)
	})
	if err != nil {
		early.discard()
		return err
	}
	defer vw.close()
	j, err := v.verifyLogs(ctx, opts, vw, early)
	if err != nil {
		return err
	}
	if j != nil {
		defer j.close()
	}
	// Requests that so far exist only in the spool are merged into the
	// walk in the same order.
	spooled := vw.spoolIDs
	absent := func(prefix string, recs []logRecord) error {
		// What the logs sequenced after the listing began is not part
		// of the view: a request claimed since is simply not listed.
		if recs = j.beforeView(recs); len(recs) == 0 {
			return nil
		}
		return fn(v.required(missingReport(prefix, recs)), Verified{}, nil)
	}
	p := &verifyPipeline{v: v, vw: vw, j: j, absent: absent, fn: fn, prepare: prepare, limit: opts.Concurrency}
	defer p.close()
	emit := func(id string, infos []KeyInfo) error {
		for len(spooled) > 0 && RequestPrefix(spooled[0]) <= RequestPrefix(id) {
			next := spooled[0]
			spooled = spooled[1:]
			if next == id {
				break
			}
			if err := p.submit(ctx, next, nil); err != nil {
				return err
			}
		}
		return p.submit(ctx, id, infos)
	}
	stray := func(key string) error {
		return fn(v.required(VerifyReport{
			RequestID: path.Base(key),
			Status:    StatusMismatch,
			Problems:  []string{key + ": stored outside any request's folder"},
		}), Verified{}, nil)
	}
	// A key outside any request's folder is reported in the order of
	// the walk, after the requests before it.
	ordered := func(key string) error {
		if err := p.drain(ctx, nil); err != nil {
			return err
		}
		return stray(key)
	}
	if err := p.drain(ctx, vw.walkRequests(ctx, emit, ordered)); err != nil {
		return err
	}
	for _, id := range spooled {
		if err := p.submit(ctx, id, nil); err != nil {
			return p.drain(ctx, err)
		}
	}
	if err := p.drain(ctx, nil); err != nil {
		return err
	}
	if j != nil {
		return j.finish(absent)
	}
	return nil
}

// verifyJob is one request of the view on its way through VerifyAll:
// verified (possibly beside others), then judged against the logs and
// reported, in the view's order.
type verifyJob struct {
	id    string
	infos []KeyInfo
	rep   VerifyReport
	r     *requestCopies
	made  any // what prepare returned
	err   error
	done  chan struct{}
}

// verifyPipeline verifies up to limit requests of the view at once and
// reports them in order: the reads of one request's artifacts overlap
// with those of the next, which a store far away (S3) needs to be read
// at any speed, while at most limit requests' artifacts are held.
type verifyPipeline struct {
	v       *verifier
	vw      *view
	j       *logJoin
	absent  func(string, []logRecord) error
	fn      func(VerifyReport, Verified, any) error
	prepare func(VerifyReport, Verified) any
	limit   int
	queue   []*verifyJob
	// work feeds the limit workers that verify jobs; nil until the first
	// job. Long-lived workers keep the stacks verification grew, which a
	// goroutine per request would grow again every time.
	work chan *verifyJob
}

// submit verifies request id of the view, whose listing is infos, and
// reports the oldest request in flight once limit are.
func (p *verifyPipeline) submit(ctx context.Context, id string, infos []KeyInfo) error {
	job := &verifyJob{id: id, infos: slices.Clone(infos), done: make(chan struct{})}
	if p.limit <= 1 {
		p.verify(ctx, job)
		return p.report(ctx, job)
	}
	if p.work == nil {
		p.work = make(chan *verifyJob, p.limit)
		for range p.limit {
			go func() {
				for job := range p.work {
					p.verify(ctx, job)
					close(job.done)
				}
			}()
		}
	}
	p.work <- job // never blocks: at most limit jobs are queued
	p.queue = append(p.queue, job)
	if len(p.queue) < p.limit {
		return nil
	}
	head := p.queue[0]
	p.queue = p.queue[1:]
	<-head.done
	return p.report(ctx, head)
}

// close lets the workers go; every job submitted has been drained.
func (p *verifyPipeline) close() {
	if p.work != nil {
		close(p.work)
	}
}

// drain reports every request still in flight, in order. After an error
// it waits for the rest without reporting them, so that no read outlives
// VerifyAll.
func (p *verifyPipeline) drain(ctx context.Context, err error) error {
	for _, job := range p.queue {
		<-job.done
		if err == nil {
			err = p.report(ctx, job)
		}
	}
	p.queue = nil
	return err
}

// verify checks job's request against its listing.
func (p *verifyPipeline) verify(ctx context.Context, job *verifyJob) {
	present := make([]string, len(job.infos))
	var newest time.Time
	for i, ki := range job.infos {
		present[i] = ki.Key
		newest = later(newest, ki.ModTime)
	}
	job.rep, job.r, job.err = p.v.verifyCopies(ctx, job.id, present, p.vw.spool[job.id])
	if job.err != nil {
		return
	}
	job.rep.Recent = job.rep.Status == StatusIncomplete && p.vw.clock.recent(newest)
	if p.prepare != nil {
		job.made = p.prepare(p.v.required(job.rep), Verified{job.r})
	}
}

// report judges job's request against what the logs record of it, when
// there are logs, and passes its report to fn.
func (p *verifyPipeline) report(ctx context.Context, job *verifyJob) error {
	if job.err != nil {
		return job.err
	}
	if p.j != nil {
		recs, err := p.j.take(RequestPrefix(job.id), p.absent)
		if err != nil {
			return err
		}
		p.v.settleSignature(&job.rep, job.r, recs)
		if err := p.j.judge(ctx, &job.rep, job.r, recs, job.infos); err != nil {
			return fmt.Errorf("evidence: verify %q: %w", job.id, err)
		}
	}
	return p.fn(p.v.required(job.rep), Verified{job.r}, job.made)
}

// verifyLogs verifies every transparency log of the view and sorts their
// entries for the join with the requests, taking what early derived while
// the requests were listed when the logs' heads have not moved since. It
// returns nil when the store has no logs and the auditor kept no
// checkpoint: there is nothing to join, and requests carry no log state.
func (v *verifier) verifyLogs(ctx context.Context, opts VerifyOptions, vw *view, early *earlyLogs) (*logJoin, error) {
	if len(vw.logs) == 0 && len(v.kept) == 0 && !opts.RequireLog {
		early.discard()
		return nil, nil
	}
	j, reps, ok := early.take(v, vw.logs)
	if !ok {
		var err error
		if j, err = newLogJoin(opts.TempDir); err != nil {
			return nil, err
		}
		if reps, err = v.deriveLogs(ctx, vw.logs, j); err != nil {
			j.close()
			return nil, err
		}
	}
	j.clock = vw.clock
	if err := v.reportLogs(reps, opts.OnLog); err != nil {
		j.close()
		return nil, err
	}
	j.start(ctx)
	return j, nil
}

// deriveLogs verifies the logs in the store, adds their entries to j, and
// returns what it found of each, with what each says of the others.
func (v *verifier) deriveLogs(ctx context.Context, logs []*logObjects, j *logJoin) ([]LogReport, error) {
	bucketID, err := v.store.Get(ctx, bucketIDKey)
	if err != nil && !errors.Is(err, ErrNotExist) {
		return nil, fmt.Errorf("evidence: verify: %w", err)
	}
	var reps []LogReport
	for _, lo := range logs {
		rep, err := v.verifyLog(ctx, lo, string(bucketID), j)
		if err != nil {
			return nil, fmt.Errorf("evidence: verify: log %s: %w", lo.instance, err)
		}
		j.sizeBefore[rep.Origin] = lo.sizeBefore
		reps = append(reps, rep)
	}
	// What each log says of the others is known once all are derived.
	if reps, err = v.crossWitness(ctx, reps, string(bucketID)); err != nil {
		return nil, fmt.Errorf("evidence: verify: %w", err)
	}
	for _, rep := range reps {
		if rep.Status == LogOK && rep.Signature == SignatureValid {
			v.attest(rep.Origin, rep.KeyID)
		}
	}
	return reps, nil
}

// reportLogs passes each log's report to onLog, then reports each kept
// checkpoint's log that is gone altogether.
func (v *verifier) reportLogs(reps []LogReport, onLog func(LogReport) error) error {
	report := func(r LogReport) error {
		if onLog == nil {
			return nil
		}
		return onLog(r)
	}
	seen := map[string]bool{}
	for _, rep := range reps {
		seen[rep.Origin] = true
		if err := report(rep); err != nil {
			return err
		}
	}
	for _, origin := range slices.Sorted(maps.Keys(v.kept)) {
		if !seen[origin] {
			rep := LogReport{Origin: origin, Status: LogInconsistent,
				Problems: []string{fmt.Sprintf("%s: the log of a kept checkpoint (size %d) is gone from the store", origin, v.kept[origin].Size)}}
			if err := report(rep); err != nil {
				return err
			}
		}
	}
	return nil
}

// requestsRoot is the prefix of every request's folder.
const requestsRoot = "requests/"

// WalkRequests calls fn once for each request with a folder in s, in
// ascending order of the request's key prefix, with the request's keys in
// ascending order. It walks the store once and holds one request's keys at
// a time, so fn must not keep keys after it returns: the slice is reused.
// Keys directly under "requests/", outside any request's folder, are
// skipped. WalkRequests stops at and returns the first error of fn or of
// the store.
func WalkRequests(ctx context.Context, s Reader, fn func(requestID string, keys []string) error) error {
	return walkRequests(ctx, s, fn, func(string) error { return nil })
}

// walkRequests is WalkRequests calling stray with each key outside a
// request's folder.
func walkRequests(ctx context.Context, s Reader, fn func(requestID string, keys []string) error, stray func(key string) error) error {
	var keys []string
	return walkRequestInfos(ctx, s, func(id string, infos []KeyInfo) error {
		keys = keys[:0]
		for _, ki := range infos {
			keys = append(keys, ki.Key)
		}
		return fn(id, keys)
	}, stray)
}

// walkRequestInfos calls fn with each request's id and the listing of its
// keys, with their storage times when the store tells them, and stray
// with each key outside a request's folder.
func walkRequestInfos(ctx context.Context, s Reader, fn func(requestID string, infos []KeyInfo) error, stray func(key string) error) error {
	return groupRequests(func(visit func(KeyInfo) error) error {
		return WalkInfo(ctx, s, requestsRoot, visit)
	}, fn, stray)
}

// groupRequests groups the keys a walk of "requests/" visits by request.
// Keys of one request are contiguous in the walk because they share the
// prefix "requests/<id>/"; it holds one request's keys at a time and
// reuses the slice.
func groupRequests(walk func(visit func(KeyInfo) error) error, fn func(requestID string, infos []KeyInfo) error, stray func(key string) error) error {
	var current string
	var infos []KeyInfo
	err := walk(func(ki KeyInfo) error {
		id, _, inFolder := strings.Cut(strings.TrimPrefix(ki.Key, requestsRoot), "/")
		if !inFolder {
			return stray(ki.Key)
		}
		if id != current && len(infos) > 0 {
			if err := fn(current, infos); err != nil {
				return err
			}
			infos = infos[:0]
		}
		current = id
		infos = append(infos, ki)
		return nil
	})
	if err != nil {
		return err
	}
	if len(infos) > 0 {
		return fn(current, infos)
	}
	return nil
}

// verifier holds what Verify and VerifyAll share across requests.
type verifier struct {
	store     Reader
	spool     Reader
	trusted   map[string]ed25519.PublicKey // by KeyID
	witnesses []note.Verifier
	threshold int
	kept      map[string]*tlog.Checkpoint // by origin
	// views is what each log verified says of the others (witness.go).
	views []*peerView
	// The requirements every report is judged under.
	requireSignature, requireLog bool
	// ring opens the sealed records verification authenticates (the
	// approvals', attempts' closes); nil without trusted keys.
	ring *trust.Keyring
	// history checks the history decisions saw; nil checks nothing.
	history HistoryChecker
	// folders opens the request folders of a FileStore (see
	// fileFolder); nil for any other store. close releases it.
	folders *storeFolders
	// attested holds, by origin, the key id of each log VerifyAll found
	// consistent under a checkpoint a trusted key signed (see
	// verify_attested.go); set before any request is verified.
	attested map[string]string
}

// close releases what the verifier holds open.
func (v *verifier) close() {
	if v.folders != nil {
		v.folders.close()
	}
}

// required marks a report with the requirements it is judged under.
func (v *verifier) required(rep VerifyReport) VerifyReport {
	rep.signatureRequired, rep.logRequired = v.requireSignature, v.requireLog
	return rep
}

// trustedList returns the trusted keys, in the order of their ids.
func (v *verifier) trustedList() []ed25519.PublicKey {
	var keys []ed25519.PublicKey
	for _, id := range slices.Sorted(maps.Keys(v.trusted)) {
		keys = append(keys, v.trusted[id])
	}
	return keys
}

func newVerifier(s Reader, opts VerifyOptions) (*verifier, error) {
	if opts.RequireSignature && len(opts.TrustedKeys) == 0 {
		return nil, errors.New("evidence: verify: RequireSignature needs TrustedKeys")
	}
	if opts.WitnessThreshold < 0 || opts.WitnessThreshold > len(opts.Witnesses) {
		return nil, fmt.Errorf("evidence: verify: a witness threshold of %d with %d witness keys", opts.WitnessThreshold, len(opts.Witnesses))
	}
	v := &verifier{store: s, spool: opts.Spool, trusted: make(map[string]ed25519.PublicKey, len(opts.TrustedKeys)),
		witnesses: opts.Witnesses, threshold: opts.WitnessThreshold,
		requireSignature: opts.RequireSignature, requireLog: opts.RequireLog, history: opts.History}
	if fs, ok := s.(*FileStore); ok {
		v.folders = fs.requestFolders()
	}
	for i, k := range opts.TrustedKeys {
		if len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("evidence: verify: TrustedKeys[%d] is %d bytes, want %d", i, len(k), ed25519.PublicKeySize)
		}
		v.trusted[KeyID(k)] = k
	}
	if len(opts.TrustedKeys) > 0 {
		ring, err := trust.NewKeyring(opts.TrustedKeys)
		if err != nil {
			return nil, fmt.Errorf("evidence: verify: %w", err)
		}
		v.ring = ring
	}
	return v, nil
}

// verifyCopies checks request id, whose keys in the store are present and
// in the spool inSpool, and returns the copies of its artifacts it read.
func (v *verifier) verifyCopies(ctx context.Context, id string, present, inSpool []string) (VerifyReport, *requestCopies, error) {
	rep, r, err := v.verify(ctx, id, present, inSpool)
	if err != nil {
		return VerifyReport{}, nil, fmt.Errorf("evidence: verify %q: %w", id, err)
	}
	return rep, r, nil
}

// verify checks request id, whose keys in the store are present and in the
// spool inSpool: it reads no other key of the request (see
// requestCopies.completeView for the one exception).
func (v *verifier) verify(ctx context.Context, id string, present, inSpool []string) (VerifyReport, *requestCopies, error) {
	rep := VerifyReport{RequestID: id}
	r := &requestCopies{v: v, id: id, inStore: present, inSpool: inSpool, cached: map[string][]storedCopy{}}
	defer r.closeFolder()
	fail := func(err error) (VerifyReport, *requestCopies, error) { return VerifyReport{}, nil, err }
	if err := validRequestID(id); err != nil {
		// Only a store holding keys Put would refuse can get here.
		rep.Status = StatusMismatch
		rep.Problems = []string{fmt.Sprintf("%s: %v", RequestPrefix(id), err)}
		return rep, r, nil
	}
	if err := r.completeView(ctx, id); err != nil {
		return fail(err)
	}
	present = r.inStore
	attempts, attemptProblems, err := r.attempts(ctx, id, present)
	if err != nil {
		return fail(err)
	}
	rep.Attempts = attempts
	approval, err := r.checkApproval(ctx, id, mergeSorted(present, r.inSpool), attempts)
	if err != nil {
		return fail(err)
	}
	rep.Approval = approval.summary
	attemptProblems = append(attemptProblems, approval.problems...)
	historyProblems, err := r.checkHistory(ctx, id, approval)
	if err != nil {
		return fail(err)
	}
	attemptProblems = append(attemptProblems, historyProblems...)

	manifestKey := Key(id, ArtifactManifest)
	copies, err := r.read(ctx, manifestKey)
	if err != nil {
		return fail(err)
	}
	switch {
	case len(copies) == 0 && len(attemptProblems) > 0:
		rep.Status = StatusMismatch
		rep.Problems = attemptProblems
		return rep, r, nil
	case len(copies) == 0 && NeverDispatched(attempts) && approval.awaiting():
		rep.Status = StatusAwaitingApproval
		return rep, r, nil
	case len(copies) == 0 && NeverDispatched(attempts):
		rep.Status = StatusNotDispatched
		return rep, r, nil
	case len(copies) == 0:
		rep.Status = StatusIncomplete
		rep.Problems = []string{manifestKey + ": missing"}
		return rep, r, nil
	case len(copies) == 2 && !bytes.Equal(copies[0].data, copies[1].data):
		rep.Status = StatusMismatch
		rep.Problems = []string{manifestKey + ": the spool's copy differs from the store's"}
		return rep, r, nil
	}
	if copies[0].spooled {
		rep.Spooled = append(rep.Spooled, manifestKey)
	}
	m, err := r.parseManifest(copies[0].data)
	if err != nil {
		rep.Status = StatusMismatch
		rep.Problems = []string{fmt.Sprintf("%s: %v", manifestKey, err)}
		return rep, r, nil
	}
	rep.Outcome = m.Outcome
	if !r.deferSignature(m, copies[0].data, &rep) {
		v.checkSignature(m, manifestKey, &rep)
	}
	if m.RequestID != id {
		// Its artifacts lie under another prefix, so checking them would
		// say nothing about this request.
		rep.Status = StatusMismatch
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s: request_id is %q", manifestKey, m.RequestID))
		return rep, r, nil
	}
	mismatches, err := r.checkArtifacts(ctx, m, present, &rep)
	if err != nil {
		return fail(err)
	}
	attemptProblems = append(attemptProblems, approval.finalProblems(m)...)
	rep.Problems = append(rep.Problems, attemptProblems...)
	switch {
	case mismatches+len(attemptProblems) > 0:
		rep.Status = StatusMismatch
	case len(rep.Spooled) > 0:
		rep.Status = StatusPending
	default:
		rep.Status = StatusOK
	}
	return rep, r, nil
}

// checkArtifacts compares the request's stored artifacts, present in the
// store and r.inSpool in the spool, with manifest m. It adds a problem to
// rep for each difference and returns how many it added; it also records
// in rep which artifacts were read from the spool.
func (r *requestCopies) checkArtifacts(ctx context.Context, m Manifest, present []string, rep *VerifyReport) (int, error) {
	mismatches := 0
	problem := func(format string, args ...any) {
		rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...))
		mismatches++
	}
	manifestKey := Key(m.RequestID, ArtifactManifest)
	listed := make(map[string]bool, len(m.Artifacts))
	for _, want := range m.Artifacts {
		listed[want.Key] = true
		copies, err := r.read(ctx, want.Key)
		if err != nil {
			return 0, err
		}
		if len(copies) == 0 {
			problem("%s: listed in the manifest but missing", want.Key)
			continue
		}
		if len(copies) == 1 && copies[0].spooled {
			rep.Spooled = append(rep.Spooled, want.Key)
		}
		for _, c := range copies {
			where := ""
			if c.spooled {
				where = " in the spool"
			}
			got := Digest(want.Key, c.data)
			if got.Size != want.Size {
				problem("%s: size%s is %d, manifest says %d", want.Key, where, got.Size, want.Size)
			}
			if got.SHA256 != want.SHA256 {
				problem("%s: sha256%s is %s, manifest says %s", want.Key, where, got.SHA256, want.SHA256)
			}
		}
	}
	for _, k := range present {
		if k != manifestKey && !listed[k] {
			problem("%s: present but not listed in the manifest", k)
		}
	}
	for _, k := range r.inSpool {
		if k != manifestKey && !listed[k] {
			problem("%s: in the spool but not listed in the manifest", k)
		}
	}
	return mismatches, nil
}

// requestCopies reads one request's artifacts from the store and the spool.
type requestCopies struct {
	v  *verifier
	id string
	// folder reads the artifacts directly in the request's folder of a
	// FileStore while the request is verified (see fileFolder); nil
	// before the first read, and once folderDone, after.
	folder     *fileFolder
	folderDone bool
	// pendingSig is the manifest signature left to the join, if any.
	pendingSig *pendingSignature
	inStore    []string // the request's keys in the store, sorted
	inSpool    []string // the request's keys in the spool
	// cached holds the dispatch records read to derive the attempts, so
	// that checking them against the manifest reads them no second time.
	cached map[string][]storedCopy
	// manifest is the first copy of the manifest, parsed once.
	manifest *parsedManifest
	// decisions holds, by key, the decision records that decode strictly
	// (DecodeRecord), so that a reader of Verified parses them no second
	// time.
	decisions map[string]DecisionRecord
}

// parseDecision decodes data, the copy of decision record key the
// verification read, as every reader of the approval evidence does:
// leniently, as json.Unmarshal. It first tries DecodeRecord's strict
// rules and keeps a record that passes them for Verified.Decision; such a
// record, when it carries no seal, is exactly the one a lenient decode
// gives, and is not decoded twice.
func (r *requestCopies) parseDecision(key string, data []byte) (DecisionRecord, error) {
	body, seal, _ := trust.Split(data)
	d, fast := decodeDecisionFast(body)
	if fast || decodeStrict(data, &d) == nil {
		if r.decisions == nil {
			r.decisions = map[string]DecisionRecord{}
		}
		r.decisions[key] = d
		if seal == nil {
			return d, nil
		}
	}
	var lenient DecisionRecord
	err := json.Unmarshal(data, &lenient)
	return lenient, err
}

type parsedManifest struct {
	m   Manifest
	err error
}

// parseManifest parses data, the first copy of the request's manifest,
// the first time it is asked to.
func (r *requestCopies) parseManifest(data []byte) (Manifest, error) {
	if r.manifest == nil {
		m, err := ParseManifest(data)
		r.manifest = &parsedManifest{m, err}
	}
	return r.manifest.m, r.manifest.err
}

// storedCopy is the content of one artifact in one place.
type storedCopy struct {
	data    []byte
	spooled bool // read from the spool rather than the store
}

// storeCopy returns the store's copy of key, or nil when the store has
// none.
func (r *requestCopies) storeCopy(ctx context.Context, key string) ([]byte, error) {
	copies, err := r.read(ctx, key)
	if err != nil || len(copies) == 0 || copies[0].spooled {
		return nil, err
	}
	return copies[0].data, nil
}

func (r *requestCopies) listedInStore(key string) bool {
	_, ok := slices.BinarySearch(r.inStore, key)
	return ok
}

// read returns every copy of key: the store's, then the spool's. Only keys
// listed are read: a key the store's listing lacks was stored after it (or
// not at all), and reading it would judge the request by two moments at
// once. A key listed in the spool but gone from it when read was uploaded
// meanwhile, and is read from the store, which holds it before the spool
// lets go of it. Copies are read once per request.
func (r *requestCopies) read(ctx context.Context, key string) (copies []storedCopy, err error) {
	if copies, ok := r.cached[key]; ok {
		return copies, nil
	}
	defer func() {
		if err == nil {
			r.cached[key] = copies
		}
	}()
	inStore := r.listedInStore(key)
	if inStore {
		if copies, err = r.getStore(ctx, key, copies); err != nil {
			return nil, err
		}
	}
	if !slices.Contains(r.inSpool, key) {
		return copies, nil
	}
	data, err := r.v.spool.Get(ctx, key)
	switch {
	case err == nil:
		return append(copies, storedCopy{data: data, spooled: true}), nil
	case !errors.Is(err, ErrNotExist):
		return nil, fmt.Errorf("spool: %w", err)
	case !inStore:
		return r.getStore(ctx, key, copies)
	}
	return copies, nil
}

// getStore appends the store's copy of key, if it has one, to copies.
func (r *requestCopies) getStore(ctx context.Context, key string, copies []storedCopy) ([]storedCopy, error) {
	data, err := r.storeGet(ctx, key)
	switch {
	case err == nil:
		return append(copies, storedCopy{data: data}), nil
	case errors.Is(err, ErrNotExist):
		return copies, nil
	}
	return nil, err
}

// storeGet is the store's Get, through the request's open folder when
// the store is a FileStore and key lies directly in the folder.
func (r *requestCopies) storeGet(ctx context.Context, key string) ([]byte, error) {
	name, ok := strings.CutPrefix(key, RequestPrefix(r.id))
	if !ok || strings.Contains(name, "/") || r.folderDone {
		return r.v.store.Get(ctx, key)
	}
	if r.folder == nil {
		if r.v.folders == nil {
			r.folderDone = true
			return r.v.store.Get(ctx, key)
		}
		if r.folder, ok = r.v.folders.open(r.id); !ok {
			r.folderDone = true
			return r.v.store.Get(ctx, key)
		}
	}
	return r.folder.get(ctx, key, name)
}

// closeFolder closes the request's folder; later reads go through Get.
func (r *requestCopies) closeFolder() {
	if r.folder != nil {
		r.folder.close()
		r.folder = nil
	}
	r.folderDone = true
}

// completeView adds to the request's keys in the store those its listed
// manifest names that the listing lacks. A gateway stores every artifact
// before the manifest, so they were stored before the listing reached the
// manifest; a listing that comes in pages can still miss one that sorts
// before the manifest ("attempts/…", "approval.json") and was stored
// while an earlier page was being read. Reading it judges the request as
// the manifest found it, not at a later moment: the manifest commits to
// its digest.
func (r *requestCopies) completeView(ctx context.Context, id string) error {
	manifestKey := Key(id, ArtifactManifest)
	if !r.listedInStore(manifestKey) {
		return nil
	}
	copies, err := r.read(ctx, manifestKey)
	if err != nil || len(copies) == 0 {
		return err
	}
	m, err := r.parseManifest(copies[0].data)
	if err != nil {
		return nil // verify reports it
	}
	for _, a := range m.Artifacts {
		if !strings.HasPrefix(a.Key, RequestPrefix(id)) || r.listedInStore(a.Key) || slices.Contains(r.inSpool, a.Key) {
			continue
		}
		found, err := r.getStore(ctx, a.Key, nil)
		if err != nil {
			return err
		}
		if len(found) > 0 {
			r.inStore = mergeSorted(r.inStore, []string{a.Key})
			r.cached[a.Key] = found
		}
	}
	return nil
}

// checkSignature sets rep.Signature and rep.KeyID for m, adding a problem
// when the signature is bad or by an untrusted key.
func (v *verifier) checkSignature(m Manifest, manifestKey string, rep *VerifyReport) {
	if m.Signature == nil {
		rep.Signature = SignatureUnsigned
		return
	}
	rep.KeyID = m.Signature.KeyID
	if len(v.trusted) == 0 {
		rep.Signature = SignatureUnchecked
		return
	}
	pub, ok := v.trusted[m.Signature.KeyID]
	if !ok {
		rep.Signature = SignatureUnknownKey
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s: signed by an untrusted key, %s: not among the trusted keys, so nothing shows a trusted gateway wrote it", manifestKey, m.Signature.KeyID))
		return
	}
	if !verifySignature(pub, m) {
		rep.Signature = SignatureBad
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s: signature by key %s does not match the manifest's content", manifestKey, m.Signature.KeyID))
		return
	}
	rep.Signature = SignatureValid
}
