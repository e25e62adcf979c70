package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/recovery"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/gateway/wire"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// maxPooledEncodeBuffer bounds the buffers kept for the next artifact: one
// large tool result must not pin its size for the gateway's lifetime.
const maxPooledEncodeBuffer = 64 << 10

// encodeBuffer returns a buffer to encode an artifact in: artifacts of a
// few kilobytes are encoded on every call, and a fresh buffer grew to
// that size each time.
func (g *Gateway) encodeBuffer() *bytes.Buffer {
	if buf, ok := g.encodeBuffers.Get().(*bytes.Buffer); ok {
		return buf
	}
	return new(bytes.Buffer)
}

func (g *Gateway) releaseEncodeBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledEncodeBuffer {
		g.encodeBuffers.Put(buf)
	}
}

// recorder writes one request's artifacts, redacting each, and remembers
// what it wrote for the manifest.
type recorder struct {
	g        *Gateway
	redactor *redact.Redactor // the gateway's: every artifact, whole
	// output, if set, removes the caller's secrets from the tool's output
	// only (see callerSecret).
	output          *redact.Redactor
	requestID       string
	hash            string
	engineRef       string
	policySetDigest string
	// attempt numbers the attempt being recorded.
	attempt int
	// decided is set once policy_decision.json is durable: from then on
	// artifacts may go to the spool.
	decided bool
	// dispatched is set once the attempt's dispatch marker may be stored:
	// from then on the tool may have run.
	dispatched bool
	// spooled is set once an artifact went to the spool.
	spooled bool
	// chain, once set, orders the attempt's writes while letting each
	// one's folder sync overlap the next one's file sync (see
	// evidence.Chain); settle waits for it before the attempt relies on
	// them.
	chain *evidence.Chain
	refs  []string
	// related are references to other requests' evidence that a failure
	// reports beside this request's own (the nested calls of a run that
	// broke); they are not this request's artifacts.
	related []string
	digests []evidence.ArtifactDigest
	report  evidence.RedactionReport
	// stageTimes sums the per-artifact stages for the call's span.
	stageTimes telemetry.StageTimes
}

func newRecorder(g *Gateway, requestID, hash, engineRef string) *recorder {
	return &recorder{g: g, redactor: g.redactor, requestID: requestID, hash: hash, engineRef: engineRef}
}

// redact encodes v and passes it through the redactor.
func (r *recorder) redact(artifact string, v any) ([]byte, error) {
	buf := r.g.encodeBuffer()
	raw, err := wire.EncodeJSON(buf, v)
	r.g.releaseEncodeBuffer(buf)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", artifact, err)
	}
	return r.redactBytes(artifact, raw)
}

// redactBytes passes an artifact marshalJSON encoded through the redactor
// and keeps its findings for the manifest.
func (r *recorder) redactBytes(artifact string, raw []byte) ([]byte, error) {
	// A per-artifact stage has no span of its own, so needs no parent.
	_, stage := r.g.telemetry.StartStage(context.Background(), telemetry.StageRedact)
	// marshalJSON's output is valid JSON by construction.
	out, findings, err := r.redactor.EncodedJSON(artifact, raw)
	r.stageTimes.Add(telemetry.StageRedact, stage.End())
	if err != nil {
		return nil, fmt.Errorf("redact %s: %w", artifact, err)
	}
	for _, f := range findings {
		r.g.telemetry.RedactionFindings(f.Rule, 1)
		r.report.Add(evidence.Redaction{Rule: f.Rule, Artifact: f.Artifact, Path: f.Path, Offset: f.Offset, Fingerprint: f.Fingerprint})
	}
	return out, nil
}

// artifact is one encoded, redacted artifact ready to be stored.
type artifact struct {
	name string
	data []byte
}

