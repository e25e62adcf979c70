package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/approval"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/gateway/wire"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// prepared is a validated call made ready for its attempts: canonical,
// hashed, its caller's secrets known. It is the same for every attempt a
// retry opens.
type prepared struct {
	caller    string
	c         call
	tool      Tool
	known     bool
	args      map[string]any
	params    map[string]any
	env       map[string]string
	hash      string
	engineRef string
	// request is request.json, the claim.
	request evidence.RequestRecord
	// output, if set, hides the caller's secrets in the tool's output.
	output *redact.Redactor
	// hidden reports the caller's secrets hidden in request.json.
	hidden []evidence.Redaction
	// callerCtx is the caller's own context, with its cancellation:
	// nested calls end with the sandbox session that made them.
	callerCtx   context.Context
	deadline    time.Time
	hasDeadline bool
	// held, set by a retry of a request held for approval once it is
	// decided, is the approval the next attempt uses or ends by.
	held *approval.Held
	// guestCall, set by a retry of a parent whose guest's call was
	// approved, is that call: the next run's guest may make it once.
	guestCall *approvedGuestCall
}

// newRecorder returns a recorder for one attempt at p.
func (p *prepared) newRecorder(g *Gateway) *recorder {
	r := newRecorder(g, p.c.RequestID, p.hash, p.engineRef)
	r.output = p.output
	for _, h := range p.hidden {
		r.report.Add(h)
	}
	return r
}

// beforeDispatch bounds the store writes that precede dispatch by the
// caller's deadline as well as by the store's own: until the call is
// dispatched, a caller who has left needs nothing more, and a write cut
// short leaves at most an open attempt that recovery closes.
func (p *prepared) beforeDispatch(ctx context.Context) (context.Context, context.CancelFunc) {
	if !p.hasDeadline {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, p.deadline)
}

// deadlinePassed reports whether the caller's deadline has passed.
func (p *prepared) deadlinePassed(now time.Time) bool {
	return p.hasDeadline && !now.Before(p.deadline)
}

// notRunCode is the status of a call that ran nothing because something
// failed: DEADLINE_EXCEEDED when the caller's deadline has passed by now
// (the store's own timeouts wrap context.DeadlineExceeded too, so only the
// clock can tell), UNAVAILABLE otherwise.
func (p *prepared) notRunCode(now time.Time) codes.Code {
	if p.deadlinePassed(now) {
		return codes.DeadlineExceeded
	}
	return codes.Unavailable
}

// attempt runs attempt n of p: decide, record the decision, and for an
// allowed call mark it dispatched and run it. rec holds what is already
// stored of the request.
func (g *Gateway) attempt(ctx context.Context, p *prepared, rec *recorder, n int) (*toolgatev1.RunToolResponse, error) {
	rec.attempt = n
	log := g.log.With("request_id", p.c.RequestID, "caller", p.caller, "tool_id", p.c.ToolID, "attempt", n)
	if p.c.FrontDoor != "" {
		log = log.With("front_door", p.c.FrontDoor)
	}
	pre, cancel := p.beforeDispatch(ctx)
	defer cancel()

	var decision policy.Decision
	var shadow *evidence.ShadowDecision
	var hist *evidence.DecisionHistory
	if p.held == nil || !p.held.Final() {
		dctx, stage := g.telemetry.StartStage(ctx, telemetry.StageDecide)
		decision, shadow, hist = g.decide(dctx, p.caller, p.c, p.tool, p.known, p.args, g.runsUnder(p))
		stage.End()
	}
	if p.guestCall != nil {
		decision = approval.GuestRerun(decision, p.guestCall.requestID)
	}
	if decision.ApprovalRequired && p.held == nil {
		var wait *approval.Held
		switch p.held, wait = g.borrowApproval(pre, p, decision, log); {
		case p.held == nil && wait != nil:
			return g.waitApproval(ctx, pre, p, rec, n, decision, shadow, wait, log)
		case p.held == nil:
			return g.askApproval(ctx, pre, p, rec, n, decision, shadow, log)
		}
		defer g.endBorrowed(ctx, p)
		if hist != nil {
			// Decided before the approval was found, the call claimed no
			// history slot: decide again, as a call that holds it.
			decision, shadow, hist = g.decide(ctx, p.caller, p.c, p.tool, p.known, p.args, g.runsUnder(p))
		}
	}
	record := g.decisionRecord(p, n, decision, shadow)
	record.History = hist
	if p.held != nil {
		asked := decision
		decision, record.Approval = approval.Judge(p.held, decision, record.DecidedAt)
		if decision.Allow {
			if err := g.useHeld(pre, p); err != nil {
				log.Error("could not record the approval's use; nothing ran", "err", err)
				rec.closeAttempt(ctx, "the approval's use could not be recorded: "+err.Error())
				return nil, approvalUseFailure(rec, p, g.now(), err)
			}
			decision, record.Approval = approval.Judge(p.held, asked, record.DecidedAt)
		}
		noteUse(rec, p)
		record.Decision, record.RuleID, record.Reason = decision.Word(), decision.RuleID, decision.Reason
		record.Suggestion = decision.Suggestion
		record.PolicyRef, record.PolicySetDigest = decision.PolicyRef, decision.PolicySetDigest
	}
	rec.policySetDigest = decision.PolicySetDigest
	// From the decision on, the attempt's records are chained: each
	// settles before the attempt relies on it (the driver, a reply, a
	// close).
	rec.chain = &evidence.Chain{}
	if err := g.putDecision(ctx, pre, p, rec, n, record, log); err != nil {
		return nil, err
	}
	resp := &toolgatev1.RunToolResponse{
		PolicyCheck: &toolgatev1.PolicyCheck{
			Decision: decisionWord(decision.Allow), Reason: decision.Reason, RuleId: decision.RuleID,
			Suggestion: decision.Suggestion, RetryAfterMs: retryAfterMS(decision, hist),
		},
		EngineRef: p.engineRef,
		RunId:     p.c.RunID,
		StepId:    p.c.StepID,
	}
	if !decision.Allow {
		log.Info("denied", "rule_id", decision.RuleID, "policy_ref", decision.PolicyRef)
		return rec.finish(ctx, resp)
	}
	if err := g.dispatch(ctx, pre, p, rec); err != nil {
		return nil, err
	}
	return g.execute(ctx, p, rec, resp, decision, log)
}

