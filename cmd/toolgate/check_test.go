package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/toolgate/toolgate/evidence"
)

const checkPolicy = `@id("read")
permit (principal, action, resource == Tool::"workspace.readFile");
`

// checkResult is what a user sees of one `toolgate check config` run.
type checkResult struct {
	code           int
	stdout, stderr string
}

// runCheck runs `toolgate check config ARGS...` in a fresh folder holding
// files (mode 0600, or 0644 for a name ending in "#0644"), with env as its
// whole environment, and returns what it printed and the folder. Unless
// noPolicies, the folder also holds the default policies folder with one
// valid policy set. It runs the binary, not the command in process, so
// that tests need not share the process's working directory.
func runCheck(t *testing.T, files map[string]string, env map[string]string, noPolicies bool, args ...string) (checkResult, string) {
	t.Helper()
	dir := t.TempDir()
	all := map[string]string{}
	if !noPolicies {
		all["policies/policy.default.cedar"] = checkPolicy
	}
	for name, text := range files {
		all[name] = text
	}
	for name, text := range all {
		mode := os.FileMode(0o600)
		if base, m, ok := strings.Cut(name, "#"); ok {
			name = base
			if m == "0644" {
				mode = 0o644
			}
		}
		name = filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(name, mode); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(toolgateBin, append([]string{"check", "config"}, args...)...)
	cmd.Dir = dir
	// The race detector's exit pause off, as for every run of the binary.
	cmd.Env = []string{"GORACE=atexit_sleep_ms=0"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := 0
	var exit *exec.ExitError
	switch err := cmd.Run(); {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return checkResult{code, out.String(), errb.String()}, dir
}

// newKeyPEM is a fresh Ed25519 signing key as a key file holds it.
func newKeyPEM(t *testing.T) string {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	data, err := evidence.EncodePrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestCheckConfigReportsEveryProblemAtItsLine(t *testing.T) {
	t.Parallel()
	key := newKeyPEM(t)
	cases := []struct {
		name       string
		files      map[string]string
		env        map[string]string
		noPolicies bool // the default policies folder is absent
		code       int
		lines      []string // stderr, exactly
		contains   []string // stderr holds these, where it names temporary paths
		out        string   // stdout, exactly
	}{
		{
			name:  "a fine configuration is ok and says the key would be created, without creating it",
			files: map[string]string{"cfg.yaml": "policies: {dir: ./policies}\n"},
			code:  exitOK,
			out:   "cfg.yaml: ok: listen 127.0.0.1:50051; 1 policy set(s) in ./policies; signing key ./toolgate-signing.key would be created on first start\n",
		},
		{
			name: "every unknown key is reported at its own line",
			files: map[string]string{"cfg.yaml": "listen: 127.0.0.1:1\nbogus: 1\npolicies:\n  dir: ./policies\n  shadw: x\n" +
				"drivers:\n  w:\n    type: workspace\n    root: ./w\n    nope: 3\n"},
			code: exitFailure,
			lines: []string{
				"cfg.yaml:2: field bogus not found in type config.Config",
				"cfg.yaml:5: field shadw not found in type config.PolicyConfig",
				"cfg.yaml:10: field nope not found in type workspace.DriverConfig",
			},
		},
		{
			name:  "a YAML syntax error stops the check at its line",
			files: map[string]string{"cfg.yaml": "policies:\n  dir: ./policies\n listen: x\n"},
			code:  exitFailure,
			lines: []string{"cfg.yaml:2: did not find expected key"},
		},
		{
			name: "a tool id holding dots is placed at the tool's driver key, not at a shorter id",
			files: map[string]string{"cfg.yaml": "tools:\n  files: {driver: workspace, target: readFile}\n" +
				"  files.read:\n    target: readFile\n    driver: nodriver\n"},
			code:  exitFailure,
			lines: []string{`cfg.yaml:5: tools.files.read.driver "nodriver": no such driver`},
		},
		{
			name: "a console signing in at an OpenID Connect provider is ok",
			files: map[string]string{"cfg.yaml": "policies: {dir: ./policies}\nconsole:\n  listen: 127.0.0.1:8470\n  oidc:\n    issuer: https://idp.example\n    client_id: console\n" +
				"    client_secret: {env: OIDC_SECRET}\n    redirect_url: http://127.0.0.1:8470/signin/oidc/callback\n"},
			env:  map[string]string{"OIDC_SECRET": "s3cret"},
			code: exitOK,
			out:  "cfg.yaml: ok: console 127.0.0.1:8470; listen 127.0.0.1:50051; 1 policy set(s) in ./policies; signing key ./toolgate-signing.key would be created on first start\n",
		},
		{
			name: "the console's OpenID Connect client secret must be readable",
			files: map[string]string{"cfg.yaml": "policies: {dir: ./policies}\nconsole:\n  listen: 127.0.0.1:8470\n  oidc:\n    issuer: https://idp.example\n    client_id: console\n" +
				"    client_secret: {env: OIDC_SECRET}\n    redirect_url: http://127.0.0.1:8470/signin/oidc/callback\n"},
			code:  exitFailure,
			lines: []string{"cfg.yaml:7: console.oidc.client_secret: environment variable OIDC_SECRET is empty or unset"},
		},
		{
			name: "the console's OpenID Connect redirect must come back to the console",
			files: map[string]string{"cfg.yaml": "policies: {dir: ./policies}\nconsole:\n  listen: 127.0.0.1:8470\n  oidc:\n    issuer: https://idp.example\n    client_id: console\n" +
				"    client_secret: {env: OIDC_SECRET}\n    redirect_url: https://evil.example/signin/oidc/callback?next=/\n"},
			env:   map[string]string{"OIDC_SECRET": "s3cret"},
			code:  exitFailure,
			lines: []string{`cfg.yaml:8: console.oidc.redirect_url "https://evil.example/signin/oidc/callback?next=/": must be the console's origin followed by /signin/oidc/callback`},
		},
		{
			name: "the console's OpenID Connect client secret file is kept out of the workspace",
			files: map[string]string{"cfg.yaml": "policies: {dir: ./policies}\ndrivers: {w: {type: workspace, root: ./w}}\nconsole:\n  listen: 127.0.0.1:8470\n  oidc:\n    issuer: https://idp.example\n    client_id: console\n" +
				"    client_secret: {file: ./w/oidc-secret}\n    redirect_url: http://127.0.0.1:8470/signin/oidc/callback\n",
				"w/oidc-secret": "s3cret"},
			code:     exitFailure,
			contains: []string{"cfg.yaml:2: drivers.w.root", "contains console.oidc.client_secret.file", "oidc-secret): callers of the workspace tools could read"},
		},
		{
			name:  "a console client secret written inline is refused without being quoted",
			files: map[string]string{"cfg.yaml": "policies: {dir: ./policies}\nconsole:\n  listen: 127.0.0.1:8470\n  oidc: {issuer: https://idp.example, client_secret: hunter2}\n"},
			code:  exitFailure,
			lines: []string{"cfg.yaml:4: console: console.oidc.client_secret: want {file: FILE} or {env: VAR}; a secret never goes in the configuration itself"},
		},
		{
			name: "a front door problem under a key the file does not have is placed at the deepest key it has",
			files: map[string]string{"cfg.yaml": "front_doors:\n  mcp:\n    listen: 127.0.0.1:8788\n" +
				"    oauth:\n      issuer: https://idp.example\n"},
			code:  exitFailure,
			lines: []string{"cfg.yaml:4: front_doors.mcp.oauth.resource: required"},
		},
		{
			name: "a validation problem, a policy problem and a key problem are each reported",
			files: map[string]string{
				"cfg.yaml":               "listen: 0.0.0.0:50051\npolicies:\n  dir: ./p\nevidence:\n  signing_key: {file: ./k.key}\n",
				"p/y.cedar":              "permit(principal, action ==, resource);\n",
				"p/policy.default.cedar": checkPolicy,
			},
			code: exitFailure,
			lines: []string{
				`cfg.yaml:1: listen "0.0.0.0:50051" is not a loopback address and auth.keys is empty: refusing to serve unauthenticated callers beyond this host`,
				`p/y.cedar:1:30: parse error near "resource": expected ident`,
				"cfg.yaml:5: evidence.signing_key: open ./k.key: no such file or directory",
			},
		},
		{
			name:  "a shadow set the folder lacks is placed at policies.shadow",
			files: map[string]string{"cfg.yaml": "policies:\n  dir: ./policies\n  shadow: {policy.default: policy.next}\n"},
			code:  exitFailure,
			lines: []string{`cfg.yaml:3: policies.shadow: no policy set "policy.next" in ./policies`},
		},
		{
			name: "a gateway-owned key that others may read is refused as serve refuses it",
			files: map[string]string{
				"cfg.yaml":   "evidence:\n  signing_key: {file: ./k.key, create: true}\n",
				"k.key#0644": key,
			},
			code: exitFailure,
			lines: []string{"cfg.yaml:2: evidence.signing_key: ./k.key has mode 0644: group or others may read or change the key, " +
				"and with it sign evidence in the gateway's name; chmod 600 it if nobody else can have read it, else replace it"},
		},
		{
			name:  "a key that is not a key is refused without quoting it",
			files: map[string]string{"cfg.yaml": "evidence:\n  signing_key: {file: ./k.key}\n", "k.key": "hunter2hunter2\n"},
			code:  exitFailure,
			lines: []string{`cfg.yaml:2: evidence.signing_key: ./k.key: evidence: private key: neither a PEM "PRIVATE KEY" block nor standard base64`},
		},
		{
			name:  "a key file that exists and parses is ok",
			files: map[string]string{"cfg.yaml": "evidence:\n  signing_key: {file: ./k.key, create: true}\n", "k.key": key},
			code:  exitOK,
			out:   "cfg.yaml: ok: listen 127.0.0.1:50051; 1 policy set(s) in ./policies; manifests signed with ./k.key\n",
		},
		{
			name:  "a key in an unset environment variable is a problem",
			files: map[string]string{"cfg.yaml": "evidence:\n  signing_key:\n    env: TG_KEY\n"},
			code:  exitFailure,
			lines: []string{"cfg.yaml:2: evidence.signing_key: environment variable TG_KEY is empty or unset"},
		},
		{
			name:  "a key in a set environment variable is ok",
			files: map[string]string{"cfg.yaml": "evidence:\n  signing_key:\n    env: TG_KEY\n"},
			env:   map[string]string{"TG_KEY": key},
			code:  exitOK,
			out:   "cfg.yaml: ok: listen 127.0.0.1:50051; 1 policy set(s) in ./policies; manifests signed with the key in $TG_KEY\n",
		},
		{
			name:  "signing_key none is ok and says manifests are unsigned",
			files: map[string]string{"cfg.yaml": "evidence:\n  signing_key: none\n"},
			code:  exitOK,
			out:   "cfg.yaml: ok: listen 127.0.0.1:50051; 1 policy set(s) in ./policies; manifests unsigned (evidence.signing_key: none)\n",
		},
		{
			name:  "a key created in a folder that does not exist is a problem",
			files: map[string]string{"cfg.yaml": "evidence:\n  signing_key: {file: ./keys/k.key, create: true}\n"},
			code:  exitFailure,
			lines: []string{"cfg.yaml:2: evidence.signing_key.file ./keys/k.key: folder keys does not exist, so the key cannot be created there"},
		},
		{
			name:  "a redaction rules file that does not exist is placed at redact.rules_file",
			files: map[string]string{"cfg.yaml": "redact:\n  key_names: [a]\n  rules_file: ./rules.toml\n"},
			code:  exitFailure,
			lines: []string{"cfg.yaml:3: redact.rules_file: rules file: open ./rules.toml: no such file or directory"},
		},
		{
			name: "a rule that does not compile is placed at redact.rules_file",
			files: map[string]string{"cfg.yaml": "redact:\n  rules_file: ./rules.toml\n",
				"rules.toml": "[[rules]]\nid = \"x\"\nregex = \"(\"\nkeywords = [\"a\"]\n"},
			code:  exitFailure,
			lines: []string{"cfg.yaml:2: redact.rules_file: rules ./rules.toml: rule x: error parsing regexp: missing closing ): `(`"},
		},
		{
			name:  "disabling a rule that does not exist is placed at redact.disable_rules",
			files: map[string]string{"cfg.yaml": "redact:\n  disable_rules: [no-such-rule]\n"},
			code:  exitFailure,
			lines: []string{`cfg.yaml:2: redact.disable_rules: cannot disable rule "no-such-rule": no such rule`},
		},
		{
			name: "every secret serve could not read is reported at its key",
			files: map[string]string{"cfg.yaml": "auth:\n  keys:\n    - caller: a\n      env: TG_API_KEY\n" +
				"approvals:\n  webhook:\n    url: http://127.0.0.1:9/hook\n    secret: {env: TG_HMAC}\n" +
				"redact:\n  fingerprint_key: {file: ./fp.key}\n"},
			code: exitFailure,
			lines: []string{
				"cfg.yaml:4: auth.keys[0].env: environment variable TG_API_KEY is empty or unset",
				"cfg.yaml:8: approvals.webhook.secret: environment variable TG_HMAC is empty or unset",
				"cfg.yaml:10: redact.fingerprint_key: open ./fp.key: no such file or directory",
			},
		},
		{
			name:  "tracing the environment turns on is named in the summary",
			files: map[string]string{"cfg.yaml": "evidence:\n  signing_key: none\n"},
			env:   map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"},
			code:  exitOK,
			out: "cfg.yaml: ok: listen 127.0.0.1:50051; 1 policy set(s) in ./policies; traces to http://127.0.0.1:4317; " +
				"manifests unsigned (evidence.signing_key: none)\n",
		},
		{
			name:  "an OTEL_* environment serve would refuse is a problem, its password not echoed",
			files: map[string]string{"cfg.yaml": "evidence:\n  signing_key: none\n"},
			env:   map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://u:hunter2secret@c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			code:  exitFailure,
			lines: []string{"cfg.yaml:1: telemetry: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT must not carry a user or password " +
				"(give collector credentials in OTEL_EXPORTER_OTLP_HEADERS)"},
		},
		{
			name:  "an OTLP protocol serve cannot speak is a problem",
			files: map[string]string{"cfg.yaml": "telemetry:\n  otlp_endpoint: http://127.0.0.1:4317\n"},
			env:   map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
			code:  exitFailure,
			lines: []string{`cfg.yaml:1: telemetry: OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf": toolgate exports OTLP over grpc only`},
		},
		{
			name: "a webhook secret too short to sign with is a problem",
			files: map[string]string{"cfg.yaml": "approvals:\n  webhook:\n    url: http://127.0.0.1:9/hook\n" +
				"    secret:\n      env: TG_HMAC\n"},
			env:   map[string]string{"TG_HMAC": "short"},
			code:  exitFailure,
			lines: []string{"cfg.yaml:4: approvals.webhook.secret: shorter than 16 bytes"},
		},
		{
			name: "a TLS key that does not match its certificate is a problem at tls",
			files: map[string]string{"cfg.yaml": "tls:\n  cert_file: ./cert.pem\n  key_file: ./k.key\n",
				"cert.pem": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "k.key": key},
			code:  exitFailure,
			lines: []string{"cfg.yaml:1: tls: x509: malformed certificate"},
		},
		{
			name:  "a policy folder that does not exist is placed at policies.dir",
			files: map[string]string{"cfg.yaml": "policies:\n  dir: ./nowhere\n"},
			code:  exitFailure,
			lines: []string{"cfg.yaml:2: policies.dir: read policy folder: open ./nowhere: no such file or directory"},
		},
		{
			name:       "a problem with a key the file leaves to the default is placed at line 1",
			files:      map[string]string{"cfg.yaml": "# policies come from the default\ninstance: a\n"},
			noPolicies: true,
			code:       exitFailure,
			lines:      []string{"cfg.yaml:1: policies.dir: read policy folder: open ./policies: no such file or directory"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, dir := runCheck(t, c.files, c.env, c.noPolicies, "cfg.yaml")
			if got.code != c.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", got.code, c.code, got.stdout, got.stderr)
			}
			if c.lines != nil {
				if want := strings.Join(c.lines, "\n") + "\n"; got.stderr != want {
					t.Errorf("stderr:\n%s\nwant:\n%s", got.stderr, want)
				}
			}
			for _, want := range c.contains {
				if !strings.Contains(got.stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, got.stderr)
				}
			}
			if got.stdout != c.out {
				t.Errorf("stdout %q, want %q", got.stdout, c.out)
			}
			if strings.Contains(got.stderr, "hunter2") {
				t.Errorf("the file's content was quoted: %s", got.stderr)
			}
			if _, err := os.Lstat(filepath.Join(dir, "toolgate-signing.key")); err == nil {
				t.Error("check created the signing key")
			}
		})
	}
}

func TestCheckConfigPlacesAKeyPathAtTheLineOfItsKey(t *testing.T) {
	t.Parallel()
	const doc = `listen: 127.0.0.1:1
tools:
  files:
    driver: a
  files.read:
    driver: b
  files.read.all: {driver: c}
auth:
  keys:
    - caller: x
    - caller: y
      env: Y
base: &base
  inner: 1
alias: *base
`
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path string
		line int
	}{
		{"listen", 1},
		{"tools.files.driver", 4},
		{"tools.files.read.driver", 6},
		{"tools.files.read.all.driver", 7},
		{"tools.files.read", 5},
		{"tools.files.write.driver", 3}, // the longest key that exists
		{"auth.keys[1].env", 12},
		{"auth.keys[1]", 11},
		{"auth.keys[7].env", 9},
		{"auth.keys[x", 9},
		{"alias.inner", 14},
		{"nothing.here", 0},
		{"", 0},
		{"listen.deeper", 1},
	}
	for _, c := range cases {
		if got := pathLine(&root, c.path); got != c.line {
			t.Errorf("pathLine(%q) = %d, want %d", c.path, got, c.line)
		}
	}
	if got := pathLine(&yaml.Node{}, "listen"); got != 0 {
		t.Errorf("an empty document gave line %d", got)
	}
}

func TestCheckCommandUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"check without a subcommand is a usage error", []string{"check"}, exitError},
		{"an unknown check is a usage error", []string{"check", "rules", "x"}, exitError},
		{"check config without a file is a usage error", []string{"check", "config"}, exitError},
		{"a flag where the file goes is a usage error", []string{"check", "config", "-x"}, exitError},
		{"help is not an error", []string{"check", "-h"}, exitOK},
		{"a file that does not exist is a problem, not a usage error", []string{"check", "config", "/nonexistent/cfg.yaml"}, exitFailure},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			got := run(context.Background(), c.args, stdio{Out: &out, Err: &errb, Getenv: func(string) string { return "" }})
			if got != c.code {
				t.Fatalf("exit %d, want %d (stderr %q)", got, c.code, errb.String())
			}
			if c.code == exitError && !strings.Contains(errb.String(), "toolgate check config FILE") {
				t.Errorf("the usage was not shown: %q", errb.String())
			}
		})
	}
}

