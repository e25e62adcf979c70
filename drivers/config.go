package drivers

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/toolgate/toolgate/internal/ident"
)

// Kind is a driver implementation as the configuration file sees it: the
// value of a drivers.<name>.type key, and the section its other keys are
// decoded into. Each driver package registers its kind from an init
// function; the gateway serves the kinds its binary imports
// (drivers/builtin), so adding a driver touches its own package and one
// import line.
type Kind struct {
	// Type is the value of the type key: "workspace", "tpmjs", "execbox".
	Type string
	// New returns the kind's settings holding their defaults, for the
	// section's keys to be decoded into (strictly: an unknown key is an
	// error). The defaults live here and nowhere else.
	New func() Config
}

// Config is one drivers.<name> section without its type key: a pointer to
// the kind's settings struct, with YAML tags naming its keys.
type Config interface {
	// Validate checks the section without touching the file system or the
	// network. An error starts with the key at fault ("root: required
	// …"), which the gateway prefixes with "config: drivers.<name>."; an
	// error about the section as a whole is a SectionError.
	Validate(v Validation) error
	// Build starts the driver called name.
	Build(ctx context.Context, name string, env BuildEnv) (Driver, error)
}

// Validation is what a section's validity may depend on beyond itself.
type Validation struct {
	// Loopback reports that the gateway's gRPC listener is reachable from
	// this host only.
	Loopback bool
}

// SectionError is a Validate error about a whole section rather than one
// key, reported as "config: drivers.<name>: <message>".
type SectionError string

func (e SectionError) Error() string { return string(e) }

// KeyError is a Build error about one key of the section, reported as
// "config: drivers.<name>.<key>: <error>". Other Build errors are
// reported as "config: drivers.<name>: <error>".
type KeyError struct {
	Key string
	Err error
}

func (e KeyError) Error() string { return e.Key + ": " + e.Err.Error() }

// Unwrap returns the error about the key.
func (e KeyError) Unwrap() error { return e.Err }

// BuildEnv is what the gateway hands a driver it builds.
type BuildEnv struct {
	// Getenv reads the gateway's environment (keys named by *_env keys).
	Getenv func(string) string
	// Logger goes through the gateway's redactor.
	Logger *slog.Logger
	// Hide lists the gateway's own files and folders, which sandboxed
	// commands must never reach.
	Hide []string
	// Trace returns a writer of redacted traces kept in dir.
	Trace func(dir string) (TraceWriter, error)
	// Background lives until the gateway is closed: the lifetime of
	// background work such as health probes.
	Background context.Context
}

// The optional interfaces below are implemented by the Config of the kinds
// that have the property; the gateway loops over the sections and asks.

// NamedPath is a path a section names, with its key ("root",
// "trace_dir").
type NamedPath struct {
	Key  string
	Path string
}

// Footprint is what a section holds on the gateway's host: the secrets it
// reads, the files that are the gateway's own and the folders its callers
// may write.
type Footprint struct {
	// Secrets are values the section reads from the environment (a
	// downstream API key), to be redacted from all evidence.
	Secrets []string
	// OwnPaths are the gateway's own paths (trace folders), kept out of
	// every workspace and hidden from sandboxes.
	OwnPaths []NamedPath
	// Workspaces are the folders callers may write, kept apart from the
	// gateway's files.
	Workspaces []NamedPath
	// TraceFolder, when set, is where the driver keeps a local trace per
	// request; the gateway lists its files in a call's local evidence
	// paths. It is one of OwnPaths as well.
	TraceFolder string
}

// HostUser is a section that holds secrets, paths or a trace folder on the
// gateway's host.
type HostUser interface {
	// Footprint returns what the section holds; getenv reads the
	// gateway's environment.
	Footprint(getenv func(string) string) Footprint
}

// WorkspaceRooter is a section whose workspace folder a command-line flag
// may replace (toolgate serve --workspace).
type WorkspaceRooter interface {
	SetWorkspaceRoot(dir string)
}

// ToolSpec is a tools.<id> entry as the gateway passes it to the driver
// it names.
type ToolSpec struct {
	Target, Package, Version, Export string
	// HasEnv reports that the entry sets env or caller_env.
	HasEnv bool
}

// Binding is what a tool entry means to its driver: the target a call
// names and, for package registries, the package and version.
type Binding struct {
	Target, Package, Version string
}

// ToolBinder is a section that checks the tools.<id> entries naming its
// driver and says what they bind to. An error starts with the key at
// fault ("target: …"). A section without it takes entries as given.
type ToolBinder interface {
	BindTool(t ToolSpec) (Binding, error)
}

// PublishedTool is a tool a driver publishes without a tools entry, as
// "<driver name>.<Target>".
type PublishedTool struct {
	Target, Description string
	Tags                []string
}

// Publisher is a section whose driver publishes tools of its own.
type Publisher interface {
	Published() []PublishedTool
}

// RegistryHost is a section that may serve any tool of a package
// registry by a "<package>::<export>" id; at most one section may.
type RegistryHost interface {
	RegistryIDs() (version string, on bool)
}

// registry holds the kinds this binary was built with. Kinds register
// from init functions, before main runs; the lock makes a late
// registration safe all the same.
var registry = struct {
	sync.RWMutex
	kinds map[string]Kind
}{kinds: map[string]Kind{}}

const kindTypeRE = ident.Word

// Register makes a driver kind available to the configuration. It is
// called from the driver package's init function; a malformed kind or a
// type registered twice is a programming error and panics, as
// database/sql.Register does.
func Register(k Kind) {
	if !kindTypeRE.MatchString(k.Type) || k.New == nil {
		panic(fmt.Sprintf("drivers: Register: kind %q: want a type matching %s and a New function", k.Type, kindTypeRE))
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.kinds[k.Type]; dup {
		panic(fmt.Sprintf("drivers: Register: kind %q registered twice", k.Type))
	}
	registry.kinds[k.Type] = k
}

// LookupKind returns the registered kind of a type.
func LookupKind(typ string) (Kind, bool) {
	registry.RLock()
	defer registry.RUnlock()
	k, ok := registry.kinds[typ]
	return k, ok
}

// KindTypes lists the registered types, sorted.
func KindTypes() []string {
	registry.RLock()
	defer registry.RUnlock()
	types := make([]string, 0, len(registry.kinds))
	for t := range registry.kinds {
		types = append(types, t)
	}
	sort.Strings(types)
	return types
}