// decisionRecord is policy_decision.json of attempt n.
func (g *Gateway) decisionRecord(p *prepared, n int, d policy.Decision, shadow *evidence.ShadowDecision) evidence.DecisionRecord {
	return evidence.DecisionRecord{
		RequestID:       p.c.RequestID,
		Caller:          p.caller,
		Attempt:         n,
		Action:          p.c.action(),
		ParentRequestID: p.c.ParentRequestID,
		ToolID:          p.c.ToolID,
		Driver:          p.tool.Driver,
		Decision:        d.Word(),
		RuleID:          d.RuleID,
		Reason:          d.Reason,
		Suggestion:      d.Suggestion,
		PolicyRef:       d.PolicyRef,
		PolicySetDigest: d.PolicySetDigest,
		Errors:          nonNil(d.Errors),
		Shadow:          shadow,
		DecidedAt:       g.now().UTC(),
		Gateway:         g.claimant,
		Principal:       decisionPrincipal(g.callerAttrs(p.caller, p.c.Identity)),
		Tool:            decisionTool(p.tool.attributes()),
	}
}

// decisionPrincipal and decisionTool record what Cedar saw of the caller
// and the tool, so that the decision can be replayed under another set.
func decisionPrincipal(a policy.CallerAttributes) *evidence.DecisionPrincipal {
	return &evidence.DecisionPrincipal{Groups: nonNil(a.Groups), Roles: nonNil(a.Roles)}
}

func decisionTool(t policy.ToolAttributes) *evidence.DecisionTool {
	return &evidence.DecisionTool{Package: t.Package, Export: t.Export, Version: t.Version, Tags: nonNil(t.Tags)}
}

// dispatch writes the attempt's dispatch marker, the last record before
// the driver is called. A caller whose deadline has passed gets
// DEADLINE_EXCEEDED and the attempt is closed not dispatched: a tool is
// never started for a caller who has left, nor recorded as timed out
// when it never started.
func (g *Gateway) dispatch(ctx, pre context.Context, p *prepared, rec *recorder) error {
	if p.deadlinePassed(g.now()) {
		rec.closeAttempt(ctx, "the caller's deadline passed before dispatch")
		return rec.failure(codes.DeadlineExceeded,
			"the deadline passed before request_id %q was dispatched; nothing was executed (retry with the same request_id)", p.c.RequestID)
	}
	// From the first byte of this write on, the marker may be stored.
	rec.dispatched = true
	err := rec.putDispatch(pre, evidence.Dispatched, "")
	if err == nil && p.deadlinePassed(g.now()) {
		err = context.DeadlineExceeded
	}
	if err != nil {
		reason := "the dispatch marker could not be written: " + err.Error()
		code := p.notRunCode(g.now())
		if code == codes.DeadlineExceeded {
			reason = "the caller's deadline passed before dispatch"
		}
		advice := rec.retryAdvice(rec.closeAttempt(ctx, reason))
		return rec.failure(code, "request_id %q was not dispatched, nothing was executed (%s): %s",
			p.c.RequestID, advice, reason)
	}
	return nil
}

