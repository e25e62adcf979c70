// Package config is Toolgate's configuration model: the YAML file's
// sections and the embedded default, their parsing (unknown keys are
// errors), defaults and validation, and the checks of what the file names
// on the host (the layout that keeps every workspace apart from the
// gateway's own files, the keys and secrets it reads). It imports neither
// gateway nor the front doors nor cmd: they import it, and the front
// doors' and the console's sections stay undecoded here (RawSection), for
// their own packages to decode.
package config

import (
	"bytes"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/lease"
	"github.com/toolgate/toolgate/gateway/recovery"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/internal/ident"
	"github.com/toolgate/toolgate/internal/regularfile"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/redact"
)

// DefaultConfigYAML is the configuration `toolgate serve` runs on when it is
// given no file. It is embedded so the binary alone is a working gateway.
//
//go:embed default.yaml
var DefaultConfigYAML []byte

// Config is the gateway's configuration file. Every key is optional; the
// zero value of a key means "use the default".
type Config struct {
	// Listen is the gRPC listen address, host:port.
	Listen string `yaml:"listen"`
	// Instance names this gateway in engine_ref; the host name by default.
	Instance string         `yaml:"instance"`
	TLS      TLSConfig      `yaml:"tls"`
	Auth     AuthConfig     `yaml:"auth"`
	Policies PolicyConfig   `yaml:"policies"`
	Evidence EvidenceConfig `yaml:"evidence"`
	// Log tunes the transparency log of the requests, kept whenever
	// manifests are signed.
	Log    TransparencyLogConfig `yaml:"log"`
	Redact RedactConfig          `yaml:"redact"`
	// Approvals configures calls that policy holds for a human's approval.
	Approvals ApprovalsConfig `yaml:"approvals"`
	// Drivers maps a driver name to its settings.
	Drivers map[string]DriverSection `yaml:"drivers"`
	// Tools maps additional tool ids onto a driver and a target. Workspace
	// drivers publish their operations as "<driver>.<operation>" without
	// being listed here.
	Tools map[string]ToolConfig `yaml:"tools"`
	// Limits bound connections and concurrent calls.
	Limits LimitsConfig `yaml:"limits"`
	// Admin is the admin listener: metrics and health over HTTP.
	Admin AdminConfig `yaml:"admin"`
	// FrontDoors maps a front door's name ("tpmjs", "agent_spaces") to its
	// section, kept undecoded: the doors live in packages that import this
	// one, and package frontdoor decodes each section strictly into its
	// kind's settings. Every door is off unless its section sets listen.
	FrontDoors map[string]RawSection `yaml:"front_doors"`
	// Console is the console's section, kept undecoded for package
	// gateway/frontdoor/console: off unless it sets listen.
	Console RawSection `yaml:"console"`
	// Telemetry says where the gateway's spans go (telemetry.Config):
	// tracing is off unless it names an OTLP endpoint or the standard
	// OTEL_EXPORTER_OTLP_* endpoint variables are set.
	Telemetry telemetry.Config `yaml:"telemetry"`

	// DoorSettings are the front doors' sections as their kinds decoded
	// them (cmd sets it from frontdoor.Load; not a key of the file): the
	// secret files they name are hidden from sandboxes as the rest of the
	// configuration's are.
	DoorSettings map[string]any `yaml:"-"`
	// SectionSettings are other sections decoded outside this package, by
	// their key (cmd sets "console"; not a key of the file): their secret
	// files are hidden from sandboxes too.
	SectionSettings map[string]any `yaml:"-"`

	// File is the path the configuration was read from (LoadConfig sets
	// it; it is not a key of the file). CheckLayout keeps every workspace
	// apart from it, and the shell sandbox hides it.
	File string `yaml:"-"`
}

// TLSConfig secures the listener. API keys travel in every call's metadata,
// so a listener reachable from other hosts needs TLS, or an explicit
// statement that something in front of the gateway provides it.
type TLSConfig struct {
	// CertFile and KeyFile are the server's PEM certificate chain and key.
	CertFile string `yaml:"cert_file" secret:"public"`
	KeyFile  string `yaml:"key_file" secret:"file"`
	// AllowPlaintext permits a non-loopback listener without TLS, for
	// deployments where a proxy or service mesh terminates TLS.
	AllowPlaintext bool `yaml:"allow_plaintext"`
}

// Enabled reports whether the gateway terminates TLS itself.
func (t TLSConfig) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// AuthConfig lists the API keys callers may present.
type AuthConfig struct {
	Keys []KeyConfig `yaml:"keys"`
}