// readmeBlock is one fenced block of the documentation (README.md and the
// pages under docs/), with its file, language and the heading it is under.
type readmeBlock struct {
	file    string
	lang    string
	heading string
	line    int
	text    string
}

// docFiles returns the documentation's files, relative to the repository
// root: the configuration page first (its first yaml block is the
// reference every other block is checked beside), then README.md and the
// other pages in order.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages under docs/: %v", err)
	}
	first := "docs/operators/configuration.md"
	files := []string{first, "README.md"}
	for _, p := range pages {
		if rel := strings.TrimPrefix(filepath.ToSlash(p), "../../"); rel != first {
			files = append(files, rel)
		}
	}
	return files
}

// readmeBlocks returns the fenced blocks of every documentation file.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	var blocks []readmeBlock
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(filepath.Join("../..", file))
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, fencedBlocks(file, data)...)
	}
	return blocks
}

// fencedBlocks returns the fenced blocks of one markdown file.
func fencedBlocks(file string, data []byte) []readmeBlock {
	var blocks []readmeBlock
	var cur *readmeBlock
	heading := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && strings.HasPrefix(line, "```"):
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case strings.HasPrefix(line, "```"):
			cur = &readmeBlock{file: file, lang: strings.TrimSpace(line[3:]), heading: heading, line: n}
		case strings.HasPrefix(line, "#"):
			heading = line
		}
	}
	return blocks
}