// execute calls the driver of a dispatched attempt and records what
// it returned.
func (g *Gateway) execute(ctx context.Context, p *prepared, rec *recorder, resp *toolgatev1.RunToolResponse, decision policy.Decision, log *slog.Logger) (*toolgatev1.RunToolResponse, error) {
	// The driver gets the caller's deadline but not its cancellation, for
	// the same reason the evidence writes do; a nested call, though, ends
	// with the sandbox session that made it. A driver whose tool goes on
	// without its caller (a TPMJS executor) waits past that deadline for
	// the tool's own result, which is what is recorded.
	dctx := ctx
	switch {
	case p.c.ParentRequestID != "":
		dctx = p.callerCtx
	case p.hasDeadline:
		var cancel context.CancelFunc
		dctx, cancel = context.WithDeadline(ctx, p.deadline)
		defer cancel()
	}
	var nested drivers.ToolCaller
	var nc *nestedCaller
	if p.c.ParentRequestID == "" {
		// Only a top-level call may call tools back: a sandbox started by
		// guest code gets none, so nesting stops at one level.
		nc = &nestedCaller{g: g, caller: p.caller, parent: p.c, parentDriver: p.tool.Driver,
			cannotWait: g.whyCannotWait(p), approved: p.guestCall}
		nested = nc
	}
	ranAt := g.now()
	dctx, stage := g.telemetry.StartStage(dctx, telemetry.StageDriver)
	result, err := callDriver(dctx, g.drivers[p.tool.Driver], drivers.Call{
		RequestID: p.c.RequestID, ToolID: p.c.ToolID, Target: p.tool.Target,
		Package: p.tool.Package, Version: p.tool.Version,
		Args: p.params, Env: p.env, Tools: nested,
	})
	stage.End()
	if dir, ok := g.traceDirs[p.tool.Driver]; ok {
		if trace := filepath.Join(dir, p.c.RequestID+".jsonl"); fileExists(trace) {
			resp.LocalEvidencePaths = append(resp.LocalEvidencePaths, trace)
		}
	}
	if err != nil {
		return nil, g.driverFailed(ctx, p, rec, nc, ranAt, err, log)
	}
	if w := nc.pausedFor(); w != nil {
		// The run had no effect; its result is discarded.
		return g.pauseForGuest(ctx, p, rec, w, log)
	}
	if result, err = rec.redactOutput(result); err != nil {
		return nil, rec.fail(ctx, codes.Internal, err)
	}
	toolResult, err := rec.redact(evidence.ArtifactToolResult, evidence.ToolResultRecord{
		RunRecord: g.runRecord(p, ranAt),
		ExitCode:  result.ExitCode, Stdout: result.Stdout, Stderr: result.Stderr,
		Data: result.Data, Evidence: result.Evidence,
	})
	if err != nil {
		return nil, rec.fail(ctx, codes.Internal, err)
	}
	data, err := wire.ToValue(result.Data)
	if err != nil {
		return nil, rec.fail(ctx, codes.Internal, err)
	}
	resp.ToolResult = &toolgatev1.ToolResult{
		ExitCode: int32(result.ExitCode), Stdout: result.Stdout, Stderr: result.Stderr, Data: data,
	}
	resp.Ok = result.ExitCode == 0
	log.Info("ran", "rule_id", decision.RuleID, "exit_code", result.ExitCode, "duration", g.now().Sub(ranAt))
	return rec.finish(ctx, resp, artifact{evidence.ArtifactToolResult, toolResult})
}

// driverFailed records a driver's failure. A failure the driver proves
// happened before the call left the gateway closes the attempt as not
// dispatched, so that a retry runs it; any other failure is final.
func (g *Gateway) driverFailed(ctx context.Context, p *prepared, rec *recorder, nc *nestedCaller, ranAt time.Time, err error, log *slog.Logger) error {
	// A driver's error can carry the tool's output, and so the caller's
	// secrets.
	msg := rec.outputText(err.Error())
	if errors.Is(err, drivers.ErrNotDispatched) && (nc == nil || len(nc.calls()) == 0) {
		log.Warn("driver failed before dispatch; nothing ran", "driver", p.tool.Driver, "err", msg)
		advice := rec.retryAdvice(rec.closeAttempt(ctx, fmt.Sprintf("driver %s: %s", p.tool.Driver, msg)))
		return rec.failure(p.notRunCode(g.now()), "driver %s: %s; nothing was executed (%s)", p.tool.Driver, msg, advice)
	}
	log.Error("driver failed", "driver", p.tool.Driver, "err", msg)
	cause := fmt.Errorf("driver %s: %s", p.tool.Driver, msg)
	var made []evidence.NestedCallRecord
	if nc != nil {
		made = nc.calls()
	}
	rec.recordBrokenRun(ctx, made, drivers.ErrorEvidence(err), evidence.BrokenRunRecord{
		RunRecord: g.runRecord(p, ranAt), Error: cause.Error(),
	})
	return rec.fail(ctx, codes.Unavailable, cause)
}

