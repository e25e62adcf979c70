package tpmjsdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// Gateway is what the door uses of the gateway; *gateway.Gateway
// implements it.
type Gateway interface {
	// Run runs one call for an authenticated caller through RunTool's
	// pipeline.
	Run(ctx context.Context, caller string, c gateway.Call) (*toolgatev1.RunToolResponse, error)
	// ListToolsAs lists the catalog's tools policy could allow caller.
	ListToolsAs(ctx context.Context, caller string, identity *gateway.Identity, req *toolgatev1.ListToolsRequest) (*toolgatev1.ListToolsResponse, error)
	// Catalog describes the catalog's tools, never their env values.
	Catalog() []gateway.CatalogEntry
	// DriverHealth returns each driver's cached health without waiting.
	DriverHealth() map[string]drivers.Health
}

// ProtocolVersion is the TPMJS executor protocol version the door speaks.
const ProtocolVersion = "1.0"

// Door serves the TPMJS executor protocol for one gateway.
type Door struct {
	gw             Gateway
	catalogPackage string
	maxBody        int64
	log            *slog.Logger
	// callerFrom names the authenticated caller of a request, or returns
	// why there is none.
	callerFrom func(context.Context) (frontdoor.Principal, error)
	now        func() time.Time
	// packaged maps "package\x00export" to the catalog's packaged tools,
	// sorted by id; byID maps every catalog id to its entry.
	packaged map[string][]gateway.CatalogEntry
	byID     map[string]gateway.CatalogEntry
}

// newDoor returns a door for gw configured by cfg, which must be valid.
func newDoor(gw Gateway, cfg Config, callerFrom func(context.Context) (frontdoor.Principal, error), log *slog.Logger) *Door {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Door{
		gw: gw, catalogPackage: cfg.CatalogPackage, maxBody: cfg.BodyLimit(),
		log: log, callerFrom: callerFrom, now: time.Now,
		packaged: map[string][]gateway.CatalogEntry{}, byID: map[string]gateway.CatalogEntry{},
	}
	entries := gw.Catalog()
	slices.SortFunc(entries, func(a, b gateway.CatalogEntry) int { return strings.Compare(a.ID, b.ID) })
	for _, e := range entries {
		d.byID[e.ID] = e
		if e.Package != "" {
			k := e.Package + "\x00" + e.Target
			d.packaged[k] = append(d.packaged[k], e)
		}
	}
	return d
}

// Routes registers the door's routes on mux: each protocol route also
// under "/api", the registry search, and a catch-all that answers 404 in
// the protocol's shape.
func (d *Door) Routes(mux *http.ServeMux) {
	for _, prefix := range []string{"", "/api"} {
		mux.Handle(prefix+"/health", d.route(http.MethodGet, d.health))
		mux.Handle(prefix+"/info", d.route(http.MethodGet, d.info))
		mux.Handle(prefix+"/execute-tool", d.route(http.MethodPost, d.execute))
	}
	mux.Handle("/api/tools/search", d.route(http.MethodGet, d.search))
	mux.Handle("/", d.route("", nil))
}

// route wraps a handler with the protocol's headers, CORS pre-flight and
// method check. A nil handler answers 404.
func (d *Door) route(method string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.setHeaders(w)
		switch {
		case r.Method == http.MethodOptions:
			w.WriteHeader(http.StatusOK)
		case h == nil:
			d.writeError(w, http.StatusNotFound, "NOT_FOUND", "no such route: "+r.Method+" "+r.URL.Path, 0)
		case r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead):
			w.Header().Set("Allow", method+", OPTIONS")
			d.writeError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", r.URL.Path+" takes "+method, 0)
		default:
			h(w, r)
		}
	})
}

// setHeaders sets what every answer carries: the protocol version and the
// CORS headers the protocol asks for. Access-Control-Allow-Origin is the
// plumbing's, which checks the origin against cors_origins.
func (d *Door) setHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("X-TPMJS-Protocol-Version", ProtocolVersion)
	h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
	h.Set("Access-Control-Allow-Headers",
		"Content-Type, Authorization, X-TPMJS-Protocol-Version, Idempotency-Key, Toolgate-Run-Id, Toolgate-Step-Id, Toolgate-Policy-Ref")
	h.Set("Access-Control-Expose-Headers", "Idempotency-Key")
}

// writeJSON writes v as the body, the way JavaScript's JSON.stringify
// would: without escaping <, > and &.
func (d *Door) writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only values this package built are encoded; a failure is a bug
		// worth a log line and a protocol answer, never a broken body.
		d.log.Error("tpmjs door: encoding an answer", "err", err)
		buf.Reset()
		buf.WriteString(`{"success":false,"error":{"code":"INTERNAL_ERROR","message":"the answer could not be encoded"},"executionTimeMs":0}` + "\n")
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// protoError is the 1.0 error object.
type protoError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// errorBody is a failure the gateway answers before or instead of a call.
type errorBody struct {
	Success         bool       `json:"success"`
	Error           protoError `json:"error"`
	ExecutionTimeMs int64      `json:"executionTimeMs"`
}

// writeError answers a failure with the protocol's error object.
func (d *Door) writeError(w http.ResponseWriter, status int, code, message string, ms int64) {
	d.writeJSON(w, status, errorBody{Error: protoError{Code: code, Message: message}, ExecutionTimeMs: ms})
}

// unauthorizedBody is the protocol's 401 answer, byte for byte: it has no
// executionTimeMs.
const unauthorizedBody = `{"success":false,"error":{"code":"UNAUTHORIZED","message":"Invalid or missing API key"}}`

// caller returns the request's authenticated caller, or answers 401 and
// returns false.
func (d *Door) caller(w http.ResponseWriter, r *http.Request) (frontdoor.Principal, bool) {
	caller, err := d.callerFrom(r.Context())
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("WWW-Authenticate", "Bearer")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(unauthorizedBody + "\n"))
		return frontdoor.Principal{}, false
	}
	return caller, true
}
