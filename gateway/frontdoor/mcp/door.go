package mcpdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/oauth"
	"github.com/toolgate/toolgate/gateway/telemetry"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// Gateway is what the door uses of the gateway; *gateway.Gateway
// implements it.
type Gateway interface {
	// Run runs one call for an authenticated caller through RunTool's
	// pipeline.
	Run(ctx context.Context, caller string, c gateway.Call) (*toolgatev1.RunToolResponse, error)
	// ToolsAllowedAs returns those of ids policy could allow caller to
	// run, in order.
	ToolsAllowedAs(ctx context.Context, caller string, identity *gateway.Identity, policyRef string, ids []string) ([]string, error)
	// Catalog describes the catalog's tools, never their env values.
	Catalog() []gateway.CatalogEntry
	// SubscribePolicyChanges signals each policy reload that changed the
	// sets.
	SubscribePolicyChanges() (<-chan struct{}, func())
	// ListApprovalsAs and DecideApprovalAs serve the approval tools
	// (approval_tools).
	ListApprovalsAs(ctx context.Context, caller string, identity *gateway.Identity, req *toolgatev1.ListApprovalsRequest) (*toolgatev1.ListApprovalsResponse, error)
	DecideApprovalAs(ctx context.Context, caller string, identity *gateway.Identity, id, decision, reason string) (*toolgatev1.Approval, error)
	// Telemetry records the door's spans, parents of the calls' spans.
	Telemetry() *telemetry.Telemetry
}

// Door serves MCP's Streamable HTTP transport at /mcp for one gateway:
// one shared SDK server, stateless, holding the whole catalog; each
// request's caller comes from the front-door plumbing.
type Door struct {
	gw  Gateway
	cfg Config
	log *slog.Logger
	now func() time.Time

	srv *mcp.Server
	// handler answers every request with one JSON body; streams answers
	// with an event stream, which only subscriptions/listen needs.
	handler, streams http.Handler
	// tools maps each served MCP tool name to its catalog entry; the
	// approval tools are not in it.
	tools map[string]gateway.CatalogEntry
	// doorTools are the names of the door's own tools (approval_tools),
	// listed to every caller: Cedar decides their calls.
	doorTools map[string]bool
	// announce re-adds one tool, unchanged, which makes the SDK send
	// notifications/tools/list_changed; nil when nothing is served.
	announce func()
	stateKey []byte

	// challenge, when set, answers a request without a valid credential
	// in place of the plain 401 (the OAuth wiring sets it, to point
	// clients at the resource metadata).
	challenge func(w http.ResponseWriter, r *http.Request, err error)
	// verifier checks OAuth access tokens (oauth.go); nil without oauth.
	verifier *oauth.Verifier

	// drainCtx ends when the servers drain: the subscriptions/listen
	// streams are joined to it. stop ends the policy watch.
	drainCtx context.Context
	drain    context.CancelFunc
	stop     context.CancelFunc
	watching sync.WaitGroup

	mu      sync.Mutex
	listens map[string]int // open subscriptions/listen streams per caller
}

// The door is a frontdoor.Door that drains its streams and releases its
// policy watch.
var (
	_ frontdoor.Drainer = (*Door)(nil)
	_ frontdoor.Closer  = (*Door)(nil)
)

// New returns the door for gw configured by cfg, which must be valid, and
// starts watching for policy changes; Close stops it.
func New(gw Gateway, cfg Config, log *slog.Logger) (*Door, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	key, err := loadStateKey(cfg.StateKeyFile)
	if err != nil {
		return nil, err
	}
	d := &Door{
		gw: gw, cfg: cfg, log: log, now: time.Now, stateKey: key,
		tools: map[string]gateway.CatalogEntry{}, doorTools: map[string]bool{}, listens: map[string]int{},
	}
	d.drainCtx, d.drain = context.WithCancel(context.Background())
	d.srv = mcp.NewServer(&mcp.Implementation{Name: "toolgate", Title: "Toolgate", Version: gateway.Version}, &mcp.ServerOptions{
		// Tools only: the default would also announce logging.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
		Logger:       sdkLogger(log),
		SetCacheable: d.setCacheable,
	})
	if err := d.openOAuth(cfg.OAuth); err != nil {
		return nil, err
	}
	if err := d.addTools(); err != nil {
		return nil, err
	}
	d.srv.AddReceivingMiddleware(d.middleware)
	d.handler = d.transport(true)
	d.streams = d.transport(false)
	var ctx context.Context
	ctx, d.stop = context.WithCancel(context.Background())
	d.watching.Add(1)
	go func() {
		defer d.watching.Done()
		d.watchPolicies(ctx)
	}()
	return d, nil
}

// transport is the SDK's Streamable HTTP handler for the shared server.
func (d *Door) transport(jsonResponse bool) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return d.srv }, &mcp.StreamableHTTPOptions{
		// A temporary session per request: no Mcp-Session-Id, so any
		// replica serves any request, and 2026-07-28 clients are served
		// as the protocol wants.
		Stateless: true,
		// One JSON body costs less than an event stream of one event;
		// the door sends nothing else while a call runs.
		JSONResponse: jsonResponse,
		Logger:       sdkLogger(d.log),
		// The SDK's own cap, beside the plumbing's: both are the door's.
		MaxRequestBodyBytes: d.cfg.BodyLimit(),
		// The SDK would refuse a non-loopback Host on a loopback socket,
		// which breaks a local proxy; the plumbing checks Host when
		// authentication is off, as for every door.
		DisableLocalhostProtection: true,
		// A 2026-07-28 call ends with its POST, as the other doors'
		// calls end with their requests.
		PropagateRequestCancellation: true,
	})
}

