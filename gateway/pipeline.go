package gateway

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/recovery"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/internal/ident"
	"github.com/toolgate/toolgate/internal/ownedid"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// The pipeline's entries, outermost first; each calls the next:
//
//   - RunTool, the gRPC method: authenticates the caller by its key.
//   - Run, every door's entry for a caller it authenticated: validates
//     the call and admits it against limits.max_concurrent_calls.
//   - runValidated: claims the request id, or resumes a claimed one
//     (resume, in gateway.go).
//   - attempt (attempt.go): decides, records the decision, and for an
//     allowed call dispatches it.
//   - execute (attempt.go): runs a dispatched attempt's driver, through
//     callDriver, and records what it returned.
//
// A sandboxed tool's nested calls (nested.go) are validated where they
// are made and enter at runValidated: a call holding a slot never waits
// for one of its own.

// Call is one tool call as a front door hands it to the gateway: the
// RunTool request it translated its own protocol into, and the door's name.
type Call struct {
	// FrontDoor names the door ("tpmjs", "agent_spaces"). It must match
	// ^[a-z][a-z0-9_]{0,31}$, or be empty for a plain RunTool call. It is
	// recorded as request.json's front_door and is not part of the
	// canonical request hash, so a retry through another door, or over
	// gRPC, is the same request.
	FrontDoor string
	// Request is the call itself, validated exactly as RunTool validates
	// it.
	Request *toolgatev1.RunToolRequest
	// Identity, when set, is how the door authenticated the caller other
	// than by an API key; see Identity. The caller name must then match
	// the pattern of auth.keys' callers. Its groups and roles reach Cedar;
	// request.json records its method, issuer, subject and token id as
	// auth, outside the canonical request hash.
	Identity *Identity
	// TraceParent is the W3C traceparent the client sent with the call
	// ("00-<32 hex>-<16 hex>-<2 hex>", ids not all zero), or "". It is
	// the parent of the call's span unless ctx holds a span of this
	// process already (see telemetry.Incoming); request.json's trace_id,
	// never hashed, is the call span's trace id, so that evidence leads to
	// the trace and back (with tracing off, this trace's). A malformed one
	// is INVALID_ARGUMENT: a door drops what it cannot vouch for.
	TraceParent string
}