// KeyConfig maps one API key to a caller name. The key itself never appears
// in the file: give either its SHA-256 digest or the name of an environment
// variable that holds it.
type KeyConfig struct {
	// Caller is the name the key authenticates: principal Caller::"<name>"
	// in Cedar.
	Caller string `yaml:"caller"`
	// SHA256 is the hex SHA-256 digest of the key.
	SHA256 string `yaml:"sha256"`
	// Env names an environment variable holding the key.
	Env string `yaml:"env"`
	// Groups and Roles are the caller's principal.groups and
	// principal.roles in Cedar. A caller with several keys has the union.
	Groups []string `yaml:"groups"`
	Roles  []string `yaml:"roles"`
}

// PolicyConfig locates the Cedar policy sets.
type PolicyConfig struct {
	// Dir is the folder of policy sets (policy.<ref>.cedar files, with
	// their schemas and tests).
	Dir string `yaml:"dir"`
	// ReloadInterval is how often the folder is checked for changes. A
	// change that two checks in a row see the same is loaded, validated
	// and swapped in whole (SIGHUP reloads at once).
	// 0 means 2s; a negative value turns the checks off.
	ReloadInterval time.Duration `yaml:"reload_interval"`
	// Shadow names, per enforcing policy_ref, a policy set evaluated
	// beside it on every call: {policy.default: policy.candidate}. Its
	// decision is recorded in policy_decision.json, never enforced, and no
	// caller can name it in ctx.policy_ref.
	Shadow map[string]string `yaml:"shadow"`
	// Selectable restricts which callers may name which enforcing policy
	// sets in ctx.policy_ref. Unset, every set of the folder that is not a
	// shadow candidate is selectable by every caller. Set, a caller may
	// name a set only when an entry lists it in refs and lists the caller
	// in callers or one of its groups in groups; an empty list lets no
	// caller name any set but the default. A call that names no set, or
	// the default (policy.default), is always judged by the default set.
	Selectable []PolicySelection `yaml:"selectable"`
}

// PolicySelection lets the callers it lists, and the callers in the groups
// it lists, name the policy sets in refs: {callers: [ci], groups: [ops],
// refs: [policy.strict]}.
type PolicySelection struct {
	// Callers are caller names from auth.keys ("anonymous" without keys).
	Callers []string `yaml:"callers"`
	// Groups are groups given to callers in auth.keys.
	Groups []string `yaml:"groups"`
	// Refs are enforcing policy sets of the folder, never a shadow
	// candidate.
	Refs []string `yaml:"refs"`
}

// EvidenceConfig locates the evidence store.
type EvidenceConfig struct {
	// URL is file://DIR or s3://BUCKET/PREFIX?endpoint=…&region=…&path_style=true
	// (mem:// keeps evidence in memory, for tests).
	URL string `yaml:"url"`
	// SpoolDir keeps artifacts the store could not take after a call was
	// decided, until they can be flushed to it. "none" turns spooling off.
	SpoolDir string `yaml:"spool_dir"`
	// SigningKey signs every manifest (Ed25519): {file: FILE}, {env: VAR},
	// {file: FILE, create: true}, or none for unsigned manifests (see
	// SigningKeySource). The embedded default is {file:
	// ./toolgate-signing.key, create: true}, and LoadConfig and
	// WithDefaults take it when the YAML leaves the key out, so a
	// configuration read from YAML or the embedded default is signed
	// unless it says none. Nil is possible only in a
	// Config built in code, and leaves manifests unsigned.
	SigningKey *SigningKeySource `yaml:"signing_key"`
	// TrustedKeys are the public keys of the replicas sharing the store
	// (PublicKeySource): the manifests and records they sign are believed
	// as the gateway's own, whose key is trusted always.
	TrustedKeys []PublicKeySource `yaml:"trusted_keys"`
	// SharedMACKey, {file: FILE} or {env: VAR}, is a secret of at least 32
	// bytes the replicas share: each MACs its records with it, so each
	// opens the others'.
	SharedMACKey *SecretSource `yaml:"shared_mac_key"`
	// OpTimeout bounds each store operation (a put, get or list, its
	// retries included), so that a store that stops answering cannot hold
	// a call longer than this. 0 means evidence.DefaultOpTimeout (15s).
	OpTimeout time.Duration `yaml:"op_timeout"`
	// SweepInterval is how often recovery revisits the requests this
	// gateway left without a manifest (a store that refused a write, a
	// call whose response could not be stored). 0 means 1m. Requests left
	// by an earlier run of the same instance are swept once at start.
	SweepInterval time.Duration `yaml:"sweep_interval"`
	// InterruptedAfter is how long after dispatch a request of this
	// instance with no response is recorded as interrupted by recovery
	// (never run again). It must exceed the longest a call can run; 0
	// means the longest run time of the configured drivers plus six
	// op_timeouts.
	InterruptedAfter time.Duration `yaml:"interrupted_after"`
	// LeaseHeartbeat is how often this process renews its lease on the
	// instance name (see package evidence/lease): a second process with
	// the name takes it for dead after three heartbeats without one, and
	// until then refuses to start. 0 means 5s.
	LeaseHeartbeat time.Duration `yaml:"lease_heartbeat"`
	// ObjectLock, for s3:// stores on buckets with S3 Object Lock on,
	// retains every artifact for a number of days.
	ObjectLock *ObjectLockConfig `yaml:"object_lock"`
	// PeerWitnessInterval is how often this gateway witnesses the logs of
	// the replicas whose keys it trusts (see docs/auditors/evidence.md, "Replicas witness
	// each other"): a duration, "" for 10s, or "off".
	PeerWitnessInterval string `yaml:"peer_witness_interval"`
}

