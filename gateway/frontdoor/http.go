package frontdoor

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/internal/argsize"
)

// DefaultMaxBodyBytes caps a request body when a door sets no cap: the
// largest body a call can come out of (argsize.MaxBodyBytes, the
// arguments' 1 MiB and a 64 KiB envelope), which is also the most any
// door's max_body_bytes may be.
const DefaultMaxBodyBytes int64 = argsize.MaxBodyBytes

// Server limits of every door listener. There is no write timeout: a call
// bounds itself (driver timeouts), and a reply may follow a long tool run.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 16 << 10
)

// Listener holds the keys every door has. Doors embed it inline:
//
//	type Config struct {
//		frontdoor.Listener `yaml:",inline"`
//		…
//	}
type Listener struct {
	// Listen is the door's host:port; unset, the door is off (the
	// default). Doors on one address share one listener. The gRPC
	// listener's rules apply: an address other hosts can reach needs
	// auth.keys (or a door on it that authenticates callers itself), and
	// TLS (the gateway's tls.cert_file and tls.key_file) or
	// tls.allow_plaintext.
	Listen string `yaml:"listen"`
	// CORSOrigins are the browser origins ("https://app.example.com")
	// allowed to call the door; a request carrying any other Origin is
	// refused. With auth.keys, or a door on the address that authenticates
	// callers, the default is "*" (no cookies are used, a page needs a key
	// or token all the same); without, no origin: any web page
	// could otherwise drive the gateway from a browser on this host.
	CORSOrigins []string `yaml:"cors_origins"`
	// MaxBodyBytes caps a request's body (default and most: 1 MiB +
	// 64 KiB, DefaultMaxBodyBytes; a door may default lower).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
}

// ListenAddr implements Config.
func (l Listener) ListenAddr() string { return l.Listen }

// Origins are the configured cors_origins.
func (l Listener) Origins() []string { return l.CORSOrigins }

// BodyLimit is max_body_bytes, or DefaultMaxBodyBytes when unset.
func (l Listener) BodyLimit() int64 {
	if l.MaxBodyBytes == 0 {
		return DefaultMaxBodyBytes
	}
	return l.MaxBodyBytes
}

// Validate checks the listener keys; errors start with the key.
func (l Listener) Validate() error {
	if l.Listen != "" {
		if _, _, err := net.SplitHostPort(l.Listen); err != nil {
			return fmt.Errorf("listen %q: want host:port: %w", l.Listen, err)
		}
	}
	if l.MaxBodyBytes < 0 {
		return errors.New("max_body_bytes: must not be negative (0: the door's default)")
	}
	if l.MaxBodyBytes > DefaultMaxBodyBytes {
		return fmt.Errorf("max_body_bytes %d: at most %d, the arguments' limit of %d bytes plus %d for the protocol's fields: "+
			"no call can come out of a larger body", l.MaxBodyBytes, DefaultMaxBodyBytes, argsize.MaxBytes, argsize.EnvelopeBytes)
	}
	for _, o := range l.CORSOrigins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || o != u.Scheme+"://"+u.Host {
			return fmt.Errorf("cors_origins: %q: want \"*\" or an origin such as https://app.example.com (scheme and host, no path)", o)
		}
	}
	return nil
}

// HTTPSettings is what the plumbing reads from a door's Config besides its
// address; Listener implements it. A Config without it gets the defaults.
type HTTPSettings interface {
	Origins() []string
	BodyLimit() int64
}

// KeyChecker maps an API key onto a caller the way the gRPC listener does.
// *callerauth.Authenticator implements it.
type KeyChecker interface {
	// Enabled reports whether callers must present a key.
	Enabled() bool
	// CallerForKey returns the caller holding key.
	CallerForKey(key string) (caller string, ok bool)
}

// Keys returns the gateway's Authenticator as the plumbing's KeyChecker:
// a path or bearer key is checked by the very code that checks a gRPC
// call's bearer key (SHA-256, constant time).
func Keys(a *callerauth.Authenticator) KeyChecker { return a }

