// Package frontdoor serves the protocols of existing clients (the TPMJS
// executor protocol, Agent Spaces operations batches) beside the gateway's
// gRPC API. A front door is a translation onto the gateway's pipeline,
// never a second one: each call it takes becomes a RunTool call of
// (*gateway.Gateway).Run, with the same authentication, policy, redaction
// and evidence.
//
// Each door is a package of its own (gateway/frontdoor/<name>) that owns
// its configuration section, front_doors.<name>, and registers its Kind in
// an init function. A binary serves the doors it imports
// (cmd/toolgate/install.go). This package imports gateway; gateway never
// imports it or any door.
//
// The shared plumbing lives here (http.go): listeners, TLS and the
// listener rules of the gRPC listener, the caller's API key (an
// Authorization: Bearer header or a /k/<key>/ path prefix, checked before
// any handler runs and never shown to a door) or, failing a key, a bearer
// token one of the address's doors verifies (BearerVerifier), browser
// origins, body caps, path cleaning and draining. A door only registers
// routes and asks CallerFrom (or PrincipalFrom) who is calling.
package frontdoor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/internal/ident"
)

// Kind is a front door implementation: Name is its section under
// front_doors (and the front_door recorded in request.json), New returns
// its settings holding their defaults, for the section to be decoded into.
type Kind struct {
	Name string
	New  func() Config
}

// Config is one door's decoded front_doors.<name> section. Validate must
// not touch the file system or the network; its errors start with the key
// at fault ("listen: …"), which Load prefixes with "config:
// front_doors.<name>.". Embed Listener for the keys every door has.
type Config interface {
	// ListenAddr is the host:port the door is served on; "" turns it off,
	// which is the default.
	ListenAddr() string
	// Validate checks the section.
	Validate() error
	// Open makes the door, once the gateway is built.
	Open(d Deps) (Door, error)
}

// Deps is what a door is opened with.
type Deps struct {
	// Name is the door's section name, to be set as gateway.Call's
	// FrontDoor.
	Name string
	// Gateway runs the door's calls. A door declares the small interface
	// of the methods it uses and keeps this behind it, so that its tests
	// can fake it.
	Gateway *gateway.Gateway
	// Logger goes through the gateway's redactor.
	Logger *slog.Logger
}

// Door is an opened front door.
type Door interface {
	// Routes registers the door's handlers on mux with Go 1.22 patterns
	// ("POST /execute-tool"). Doors on one address share a mux, and a
	// pattern that conflicts with another door's is a configuration
	// error. Handlers read the caller with CallerFrom(r.Context()); paths
	// reach them without the /k/<key>/ prefix and with doubled slashes
	// collapsed.
	Routes(mux *http.ServeMux)
}

// GRPCDoor is a Door that also serves a gRPC service on the gateway's own
// gRPC server (whose interceptors authenticate every call).
type GRPCDoor interface {
	Door
	RegisterGRPC(s *grpc.Server)
}

// Closer is a Door holding resources to release when the server stops.
type Closer interface {
	Close() error
}

// Loaded is a configured door that is on: its name and its validated
// settings.
type Loaded struct {
	Name   string
	Config Config
}

// registry holds the kinds this binary was built with. Kinds register
// from init functions, before main runs; the lock makes a late
// registration safe all the same.
var registry = struct {
	sync.RWMutex
	kinds map[string]Kind
}{kinds: map[string]Kind{}}

// nameRE is the form of a door's name: the one gateway.Call accepts as
// FrontDoor.
const nameRE = ident.Word