// persist writes one artifact create-only and records its digest. Artifacts
// are written one after another, each durable before the next: that order
// is what the request's state is read from.
//
// Before the decision is durable (r.decided false) a failed write fails the
// call, so nothing runs without its write-ahead record. After it, an
// artifact the store refuses goes to the local spool: the call is decided,
// and for an allowed call the tool has run, so its record must not be lost.
// Once one artifact of a request is spooled the rest follow it there, so the
// store never holds a later artifact without the earlier ones.
func (r *recorder) persist(ctx context.Context, a artifact) error {
	key := evidence.Key(r.requestID, a.name)
	var err error
	if !r.spooled {
		err = r.storePut(ctx, key, a.data)
	}
	if r.spooled || err != nil {
		if !r.decided || r.g.spool == nil || errors.Is(err, evidence.ErrExist) {
			return err
		}
		// The store may have lost the artifact before this one too (its
		// folder's sync failed): it goes first, so the spool holds no
		// later artifact without the earlier ones.
		if earlier := notDurable(err); earlier != nil && earlier.Key != key {
			if spoolErr := r.g.spool.Put(ctx, earlier.Key, earlier.Data); spoolErr != nil {
				return errors.Join(err, fmt.Errorf("spool: %w", spoolErr))
			}
		}
		if spoolErr := r.g.spool.Put(ctx, key, a.data); spoolErr != nil {
			return errors.Join(err, fmt.Errorf("spool: %w", spoolErr))
		}
		if !r.spooled {
			r.g.log.Warn("evidence store failed; artifacts spooled locally until it is back",
				"request_id", r.requestID, "artifact", a.name, "err", err)
			r.spooled = true
			r.g.kickFlusher()
		}
	}
	r.refs = append(r.refs, key)
	r.digests = append(r.digests, evidence.Digest(key, a.data))
	return nil
}

// storePut writes one artifact to the store, timed as an evidence_write
// stage.
func (r *recorder) storePut(ctx context.Context, key string, data []byte) error {
	_, stage := r.g.telemetry.StartStage(ctx, telemetry.StageEvidenceWrite)
	if r.chain != nil {
		ctx = evidence.WithChain(ctx, r.chain)
	}
	err := r.g.store.Put(ctx, key, data)
	r.stageTimes.Add(telemetry.StageEvidenceWrite, stage.End())
	return err
}

// notDurable returns the chained write err reports as not durable, if
// any.
func notDurable(err error) *evidence.NotDurableError {
	var nd *evidence.NotDurableError
	if errors.As(err, &nd) {
		return nd
	}
	return nil
}

// settle waits until the attempt's chained writes are durable. One that
// did not become durable goes to the spool when the attempt may spool
// (it is decided); the error says it is kept nowhere.
func (r *recorder) settle(ctx context.Context) error {
	err := r.chain.Wait(ctx)
	nd := notDurable(err)
	if err == nil || nd == nil || !r.decided || r.g.spool == nil {
		return err
	}
	if spoolErr := r.g.spool.Put(ctx, nd.Key, nd.Data); spoolErr != nil {
		return errors.Join(err, fmt.Errorf("spool: %w", spoolErr))
	}
	if !r.spooled {
		r.g.log.Warn("evidence store failed; artifacts spooled locally until it is back",
			"request_id", r.requestID, "key", nd.Key, "err", err)
		r.spooled = true
		r.g.kickFlusher()
	}
	return nil
}

func (r *recorder) put(ctx context.Context, name string, v any) error {
	data, err := r.redact(name, v)
	if err != nil {
		return err
	}
	return r.persist(ctx, artifact{name: name, data: data})
}

// putSealed is put for a record the gateway reads back and acts on (the
// claim, a decision): it carries the gateway's MAC (see sealRecord).
func (r *recorder) putSealed(ctx context.Context, name string, v any) error {
	data, err := r.redact(name, v)
	if err == nil {
		data, err = r.g.sealRecord(evidence.Key(r.requestID, name), data, false)
	}
	if err != nil {
		return err
	}
	return r.persist(ctx, artifact{name: name, data: data})
}