// DefaultSweepInterval is how often recovery revisits the requests this
// gateway left unfinished when evidence.sweep_interval is 0.
const DefaultSweepInterval = recovery.DefaultSweepInterval

// minLeaseHeartbeat is the shortest evidence.lease_heartbeat: a renewal
// is a store write and a listing, and must fit in one period.
const minLeaseHeartbeat = 10 * time.Millisecond

// ObjectLockConfig is the S3 Object Lock retention put on each artifact.
type ObjectLockConfig struct {
	// Mode is GOVERNANCE or COMPLIANCE.
	Mode string `yaml:"mode"`
	// Days is how long each artifact is retained from its write.
	Days int `yaml:"days"`
}

// EffectiveOpTimeout is the configured per-operation store deadline, or the default.
func (e EvidenceConfig) EffectiveOpTimeout() time.Duration {
	if e.OpTimeout == 0 {
		return evidence.DefaultOpTimeout
	}
	return e.OpTimeout
}

// StoreURL returns the evidence URL with the object lock settings folded
// into its query, where the s3 backend reads them.
func (e EvidenceConfig) StoreURL() (string, error) {
	if e.ObjectLock == nil {
		return e.URL, nil
	}
	u, err := url.Parse(e.URL)
	if err != nil || u.Scheme != "s3" {
		return "", fmt.Errorf("evidence.object_lock: needs an s3:// evidence.url")
	}
	q := u.Query()
	if q.Has("object_lock_mode") || q.Has("object_lock_days") {
		return "", fmt.Errorf("evidence.object_lock: the URL sets object lock too; give it in one place")
	}
	q.Set("object_lock_mode", e.ObjectLock.Mode)
	q.Set("object_lock_days", strconv.Itoa(e.ObjectLock.Days))
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// SecretSource names where a secret is read from: a file or an environment
// variable, never the configuration itself.
type SecretSource struct {
	// File is a file holding the secret (kept out of sandboxes).
	File string `yaml:"file" secret:"file"`
	// Env names an environment variable holding the secret.
	Env string `yaml:"env"`
}

// Read returns the secret. getenv reads environment variables.
func (s SecretSource) Read(getenv func(string) string) ([]byte, error) {
	switch {
	case s.File != "" && s.Env != "":
		return nil, errors.New("give file or env, not both")
	case s.File != "":
		return regularfile.Read(s.File, MaxKeyFileBytes)
	case s.Env != "":
		v := getenv(s.Env)
		if v == "" {
			return nil, fmt.Errorf("environment variable %s is empty or unset", s.Env)
		}
		return []byte(v), nil
	default:
		return nil, errors.New("give file or env")
	}
}

// RedactConfig configures the redactor every artifact passes through.
type RedactConfig struct {
	// SecretsEnv names environment variables whose values are secrets to be
	// replaced wherever they appear in evidence.
	SecretsEnv []string `yaml:"secrets_env"`
	// KeyNames are JSON key names whose values are secret, in addition to
	// the built-in list.
	KeyNames []string `yaml:"key_names"`
	// RulesFile is a gitleaks-format TOML file of rules added to the
	// default set (gitleaks' rules and Toolgate's); a rule with the id of a
	// default rule replaces it.
	RulesFile string `yaml:"rules_file" secret:"public"`
	// DisableRules are rule ids to switch off.
	DisableRules []string `yaml:"disable_rules"`
	// FingerprintKey keys the HMAC-SHA256 fingerprints of redacted secrets
	// in manifests. Unset, a key is derived from evidence.signing_key, or
	// with signing_key: none drawn at random at start (fingerprints then
	// compare only within one run).
	FingerprintKey *SecretSource `yaml:"fingerprint_key"`
}

// Rules is the redactor configuration of c's rules alone: the default
// rules, its key names and rules file, less the rules it disables. It is
// what "toolgate redact" runs and "check config" compiles; a running
// gateway adds the values of its secrets and its fingerprint key.
func (c RedactConfig) Rules() redact.Config {
	return redact.Config{KeyNames: c.KeyNames, RulesFile: c.RulesFile, DisableRules: c.DisableRules}
}

// DriverSection is one drivers.<name> section: its type, and its other
// keys decoded strictly into the settings of the driver kind of that type
// (drivers.Kind), which own their keys, defaults and validation.
type DriverSection struct {
	// Type is the driver kind ("workspace", "tpmjs", "execbox").
	Type string
	// Config holds the kind's settings; nil when Type is empty or names no
	// kind of this build, which Validate reports.
	Config drivers.Config
}

// UnmarshalYAML reads the type key, then decodes the rest of the section
// into the kind's settings, refusing keys the kind does not have. An empty
// or unknown type is left for Validate to report.
func (d *DriverSection) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: a driver section is a mapping of keys", n.Line)
	}
	rest := *n
	rest.Content = nil
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "type" {
			if err := n.Content[i+1].Decode(&d.Type); err != nil {
				return err
			}
			continue
		}
		rest.Content = append(rest.Content, n.Content[i], n.Content[i+1])
	}
	kind, ok := drivers.LookupKind(d.Type)
	if !ok {
		return nil
	}
	c := kind.New()
	if err := decodeStrict(&rest, c); err != nil {
		return err
	}
	d.Config = c
	return nil
}