// Register makes a door kind available to Load. It is called from the
// door package's init function; registering a malformed kind or one name
// twice is a programming error and panics, as database/sql.Register does.
func Register(k Kind) {
	if !nameRE.MatchString(k.Name) || k.New == nil {
		panic(fmt.Sprintf("frontdoor: Register: kind %q: want a name matching %s and a New function", k.Name, nameRE))
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.kinds[k.Name]; dup {
		panic(fmt.Sprintf("frontdoor: Register: kind %q registered twice", k.Name))
	}
	registry.kinds[k.Name] = k
}

// Kinds lists the names of the registered door kinds, sorted.
func Kinds() []string {
	registry.RLock()
	defer registry.RUnlock()
	names := make([]string, 0, len(registry.kinds))
	for name := range registry.kinds {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// NewConfig returns the settings of the door kind name holding their
// defaults, and whether this build has the kind; a test walks their types.
func NewConfig(name string) (Config, bool) {
	k, ok := lookupKind(name)
	if !ok {
		return nil, false
	}
	return k.New(), true
}

func lookupKind(name string) (Kind, bool) {
	registry.RLock()
	defer registry.RUnlock()
	k, ok := registry.kinds[name]
	return k, ok
}

// CallerAuthenticator is implemented by a door's Config when the opened
// door authenticates callers itself, as a BearerVerifier (OAuth access
// tokens), so that its address is not open to anonymous callers even
// without auth.keys. Load then applies the listener rules as for
// auth.keys, and Serve refuses to start if the opened door is no
// BearerVerifier after all.
type CallerAuthenticator interface {
	// AuthenticatesCallers reports whether the door, once opened, will
	// verify bearer tokens.
	AuthenticatesCallers() bool
}

// authenticatesCallers reports whether c says its door verifies callers.
func authenticatesCallers(c Config) bool {
	ca, ok := c.(CallerAuthenticator)
	return ok && ca.AuthenticatesCallers()
}

// Load decodes and checks cfg.FrontDoors: each section strictly into its
// kind's settings (an unknown door or key is an error), its Validate, and
// the listener rules of the gRPC listener (config.Config.ValidateListenerAuth)
// for its address, where a door that authenticates callers itself
// (CallerAuthenticator) counts as auth.keys for every door of its address:
// they share one plumbing, which then requires authentication. It returns
// the doors that are on, sorted by name; sections without listen are off.
// It neither listens nor opens anything, so `serve` and configuration
// checks share it.
func Load(cfg config.Config) ([]Loaded, error) {
	var on []Loaded
	names := make([]string, 0, len(cfg.FrontDoors))
	for name := range cfg.FrontDoors {
		names = append(names, name)
	}
	sort.Strings(names)
	authAt := map[string]bool{}
	for _, name := range names {
		kind, ok := lookupKind(name)
		if !ok {
			return nil, fmt.Errorf("config: front_doors.%s: unknown front door (this build has: %s)", name, kindList())
		}
		c := kind.New()
		if err := cfg.FrontDoors[name].DecodeStrict(c); err != nil {
			return nil, fmt.Errorf("config: front_doors.%s: %w", name, err)
		}
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("config: front_doors.%s.%w", name, err)
		}
		if addr := c.ListenAddr(); addr != "" {
			on = append(on, Loaded{Name: name, Config: c})
			authAt[addr] = authAt[addr] || authenticatesCallers(c)
		}
	}
	for _, l := range on {
		if err := checkListener(cfg, l, authAt[l.Config.ListenAddr()]); err != nil {
			return nil, err
		}
	}
	return on, nil
}

// Settings returns the decoded sections of doors by name, for
// config.Config.DoorSettings: the gateway hides the secret files they
// name from sandboxes without knowing the doors' types.
func Settings(doors []Loaded) map[string]any {
	out := make(map[string]any, len(doors))
	for _, d := range doors {
		out[d.Name] = d.Config
	}
	return out
}

// checkListener applies the listener rules to door l, whose address has a
// door that authenticates callers when doorAuth.
func checkListener(cfg config.Config, l Loaded, doorAuth bool) error {
	addr := l.Config.ListenAddr()
	key := "front_doors." + l.Name + ".listen"
	if err := cfg.ValidateListenerAuth(key, addr, doorAuth); err != nil {
		return err
	}
	if hs, ok := l.Config.(HTTPSettings); ok && len(cfg.Auth.Keys) == 0 && !doorAuth && slices.Contains(hs.Origins(), "*") {
		return fmt.Errorf("config: front_doors.%s.cors_origins: \"*\" without auth.keys would let any web page "+
			"call the gateway from a browser on this host; list the origins", l.Name)
	}
	if addr == cfg.Listen && !strings.HasSuffix(addr, ":0") {
		return fmt.Errorf("config: %s %q: the gRPC listener's address (listen); give the door another port", key, addr)
	}
	if config.SameListenAddr(addr, cfg.Admin.Addr()) {
		return fmt.Errorf("config: %s %q: the admin listener's address (admin.listen); give the door another port", key, addr)
	}
	return nil
}

func kindList() string {
	kinds := Kinds()
	if len(kinds) == 0 {
		return "none"
	}
	return strings.Join(kinds, ", ")
}

// callerKey is the context key of the request's authentication outcome.
type callerKey struct{}

// callerResult is what the plumbing found out about the caller.
type callerResult struct {
	caller string
	// identity is set when a BearerVerifier authenticated the caller.
	identity *gateway.Identity
	err      error
}

// ErrUnauthenticated is the error CallerFrom wraps when a request carries
// no valid API key where auth.keys asks for one, or no bearer token a
// door's BearerVerifier accepts. Doors answer it in their own protocol
// (the TPMJS executor's 401 body, an Agent Spaces error); a verifier's
// own error is wrapped too, for its door to tell why (errors.As).
var ErrUnauthenticated = errors.New("frontdoor: missing or unknown API key")

// CallerFrom returns the authenticated caller of a request a door's
// handler serves: a caller of auth.keys, one a door's BearerVerifier
// found (see PrincipalFrom for what else it proved), or
// gateway.AnonymousCaller when authentication is off. Without a valid key
// or token it returns an error wrapping
// ErrUnauthenticated, for the door to answer in its own protocol; the
// request's body is then unreadable, so nothing of it reaches the door.
func CallerFrom(ctx context.Context) (string, error) {
	r, ok := ctx.Value(callerKey{}).(callerResult)
	if !ok {
		return "", errors.New("frontdoor: no caller: the request did not come through the front-door plumbing")
	}
	return r.caller, r.err
}

// WithCaller returns ctx carrying caller as CallerFrom reports it, for
// tests of a door's handlers and for doors reached another way (gRPC).
func WithCaller(ctx context.Context, caller string) context.Context {
	return context.WithValue(ctx, callerKey{}, callerResult{caller: caller})
}

// mount opens the doors served on one address and registers their routes
// on one mux, counting each request under its door when the gateway
// records telemetry. A pattern conflict between doors is an error naming both,
// reported before anything listens.
func mount(doors []Loaded, deps Deps) (http.Handler, []Door, error) {
	mux := http.NewServeMux()
	var opened []Door
	fail := func(err error) (http.Handler, []Door, error) {
		return nil, nil, errors.Join(err, closeDoors(opened))
	}
	var names []string
	counted := &countingMux{mux: mux, t: deps.Gateway.Telemetry()}
	for _, l := range doors {
		d := deps
		d.Name = l.Name
		door, err := l.Config.Open(d)
		if err != nil {
			return fail(fmt.Errorf("front_doors.%s: %w", l.Name, err))
		}
		opened = append(opened, door)
		// Alone first, so that a door's own clash is not blamed on another.
		alone := http.NewServeMux()
		if err := register(alone, door); err != nil {
			return fail(fmt.Errorf("config: front_doors.%s: its routes conflict with each other: %w", l.Name, err))
		}
		counted.doors = append(counted.doors, doorRoutes{name: l.Name, mux: alone})
		if err := register(mux, door); err != nil {
			return fail(fmt.Errorf("config: front_doors.%s: its routes conflict with those of front_doors.%s on %s: %w",
				l.Name, strings.Join(names, ", front_doors."), l.Config.ListenAddr(), err))
		}
		names = append(names, l.Name)
	}
	if counted.t == nil {
		return mux, opened, nil
	}
	return counted, opened, nil
}

// countingMux serves mux, counting each request under the door whose
// routes match it; a request no door's routes match is not counted.
type countingMux struct {
	mux   *http.ServeMux
	doors []doorRoutes
	t     *telemetry.Telemetry
}

// doorRoutes are the routes of one door alone.
type doorRoutes struct {
	name string
	mux  *http.ServeMux
}

func (c *countingMux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for _, d := range c.doors {
		if _, pattern := d.mux.Handler(r); pattern != "" {
			c.t.FrontDoorRequest(d.name)
			break
		}
	}
	c.mux.ServeHTTP(w, r)
}

// register calls door.Routes, turning http.ServeMux's panic on a
// conflicting pattern into an error.
func register(mux *http.ServeMux, door Door) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	door.Routes(mux)
	return nil
}

func closeDoors(doors []Door) error {
	var errs []error
	for _, d := range slices.Backward(doors) {
		if c, ok := d.(Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}
