// Package gateway is Toolgate's request pipeline and gRPC service: it
// authenticates a RunTool call, validates it, claims its request_id in the
// evidence store, asks policy, runs allowed calls through a driver, redacts
// every artifact, and answers with exactly the response it stored.
package gateway

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/lease"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/gateway/approval"
	"github.com/toolgate/toolgate/gateway/callerauth"
	inst "github.com/toolgate/toolgate/gateway/instance"
	"github.com/toolgate/toolgate/gateway/logredact"
	"github.com/toolgate/toolgate/gateway/recovery"
	"github.com/toolgate/toolgate/gateway/servelimits"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/gateway/wire"
	"github.com/toolgate/toolgate/internal/connlimit"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// Version is the gateway's release, reported in engine_ref.
const Version = "0.1.0"

// Rule ids the gateway decides by itself, before or instead of Cedar.
const (
	RuleUnknownTool = "unknown_tool"
)

// Decider makes policy decisions. *policy.Engine and *policy.Live
// implement it.
type Decider interface {
	// Decide judges a tool call.
	Decide(ctx context.Context, req policy.Request) policy.Decision
	// DecideApproval judges whether an approver may decide a held-back
	// call (Action::"Approve").
	DecideApproval(ctx context.Context, a policy.ApprovalRequest) policy.Decision
}

// Options are a Gateway's collaborators. All but Logger and Now are required.
type Options struct {
	Decider Decider
	Store   evidence.Store
	// Spool, if set, takes the artifacts the store refuses once a call's
	// decision is durable; RunSpoolFlusher moves them to the store later.
	Spool *evidence.Spool
	// Signer, if set, signs every manifest.
	Signer *evidence.Signer
	// TrustedKeys are the public keys of the replicas sharing the store,
	// whose signed records (manifests, approvals, attempts closed not
	// dispatched) this gateway believes; its own key is always trusted.
	TrustedKeys []ed25519.PublicKey
	Redactor    *redact.Redactor
	Auth        *callerauth.Authenticator
	Drivers     map[string]drivers.Driver
	Tools       map[string]Tool
	// Shadows maps an enforcing policy_ref to a policy set evaluated beside
	// it on every call and recorded, never enforced. No caller may name a
	// shadow set in ctx.policy_ref.
	Shadows map[string]string
	// Selectable restricts which callers may name which policy sets (see
	// config.PolicyConfig.Selectable). nil: every set that is not a shadow.
	Selectable []config.PolicySelection
	// Registry, if set, serves registry-style tool ids.
	Registry *Registry
	// TraceDirs maps a driver name to the folder where it keeps a local
	// trace per request, <dir>/<request_id>.jsonl.
	TraceDirs map[string]string
	// Instance names this gateway in engine_ref.
	Instance string
	Logger   *slog.Logger
	// Now returns the current time; time.Now by default.
	Now func() time.Time
	// Limits bound connections and concurrent calls; zero values take
	// config.DefaultLimits.
	Limits config.LimitsConfig
	// Recovery tunes how requests left unfinished are finalised.
	Recovery RecoveryOptions
	// Approvals tunes calls held for a human's approval.
	Approvals ApprovalOptions
	// Telemetry, if set, records metrics and spans of every call.
	Telemetry *telemetry.Telemetry

	// SharedMACKey, if set (at least 32 bytes), is the MAC key of the
	// replicas sharing the store: the gateway MACs its records with it and
	// opens theirs, beside TrustedKeys (see setTrust).
	SharedMACKey []byte
	// Lease, if set, is this process's lease on Instance (see
	// package evidence/lease): the gateway starts nothing without it,
	// and its epoch marks the requests it owns.
	Lease *lease.Lease
}