// Plumbing is what every door request passes through before it is routed.
type Plumbing struct {
	// Keys authenticates callers; required.
	Keys KeyChecker
	// Origins are the browser origins let through (see
	// Listener.CORSOrigins); nil takes the default for Keys.
	Origins []string
	// MaxBodyBytes caps each body; 0, or more than DefaultMaxBodyBytes,
	// is DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Budget, when set, bounds the body bytes read at once across every
	// address (see BodyBudget); a read beyond it fails with
	// ErrBodyBudget, which a door answers 503.
	Budget *BodyBudget
	// Logger gets a debug line per request (its route pattern, never its
	// path, which may hold a key).
	Logger *slog.Logger
	// Verifiers are the BearerVerifiers of the doors on this address,
	// tried in order on an Authorization: Bearer token that is no API key.
	// With any, authentication is required even without auth.keys.
	Verifiers []BearerVerifier
	// Telemetry, when set, times each request's authentication (the auth
	// stage, and the call span's toolgate.auth child) and counts bodies
	// refused as too large under the max_request_bytes limit.
	Telemetry *telemetry.Telemetry
}

// authRequired reports whether every request must authenticate: with
// auth.keys, or when a door verifies bearer tokens. Otherwise callers are
// anonymous, and only loopback host names are served.
func (p Plumbing) authRequired() bool {
	return p.Keys.Enabled() || len(p.Verifiers) > 0
}

// Wrap returns next behind the plumbing:
//
//   - the caller's key is taken from "Authorization: Bearer <key>" or a
//     leading /k/<percent-escaped key>/ path segment (the only way the
//     published TPMJS client can send one), both are removed from the
//     request, and the caller (or ErrUnauthenticated) is put in its
//     context for CallerFrom, before any byte of the body is read; if both
//     forms are given they must carry the same key; a bearer header that
//     is no API key goes to the Verifiers, a path key never does;
//   - an unauthenticated request's body cannot be read at all, an
//     authenticated one's is capped, and counted against the Budget while
//     the door's handler runs;
//   - the path is cleaned (doubled slashes, dot segments) and served
//     without a redirect, which would cost a round trip and could echo a
//     key in a Location header;
//   - a request with an Origin not allowed is refused (403), and so is,
//     without authentication (no auth.keys, no verifier), one whose Host
//     is not loopback (DNS rebinding); an allowed Origin gets
//     Access-Control-Allow-Origin;
//   - the W3C traceparent and tracestate headers are put in the request's
//     context (telemetry.Extract), the parent of the call's span;
//   - with Telemetry, authentication is timed, and a request whose body
//     outgrew the cap, or that the door answered 413, counts once as a
//     max_request_bytes limit hit.
func (p Plumbing) Wrap(next http.Handler) http.Handler {
	authRequired := p.authRequired()
	origins := p.Origins
	if origins == nil && authRequired {
		origins = []string{"*"}
	}
	limit := p.MaxBodyBytes
	if limit <= 0 || limit > DefaultMaxBodyBytes {
		limit = DefaultMaxBodyBytes
	}
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authRequired && !loopbackHost(r.Host) {
			refuse(w, http.StatusForbidden, "HOST_NOT_ALLOWED", "without auth.keys only loopback host names are served")
			log.Debug("front door request refused", "method", r.Method, "reason", "host")
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			if !slices.Contains(origins, "*") && !slices.Contains(origins, origin) {
				refuse(w, http.StatusForbidden, "ORIGIN_NOT_ALLOWED", "this origin is not in the door's cors_origins")
				log.Debug("front door request refused", "method", r.Method, "reason", "origin")
				return
			}
			w.Header().Set("Access-Control-Allow-Origin", origin)
			w.Header().Add("Vary", "Origin")
		}
		r2, pathKey, hasPathKey := stripKey(r)
		authStart := time.Now()
		res := p.authenticate(r2, pathKey, hasPathKey)
		authEnd := time.Now()
		p.Telemetry.ObserveStage(telemetry.StageAuth, authEnd.Sub(authStart))
		r2.Header.Del("Authorization")
		body := &cappedBody{}
		var budgeted *budgetedBody
		if res.err != nil {
			r2.Body = refusedBody{}
			r2.ContentLength = 0
		} else {
			budgeted = &budgetedBody{ReadCloser: r2.Body, budget: p.Budget}
			body.ReadCloser = http.MaxBytesReader(w, budgeted, limit)
			r2.Body = body
		}
		// The caller's W3C trace context becomes the parent of the call's
		// span; a malformed one is ignored.
		ctx := telemetry.Extract(context.WithValue(r2.Context(), callerKey{}, res), propagation.HeaderCarrier(r2.Header))
		if res.err == nil {
			ctx = telemetry.WithAuth(ctx, authStart, authEnd)
		}
		r2 = r2.WithContext(ctx)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		next.ServeHTTP(rec, r2)
		if budgeted != nil {
			budgeted.releaseAll()
			if budgeted.refused.Load() {
				p.Telemetry.LimitHit(telemetry.LimitMaxConcurrentCalls)
			}
		}
		if body.overCap.Load() || rec.status == http.StatusRequestEntityTooLarge {
			p.Telemetry.LimitHit(telemetry.LimitMaxRequestBytes)
		}
		log.Debug("front door request", "method", r.Method, "route", routeOf(r2), "status", rec.status,
			"caller", res.caller, "authenticated", res.err == nil, "duration", time.Since(start))
	})
}