// runRecord says what tool_result.json records of every run of p that
// started at ranAt.
func (g *Gateway) runRecord(p *prepared, ranAt time.Time) evidence.RunRecord {
	return evidence.RunRecord{
		RequestID: p.c.RequestID, Driver: p.tool.Driver, Target: p.tool.Target, Engine: p.engineRef,
		StartedAt: ranAt.UTC(), DurationMS: g.now().Sub(ranAt).Milliseconds(),
	}
}

// errDispatchedElsewhere: an attempt another gateway call has dispatched
// cannot be closed as not dispatched.
var errDispatchedElsewhere = errors.New("the attempt was dispatched by its owner")

// closeAttempt closes attempt n of a request as not dispatched. Its
// dispatch slot is written create-only with State NotDispatched; if the
// slot is taken by a Dispatched marker, the marker is ours when marked is
// set (written by this very attempt, perhaps by a write whose outcome was
// unknown), and not_dispatched.json closes the attempt after it. Otherwise
// the attempt's owner dispatched it and errDispatchedElsewhere is returned.
func (g *Gateway) closeAttempt(ctx context.Context, requestID string, n int, marked bool, encode func(name string, v any) ([]byte, error), reason string) (string, error) {
	return g.closeAttemptWith(ctx, g.closeRecord(requestID, n, reason), marked, encode)
}

// closeAttemptWith is closeAttempt writing rec.
func (g *Gateway) closeAttemptWith(ctx context.Context, rec evidence.DispatchRecord, marked bool, encode func(name string, v any) ([]byte, error)) (string, error) {
	requestID, n := rec.RequestID, rec.Attempt
	slot := evidence.AttemptKey(requestID, n, evidence.ArtifactDispatch)
	data, err := g.encodeSigned(slot, evidence.ArtifactDispatch, rec, encode)
	if err != nil {
		return "", err
	}
	err = g.store.Put(ctx, slot, data)
	if !errors.Is(err, evidence.ErrExist) {
		return slot, err
	}
	stored, err := g.store.Get(ctx, slot)
	if err != nil {
		return "", err
	}
	d, err := evidence.ParseDispatchRecord(stored, requestID, n)
	switch {
	case err != nil:
		return "", err
	case d.State == evidence.NotDispatched:
		return "", g.checkClosed(slot, stored) // closed already
	case !marked:
		return "", errDispatchedElsewhere
	}
	after := evidence.AttemptKey(requestID, n, evidence.ArtifactNotDispatched)
	if data, err = g.encodeSigned(after, evidence.ArtifactNotDispatched, rec, encode); err != nil {
		return "", err
	}
	if err := g.store.Put(ctx, after, data); err != nil && !errors.Is(err, evidence.ErrExist) {
		return "", err
	}
	return after, nil
}

// closeRecord is the record that closes attempt n of a request as not
// dispatched.
func (g *Gateway) closeRecord(requestID string, n int, reason string) evidence.DispatchRecord {
	return evidence.DispatchRecord{
		RequestID: requestID, Attempt: n, State: evidence.NotDispatched,
		Reason: truncateText(reason, maxManifestError), Gateway: g.engineBase, At: g.now().UTC(),
	}
}

// encodeSigned encodes and signs a record that closes an attempt not
// dispatched, stored under key.
func (g *Gateway) encodeSigned(key, name string, rec evidence.DispatchRecord, encode func(name string, v any) ([]byte, error)) ([]byte, error) {
	data, err := encode(name, rec)
	if err != nil {
		return nil, err
	}
	return g.sealRecord(key, data, true)
}

// checkClosed checks that the record found closing an attempt, stored
// under key, was signed by a trusted gateway: a forged close would let a
// retry run the request again.
func (g *Gateway) checkClosed(key string, stored []byte) error {
	if g.trusted == nil {
		return nil
	}
	if _, _, err := g.trusted.OpenSigned(key, stored); err != nil {
		return fmt.Errorf("the record closing this attempt failed authentication: %w", err)
	}
	return nil
}