// readmeFragments are the README's yaml blocks that show a few keys to
// add to a configuration that has others (auth.keys, tls), so they do not
// check on their own; every other block must.
var readmeFragments = map[string]string{
	"# Policy":                   "selectable entries naming groups and callers of an auth.keys section it does not repeat",
	"## OAuth 2.1 access tokens": "a door on 0.0.0.0 whose TLS settings the text says to add as ever",
	"### Scraping":               "Prometheus's configuration, not Toolgate's",
	"## Dashboard":               "Grafana's provisioning file, not Toolgate's",
}

// readmeProblems are the problems `check config` finds in README blocks,
// by heading: none. A block that gains one fails the test until README.md
// is corrected, or the problem is listed here on purpose.
var readmeProblems = map[string]string{}

// readmeEnv sets the environment variables the README's configurations
// read secrets from, as a deployment would.
var readmeEnv = map[string]string{
	"TOOLGATE_CI_KEY":          "ci-key-0123456789abcdef",
	"TOOLGATE_AGENT_KEY":       "agent-key-0123456789abcdef",
	"TOOLGATE_FINGERPRINT_KEY": "fingerprint-key-0123456789abcdef",
	"TOOLGATE_SHARED_MAC_KEY":  "shared-mac-key-0123456789abcdef-0123",
	"TOOLGATE_OIDC_SECRET":     "oidc-client-secret-0123456789",
}