// validate checks the section called name.
func (d DriverSection) validate(name string, v drivers.Validation) error {
	switch {
	case d.Type == "":
		return fmt.Errorf("config: drivers.%s.type: required (%s)", name, orList(drivers.KindTypes()))
	case d.Config == nil:
		return fmt.Errorf("config: drivers.%s.type %q: unknown driver type (this build has: %s)", name, d.Type,
			strings.Join(drivers.KindTypes(), ", "))
	}
	if err := d.Config.Validate(v); err != nil {
		var whole drivers.SectionError
		if errors.As(err, &whole) {
			return fmt.Errorf("config: drivers.%s: %w", name, err)
		}
		return fmt.Errorf("config: drivers.%s.%w", name, err)
	}
	return nil
}

// SetWorkspaceRoot replaces the workspace folder of the driver called
// name, and reports whether that driver has one.
func (c Config) SetWorkspaceRoot(name, dir string) bool {
	wr, ok := c.Drivers[name].Config.(drivers.WorkspaceRooter)
	if ok {
		wr.SetWorkspaceRoot(dir)
	}
	return ok
}

// orList joins "a, b or c".
func orList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// ToolConfig binds a tool id to a driver and describes it for discovery
// and for policy.
type ToolConfig struct {
	// Driver is the name of the drivers section that runs the tool.
	Driver string `yaml:"driver"`
	// Target is the operation of a workspace driver.
	Target string `yaml:"target"`
	// Package, Version and Export locate a TPMJS tool: the npm package,
	// a version, range or dist-tag (default latest), and the export name.
	Package string `yaml:"package"`
	Version string `yaml:"version"`
	Export  string `yaml:"export"`
	// Description and Tags are shown by ListTools; Tags are also
	// resource.tags in Cedar.
	Description string   `yaml:"description"`
	Tags        []string `yaml:"tags"`
	// Labels are added to the session of every dispatched call of the
	// tool, as a permit's @label adds its labels: context.session.labels.
	Labels []string `yaml:"labels"`
	// Env is handed to the tool, each value read from the gateway's
	// environment: {OPENAI_API_KEY: {from_env: OPENAI_API_KEY}}.
	Env map[string]EnvValue `yaml:"env"`
	// CallerEnv names the variables a caller may set, in args._env.
	CallerEnv []string `yaml:"caller_env"`
	// InputSchema is a JSON Schema of the tool's arguments, written as a
	// YAML mapping ({type: object, properties: {…}}), which clients show
	// to a model (MCP's tools/list). It must compile, as JSON Schema
	// 2020-12, to an object schema. Unset: the driver's schema when it
	// knows one, else any object. The gateway validates arguments its own
	// way; the schema is advice.
	InputSchema map[string]any `yaml:"input_schema"`
}