// finish stores the artifacts written beside the response (the tool's
// result), then response.json, then the manifest, and returns the response
// decoded from the stored bytes, so the caller receives exactly what is on
// record. The order means no response is ever stored without the result it
// reports, and the reply goes out only once its response is durable in the
// store or the spool. A manifest that cannot be written is left to
// recovery: the response is durable, so the caller gets it.
func (r *recorder) finish(ctx context.Context, resp *toolgatev1.RunToolResponse, with ...artifact) (*toolgatev1.RunToolResponse, error) {
	resp.EvidenceRefs = slices.Clone(r.refs)
	for _, a := range with {
		resp.EvidenceRefs = append(resp.EvidenceRefs, evidence.Key(r.requestID, a.name))
	}
	resp.EvidenceRefs = append(resp.EvidenceRefs,
		evidence.Key(r.requestID, evidence.ArtifactResponse),
		evidence.Key(r.requestID, evidence.ArtifactManifest))
	stored, reply, err := r.encodeResponse(resp)
	if err != nil {
		return nil, r.abandon(ctx, codes.Internal, err)
	}
	for _, a := range with {
		if err := r.persist(ctx, a); err != nil {
			return nil, r.unrecorded(ctx, fmt.Errorf("%s: %w", a.name, err))
		}
	}
	if err := r.persist(ctx, artifact{evidence.ArtifactResponse, stored}); err != nil {
		return nil, r.unrecorded(ctx, fmt.Errorf("%s: %w", evidence.ArtifactResponse, err))
	}
	manifestErr := r.writeManifest(ctx, evidence.OutcomeCompleted, "")
	if manifestErr == nil {
		manifestErr = r.settle(ctx)
	}
	if nd := notDurable(manifestErr); nd != nil && nd.Key != evidence.Key(r.requestID, evidence.ArtifactManifest) {
		// The response, or the result before it, may not survive a
		// crash and is kept nowhere else: no reply without its record.
		return nil, r.unrecorded(ctx, manifestErr)
	}
	if manifestErr != nil {
		r.g.log.Warn("the manifest could not be written; recovery writes it from the stored artifacts",
			"request_id", r.requestID, "err", manifestErr)
		r.g.recovery.LeftUnfinished(r.requestID, recovery.Unfinished{})
	}
	return reply, nil
}

// encodeResponse encodes and redacts response.json, and returns it with
// the reply: the response as read back from the stored bytes. A response
// that cannot be read back must not become the request's permanent
// answer.
//
// When the redactor left the bytes as MarshalResponse wrote them and
// readBack can tell what reading them gives, that is the reply, without
// parsing the bytes again (which cost a twentieth of an allowed call);
// otherwise they are decoded.
func (r *recorder) encodeResponse(resp *toolgatev1.RunToolResponse) (stored []byte, reply *toolgatev1.RunToolResponse, err error) {
	body, err := wire.MarshalResponse(resp)
	if err != nil {
		return nil, nil, err
	}
	redacted, err := r.redactBytes(evidence.ArtifactResponse, body)
	if err != nil {
		return nil, nil, err
	}
	// The MAC lets a retry replay a response whose manifest was never
	// written (see checkReplay) without taking one planted in the store.
	if stored, err = r.g.sealRecord(evidence.Key(r.requestID, evidence.ArtifactResponse), redacted, false); err != nil {
		return nil, nil, err
	}
	if bytes.Equal(redacted, body) {
		if reply, ok := wire.ReadBack(resp); ok {
			return stored, reply, nil
		}
	}
	if reply, err = wire.DecodeResponse(stored); err != nil {
		return nil, nil, err
	}
	return stored, reply, nil
}

// unrecorded answers a call whose response could be stored neither in the
// store nor in the spool. Before dispatch (a deny) nothing ran: the
// attempt is closed, and a retry decides again. After dispatch the tool
// has run and its response is lost: the caller is told so, a retry is
// told the same, and recovery records the request as failed.
func (r *recorder) unrecorded(ctx context.Context, cause error) error {
	msg, _ := r.redactor.String(cause.Error())
	if !r.dispatched {
		r.closeAttempt(ctx, "the response could not be stored: "+msg)
		return r.failure(codes.Unavailable,
			"the evidence store and the spool refused the response, nothing was executed (retry with the same request_id): %s", msg)
	}
	told := fmt.Sprintf("request_id %q ran, but the evidence store and the spool refused its response (%s); "+
		"its outcome is not on record, and it is never run again", r.requestID, msg)
	r.g.log.Error("the response of a call that ran could not be stored", "request_id", r.requestID, "err", msg)
	r.g.recovery.LeftUnfinished(r.requestID, recovery.Unfinished{Told: told})
	return r.failure(codes.Aborted, "%s", told)
}

