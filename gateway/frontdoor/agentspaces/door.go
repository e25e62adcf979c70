package agentspaces

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/internal/ownedid"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// Gateway is what the door uses of *gateway.Gateway.
type Gateway interface {
	// Run runs one tool call for an authenticated caller.
	Run(ctx context.Context, caller string, c gateway.Call) (*toolgatev1.RunToolResponse, error)
	// DecideApprovalAs approves or denies a held call as caller.
	DecideApprovalAs(ctx context.Context, caller string, identity *gateway.Identity, id, decision, reason string) (*toolgatev1.Approval, error)
	// ListApprovalsAs lists the approvals caller may decide or asked for.
	ListApprovalsAs(ctx context.Context, caller string, identity *gateway.Identity, req *toolgatev1.ListApprovalsRequest) (*toolgatev1.ListApprovalsResponse, error)
}

// Options configure a Door; zero values take the defaults of Config.
type Options struct {
	// Name is the front_door recorded with every call; "agent_spaces" by
	// default.
	Name string
	// Driver is the driver whose tools run the operations: operation T
	// runs tool "<Driver>.T".
	Driver string
	// MaxOperations bounds a batch.
	MaxOperations int
	// PausedBatches bounds the batches held for an approval.
	PausedBatches int
	// MaxBodyBytes caps a request body.
	MaxBodyBytes int64
	// Logger, if set, gets the door's own errors.
	Logger *slog.Logger
	// Now returns the current time; time.Now by default.
	Now func() time.Time
	// GRPCCaller returns the authenticated caller of a gRPC call; without
	// it RegisterGRPC serves nothing.
	GRPCCaller func(ctx context.Context) (string, error)
}

// Door serves Agent Spaces operations batches. It is safe for concurrent
// use.
type Door struct {
	gw   Gateway
	opts Options
	held *heldTable
	log  *slog.Logger
	// callerOf returns the caller of a gRPC call (see RegisterGRPC).
	callerOf func(ctx context.Context) (string, error)
}