// EnvValue says where the gateway reads an environment value for a tool.
type EnvValue struct {
	// FromEnv names the gateway's environment variable whose value the
	// tool is given.
	FromEnv string `yaml:"from_env"`
}

// ParseConfig decodes a YAML configuration. Unknown keys are errors, so a
// typo cannot silently turn a setting off.
func ParseConfig(data []byte) (Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return cfg, nil
}

// MaxConfigBytes bounds what is read of a configuration file: a real one
// is a few KiB, and a path that names something huge (or endless, like
// /dev/zero) must not exhaust memory before decoding refuses it.
const MaxConfigBytes = 4 << 20

// LoadConfig reads and decodes a YAML file, applied on top of the embedded
// default.
func LoadConfig(path string) (Config, error) {
	data, err := ReadConfigFile(path)
	if err != nil {
		return Config{}, err
	}
	return LoadConfigData(path, data)
}

// ReadConfigFile reads the configuration file at path, refusing one larger
// than MaxConfigBytes.
func ReadConfigFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("config: %s: larger than %d bytes, too large to be a configuration file", path, MaxConfigBytes)
	}
	return data, nil
}

// LoadConfigData decodes data, read from path, as LoadConfig does: on top
// of the embedded default, with File set to path.
func LoadConfigData(path string, data []byte) (Config, error) {
	cfg, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	cfg.File = path
	return cfg.WithDefaults()
}

// DefaultConfig returns the embedded default configuration.
func DefaultConfig() (Config, error) {
	return ParseConfig(DefaultConfigYAML)
}

// WithDefaults fills every unset key from the embedded default.
func (c Config) WithDefaults() (Config, error) {
	def, err := DefaultConfig()
	if err != nil {
		return Config{}, err
	}
	if c.Listen == "" {
		c.Listen = def.Listen
	}
	if c.Policies.Dir == "" {
		c.Policies.Dir = def.Policies.Dir
	}
	if c.Evidence.URL == "" {
		c.Evidence.URL = def.Evidence.URL
	}
	if c.Evidence.SpoolDir == "" {
		c.Evidence.SpoolDir = def.Evidence.SpoolDir
	}
	if c.Evidence.SigningKey == nil {
		c.Evidence.SigningKey = def.Evidence.SigningKey
	}
	if c.Drivers == nil {
		c.Drivers = def.Drivers
	}
	return c, nil
}

// CallerNamePattern is the form of a caller name: auth.keys' callers, and
// those a front door derives from a token, which Cedar sees as
// Caller::"<name>" and evidence records.
const CallerNamePattern = ident.CallerNamePattern

// AnonymousCaller is the caller name of every call when auth.keys is
// empty, which the gateway allows only on a loopback listener.
const AnonymousCaller = "anonymous"

const (
	callerNamePattern = ident.CallerName
	driverNamePattern = ident.DriverName
	envNamePattern    = ident.EnvName
)