// Routes serves the transport at /mcp, every method: the SDK answers
// those it does not take (GET and DELETE in stateless mode) with 405.
func (d *Door) Routes(mux *http.ServeMux) {
	mux.Handle(Path, http.HandlerFunc(d.serveHTTP))
	d.oauthRoutes(mux)
}

// Handler is the door's /mcp handler, for tests that serve it without a
// mux. It expects the front-door plumbing in front of it.
func (d *Door) Handler() http.Handler { return http.HandlerFunc(d.serveHTTP) }

// serveHTTP turns away a request without a caller before the SDK reads a
// byte of it, then hands it to the SDK.
func (d *Door) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if _, err := principalOf(r.Context()); err != nil {
		d.refuse(w, r, err)
		return
	}
	if r.Method == http.MethodPost {
		// The body is read and its shape checked here, under the doors'
		// budget, before the SDK decodes it (twice) into messages.
		body, err := frontdoor.ReadBody(w, r, d.cfg.BodyLimit())
		if err != nil {
			refuseBody(w, err)
			return
		}
		if isBatch(body) {
			// The SDK still serves batches to 2025-03-26 clients and to
			// requests without MCP-Protocol-Version: one POST would run
			// as many calls as fit under max_body_bytes, concurrently,
			// on one connection of the gateway's limit.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, batchRefusedBody)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	// 2026-07-28 names the method in a header the SDK checks against the
	// body; a listen sent without it is answered, as JSON, when it ends.
	r = withSession(r)
	if r.Header.Get("Mcp-Method") == "subscriptions/listen" {
		d.streams.ServeHTTP(w, r)
		return
	}
	d.handler.ServeHTTP(w, r)
}

// isBatch reports whether the body's first non-space byte opens a JSON
// array.
func isBatch(body []byte) bool {
	rest := bytes.TrimLeft(body, " \t\r\n")
	return len(rest) > 0 && rest[0] == '['
}

// refuseBody answers a body frontdoor.ReadBody refused: its HTTP status
// and a JSON-RPC error with id null, as the body was not decoded
// (invalid request; -32000, a server error, when the doors' body budget
// is spent and the client should retry).
func refuseBody(w http.ResponseWriter, err error) {
	status := http.StatusBadRequest
	if be, ok := errors.AsType[*frontdoor.BodyError](err); ok {
		status = be.Status
	}
	code := -32600
	if status == http.StatusServiceUnavailable {
		code = -32000
		w.Header().Set("Retry-After", "1")
	}
	msg, _ := json.Marshal(err.Error())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":null,"error":{"code":%d,"message":%s}}`+"\n", code, msg)
}

// batchRefusedBody is the JSON-RPC error (invalid request) a batch gets.
const batchRefusedBody = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"JSON-RPC batches are not served"}}` + "\n"

// unauthorizedBody is the JSON-RPC error a request without a valid
// credential gets: id null, as its body was never read.
const unauthorizedBody = `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"unauthorized"}}` + "\n"

// refuse answers a request that carries no valid credential: 401, a
// JSON-RPC error body and "WWW-Authenticate: Bearer", unless challenge
// answers it.
func (d *Door) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if d.challenge != nil {
		d.challenge(w, r, err)
		return
	}
	d.log.Debug("mcp door: request refused", "reason", err)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("WWW-Authenticate", "Bearer")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte(unauthorizedBody))
}

// Drain ends the subscriptions/listen streams, so that the servers'
// shutdown does not wait on them; it implements frontdoor.Drainer. New
// streams end at once after it.
func (d *Door) Drain() { d.drain() }

// Close stops the policy watch and ends the streams.
func (d *Door) Close() error {
	d.drain()
	d.stop()
	d.watching.Wait()
	return nil
}

// setCacheable marks lists private (they differ per caller) and fresh for
// list_ttl.
func (d *Door) setCacheable(_ context.Context, req mcp.Request, c *mcp.Cacheable) {
	if _, ok := req.(*mcp.ListToolsRequest); ok {
		c.CacheScope = "private"
		c.TTLMs = int(d.cfg.ListTTL / time.Millisecond)
	}
}

// middleware filters tools/list per caller and bounds
// subscriptions/listen; everything else passes.
func (d *Door) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/list":
			return d.listTools(ctx, next, req)
		case "subscriptions/listen":
			return d.listen(ctx, next, req)
		}
		return next(ctx, method, req)
	}
}

// listen serves subscriptions/listen: at most MaxListensPerCaller streams
// per caller, each ending when the servers drain.
func (d *Door) listen(ctx context.Context, next mcp.MethodHandler, req mcp.Request) (mcp.Result, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.listens[p.Caller] >= MaxListensPerCaller {
		d.mu.Unlock()
		return nil, rpcError(codeTooManyListens,
			fmt.Sprintf("at most %d subscriptions/listen streams per caller", MaxListensPerCaller), nil)
	}
	d.listens[p.Caller]++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		if d.listens[p.Caller]--; d.listens[p.Caller] == 0 {
			delete(d.listens, p.Caller)
		}
		d.mu.Unlock()
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(d.drainCtx, cancel)
	defer stop()
	return next(ctx, "subscriptions/listen", req)
}