// authenticate checks the key of r: the bearer header, the path key or
// both, which must then agree. A bearer header that is no API key, sent
// without a path key, is given to each verifier in turn.
func (p Plumbing) authenticate(r *http.Request, pathKey string, hasPathKey bool) callerResult {
	if !p.authRequired() {
		return callerResult{caller: gateway.AnonymousCaller}
	}
	fail := func(why string) callerResult {
		return callerResult{err: fmt.Errorf("%w: %s", ErrUnauthenticated, why)}
	}
	bearer, why := bearerOf(r)
	if why != "" {
		return fail(why)
	}
	key := bearer
	switch {
	case hasPathKey && pathKey == "":
		return fail("the /k/<key>/ path prefix holds no valid key")
	case hasPathKey && bearer != "":
		a, b := sha256.Sum256([]byte(bearer)), sha256.Sum256([]byte(pathKey))
		if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
			return fail("the Authorization header and the /k/<key>/ path prefix carry different keys")
		}
	case hasPathKey:
		key = pathKey
	case bearer == "":
		return fail(`send "Authorization: Bearer <key>" or a /k/<key>/ path prefix`)
	}
	// With authentication required only by a verifier, CallerForKey would
	// take any key for the anonymous caller: it is not asked.
	if p.Keys.Enabled() {
		if caller, ok := p.Keys.CallerForKey(key); ok {
			return callerResult{caller: caller}
		}
	}
	if hasPathKey || len(p.Verifiers) == 0 {
		// A token in a path lands in logs and histories: it is no
		// credential, whatever a verifier would make of it.
		return fail("unknown API key")
	}
	return p.verify(r.Context(), bearer)
}

// bearerOf returns the token of r's Authorization header ("" without
// one), or why the header is unusable.
func bearerOf(r *http.Request) (token, why string) {
	values := r.Header.Values("Authorization")
	switch len(values) {
	case 0:
		return "", ""
	case 1:
		scheme, key, ok := strings.Cut(values[0], " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(key) == "" {
			return "", `authorization: expected "Bearer <key>"`
		}
		return strings.TrimSpace(key), ""
	default:
		return "", "authorization: send one Authorization header"
	}
}

// verify gives token to each verifier until one accepts it. A refusal
// wraps ErrUnauthenticated and every verifier's error, so that a door can
// tell why (an expired token, a missing scope) and answer accordingly.
func (p Plumbing) verify(ctx context.Context, token string) callerResult {
	var errs []error
	for _, v := range p.Verifiers {
		pr, err := v.VerifyBearer(ctx, token)
		if err == nil && pr.Caller == "" {
			err = errors.New("the verifier accepted the token but named no caller")
		}
		if err == nil {
			return callerResult{caller: pr.Caller, identity: pr.Identity}
		}
		errs = append(errs, err)
	}
	return callerResult{err: fmt.Errorf("%w: no API key, and the bearer token is refused: %w", ErrUnauthenticated, errors.Join(errs...))}
}

// stripKey returns a copy of r without its /k/<key>/ path prefix and with
// its path cleaned, and the key it held. A prefix whose key does not
// unescape gives hasKey with an empty key.
func stripKey(r *http.Request) (r2 *http.Request, key string, hasKey bool) {
	escaped := "/" + strings.TrimLeft(r.URL.EscapedPath(), "/")
	if rest, ok := strings.CutPrefix(escaped, "/k/"); ok {
		hasKey = true
		seg, tail, _ := strings.Cut(rest, "/")
		if k, err := url.PathUnescape(seg); err == nil && !strings.ContainsAny(k, "\x00\r\n") {
			key = k
		}
		escaped = "/" + tail
	}
	// The path is cleaned in its escaped form, so that an escaped slash
	// stays data inside its segment ("/v1/runs/a%2Fb" names run "a/b",
	// which the door refuses) rather than becoming path structure. Dots
	// are unreserved, so their escapes are decoded first and "%2E%2E" is
	// cleaned like "..".
	escaped = cleanPath(strings.ReplaceAll(strings.ReplaceAll(escaped, "%2E", "."), "%2e", "."))
	u := *r.URL
	p, err := url.PathUnescape(escaped)
	if err != nil {
		// Routed as written: no pattern matches a malformed escape.
		p = escaped
	}
	u.Path, u.RawPath = p, escaped
	r2 = r.Clone(r.Context())
	r2.URL = &u
	r2.RequestURI = u.RequestURI()
	return r2, key, hasKey
}