// Validate reports the first problem that would make the gateway unsafe or
// unable to start. It does not touch the file system.
func (c Config) Validate() error {
	if err := c.ValidateListener("listen", c.Listen); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(c.Listen)
	seen := map[string]bool{}
	for i, k := range c.Auth.Keys {
		where := fmt.Sprintf("config: auth.keys[%d]", i)
		if !callerNamePattern.MatchString(k.Caller) {
			return fmt.Errorf("%s.caller %q: must match %s", where, k.Caller, callerNamePattern)
		}
		switch {
		case k.SHA256 != "" && k.Env != "":
			return fmt.Errorf("%s: give sha256 or env, not both", where)
		case k.SHA256 != "":
			if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != 32 {
				return fmt.Errorf("%s.sha256: must be 64 hex digits (the SHA-256 of the key, never the key)", where)
			}
		case k.Env != "":
			if !envNamePattern.MatchString(k.Env) {
				return fmt.Errorf("%s.env %q: not an environment variable name", where, k.Env)
			}
		default:
			return fmt.Errorf("%s: give sha256 (digest of the key) or env (variable holding the key)", where)
		}
		id := k.SHA256 + "\x00" + k.Env
		if seen[id] {
			return fmt.Errorf("%s: the same key is listed twice", where)
		}
		seen[id] = true
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := c.Admin.validate(c.Listen); err != nil {
		return err
	}
	if err := c.Policies.validate(c.Auth.Keys); err != nil {
		return err
	}
	if err := c.Log.validate(); err != nil {
		return err
	}
	if err := c.Approvals.validate(); err != nil {
		return err
	}
	if err := c.Telemetry.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if c.Evidence.OpTimeout < 0 {
		return fmt.Errorf("config: evidence.op_timeout: must not be negative (0: %v)", evidence.DefaultOpTimeout)
	}
	if c.Evidence.SweepInterval < 0 {
		return fmt.Errorf("config: evidence.sweep_interval: must not be negative (0: %v)", DefaultSweepInterval)
	}
	if c.Evidence.InterruptedAfter < 0 {
		return errors.New("config: evidence.interrupted_after: must not be negative (0: the longest driver run time plus six op_timeouts)")
	}
	if h := c.Evidence.LeaseHeartbeat; h != 0 && h < minLeaseHeartbeat {
		return fmt.Errorf("config: evidence.lease_heartbeat: %v is shorter than %v (0: %v)", h, minLeaseHeartbeat, lease.DefaultHeartbeat)
	}
	if err := c.Evidence.SigningKey.Validate(); err != nil {
		return err
	}
	if _, err := c.Evidence.EffectivePeerWitnessInterval(); err != nil {
		return err
	}
	if err := c.Evidence.validateTrust(); err != nil {
		return err
	}
	if ol := c.Evidence.ObjectLock; ol != nil {
		if ol.Mode != "GOVERNANCE" && ol.Mode != "COMPLIANCE" {
			return fmt.Errorf("config: evidence.object_lock.mode %q: want GOVERNANCE or COMPLIANCE", ol.Mode)
		}
		if ol.Days <= 0 {
			return fmt.Errorf("config: evidence.object_lock.days: must be at least 1")
		}
		if _, err := c.Evidence.StoreURL(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	for _, name := range c.Redact.SecretsEnv {
		if !envNamePattern.MatchString(name) {
			return fmt.Errorf("config: redact.secrets_env: %q is not an environment variable name", name)
		}
	}
	registryDriver := ""
	for _, name := range slices.Sorted(maps.Keys(c.Drivers)) {
		d := c.Drivers[name]
		if !driverNamePattern.MatchString(name) {
			return fmt.Errorf("config: drivers.%s: name must match %s", name, driverNamePattern)
		}
		if err := d.validate(name, drivers.Validation{Loopback: isLoopbackHost(host)}); err != nil {
			return err
		}
		if rh, ok := d.Config.(drivers.RegistryHost); ok {
			if _, on := rh.RegistryIDs(); on {
				if registryDriver != "" {
					return fmt.Errorf("config: drivers.%s.allow_registry_ids: %s allows them already; registry ids must name one driver", name, registryDriver)
				}
				registryDriver = name
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.Tools)) {
		t := c.Tools[id]
		if err := ident.ValidateToolID(id); err != nil {
			return fmt.Errorf("config: tools.%s: %w", id, err)
		}
		d, ok := c.Drivers[t.Driver]
		if !ok {
			return fmt.Errorf("config: tools.%s.driver %q: no such driver", id, t.Driver)
		}
		if err := t.validate(d.Config); err != nil {
			return fmt.Errorf("config: tools.%s.%w", id, err)
		}
	}
	return nil
}

// ValidateListener applies the gRPC listener's rules to the address addr,
// given under the configuration key key ("listen",
// "front_doors.tpmjs.listen"): an address other hosts can reach needs
// auth.keys, and TLS (tls.cert_file and tls.key_file) or
// tls.allow_plaintext, since API keys travel with every request.
func (c Config) ValidateListener(key, addr string) error {
	return c.ValidateListenerAuth(key, addr, false)
}

// ValidateListenerAuth is ValidateListener for a front door's address
// where, when doorAuth, a door authenticates callers itself (OAuth access
// tokens): that stands in for auth.keys, never for TLS, since its tokens
// are bearer credentials too.
func (c Config) ValidateListenerAuth(key, addr string, doorAuth bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("config: %s %q: %w", key, addr, err)
	}
	if len(c.Auth.Keys) == 0 && !doorAuth && !isLoopbackHost(host) {
		return fmt.Errorf("config: %s %q is not a loopback address and auth.keys is empty: "+
			"refusing to serve unauthenticated callers beyond this host", key, addr)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return errors.New("config: tls: give both cert_file and key_file")
	}
	if !isLoopbackHost(host) && !c.TLS.Enabled() && !c.TLS.AllowPlaintext {
		return fmt.Errorf("config: %s %q is not a loopback address and tls is not configured: "+
			"API keys would cross the network in clear text (set tls.cert_file and tls.key_file, or "+
			"tls.allow_plaintext: true when a proxy in front of the gateway terminates TLS)", key, addr)
	}
	return nil
}

// IsLoopbackAddr reports whether the host of a host:port address can only
// be reached from this machine.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && isLoopbackHost(host)
}

// RawSection is a configuration section kept as YAML, for a package that
// imports this one to decode (front_doors.<name>).
type RawSection struct {
	node *yaml.Node
}

// UnmarshalYAML keeps the section's node.
func (r *RawSection) UnmarshalYAML(n *yaml.Node) error {
	r.node = n
	return nil
}

// IsZero reports whether the section is absent or empty.
func (r RawSection) IsZero() bool { return r.node == nil || len(r.node.Content) == 0 }

// DecodeStrict decodes the section into v, refusing keys v does not have.
func (r RawSection) DecodeStrict(v any) error {
	if r.node == nil || r.node.Kind == 0 || (r.node.Kind == yaml.ScalarNode && r.node.Tag == "!!null") {
		return nil
	}
	if r.node.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want a mapping of keys", r.node.Line)
	}
	return decodeStrict(r.node, v)
}

// decodeStrict decodes n into v (a pointer), refusing keys v does not
// have, as ParseConfig does for the rest of the file. yaml.Node.Decode
// ignores KnownFields, so n is decoded once as it is, which reports type
// errors at their lines, then written out and decoded again, into a
// throwaway value, by a decoder that refuses unknown keys; those errors
// are given the lines of the keys in n.
func decodeStrict(n *yaml.Node, v any) error {
	if err := n.Decode(v); err != nil {
		return err
	}
	data, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err = dec.Decode(reflect.New(reflect.TypeOf(v).Elem()).Interface())
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	out := &yaml.TypeError{}
	for _, msg := range te.Errors {
		if m := unknownFieldRE.FindStringSubmatch(msg); m != nil {
			if line := keyLine(n, m[3]); line > 0 {
				msg = fmt.Sprintf("line %d: %s", line, m[2])
			}
		}
		out.Errors = append(out.Errors, msg)
	}
	return out
}

// unknownFieldRE matches yaml.v3's message for a key a type does not have.
var unknownFieldRE = regexp.MustCompile(`^line (\d+): (field (\S+) not found in type \S+)$`)

// keyLine is the line of the first mapping key called key within n.
func keyLine(n *yaml.Node, key string) int {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i].Line
			}
		}
	}
	for _, c := range n.Content {
		if line := keyLine(c, key); line > 0 {
			return line
		}
	}
	return 0
}