// abandon ends an attempt on an error of the gateway's own: before
// dispatch the attempt is closed and may be retried, after it the request
// has failed.
func (r *recorder) abandon(ctx context.Context, code codes.Code, cause error) error {
	if r.dispatched {
		return r.fail(ctx, code, cause)
	}
	msg, _ := r.redactor.String(cause.Error())
	r.closeAttempt(ctx, msg)
	return r.failure(code, "%s; nothing was executed", msg)
}

// putDispatch writes the attempt's dispatch marker to the store, never to
// the spool: replicas must see it.
func (r *recorder) putDispatch(ctx context.Context, state, reason string) error {
	name := evidence.AttemptArtifact(r.attempt, evidence.ArtifactDispatch)
	data, err := r.redact(name, evidence.DispatchRecord{
		RequestID: r.requestID, Attempt: r.attempt, State: state, Reason: reason,
		Gateway: r.g.engineBase, At: r.g.now().UTC(),
	})
	key := evidence.Key(r.requestID, name)
	if err == nil {
		// Closing an attempt not dispatched lets any replica run the
		// request again, so that record is signed; a marker is MACed.
		data, err = r.g.sealRecord(key, data, state == evidence.NotDispatched)
	}
	if err != nil {
		return err
	}
	if err := r.storePut(ctx, key, data); err != nil {
		return err
	}
	// The marker is durable before anything relies on it: the driver is
	// called next.
	if err := r.chain.Wait(ctx); err != nil {
		return err
	}
	r.refs = append(r.refs, key)
	r.digests = append(r.digests, evidence.Digest(key, data))
	return nil
}

// closeAttempt closes the recorder's attempt as not dispatched (see
// Gateway.closeAttempt). When the store refuses the close of an attempt
// whose marker may be stored, the close goes to the spool: the caller is
// about to be told nothing ran, and that must outlive this process. When
// neither takes it, recovery writes it later, if this process lives that
// long: nothing of this attempt is in flight any more. The error says
// whether the close is durable now.
func (r *recorder) closeAttempt(ctx context.Context, reason string) error {
	// The close is a plain write: what was chained before it is durable
	// first (or spooled), so the close never outlives a crash they do not.
	if err := r.settle(ctx); err != nil {
		r.g.log.Warn("an earlier record of the attempt may not be durable", "request_id", r.requestID, "err", err)
	}
	// One record for both: a close the store took after all, and its
	// copy in the spool, must be the same bytes for the flush to agree.
	closing := r.g.closeRecord(r.requestID, r.attempt, reason)
	key, err := r.g.closeAttemptWith(ctx, closing, r.dispatched, r.redact)
	if err != nil && r.dispatched {
		if spooled, spoolErr := r.g.spoolClose(ctx, closing, r.redact); spoolErr == nil {
			key, err = spooled, nil
		} else {
			err = fmt.Errorf("%w; the spool: %w", err, spoolErr)
		}
	}
	if err != nil {
		r.g.log.Error("could not close an attempt that was not dispatched; recovery will",
			"request_id", r.requestID, "attempt", r.attempt, "err", err)
		left := recovery.Unfinished{}
		if r.dispatched {
			left = recovery.Unfinished{NotDispatched: r.attempt, Reason: reason}
		}
		r.g.recovery.LeftUnfinished(r.requestID, left)
		return err
	}
	if key != "" {
		r.refs = append(r.refs, key)
	}
	return nil
}

// recordBrokenRun keeps what is known of a run whose driver failed: the
// nested calls the gateway ran for it and the evidence the driver's error
// carries, as tool_result.json without a result (see evidence.BrokenRunRecord),
// listed in the failure manifest, and a reference to each nested call's
// evidence in the failure's status details. Nothing is written when there
// is neither. The write is best effort, like the manifest's: the store may
// be what failed.
func (r *recorder) recordBrokenRun(ctx context.Context, made []evidence.NestedCallRecord, driverEvidence map[string]any, rec evidence.BrokenRunRecord) {
	if len(made) == 0 && driverEvidence == nil {
		return
	}
	rec.NestedCalls = nonNilCalls(made)
	if driverEvidence != nil {
		// The caller's secrets are hidden in the driver's evidence as in
		// a result's.
		res, err := r.redactOutput(drivers.Result{Evidence: driverEvidence})
		if err != nil {
			r.g.log.Error("the evidence of a failed driver is left out", "request_id", r.requestID, "err", err)
		} else {
			rec.Evidence = res.Evidence
		}
	}
	if err := r.put(ctx, evidence.ArtifactToolResult, rec); err != nil {
		r.g.log.Error("could not record the nested calls of a failed run", "request_id", r.requestID, "nested_calls", len(made), "err", err)
	}
	r.related = relatedRefs(made)
}

