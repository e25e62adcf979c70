package config

import (
	"strings"
	"testing"
)

func TestDefaultConfigIsValid(t *testing.T) {
	cfg, err := DefaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Config{Listen: "127.0.0.1:50051"}
	if cfg.Listen != want.Listen || cfg.Policies.Dir != "./policies" ||
		cfg.Evidence.URL != "file://./toolgate-evidence" || workspaceRoot(cfg, "workspace") != "./workspace" ||
		len(cfg.Auth.Keys) != 0 {
		t.Errorf("embedded default = %+v, want DESIGN's defaults", cfg)
	}
}

func TestConfigValidate(t *testing.T) {
	digest := strings.Repeat("ab", 32)
	tests := []struct {
		name    string
		yaml    string
		wantErr string // "" means valid
	}{
		{"loopback without auth", "listen: 127.0.0.1:9000", ""},
		{"ipv6 loopback without auth", "listen: '[::1]:9000'", ""},
		{"localhost without auth", "listen: localhost:9000", ""},
		{"all interfaces without auth", "listen: 0.0.0.0:9000", "not a loopback address and auth.keys is empty"},
		{"empty host without auth", "listen: ':9000'", "not a loopback address"},
		{"public with auth but no tls", "listen: 0.0.0.0:9000\nauth: {keys: [{caller: a, sha256: " + digest + "}]}", "tls is not configured"},
		{"public with auth and plaintext acknowledged", "listen: 0.0.0.0:9000\nauth: {keys: [{caller: a, sha256: " + digest + "}]}\ntls: {allow_plaintext: true}", ""},
		{"public with auth and tls", "listen: 0.0.0.0:9000\nauth: {keys: [{caller: a, sha256: " + digest + "}]}\ntls: {cert_file: c.pem, key_file: k.pem}", ""},
		{"tls cert without key", "tls: {cert_file: c.pem}", "give both cert_file and key_file"},
		{"plaintext key instead of digest", "auth: {keys: [{caller: a, sha256: hunter2}]}", "64 hex digits"},
		{"key without source", "auth: {keys: [{caller: a}]}", "give sha256"},
		{"key with both sources", "auth: {keys: [{caller: a, sha256: " + digest + ", env: K}]}", "not both"},
		{"bad caller name", "auth: {keys: [{caller: 'a b', env: K}]}", "caller"},
		{"duplicate key", "auth: {keys: [{caller: a, env: K}, {caller: b, env: K}]}", "listed twice"},
		{"bad env name", "auth: {keys: [{caller: a, env: 'K-1'}]}", "not an environment variable name"},
		{"unknown driver type", "drivers: {x: {type: ftp}}", "unknown driver type"},
		{"workspace without root", "drivers: {w: {type: workspace}}", "root: required"},
		{"tool on missing driver", "tools: {t.x: {driver: nope, target: readFile}}", "no such driver"},
		{"tool id with space", "tools: {'t x': {driver: workspace, target: readFile}}", "white space"},
		{"tool labels", "tools: {t.x: {driver: workspace, target: readFile, labels: [sensitive, 'ns:pii']}}", ""},
		{"tool label with a space", "tools: {t.x: {driver: workspace, target: readFile, labels: ['a b']}}", `labels: "a b": a label is`},
		{"object lock on s3", "evidence: {url: 's3://b/p?region=auto', object_lock: {mode: COMPLIANCE, days: 30}}", ""},
		{"object lock on a file store", "evidence: {object_lock: {mode: GOVERNANCE, days: 1}}", "needs an s3://"},
		{"object lock bad mode", "evidence: {url: 's3://b?region=auto', object_lock: {mode: STRICT, days: 1}}", "GOVERNANCE or COMPLIANCE"},
		{"object lock zero days", "evidence: {url: 's3://b?region=auto', object_lock: {mode: GOVERNANCE}}", "at least 1"},
		{"object lock twice", "evidence: {url: 's3://b?region=auto&object_lock_days=2', object_lock: {mode: GOVERNANCE, days: 1}}", "one place"},
		{"bad secrets_env", "redact: {secrets_env: ['A B']}", "redact.secrets_env"},
		{"selectable by caller and group", "auth: {keys: [{caller: ci, env: K, groups: [ops]}]}\npolicies: {selectable: [{callers: [ci], refs: [strict]}, {groups: [ops], refs: [lenient]}]}", ""},
		{"selectable by anonymous without keys", "policies: {selectable: [{callers: [anonymous], refs: [strict]}]}", ""},
		{"selectable nothing", "policies: {selectable: []}", ""},
		{"selectable without refs", "policies: {selectable: [{callers: [anonymous]}]}", "policies.selectable[0].refs"},
		{"selectable for nobody", "policies: {selectable: [{refs: [strict]}]}", "give callers or groups"},
		{"selectable for an unknown caller", "auth: {keys: [{caller: ci, env: K}]}\npolicies: {selectable: [{callers: [cl], refs: [strict]}]}", `policies.selectable[0].callers: "cl" is not a caller`},
		{"selectable for an unknown group", "auth: {keys: [{caller: ci, env: K, groups: [ops]}]}\npolicies: {selectable: [{groups: [op], refs: [strict]}]}", `no auth.keys entry has group "op"`},
		{"selectable shadow set", "policies: {shadow: {policy.default: policy.candidate}, selectable: [{callers: [anonymous], refs: [policy.candidate]}]}", "policy.candidate is the shadow candidate of policy.default"},
		{"default set as a shadow", "policies: {shadow: {strict: policy.default}}", "policy.default is the default set"},
		{"shadow of a shadow", "policies: {shadow: {a: b, b: c}}", "policies.shadow.b: b is a shadow candidate"},
		{"sandbox keys", "drivers: {w: {type: workspace, root: w, sandbox: namespaces, network: host, max_processes: 64, max_memory_bytes: 1073741824, max_file_bytes: 1048576}}", ""},
		{"unknown sandbox", "drivers: {w: {type: workspace, root: w, sandbox: chroot}}", "drivers.w.sandbox \"chroot\""},
		{"unknown network", "drivers: {w: {type: workspace, root: w, network: bridge}}", "drivers.w.network \"bridge\""},
		{"network none without the sandbox", "drivers: {w: {type: workspace, root: w, sandbox: none, network: none}}", "drivers.w.network: none needs sandbox: namespaces"},
		{"no sandbox on loopback", "drivers: {w: {type: workspace, root: w, sandbox: none}}", ""},
		{"no sandbox beyond loopback", "listen: 0.0.0.0:9000\nauth: {keys: [{caller: a, sha256: " + digest + "}]}\ntls: {allow_plaintext: true}\ndrivers: {w: {type: workspace, root: w, sandbox: none}}", "drivers.w.sandbox: none on a listen address that is not loopback"},
		{"no sandbox beyond loopback, accepted", "listen: 0.0.0.0:9000\nauth: {keys: [{caller: a, sha256: " + digest + "}]}\ntls: {allow_plaintext: true}\ndrivers: {w: {type: workspace, root: w, sandbox: none, allow_unsandboxed: true}}", ""},
		{"negative store operation timeout", "evidence: {op_timeout: -1s}", "evidence.op_timeout: must not be negative"},
		{"store operation timeout", "evidence: {op_timeout: 3s}", ""},
		{"peer witness interval", "evidence: {peer_witness_interval: 30s}", ""},
		{"peer witness off", "evidence: {peer_witness_interval: off}", ""},
		{"peer witness interval of 0", "evidence: {peer_witness_interval: 0s}", "evidence.peer_witness_interval \"0s\": a positive duration"},
		{"peer witness interval not a duration", "evidence: {peer_witness_interval: often}", "evidence.peer_witness_interval \"often\""},
		{"negative process cap", "drivers: {w: {type: workspace, root: w, max_processes: -1}}", "drivers.w.max_processes"},
		{"negative memory cap", "drivers: {w: {type: workspace, root: w, max_memory_bytes: -1}}", "drivers.w.max_memory_bytes"},
		{"negative file cap", "drivers: {w: {type: workspace, root: w, max_file_bytes: -1}}", "drivers.w.max_file_bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkConfigError(t, tc.yaml, tc.wantErr)
		})
	}
}