// New returns a Door running its calls through gw.
func New(gw Gateway, o Options) (*Door, error) {
	if gw == nil {
		return nil, errors.New("agentspaces: a gateway is required")
	}
	def := defaultConfig()
	if o.Name == "" {
		o.Name = Name
	}
	if o.Driver == "" {
		o.Driver = def.Driver
	}
	if o.MaxOperations <= 0 {
		o.MaxOperations = def.MaxOperations
	}
	if o.PausedBatches <= 0 {
		o.PausedBatches = def.PausedBatches
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Door{gw: gw, opts: o, held: newHeldTable(o.PausedBatches, o.Now), log: log, callerOf: o.GRPCCaller}, nil
}

// Request is one message of a run, as the HTTP or gRPC form carries it.
type Request struct {
	// Caller is the authenticated caller.
	Caller string
	// Identity is what a bearer token proved of Caller (its groups and
	// roles reach Cedar); nil for an API key.
	Identity *gateway.Identity
	// RunID is the run's id, from the path.
	RunID string
	// Turn is the Idempotency-Key; "" for a fresh one.
	Turn string
	// PolicyRef is the Toolgate-Policy-Ref header, "" for the default.
	PolicyRef string
	// Body is the message.
	Body []byte
}

// Reply is the protocol's events message, plus Toolgate's extension.
type Reply struct {
	ProtocolVersion string         `json:"protocolVersion"`
	RunID           string         `json:"runId"`
	Status          string         `json:"status"`
	Events          []Event        `json:"events"`
	Toolgate        ReplyExtension `json:"toolgate"`
}

// ReplyExtension is the "toolgate" object of a reply.
type ReplyExtension struct {
	// Turn is the turn the operations ran under: re-send the batch with
	// Idempotency-Key set to it to have it replayed.
	Turn string `json:"turn,omitempty"`
}

// HTTP answers of a reply that is not 200.
const (
	httpMalformed = http.StatusBadRequest
	httpHalted    = http.StatusServiceUnavailable
	httpAborted   = http.StatusConflict
)

// Serve handles one message and returns the reply with its HTTP status.
func (d *Door) Serve(ctx context.Context, req Request) (Reply, int) {
	now := d.opts.Now()
	reply := Reply{ProtocolVersion: protocolVersion, RunID: req.RunID, Status: statusError}
	if err := checkRequest(req); err != nil {
		reply.Events = []Event{errorEvent(now, "", categoryValidation, err.Error(), nil)}
		return reply, httpMalformed
	}
	m, err := parseMessage(req.Body, d.opts.MaxOperations)
	if err != nil {
		reply.Events = []Event{errorEvent(now, "", categoryValidation, strings.TrimPrefix(err.Error(), errMalformed.Error()+": "), nil)}
		return reply, httpMalformed
	}
	if m.Kind != kindBatch {
		return d.resume(ctx, req, m)
	}
	if req.Turn == "" {
		req.Turn = freshTurn()
	}
	b := &heldBatch{RunID: req.RunID, Requester: req.Caller, Identity: req.Identity, Turn: req.Turn, PolicyRef: req.PolicyRef, Ops: m.Ops}
	return d.runFrom(ctx, b, 0)
}

// checkRequest validates what comes beside the body.
func checkRequest(req Request) error {
	if !runIDPattern.MatchString(req.RunID) {
		return fmt.Errorf("runId %q: must match %s", truncate(req.RunID), runIDPattern)
	}
	if req.Turn != "" && !turnPattern.MatchString(req.Turn) {
		return fmt.Errorf("Idempotency-Key %q: must match %s", truncate(req.Turn), turnPattern)
	}
	if len(req.PolicyRef) > 256 || !utf8.ValidString(req.PolicyRef) || strings.IndexFunc(req.PolicyRef, unicode.IsControl) >= 0 {
		return errors.New("Toolgate-Policy-Ref: want at most 256 bytes of printable text")
	}
	return nil
}

// freshTurn is a new turn: "t" and 16 base32 characters of 10 random
// bytes.
func freshTurn() string {
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "t" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// requestID is the request id of operation i of caller's turn of a run:
// "<runId>:<turn>:<i>", owned by caller (see ownedid). Neither runID nor
// turn holds ':', so the parts are read back unambiguously; and since
// other callers may know a run id and a turn, the ids are caller's alone:
// another caller's batch under the same run and turn has ids of its own,
// and the gateway refuses anyone else a claim on them.
func requestID(caller, runID, turn string, i int) string {
	return ownedid.New(caller, fmt.Sprintf("%s:%s:%d", runID, turn, i))
}

// runFrom runs b's operations from index k on, in order, as b's requester,
// and holds b when one of them waits for an approval.
func (d *Door) runFrom(ctx context.Context, b *heldBatch, k int) (Reply, int) {
	reply := Reply{ProtocolVersion: protocolVersion, RunID: b.RunID, Status: statusCompleted, Toolgate: ReplyExtension{Turn: b.Turn}}
	reply.Events = make([]Event, 0, len(b.Ops)-k)
	for i := k; i < len(b.Ops); i++ {
		op := b.Ops[i]
		out := d.runOne(ctx, b, i)
		reply.Events = append(reply.Events, out.event)
		if out.pending != nil {
			h := *b
			h.K, h.ApprovalID = i, out.pending.GetApprovalId()
			h.ExpiresAt = out.pending.GetExpiresAt().AsTime()
			out.event.OperationID = op.eventID(i)
			reply.Events[len(reply.Events)-1] = out.event
			d.held.put(&h)
		}
		if out.stop {
			reply.Status = out.status
			if out.status == statusError {
				if out.event.Toolgate != nil && out.event.Toolgate.Code == "Aborted" {
					return reply, httpAborted
				}
				return reply, httpHalted
			}
			break
		}
	}
	return reply, http.StatusOK
}

// runOne runs operation i of b: one RunTool call, or none for a message
// or an operation that failed validation.
func (d *Door) runOne(ctx context.Context, b *heldBatch, i int) outcome {
	op := b.Ops[i]
	if op.Invalid != "" {
		return outcome{event: errorEvent(d.opts.Now(), op.ID, categoryValidation, op.Invalid, map[string]string{"field": op.Field})}
	}
	if op.Type == opMessage {
		return outcome{event: messageEvent(d.opts.Now(), op)}
	}
	id := requestID(b.Requester, b.RunID, b.Turn, i)
	args, err := structpb.NewStruct(op.Args)
	if err != nil {
		return outcome{event: errorEvent(d.opts.Now(), op.ID, categoryValidation, "arguments: "+err.Error(), nil)}
	}
	resp, err := d.gw.Run(ctx, b.Requester, gateway.Call{FrontDoor: d.opts.Name, Identity: b.Identity, Request: &toolgatev1.RunToolRequest{
		RequestId: id, ToolId: d.opts.Driver + "." + op.Type, Args: args,
		Ctx: &toolgatev1.RunContext{RunId: b.RunID, StepId: op.eventID(i), PolicyRef: b.PolicyRef},
	}})
	if err != nil {
		return failureOutcome(d.opts.Now(), op, id, err)
	}
	return callOutcome(d.opts.Now(), op, id, resp)
}

// Routes implements frontdoor.Door.
func (d *Door) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/runs/{runId}/operations", d.serveHTTP)
}

// serveHTTP is POST /v1/runs/{runId}/operations.
func (d *Door) serveHTTP(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("runId")
	p, err := frontdoor.PrincipalFrom(r.Context())
	if err != nil {
		d.writeReply(w, Reply{ProtocolVersion: protocolVersion, RunID: runID, Status: statusError,
			Events: []Event{errorEvent(d.opts.Now(), "", categoryPolicy, "missing or unknown API key", nil)}}, http.StatusUnauthorized)
		return
	}
	body, err := frontdoor.ReadBody(w, r, d.opts.MaxBodyBytes)
	if err != nil {
		code, msg := httpMalformed, err.Error()
		if be, ok := errors.AsType[*frontdoor.BodyError](err); ok && be.Status != http.StatusBadRequest {
			code = be.Status
		}
		d.writeReply(w, Reply{ProtocolVersion: protocolVersion, RunID: runID, Status: statusError,
			Events: []Event{errorEvent(d.opts.Now(), "", categoryValidation, msg, nil)}}, code)
		return
	}
	reply, code := d.Serve(r.Context(), Request{
		Caller: p.Caller, Identity: p.Identity, RunID: runID, Turn: r.Header.Get("Idempotency-Key"),
		PolicyRef: r.Header.Get("Toolgate-Policy-Ref"), Body: body,
	})
	d.writeReply(w, reply, code)
}

func (d *Door) writeReply(w http.ResponseWriter, reply Reply, code int) {
	if reply.Events == nil {
		reply.Events = []Event{}
	}
	body, err := json.Marshal(reply)
	if err != nil {
		d.log.Error("agentspaces: reply not encodable", "err", err)
		http.Error(w, `{"status":"error"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if reply.Toolgate.Turn != "" {
		w.Header().Set("Idempotency-Key", reply.Toolgate.Turn)
	}
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}