// validate checks policies.shadow and policies.selectable against each
// other and against the callers and groups auth.keys defines. Whether the
// sets exist in the folder is checked when the folder is loaded.
func (p PolicyConfig) validate(keys []KeyConfig) error {
	for _, ref := range slices.Sorted(maps.Keys(p.Shadow)) {
		shadow := p.Shadow[ref]
		switch {
		case shadow == "" || shadow == ref:
			return fmt.Errorf("config: policies.shadow.%s: name another policy set", ref)
		case shadow == policy.DefaultRef:
			return fmt.Errorf("config: policies.shadow.%s: %s is the default set, enforced for every call that names none; it cannot be a shadow candidate", ref, shadow)
		}
		if _, ok := p.Shadow[shadow]; ok {
			return fmt.Errorf("config: policies.shadow.%s: %s is a shadow candidate, never enforced, so it cannot have a shadow of its own", shadow, shadow)
		}
	}
	callers, groups := map[string]bool{}, map[string]bool{}
	for _, k := range keys {
		callers[k.Caller] = true
		for _, g := range k.Groups {
			groups[g] = true
		}
	}
	if len(keys) == 0 {
		callers[AnonymousCaller] = true
	}
	for i, sel := range p.Selectable {
		where := fmt.Sprintf("config: policies.selectable[%d]", i)
		if len(sel.Refs) == 0 {
			return fmt.Errorf("%s.refs: list the policy sets these callers may select", where)
		}
		if len(sel.Callers) == 0 && len(sel.Groups) == 0 {
			return fmt.Errorf("%s: give callers or groups", where)
		}
		for _, c := range sel.Callers {
			if !callers[c] {
				return fmt.Errorf("%s.callers: %q is not a caller of auth.keys%s", where, c, anonymousHint(keys))
			}
		}
		for _, g := range sel.Groups {
			if !groups[g] {
				return fmt.Errorf("%s.groups: no auth.keys entry has group %q", where, g)
			}
		}
		for _, ref := range sel.Refs {
			if ref == "" {
				return fmt.Errorf("%s.refs: empty policy set name", where)
			}
			for _, enforcing := range slices.Sorted(maps.Keys(p.Shadow)) {
				if p.Shadow[enforcing] == ref {
					return fmt.Errorf("%s.refs: %s is the shadow candidate of %s (policies.shadow) and is never enforced, so no caller may select it", where, ref, enforcing)
				}
			}
		}
	}
	return nil
}