// Gateway runs RunTool calls. It is safe for concurrent use.
type Gateway struct {
	decider   Decider
	store     evidence.Store
	spool     *evidence.Spool
	spoolKick chan struct{}
	signer    *evidence.Signer
	// sealer seals, and trusted opens, the records the gateway reads
	// back and acts on; both nil when manifests are not signed.
	sealer  *trust.Sealer
	trusted *trust.Keyring
	// history keeps the session history policies decide on (history.go).
	history   HistoryKeeper
	redactor  *redact.Redactor
	auth      *callerauth.Authenticator
	drivers   map[string]drivers.Driver
	tools     map[string]Tool
	registry  *Registry
	shadows   map[string]string
	selection selection
	// shadowFlips counts decisions a shadow set would have flipped.
	shadowFlips atomic.Int64
	// encodeBuffers holds *bytes.Buffer to encode artifacts in (see
	// encodeBuffer).
	encodeBuffers sync.Pool
	limits        config.LimitsConfig
	// conns caps the connections of every listener (limits.go).
	conns *connlimit.Limiter
	// running counts the top-level calls in flight, against
	// limits.max_concurrent_calls.
	running    atomic.Int64
	traceDirs  map[string]string
	engineBase string
	instance   string
	// lease is this process's lease on instance, nil without one;
	// claimant is engineBase with its epoch, the owner in the records
	// recovery reads (see owns).
	lease    *lease.Lease
	claimant string
	// recovery knows which requests this process runs and which it left
	// unfinished; recoveryLimits say when others count as abandoned.
	recovery       *recovery.Notes
	recoveryLimits recovery.Limits
	log            *slog.Logger
	now            func() time.Time
	// approvalTTL is how long an approval may be decided and used;
	// notifier, if set, is told of approvals asked for and decided.
	approvalTTL time.Duration
	notifier    approval.Notifier
	// changes are told of every policy swap (SubscribePolicyChanges).
	changes policyChanges
	// telemetry is nil when nothing is recorded.
	telemetry *telemetry.Telemetry
}

// New checks opts and returns a Gateway.
func New(opts Options) (*Gateway, error) {
	switch {
	case opts.Decider == nil:
		return nil, errors.New("gateway: Options.Decider is required")
	case opts.Store == nil:
		return nil, errors.New("gateway: Options.Store is required")
	case opts.Redactor == nil:
		return nil, errors.New("gateway: Options.Redactor is required")
	case opts.Auth == nil:
		return nil, errors.New("gateway: Options.Auth is required")
	case opts.Instance == "":
		return nil, errors.New("gateway: Options.Instance is required")
	}
	if err := opts.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	for id, t := range opts.Tools {
		if _, ok := opts.Drivers[t.Driver]; !ok {
			return nil, fmt.Errorf("gateway: tool %q: no driver %q", id, t.Driver)
		}
	}
	if r := opts.Registry; r != nil {
		if _, ok := opts.Drivers[r.Driver]; !ok {
			return nil, fmt.Errorf("gateway: registry ids: no driver %q", r.Driver)
		}
	}
	store := opts.Store
	if opts.Lease != nil {
		store = opts.Lease.Guard(store)
	}
	g := &Gateway{
		decider:        opts.Decider,
		store:          inst.Meter(store, opts.Telemetry),
		spool:          opts.Spool,
		spoolKick:      make(chan struct{}, 1),
		signer:         opts.Signer,
		redactor:       opts.Redactor,
		auth:           opts.Auth,
		drivers:        opts.Drivers,
		tools:          opts.Tools,
		registry:       opts.Registry,
		shadows:        opts.Shadows,
		selection:      newSelection(opts.Shadows, opts.Selectable),
		traceDirs:      opts.TraceDirs,
		limits:         opts.Limits.WithDefaults(),
		engineBase:     fmt.Sprintf("toolgate/%s@%s", Version, opts.Instance),
		instance:       opts.Instance,
		lease:          opts.Lease,
		recovery:       recovery.NewNotes(),
		recoveryLimits: opts.Recovery.Limits(opts.Drivers),
		log:            logredact.Logger(opts.Logger, opts.Redactor),
		now:            opts.Now,
		approvalTTL:    opts.Approvals.TTL,
		notifier:       opts.Approvals.Notifier,
		telemetry:      opts.Telemetry,
	}
	g.conns = servelimits.Connections(g.limits, opts.Telemetry)
	g.claimant = g.engineBase
	if g.lease != nil {
		g.claimant = evidence.GatewayNameWithEpoch(g.engineBase, g.lease.Epoch())
	}
	if g.approvalTTL <= 0 {
		g.approvalTTL = config.DefaultApprovalTTL
	}
	if err := g.setTrust(opts.TrustedKeys, opts.SharedMACKey); err != nil {
		return nil, err
	}
	g.history = g.newHistory()
	if g.now == nil {
		g.now = time.Now
	}
	g.observeState()
	return g, nil
}

