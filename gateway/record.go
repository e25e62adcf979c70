package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// MarshalResponse encodes a response as the contract's JSON, the form of
// response.json and of `toolgate call`'s output.
func MarshalResponse(r *toolgatev1.RunToolResponse) ([]byte, error) {
	out := evidence.ResponseRecord{
		OK: r.GetOk(),
		PolicyCheck: evidence.ResponsePolicyCheck{
			Decision: r.GetPolicyCheck().GetDecision(),
			Reason:   r.GetPolicyCheck().GetReason(),
			RuleID:   r.GetPolicyCheck().GetRuleId(),
		},
		EvidenceRefs:       nonNil(r.GetEvidenceRefs()),
		LocalEvidencePaths: r.GetLocalEvidencePaths(),
		EngineRef:          r.GetEngineRef(),
		RunID:              r.GetRunId(),
		StepID:             r.GetStepId(),
	}
	if tr := r.GetToolResult(); tr != nil {
		out.ToolResult = &evidence.ResponseToolResult{ExitCode: tr.GetExitCode(), Stdout: tr.GetStdout(), Stderr: tr.GetStderr()}
		if tr.GetData() != nil {
			data, err := protojson.Marshal(tr.GetData())
			if err != nil {
				return nil, fmt.Errorf("response: tool_result.data: %w", err)
			}
			out.ToolResult.Data = data
		}
	}
	return marshalJSON(out)
}

// decodeResponse reads response.json back into the wire type. The proto
// field names are the contract's, which protojson accepts.
func decodeResponse(data []byte) (*toolgatev1.RunToolResponse, error) {
	var r toolgatev1.RunToolResponse
	if err := protojson.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decode response: %w", err)
	}
	return &r, nil
}

func parseRequestRecord(data []byte) (evidence.RequestRecord, error) {
	var r evidence.RequestRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return evidence.RequestRecord{}, err
	}
	if r.CanonicalRequestHash == "" {
		return evidence.RequestRecord{}, errors.New("canonical_request_hash is missing")
	}
	return r, nil
}

// toValue converts a driver's structured output into a protobuf Value by way
// of JSON, the form drivers promise it has.
func toValue(v any) (*structpb.Value, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("tool_result.data is not JSON: %w", err)
	}
	var out structpb.Value
	if err := protojson.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("tool_result.data: %w", err)
	}
	return &out, nil
}

func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// Indented: auditors read these files, and the redactor keeps the
	// layout it is given.
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
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
	// decided is set once policy_decision.json is durable: from then on
	// artifacts may go to the spool.
	decided bool
	// spooled is set once an artifact went to the spool.
	spooled bool
	refs    []string
	// related are references to other requests' evidence that a failure
	// reports beside this request's own (the nested calls of a run that
	// broke); they are not this request's artifacts.
	related []string
	digests []evidence.ArtifactDigest
	report  evidence.RedactionReport
}

func newRecorder(g *Gateway, requestID, hash, engineRef string) *recorder {
	return &recorder{g: g, redactor: g.redactor, requestID: requestID, hash: hash, engineRef: engineRef}
}

// redact encodes v and passes it through the redactor.
func (r *recorder) redact(artifact string, v any) ([]byte, error) {
	raw, err := marshalJSON(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", artifact, err)
	}
	return r.redactBytes(artifact, raw)
}

// redactBytes passes an encoded artifact through the redactor and keeps its
// findings for the manifest.
func (r *recorder) redactBytes(artifact string, raw []byte) ([]byte, error) {
	out, findings, err := r.redactor.JSON(artifact, raw)
	if err != nil {
		return nil, fmt.Errorf("redact %s: %w", artifact, err)
	}
	for _, f := range findings {
		r.report.Add(evidence.Redaction{Rule: f.Rule, Artifact: f.Artifact, Path: f.Path, Offset: f.Offset, Fingerprint: f.Fingerprint})
	}
	return out, nil
}

// artifact is one encoded, redacted artifact ready to be stored.
type artifact struct {
	name string
	data []byte
}

// persist writes artifacts create-only, concurrently, and records their
// digests in the given order.
//
// Before the decision is durable (r.decided false) a failed write fails the
// call, so nothing runs without its write-ahead record. After it, an
// artifact the store refuses goes to the local spool: the call is decided,
// and for an allowed call the tool has run, so its record must not be lost.
// Once one artifact of a request is spooled the rest follow it there, so the
// store never holds a later artifact without the earlier ones.
func (r *recorder) persist(ctx context.Context, arts ...artifact) error {
	errs := make([]error, len(arts))
	if !r.spooled {
		var wg sync.WaitGroup
		for i, a := range arts {
			wg.Go(func() { errs[i] = r.g.store.Put(ctx, evidence.Key(r.requestID, a.name), a.data) })
		}
		wg.Wait()
	}
	for i, a := range arts {
		key := evidence.Key(r.requestID, a.name)
		if r.spooled || errs[i] != nil {
			if !r.decided || r.g.spool == nil || errors.Is(errs[i], evidence.ErrExist) {
				return errs[i]
			}
			if err := r.g.spool.Put(ctx, key, a.data); err != nil {
				return errors.Join(errs[i], fmt.Errorf("spool: %w", err))
			}
			if !r.spooled {
				r.g.log.Warn("evidence store failed; artifacts spooled locally until it is back",
					"request_id", r.requestID, "artifact", a.name, "err", errs[i])
				r.spooled = true
				r.g.kickFlusher()
			}
		}
		r.refs = append(r.refs, key)
		r.digests = append(r.digests, evidence.Digest(key, a.data))
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

// finish stores response.json (with any artifacts that may be written
// beside it) and the manifest, and returns the response decoded from the
// stored bytes, so the caller receives exactly what is on record.
func (r *recorder) finish(ctx context.Context, resp *toolgatev1.RunToolResponse, with ...artifact) (*toolgatev1.RunToolResponse, error) {
	resp.EvidenceRefs = slices.Clone(r.refs)
	for _, a := range with {
		resp.EvidenceRefs = append(resp.EvidenceRefs, evidence.Key(r.requestID, a.name))
	}
	resp.EvidenceRefs = append(resp.EvidenceRefs,
		evidence.Key(r.requestID, evidence.ArtifactResponse),
		evidence.Key(r.requestID, evidence.ArtifactManifest))
	body, err := MarshalResponse(resp)
	if err != nil {
		return nil, r.fail(ctx, codes.Internal, err)
	}
	stored, err := r.redactBytes(evidence.ArtifactResponse, body)
	if err != nil {
		return nil, r.fail(ctx, codes.Internal, err)
	}
	// Decode before storing: a response that cannot be read back must not
	// become the request's permanent answer.
	reply, err := decodeResponse(stored)
	if err != nil {
		return nil, r.fail(ctx, codes.Internal, err)
	}
	if err := r.persist(ctx, append(with, artifact{evidence.ArtifactResponse, stored})...); err != nil {
		return nil, r.fail(ctx, codes.Unavailable, fmt.Errorf("the evidence store and the spool failed writing the response: %w", err))
	}
	if err := r.writeManifest(ctx, evidence.OutcomeCompleted, ""); err != nil {
		// response.json is durable, so a retry replays it; the manifest
		// gap is what verification will report.
		return nil, r.failure(codes.Unavailable, "evidence store failed writing the manifest (a retry returns the stored response): %v", err)
	}
	return reply, nil
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
		if err := r.writeManifest(ctx, evidence.OutcomeFailed, msg); err != nil {
			r.g.log.Error("could not write the failure manifest", "request_id", r.requestID, "err", err)
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