func TestParseConfigRejectsUnknownKeys(t *testing.T) {
	_, err := ParseConfig([]byte("listen: 127.0.0.1:1\npolicies:\n  dirr: x\n"))
	if err == nil || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), "dirr") {
		t.Fatalf("error = %v, want the unknown key and its line", err)
	}
}

func TestObjectLockReachesTheStoreURL(t *testing.T) {
	e := EvidenceConfig{URL: "s3://bucket/pre?region=auto&endpoint=https://x.r2.cloudflarestorage.com", ObjectLock: &ObjectLockConfig{Mode: "COMPLIANCE", Days: 30}}
	got, err := e.StoreURL()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"object_lock_mode=COMPLIANCE", "object_lock_days=30", "region=auto", "s3://bucket/pre?"} {
		if !strings.Contains(got, want) {
			t.Errorf("store URL %q lacks %q", got, want)
		}
	}
}

// checkConfigError parses, completes and validates the configuration text,
// and fails t unless validation fails with an error mentioning wantErr, or
// passes when wantErr is "".
func checkConfigError(t *testing.T, text, wantErr string) {
	t.Helper()
	cfg, err := ParseConfig([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = cfg.WithDefaults(); err != nil {
		t.Fatal(err)
	}
	err = cfg.Validate()
	switch {
	case wantErr == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
		t.Fatalf("error = %v, want one mentioning %q", err, wantErr)
	}
}

func TestConfigNestedCallLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		keys    string
		wantErr string // "" means valid
	}{
		{"unset takes the defaults", "", ""},
		{"a limit within bounds", ", max_nested_calls: 1000, max_nested_in_flight: 16", ""},
		{"zero nested calls is refused, not defaulted", ", max_nested_calls: 0", "drivers.sb.max_nested_calls: must be between 1 and 10000 (unset: 256), got 0"},
		{"negative nested calls", ", max_nested_calls: -5", "drivers.sb.max_nested_calls: must be between 1 and 10000"},
		{"unbounded nested calls", ", max_nested_calls: 1000000", "drivers.sb.max_nested_calls: must be between 1 and 10000 (unset: 256), got 1000000"},
		{"zero in flight", ", max_nested_in_flight: 0", "drivers.sb.max_nested_in_flight: must be between 1 and 64 (unset: 8), got 0"},
		{"too many in flight", ", max_nested_in_flight: 65", "drivers.sb.max_nested_in_flight: must be between 1 and 64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkConfigError(t, "drivers: {sb: {type: execbox, url: 'ws://127.0.0.1:1/run'"+tc.keys+"}}", tc.wantErr)
		})
	}
}