// prepare canonicalises a call's arguments that name resources (from here
// on the hash, the evidence, policy and the driver see only that form),
// hashes it, and sorts out the caller's secrets.
func (g *Gateway) prepare(ctx context.Context, caller string, c call) (*prepared, error) {
	p := &prepared{caller: caller, callerCtx: ctx, engineRef: g.engineBase}
	p.deadline, p.hasDeadline = ctx.Deadline()
	started := g.now()
	var err error
	p.tool, p.known = g.lookupTool(c.ToolID)
	if p.known {
		p.engineRef += "/" + g.drivers[p.tool.Driver].Engine()
	}
	if p.args = c.decodedArgs; p.args == nil {
		if p.args, err = decodeArgs(c.Args); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	c.decodedArgs = nil
	if p.known {
		if c, p.args, err = g.canonicalise(c, p.tool, p.args); err != nil {
			var invalid *invalidArgument
			if errors.As(err, &invalid) {
				return nil, status.Error(codes.InvalidArgument, err.Error())
			}
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	p.c = c
	if p.hash, err = canonicalHash(caller, c); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	env, callerEnv, params, err := p.tool.env(p.args)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	p.env, p.params = env, params
	secrets, err := g.callerSecrets(caller, c, p.tool, callerEnv, params)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	p.request = evidence.RequestRecord{
		RequestID: c.RequestID, Caller: caller, ToolID: c.ToolID, Args: c.Args,
		Ctx:        evidence.RequestContext{RunID: c.RunID, StepID: c.StepID, PolicyRef: c.PolicyRef},
		ReceivedAt: started.UTC(), CanonicalRequestHash: p.hash, Gateway: g.claimant,
		ParentRequestID: c.ParentRequestID, FrontDoor: c.FrontDoor, Auth: authRecord(c.Identity), TraceID: c.TraceID,
	}
	if len(secrets) > 0 {
		// What a caller hands a tool as environment is hidden in
		// request.json and in the tool's output, and nowhere else: see
		// callerSecret.
		values := make([]string, len(secrets))
		for i, s := range secrets {
			values[i] = s.value
		}
		p.output = g.redactor.Standalone(values...)
		rec := p.newRecorder(g)
		if p.request.Args, err = rec.hideCallerSecrets(p.args, secrets); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		p.hidden = rec.report.Redactions()
	}
	return p, nil
}

// decide applies the gateway's own rules, then policy. When the policy set
// has a shadow, the shadow decides too, for the record only. runs says
// whether a decision lets the call run (an allow, or one an approval the
// call holds grants): such a call claims its history slot.
func (g *Gateway) decide(ctx context.Context, caller string, c call, tool Tool, known bool,
	args map[string]any, runs func(policy.Decision) bool) (policy.Decision, *evidence.ShadowDecision, *evidence.DecisionHistory) {
	if !known {
		return policy.Decision{
			RuleID:    RuleUnknownTool,
			Reason:    fmt.Sprintf("no driver serves tool %q", c.ToolID),
			PolicyRef: c.PolicyRef,
		}, nil, nil
	}
	attrs := g.callerAttrs(caller, c.Identity)
	if reason, ok := g.selection.allows(caller, attrs, c.PolicyRef); !ok {
		// A recorded deny, not INVALID_ARGUMENT: an attempt to pick the
		// set that judges a call belongs in the evidence.
		return policy.Decision{RuleID: RulePolicyRefNotSelectable, Reason: reason, PolicyRef: c.PolicyRef}, nil, nil
	}
	req := policy.Request{
		Caller:          caller,
		CallerAttrs:     attrs,
		Action:          c.action(),
		ToolID:          c.ToolID,
		Driver:          tool.Driver,
		Tool:            tool.attributes(),
		RequestID:       c.RequestID,
		ParentRequestID: c.ParentRequestID,
		RunID:           c.RunID,
		StepID:          c.StepID,
		PolicyRef:       c.PolicyRef,
		Args:            args,
	}
	var hist *evidence.DecisionHistory
	var d policy.Decision
	if g.wantsHistory(tool) {
		d, hist = g.decideWithHistory(ctx, req, runs)
		if hist != nil {
			req.History = factsOf(hist)
		}
	} else {
		d = g.decider.Decide(ctx, req)
	}
	shadowRef, ok := g.shadows[d.PolicyRef]
	if !ok {
		return d, nil, hist
	}
	req.PolicyRef = shadowRef
	sd := g.decider.Decide(ctx, req)
	sr := &evidence.ShadowDecision{
		PolicyRef: sd.PolicyRef, Decision: sd.Word(), RuleID: sd.RuleID, Reason: sd.Reason,
		PolicySetDigest: sd.PolicySetDigest, Differs: sd.Word() != d.Word(),
	}
	if sr.Differs {
		g.shadowFlips.Add(1)
		g.telemetry.ShadowFlip()
		g.log.Info("shadow policy would decide otherwise", "request_id", c.RequestID, "tool_id", c.ToolID,
			"policy_ref", d.PolicyRef, "decision", d.Word(), "rule_id", d.RuleID,
			"shadow_ref", sd.PolicyRef, "shadow_decision", sr.Decision, "shadow_rule_id", sd.RuleID)
	}
	return d, sr, hist
}

// Logger returns the gateway's logger: the one it was given, with every
// record passed through the gateway's redactor.
func (g *Gateway) Logger() *slog.Logger { return g.log }

// Signer returns the signer of the gateway's manifests, or nil when they
// are unsigned (evidence.signing_key: none, or Options.Signer left nil).
func (g *Gateway) Signer() *evidence.Signer { return g.signer }

// ShadowFlips counts the calls whose shadow policy set decided otherwise
// (allow, deny or approval_required) than the enforcing set, since the
// gateway started.
func (g *Gateway) ShadowFlips() int64 { return g.shadowFlips.Load() }

// resume answers a request whose id is already claimed: the stored
// answer when there is one, the next attempt when every earlier one
// provably ran nothing, and ABORTED while the request may be running or
// may have run.
func (g *Gateway) resume(ctx context.Context, p *prepared, rec *recorder) (*toolgatev1.RunToolResponse, error) {
	id := p.c.RequestID
	stored, err := g.store.Get(ctx, evidence.Key(id, evidence.ArtifactRequest))
	if err != nil {
		return nil, rec.failure(codes.Unavailable, "evidence store unavailable: %v", err)
	}
	prev, err := evidence.ParseRequestRecord(stored)
	if err != nil {
		return nil, rec.failure(codes.Internal, "stored request.json for %s is unreadable: %v", id, err)
	}
	if prev.CanonicalRequestHash != p.hash {
		return nil, status.Errorf(codes.AlreadyExists,
			"request_id %q was already used for a different request (caller, tool_id, args or ctx differ); use a new request_id", id)
	}
	keys, err := g.store.List(ctx, evidence.RequestPrefix(id))
	if err != nil {
		return nil, rec.failure(codes.Unavailable, "evidence store unavailable: %v", err)
	}
	rec.refs = keys
	if resp, answered, err := g.storedAnswer(ctx, p, rec, keys); answered {
		return resp, err
	}
	attempts, err := g.readAttempts(ctx, id, keys)
	if errors.Is(err, trust.ErrTampered) {
		g.tampered(nil, telemetry.RecordAttempt, id, err)
		return nil, rec.failure(codes.DataLoss, "the attempts of request_id %q failed authentication (evidence tampering); "+
			"nothing was executed; toolgate evidence verify names the record: %v", id, err)
	}
	if err != nil {
		return nil, rec.failure(codes.Unavailable, "the attempts of request_id %q cannot be read: %v", id, err)
	}
	last := attempts[len(attempts)-1]
	if last.State != evidence.NotDispatched && g.flushSpooledClose(ctx, id, last.Number) {
		return g.resume(ctx, p, rec) // the attempt is closed now: judge it again
	}
	if g.closeAbandoned(ctx, id, keys, last) {
		last.State = evidence.NotDispatched
		if keys, err = g.store.List(ctx, evidence.RequestPrefix(id)); err != nil {
			return nil, rec.failure(codes.Unavailable, "evidence store unavailable: %v", err)
		}
	}
	switch last.State {
	case evidence.NotDispatched:
		if slices.Contains(keys, evidence.Key(id, evidence.ArtifactApprovalRequest)) {
			return g.approvalGate(ctx, p, rec, keys, last.Number+1)
		}
		return g.nextAttempt(ctx, p, rec, keys, last.Number+1)
	case evidence.Dispatched:
		if left, ok := g.recovery.Lookup(id); ok && left.Told != "" {
			return nil, rec.failure(codes.Aborted, "%s", left.Told)
		}
		return nil, rec.failure(codes.Aborted,
			"request_id %q is in flight, or was interrupted, after dispatch; it is never executed twice", id)
	}
	return nil, rec.failure(codes.Aborted,
		"request_id %q is in flight and not yet dispatched; retry with the same request_id later", id)
}

// storedAnswer answers a retry from the store when the request has
// finished there, rolling forward a response stored without its manifest
// first. answered is false when there is no answer yet.
func (g *Gateway) storedAnswer(ctx context.Context, p *prepared, rec *recorder, keys []string) (*toolgatev1.RunToolResponse, bool, error) {
	id := p.c.RequestID
	responseKey := evidence.Key(id, evidence.ArtifactResponse)
	manifestKey := evidence.Key(id, evidence.ArtifactManifest)
	if slices.Contains(keys, responseKey) && !slices.Contains(keys, manifestKey) && g.abandoned(ctx, id, keys) {
		if s, err := g.storedRequests().Read(ctx, id, keys); err == nil && g.rollForward(ctx, s) == nil {
			g.recovery.Settled(id)
		}
	}
	resp, answered, err := g.answerFromResponse(ctx, p, rec)
	if answered {
		return resp, true, err
	}
	m, err := g.store.Get(ctx, manifestKey)
	if err != nil {
		return nil, false, nil
	}
	man, err := evidence.ParseManifest(m)
	if err != nil {
		return nil, true, rec.failure(codes.DataLoss, "the manifest of request_id %q is unreadable: %v", id, err)
	}
	if man.Outcome == evidence.OutcomeCompleted {
		// The manifest is written after response.json: one that says
		// completed means the response was written since it was looked for.
		if resp, answered, err := g.answerFromResponse(ctx, p, rec); answered {
			return resp, true, err
		}
	}
	why := man.Error
	if why == "" {
		why = "no response is stored"
	}
	return nil, true, rec.failure(codes.Aborted,
		"request_id %q already %s (%s) and is never executed twice; use a new request_id", id, man.Outcome, why)
}

// answerFromResponse answers a retry with the stored response.json, from
// the store or, while the store was down, the spool. answered is false
// when no response is stored.
func (g *Gateway) answerFromResponse(ctx context.Context, p *prepared, rec *recorder) (*toolgatev1.RunToolResponse, bool, error) {
	id := p.c.RequestID
	responseKey := evidence.Key(id, evidence.ArtifactResponse)
	body, err := g.store.Get(ctx, responseKey)
	if errors.Is(err, evidence.ErrNotExist) && g.spool != nil {
		// Finished while the store was down: the answer waits in the spool.
		body, err = g.spool.Get(ctx, responseKey)
	}
	switch {
	case errors.Is(err, evidence.ErrNotExist):
		return nil, false, nil
	case err != nil:
		return nil, true, rec.failure(codes.Unavailable, "evidence store unavailable: %v", err)
	}
	err = g.checkReplay(ctx, id, p.hash, body)
	if errors.Is(err, errAwaitingManifest) {
		return nil, true, rec.failure(codes.Aborted, "request_id %q was answered by another replica, which has not "+
			"finished its record yet; retry with the same request_id shortly", id)
	}
	if err != nil {
		if errors.Is(err, trust.ErrTampered) {
			g.tampered(nil, telemetry.RecordResponse, id, err)
		}
		return nil, true, rec.failure(codes.DataLoss, "%v", err)
	}
	resp, err := wire.DecodeResponse(body)
	if err != nil {
		return nil, true, rec.failure(codes.Internal, "stored response.json for %s is unreadable: %v", id, err)
	}
	return resp, true, nil
}

// closeAbandoned closes the last attempt of a request a retry found
// unsettled, when that is provably right: an open attempt nobody is
// working on any more, or one this process proved not dispatched but
// could not close. It reports whether the attempt is now closed.
func (g *Gateway) closeAbandoned(ctx context.Context, id string, keys []string, last evidence.Attempt) bool {
	left, noted := g.recovery.Lookup(id)
	var marked bool
	var reason string
	switch {
	case last.State == evidence.Dispatched && noted && left.NotDispatched == last.Number && !left.Aged:
		marked, reason = true, left.Reason
	case last.State == evidence.AttemptOpen && g.abandoned(ctx, id, keys):
		reason = "abandoned before dispatch: found open by a retry after its gateway had stopped working on it"
	default:
		return false
	}
	if _, err := g.closeAttempt(ctx, id, last.Number, marked, g.encodeRecord, reason); err != nil {
		return false
	}
	g.recovery.Settled(id)
	return true
}

// abandoned reports whether a retry may settle request id itself (close
// its open attempt, or roll its response forward): nothing of it waits in
// this gateway's spool, no other call of it is in flight here, and this
// instance owns its last attempt. Another instance's
// request is left to that instance once decided, since the rest of its
// record may wait in that gateway's spool; before a decision, only once it
// is older than an open attempt can be.
func (g *Gateway) abandoned(ctx context.Context, id string, keys []string) bool {
	if g.recovery.OthersRunning(id, 1) {
		return false
	}
	if g.spool != nil {
		if spooled, err := g.spool.List(ctx, evidence.RequestPrefix(id)); err != nil || len(spooled) > 0 {
			return false
		}
	}
	s, err := g.storedRequests().Read(ctx, id, keys)
	switch {
	case err != nil:
		return false
	case g.owns(s.Owner()):
		return true
	case s.Decision != nil:
		return false
	}
	return g.now().Sub(s.LastActivity) >= g.recoveryLimits.OpenAfter
}

// nextAttempt opens attempt n of a request whose earlier attempts ran
// nothing. Its recorder starts with every artifact already stored, so the
// manifest lists the whole history.
func (g *Gateway) nextAttempt(ctx context.Context, p *prepared, rec *recorder, keys []string, n int) (*toolgatev1.RunToolResponse, error) {
	rec.refs, rec.digests = nil, nil
	for _, key := range keys {
		if !evidence.IsArtifactKey(p.c.RequestID, key) {
			continue // not the gateway's: never signed into a manifest
		}
		data, err := g.store.Get(ctx, key)
		if err != nil {
			return nil, rec.failure(codes.Unavailable, "evidence store unavailable, nothing was executed: %v", err)
		}
		rec.refs = append(rec.refs, key)
		rec.digests = append(rec.digests, evidence.Digest(key, data))
	}
	return g.attempt(ctx, p, rec, n)
}

// replaySpooled answers a retry that arrives while the store is down, for a
// request that finished into the spool: its spooled manifest carries the
// canonical hash that tells a retry from a reuse of the id.
func (g *Gateway) replaySpooled(ctx context.Context, c call, hash string) (*toolgatev1.RunToolResponse, bool, error) {
	if g.spool == nil {
		return nil, false, nil
	}
	m, err := g.spool.Get(ctx, evidence.Key(c.RequestID, evidence.ArtifactManifest))
	if err != nil {
		return nil, false, nil
	}
	man, err := evidence.ParseManifest(m)
	if err != nil {
		return nil, false, nil
	}
	if man.CanonicalRequestHash != hash {
		return nil, true, status.Errorf(codes.AlreadyExists,
			"request_id %q was already used for a different request; use a new request_id", c.RequestID)
	}
	body, err := g.spool.Get(ctx, evidence.Key(c.RequestID, evidence.ArtifactResponse))
	if err != nil {
		return nil, false, nil
	}
	if err := g.responseMatches(man, c.RequestID, hash, body); err != nil {
		g.tampered(nil, telemetry.RecordResponse, c.RequestID, err)
		return nil, true, status.Error(codes.DataLoss, err.Error())
	}
	resp, err := wire.DecodeResponse(body)
	if err != nil {
		return nil, false, nil
	}
	return resp, true, nil
}

// checkReplay makes sure a stored response is the one its request's
// manifest (in the store, or else in the spool) committed to before it is
// replayed. Without a manifest (a crash between the two writes) there is
// nothing to check against and the response is replayed as it is.
func (g *Gateway) checkReplay(ctx context.Context, requestID, hash string, body []byte) error {
	key := evidence.Key(requestID, evidence.ArtifactManifest)
	raw, err := g.store.Get(ctx, key)
	if errors.Is(err, evidence.ErrNotExist) && g.spool != nil {
		raw, err = g.spool.Get(ctx, key)
	}
	if errors.Is(err, evidence.ErrNotExist) {
		return g.checkUnmanifested(requestID, body)
	}
	if err != nil {
		return fmt.Errorf("the manifest of %s cannot be read to check the stored response against it: %w", requestID, err)
	}
	m, err := evidence.ParseManifest(raw)
	if err != nil {
		// Manifests are written whole, create-only: one that does not
		// parse was put there by someone else.
		return fmt.Errorf("%w: %s failed authentication: it is unreadable (%v); the stored response is not replayed, "+
			"and nothing was executed (toolgate evidence verify checks it)", trust.ErrTampered, key, err)
	}
	return g.responseMatches(m, requestID, hash, body)
}

// responseMatches checks body, a stored response.json, against m: m must
// belong to this request, list response.json with body's SHA-256 and size,
// and, when the gateway signs manifests, carry a valid signature by a key
// it trusts (its own, or a replica's in evidence.trusted_keys). Every
// error wraps trust.ErrTampered.
func (g *Gateway) responseMatches(m evidence.Manifest, requestID, hash string, body []byte) error {
	mismatch := func(why string) error {
		return fmt.Errorf("%w: %s failed authentication: it does not match its manifest (%s), "+
			"so it is not replayed, and nothing was executed (toolgate evidence verify checks it)",
			trust.ErrTampered, evidence.Key(requestID, evidence.ArtifactResponse), why)
	}
	if m.RequestID != requestID || m.CanonicalRequestHash != hash {
		return mismatch("the manifest belongs to another request")
	}
	if g.trusted != nil {
		if err := evidence.CheckSignatureWith(g.trusted, m); err != nil {
			return manifestRefused(requestID, m, err)
		}
	}
	key := evidence.Key(requestID, evidence.ArtifactResponse)
	want := evidence.Digest(key, body)
	for _, a := range m.Artifacts {
		if a.Key == key {
			if a.SHA256 != want.SHA256 || a.Size != want.Size {
				return mismatch(fmt.Sprintf("response.json has SHA-256 %s and %d bytes, the manifest records %s and %d bytes", want.SHA256, want.Size, a.SHA256, a.Size))
			}
			return nil
		}
	}
	return mismatch("the manifest does not list response.json")
}

// manifestRefused says why a manifest's signature keeps its request's
// stored response from being replayed.
func manifestRefused(requestID string, m evidence.Manifest, err error) error {
	var why string
	switch {
	case errors.Is(err, trust.ErrUnsealed):
		why = "it is not signed, though this gateway signs every manifest"
	case errors.Is(err, trust.ErrUntrustedKey):
		why = fmt.Sprintf("it is signed by key %s, which this gateway does not trust (evidence.trusted_keys)", m.Signature.KeyID)
	default:
		why = fmt.Sprintf("its signature by key %s does not match its content", m.Signature.KeyID)
	}
	return fmt.Errorf("%w: %s failed authentication: %s; the stored response is not replayed, "+
		"and nothing was executed (toolgate evidence verify checks it)", trust.ErrTampered, evidence.Key(requestID, evidence.ArtifactManifest), why)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func decisionWord(allow bool) string {
	if allow {
		return "allow"
	}
	return "deny"
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