// Run runs c for caller, who is already authenticated (RunTool by its
// key, a front door by its own protocol's), through RunTool's pipeline:
// admission against limits.max_concurrent_calls, validation, the claim of
// the request id, the decision, the driver and the evidence. Its answers
// and errors are RunTool's, gRPC statuses included, so every door maps
// one set of outcomes onto its protocol.
func (g *Gateway) Run(ctx context.Context, caller string, c Call) (resp *toolgatev1.RunToolResponse, err error) {
	// The call's span continues the caller's trace (telemetry.Incoming).
	ctx = telemetry.Incoming(ctx, c.TraceParent)
	ctx, span := g.telemetry.StartCall(ctx, g.telemetryCall(c))
	defer func() { span.End(callResult(resp, err)) }()
	if c.FrontDoor != "" && !frontDoorPattern.MatchString(c.FrontDoor) {
		return nil, status.Errorf(codes.InvalidArgument, "front door %q: must match %s",
			ident.Clip(c.FrontDoor), frontDoorPattern)
	}
	if caller == "" {
		// Authentication always names someone (AnonymousCaller when it is
		// off): an empty caller is a door that skipped it.
		return nil, status.Error(codes.Unauthenticated, "caller: missing; authenticate before Run")
	}
	if c.Request == nil {
		return nil, status.Error(codes.InvalidArgument, "request: missing")
	}
	if err := validateIdentity(caller, c.Identity); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if _, err := traceID(c.TraceParent); err != nil {
		// It is written into the evidence: a door passes only a valid one.
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := g.admitCall(); err != nil {
		return nil, err
	}
	defer g.releaseCall()
	parsed, err := parseRequest(c.Request)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// request.json's trace_id is the call span's trace, so that evidence
	// and trace lead to each other; with tracing off, the caller's.
	parsed.FrontDoor, parsed.Identity, parsed.TraceID = c.FrontDoor, c.Identity, telemetry.TraceID(ctx)
	return g.runValidated(ctx, caller, parsed)
}

// RunTool implements the ToolGateway service. At most
// limits.max_concurrent_calls run at once; the tool calls a running call's
// sandboxed code makes go through runValidated directly and are not counted, so a
// call holding a slot never waits for a slot of its own.
func (g *Gateway) RunTool(ctx context.Context, req *toolgatev1.RunToolRequest) (*toolgatev1.RunToolResponse, error) {
	caller, err := g.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	return g.Run(ctx, caller, Call{Request: req})
}

// runValidated runs one validated call: it checks the request id is the
// caller's to use, prepares the call, claims the request id (a retry of a
// claimed id is answered by resume) and runs attempt 1. Run enters here
// after admission; a sandboxed tool's nested calls enter here directly.
func (g *Gateway) runValidated(ctx context.Context, caller string, c call) (*toolgatev1.RunToolResponse, error) {
	// Another caller's owned id is refused before it is claimed: a claim
	// would make the owner's call fail.
	if err := ownedid.Check(caller, c.RequestID); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	p, err := g.prepare(ctx, caller, c)
	if err != nil {
		return nil, err
	}
	if err := g.holdsInstance(ctx); err != nil {
		return nil, err
	}
	// Evidence must be completed even when the caller goes away: a claimed
	// request with half its evidence is worse than a late answer.
	ctx = detach(ctx)
	g.recovery.Enter(c.RequestID)
	defer g.recovery.Leave(c.RequestID)
	rec := p.newRecorder(g)
	defer func() { g.telemetry.AnnotateCall(ctx, rec.stageTimes) }()
	if p.deadlinePassed(g.now()) {
		return nil, status.Errorf(codes.DeadlineExceeded,
			"the deadline passed before request_id %q was claimed; nothing was executed", c.RequestID)
	}

	// 1. Claim the request id: a create-only write of request.json.
	pre, cancel := p.beforeDispatch(ctx)
	pre, claim := g.telemetry.StartStage(pre, telemetry.StageClaim)
	err = rec.putSealed(pre, evidence.ArtifactRequest, p.request)
	claim.End()
	cancel()
	if errors.Is(err, evidence.ErrExist) {
		return g.resume(ctx, p, rec)
	}
	if err != nil {
		// The claim may exist all the same: a write whose outcome is
		// unknown, or a store that can no longer write (a full disk) but
		// still reads. Then the request is answered as a retry is.
		if _, getErr := g.store.Get(ctx, evidence.Key(c.RequestID, evidence.ArtifactRequest)); getErr == nil {
			return g.resume(ctx, p, rec)
		}
		if resp, ok, err := g.replaySpooled(ctx, p.c, p.hash); ok {
			return resp, err
		}
		// The write may have landed all the same: recovery closes the
		// attempt it would have opened, so that a retry can run.
		g.recovery.LeftUnfinished(c.RequestID, recovery.Unfinished{ClaimUnsure: g.now()})
		g.log.Error("evidence store unavailable; nothing ran", "request_id", c.RequestID, "err", err)
		return nil, rec.failure(p.notRunCode(g.now()),
			"evidence store unavailable, nothing was executed (retry with the same request_id): %v", err)
	}
	// 2. Decide, make the decision durable, dispatch, run, record.
	return g.attempt(ctx, p, rec, 1)
}

// callDriver calls d, turning a driver panic into an error: a bug in one driver must not
// take the gateway, and every other call in flight, down with it.
func callDriver(ctx context.Context, d drivers.Driver, c drivers.Call) (res drivers.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("driver panicked: %v", p)
		}
	}()
	return d.Run(ctx, c)
}