func anonymousHint(keys []KeyConfig) string {
	if len(keys) == 0 {
		return fmt.Sprintf(" (without auth.keys every caller is %q)", AnonymousCaller)
	}
	return ""
}

// spec is the entry as its driver sees it.
func (t ToolConfig) spec() drivers.ToolSpec {
	return drivers.ToolSpec{Target: t.Target, Package: t.Package, Version: t.Version, Export: t.Export,
		HasEnv: len(t.Env) > 0 || len(t.CallerEnv) > 0}
}

// Bind returns what the entry binds to on the driver configured as dc.
func (t ToolConfig) Bind(dc drivers.Config) (drivers.Binding, error) {
	return Binder(dc)(t.spec())
}

// Binder returns how the driver configured as dc binds a tool entry: its
// drivers.ToolBinder, or the entry as given.
func Binder(dc drivers.Config) func(drivers.ToolSpec) (drivers.Binding, error) {
	if b, ok := dc.(drivers.ToolBinder); ok {
		return b.BindTool
	}
	return func(t drivers.ToolSpec) (drivers.Binding, error) {
		return drivers.Binding{Target: t.Target, Package: t.Package, Version: t.Version}, nil
	}
}

// validate checks a tool's settings for its driver (whose kind checks
// what the entry binds to). Errors start with the offending key.
func (t ToolConfig) validate(dc drivers.Config) error {
	if _, err := t.Bind(dc); err != nil {
		return err
	}
	for name, v := range t.Env {
		if !envNamePattern.MatchString(name) || !envNamePattern.MatchString(v.FromEnv) {
			return fmt.Errorf("env.%s: want {from_env: VARIABLE} with valid variable names", name)
		}
	}
	for _, name := range t.CallerEnv {
		if !envNamePattern.MatchString(name) {
			return fmt.Errorf("caller_env: %q is not an environment variable name", name)
		}
		if _, ok := t.Env[name]; ok {
			return fmt.Errorf("caller_env: %s is set by the gateway and cannot be overridden by callers", name)
		}
	}
	for _, tag := range t.Tags {
		if tag == "" || len(tag) > 64 {
			return fmt.Errorf("tags: %q: tags are 1 to 64 bytes", tag)
		}
	}
	for _, l := range t.Labels {
		if !policy.ValidLabel(l) {
			return fmt.Errorf("labels: %q: a label is 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'", l)
		}
	}
	if t.InputSchema != nil {
		if err := checkInputSchema(t.InputSchema); err != nil {
			return fmt.Errorf("input_schema: %w", err)
		}
	}
	return nil
}

// isLoopbackHost reports whether host can only be reached from this machine.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckPolicyRefs checks that every policy set policies.shadow and
// policies.selectable name is one of refs, the sets of the loaded policy
// folder.
func (c Config) CheckPolicyRefs(refs []string) error {
	for _, ref := range slices.Sorted(maps.Keys(c.Policies.Shadow)) {
		for _, name := range []string{ref, c.Policies.Shadow[ref]} {
			if !slices.Contains(refs, name) {
				return fmt.Errorf("config: policies.shadow: no policy set %q in %s", name, c.Policies.Dir)
			}
		}
	}
	for i, sel := range c.Policies.Selectable {
		for _, ref := range sel.Refs {
			if !slices.Contains(refs, ref) {
				return fmt.Errorf("config: policies.selectable[%d].refs: no policy set %q in %s", i, ref, c.Policies.Dir)
			}
		}
	}
	return nil
}