// fail records a request that stopped without a response, then returns the
// status for the caller. The manifest is best effort: the store may be the
// very thing that failed.
func (r *recorder) fail(ctx context.Context, code codes.Code, cause error) error {
	msg, _ := r.redactor.String(cause.Error())
	if len(r.refs) > 0 {
		err := r.writeManifest(ctx, evidence.OutcomeFailed, msg)
		if err == nil {
			err = r.settle(ctx)
		}
		if err != nil {
			r.g.log.Error("could not write the failure manifest; recovery will", "request_id", r.requestID, "err", err)
			r.g.recovery.LeftUnfinished(r.requestID, recovery.Unfinished{Told: msg})
		}
	}
	return r.failure(code, "%s", msg)
}

func (r *recorder) writeManifest(ctx context.Context, outcome, errText string) error {
	m := evidence.Manifest{
		Version:              evidence.ManifestVersion,
		RequestID:            r.requestID,
		CanonicalRequestHash: r.hash,
		EngineRef:            r.engineRef,
		PolicySetDigest:      r.policySetDigest,
		Outcome:              outcome,
		Error:                truncateText(errText, maxManifestError),
		Artifacts:            r.digests,
		Redactions:           r.report.Redactions(),
		FingerprintKeyID:     r.redactor.FingerprintKeyID(),
		CreatedAt:            r.g.now().UTC(),
	}
	if r.g.signer != nil {
		if err := r.g.signer.Sign(&m); err != nil {
			return err
		}
	}
	data, err := evidence.EncodeManifest(m)
	if err != nil {
		return err
	}
	return r.persist(ctx, artifact{evidence.ArtifactManifest, data})
}

// outputText removes the caller's secrets from a text that may carry the
// tool's output, such as a driver's error.
func (r *recorder) outputText(s string) string {
	if r.output == nil {
		return s
	}
	s, _ = r.output.String(s)
	return s
}

// maxManifestError bounds the error text a manifest records: a driver's
// error can be as long as its output, and the manifest's size is bounded
// (evidence.MaxManifestSize).
const maxManifestError = 4 << 10

// truncateText cuts s to at most n bytes at a character boundary, marking
// the cut.
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "… (truncated)"
}

// failure builds a status carrying the evidence written so far.
func (r *recorder) failure(code codes.Code, format string, args ...any) error {
	st := status.Newf(code, format, args...)
	if withDetails, err := st.WithDetails(&toolgatev1.RunToolFailure{
		EvidenceRefs: append(nonNil(slices.Clone(r.refs)), r.related...),
		EngineRef:    r.engineRef,
	}); err == nil {
		st = withDetails
	}
	return st.Err()
}

func nonNilCalls(s []evidence.NestedCallRecord) []evidence.NestedCallRecord {
	if s == nil {
		return []evidence.NestedCallRecord{}
	}
	return s
}

// retryAdvice says what the caller of an attempt that ran nothing should
// do, given closeErr, the outcome of closing it. An attempt closed
// durably, or one whose marker was never written (recovery closes it from
// what the store shows), may be retried with the same request id. The close of
// one whose marker may be stored lives only in this process's memory when
// neither the store nor the spool took it: should the gateway restart
// before its recovery writes the close, the attempt counts as dispatched.
func (r *recorder) retryAdvice(closeErr error) string {
	if closeErr == nil || !r.dispatched {
		return "retry with the same request_id"
	}
	msg, _ := r.redactor.String(closeErr.Error())
	return "retry with the same request_id while this gateway runs; neither the evidence store nor the spool took the record " +
		"that it did not run (" + msg + "), so should this gateway restart first, the request is recorded interrupted " +
		"and only a new request_id runs it"
}