// TestReadmeConfigurationsCheck runs `check config` on every yaml block of
// the README that is a configuration on its own, the Configuration
// section's reference block first, in a folder holding the policy sets
// those blocks name, a TLS pair and the README's rules.toml, where paths
// under /etc/toolgate/ are taken to lie.
func TestReadmeConfigurationsCheck(t *testing.T) {
	t.Parallel()
	var yamls []readmeBlock
	rules := ""
	for _, b := range readmeBlocks(t) {
		switch {
		case b.lang == "yaml":
			yamls = append(yamls, b)
		case b.lang == "toml" && strings.HasPrefix(b.text, "# rules.toml"):
			rules = b.text
		}
	}
	if len(yamls) == 0 || yamls[0].heading != "# Configuration" || rules == "" {
		t.Fatalf("the docs' first yaml block is not the Configuration reference, or they have no rules.toml (%d blocks)", len(yamls))
	}
	pol := "policies/policy."
	certFile, keyFile := writeSelfSigned(t, t.TempDir())
	cert, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	tlsKey, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range yamls {
		if _, ok := readmeFragments[b.heading]; ok {
			continue
		}
		t.Run(strings.TrimLeft(b.heading, "# "), func(t *testing.T) {
			t.Parallel()
			cfg := strings.ReplaceAll(b.text, "/etc/toolgate/", "./")
			got, dir := runCheck(t, map[string]string{"cfg.yaml": cfg, "rules.toml": rules,
				"cert.pem": string(cert), "key.pem": string(tlsKey),
				pol + "candidate.cedar": checkPolicy, pol + "lenient.cedar": checkPolicy}, readmeEnv, false, "cfg.yaml")
			if want := readmeProblems[b.heading]; got.stderr != want {
				t.Errorf("%s line %d: exit %d:\n%s\nwant:\n%s", b.file, b.line, got.code, got.stderr, want)
			}
			if (got.code == exitOK) != (readmeProblems[b.heading] == "") {
				t.Errorf("%s line %d: exit %d", b.file, b.line, got.code)
			}
			if _, err := os.Lstat(filepath.Join(dir, "toolgate-signing.key")); err == nil {
				t.Error("check created the signing key")
			}
		})
	}
}