// cleanPath is path.Clean keeping a trailing slash, as http.ServeMux
// cleans before it redirects.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// routeOf is the pattern that served r, never its path.
func routeOf(r *http.Request) string {
	if r.Pattern == "" {
		return "(no route)"
	}
	return r.Pattern
}

// loopbackHost reports whether a Host header names this machine only.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// cappedBody is an authenticated request's body behind the address's cap,
// remembering whether a read ran into the cap. A door may cap its body
// lower, and answer 413 itself, or leave the cap to the plumbing.
type cappedBody struct {
	io.ReadCloser
	overCap atomic.Bool
}

func (b *cappedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		b.overCap.Store(true)
	}
	return n, err
}

// refusedBody is the body of an unauthenticated request: nothing of it is
// read, so a caller without a key cannot make the gateway read or decode
// anything.
type refusedBody struct{}

func (refusedBody) Read([]byte) (int, error) { return 0, ErrUnauthenticated }
func (refusedBody) Close() error             { return nil }

// refuse answers a request the plumbing turns away, in the JSON error
// form both door protocols use.
func refuse(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"success":false,"error":{"code":%q,"message":%q}}`+"\n", code, message)
}

// statusRecorder remembers the status a handler answered with.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Servers are the running door listeners, one per distinct address.
type Servers struct {
	listeners map[string]net.Addr
	servers   []*http.Server
	doors     []Door
	errc      chan error
	once      sync.Once
}

// Addr is the bound address of the listener configured as listen (the
// port chosen when it was :0), or nil.
func (s *Servers) Addr(listen string) net.Addr { return s.listeners[listen] }

// Err delivers the first error a listener stops with.
func (s *Servers) Err() <-chan error { return s.errc }

// Doors are the opened doors, for GRPCDoor registration.
func (s *Servers) Doors() []Door { return s.doors }

// RegisterGRPC registers the gRPC services of the doors that have one.
// Call it before the gRPC server serves.
func (s *Servers) RegisterGRPC(srv *grpc.Server) {
	for _, d := range s.doors {
		if gd, ok := d.(GRPCDoor); ok {
			gd.RegisterGRPC(srv)
		}
	}
}

// Shutdown stops accepting requests, waits for those in flight until ctx
// ends, and closes the doors. Doors that hold requests open without end
// (Drainer) are drained first, so that the wait ends.
func (s *Servers) Shutdown(ctx context.Context) error {
	var errs []error
	s.once.Do(func() {
		for _, d := range s.doors {
			if dr, ok := d.(Drainer); ok {
				dr.Drain()
			}
		}
		for _, srv := range s.servers {
			if err := srv.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("frontdoor: shutdown %s: %w", srv.Addr, err))
			}
		}
		errs = append(errs, closeDoors(s.doors))
	})
	return errors.Join(errs...)
}

// Serve opens the doors and serves them: one http.Server per distinct
// address, the doors of one address on one mux, each behind the Plumbing,
// with the gateway's keys, TLS settings and connection limit. A route
// conflict fails before anything listens. log should be the gateway's
// redacting logger; the servers' own error logs go to it too.
func Serve(ctx context.Context, cfg config.Config, g *gateway.Gateway, doors []Loaded, log *slog.Logger) (*Servers, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Servers{listeners: map[string]net.Addr{}, errc: make(chan error, 1)}
	byAddr := map[string][]Loaded{}
	var addrs []string
	for _, d := range doors {
		a := d.Config.ListenAddr()
		if _, seen := byAddr[a]; !seen {
			addrs = append(addrs, a)
		}
		byAddr[a] = append(byAddr[a], d)
	}
	var tlsConfig *tls.Config
	if len(addrs) > 0 && cfg.TLS.Enabled() {
		cert, err := tls.LoadX509KeyPair(cfg.TLS.CertFile, cfg.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	handlers := map[string]http.Handler{}
	budget := NewBodyBudget(bodyBudget(cfg.Limits))
	for _, a := range addrs {
		mux, opened, err := mount(byAddr[a], Deps{Gateway: g, Logger: log})
		s.doors = append(s.doors, opened...)
		if err != nil {
			return nil, errors.Join(err, closeDoors(s.doors))
		}
		p, err := plumbingFor(byAddr[a], opened, g.Authenticator(), log)
		if err != nil {
			return nil, errors.Join(err, closeDoors(s.doors))
		}
		p.Telemetry, p.Budget = g.Telemetry(), budget
		handlers[a] = p.Wrap(mux)
	}
	for _, a := range addrs {
		if err := s.listen(ctx, a, handlers[a], g, tlsConfig, log); err != nil {
			return nil, errors.Join(err, s.Shutdown(ctx))
		}
	}
	return s, nil
}

// bodyBudget is the bytes of bodies the doors may hold at once:
// limits.max_concurrent_calls bodies at the largest limit, so that the
// doors read no more in parallel than the gateway runs calls.
func bodyBudget(l config.LimitsConfig) int64 {
	calls := l.MaxConcurrentCalls
	if calls <= 0 {
		calls = config.DefaultLimits().MaxConcurrentCalls
	}
	return int64(calls) * DefaultMaxBodyBytes
}

// plumbingFor merges the HTTP settings of the doors sharing one address:
// the union of their origins, the largest of their body caps (a door may
// read less) and the verifiers of the opened doors, in door order. A door
// whose configuration says it authenticates callers must have opened as a
// BearerVerifier: its address would otherwise serve anyone its listener
// rules let through on the strength of that door.
func plumbingFor(doors []Loaded, opened []Door, keys KeyChecker, log *slog.Logger) (Plumbing, error) {
	p := Plumbing{Keys: keys, Logger: log}
	for i, d := range doors {
		if v, ok := opened[i].(BearerVerifier); ok && (authenticatesCallers(d.Config) || !isCallerAuthenticator(d.Config)) {
			p.Verifiers = append(p.Verifiers, v)
		} else if authenticatesCallers(d.Config) {
			return Plumbing{}, fmt.Errorf("front_doors.%s: the door's settings say it authenticates callers, "+
				"but the opened door verifies no bearer token", d.Name)
		}
		hs, ok := d.Config.(HTTPSettings)
		if !ok {
			p.MaxBodyBytes = max(p.MaxBodyBytes, DefaultMaxBodyBytes)
			continue
		}
		p.MaxBodyBytes = max(p.MaxBodyBytes, hs.BodyLimit())
		for _, o := range hs.Origins() {
			if !slices.Contains(p.Origins, o) {
				p.Origins = append(p.Origins, o)
			}
		}
	}
	return p, nil
}

// isCallerAuthenticator reports whether c says, either way, whether its
// door verifies callers: a door type that always has VerifyBearer is a
// verifier only when its settings turn that on.
func isCallerAuthenticator(c Config) bool {
	_, ok := c.(CallerAuthenticator)
	return ok
}

func (s *Servers) listen(ctx context.Context, addr string, h http.Handler, g *gateway.Gateway, tlsConfig *tls.Config, log *slog.Logger) error {
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("frontdoor: listen %s: %w", addr, err)
	}
	srv := &http.Server{
		Addr:              addr,
		Handler:           h,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	s.listeners[addr] = lis.Addr()
	s.servers = append(s.servers, srv)
	ServeLimited(g, srv, lis, tlsConfig, func(err error) {
		select {
		case s.errc <- fmt.Errorf("frontdoor: serve %s: %w", addr, err):
		default:
		}
	})
	return nil
}

// ServeLimited serves srv on lis, with TLS when tlsConfig is set, in a
// goroutine of its own, counting its connections against the gateway's
// one connection limit (idle ones shed first), and calls failed if it
// ends other than by being shut down. Every HTTP listener of the gateway
// is served this way.
func ServeLimited(g *gateway.Gateway, srv *http.Server, lis net.Listener, tlsConfig *tls.Config, failed func(error)) {
	srv.ConnState = g.Connections().HTTPConnState
	limited := g.LimitListener(lis)
	go func() {
		var err error
		if tlsConfig != nil {
			err = srv.ServeTLS(limited, "", "")
		} else {
			err = srv.Serve(limited)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			failed(err)
		}
	}()
}
