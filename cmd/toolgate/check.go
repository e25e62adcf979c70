package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway/configsecrets"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/console"
	"github.com/toolgate/toolgate/gateway/signingkey"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/internal/regularfile"
	"github.com/toolgate/toolgate/policy"
)

const checkUsage = `usage:
  toolgate check config FILE...   check configuration files as serve would read them, without starting
                                  anything: every problem as FILE:LINE: message (exit 1 when there is one)
`

// checkConfigAbout is what "toolgate check config -h" says.
const checkConfigAbout = `Checks configuration files as serve would read them, without starting
anything: every problem as FILE:LINE: message on stderr, one FILE: ok line
on stdout for a file without. Exit 0 when every file is fine, 1 when one
has problems, 2 on a usage error.
`

// checkCmd runs the check subcommands.
func checkCmd(ctx context.Context, args []string, std stdio) int {
	return checkGroup().run(ctx, args, std)
}

// checkGroup is the commands of "toolgate check".
func checkGroup() group {
	return group{name: "toolgate check", usage: checkUsage, commands: map[string]command{
		"config": checkConfigCmd,
	}}
}

// checkConfigCmd checks configuration files. Exit 0 when every file is
// fine, 1 when one has problems, 2 on a usage error.
func checkConfigCmd(_ context.Context, args []string, std stdio) int {
	fs := newFlagSet("toolgate check config", "FILE...", checkConfigAbout, std)
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	files := fs.Args()
	if len(files) == 0 {
		fs.Usage()
		return exitError
	}
	code := exitOK
	for _, file := range files {
		r := checkConfig(file, std.Getenv)
		for _, p := range r.problems {
			if p.at != "" {
				fmt.Fprintf(std.Err, "%s: %s\n", p.at, p.msg)
				continue
			}
			fmt.Fprintf(std.Err, "%s:%d: %s\n", file, p.line, p.msg)
		}
		if len(r.problems) > 0 {
			code = exitFailure
			continue
		}
		fmt.Fprintf(std.Out, "%s: ok: %s\n", file, strings.Join(r.summary, "; "))
	}
	return code
}

// problem is one thing wrong with a configuration, at a line of its file,
// or, for a policy problem, at the position at of a policy file.
type problem struct {
	line int
	msg  string
	at   string
}

// checkReport is what checking one configuration found.
type checkReport struct {
	problems []problem
	summary  []string // what a fine configuration amounts to, for its ok line
}

// checkConfig checks the configuration at path as serve reads it: decoded
// on top of the embedded default, validated, its front doors loaded, its
// layout checked, its policy folder loaded, its TLS pair and secrets read, its
// redaction rules compiled, its signing key and the replicas' keys read and its tracing settings,
// with the OTEL_* environment, checked. It neither listens,
// nor contacts a store or a peer, nor creates a file. A file that does not
// decode stops the check there; every later step is independent of the
// others, so each reports its own problem.
func checkConfig(path string, getenv func(string) string) checkReport {
	var r checkReport
	data, err := config.ReadConfigFile(path)
	if err != nil {
		r.problems = append(r.problems, problem{line: 1, msg: trimConfigPrefix(err.Error(), path)})
		return r
	}
	cfg, err := config.LoadConfigData(path, data)
	if err != nil {
		r.problems = problemsOf(err, path, nil)
		return r
	}
	var root yaml.Node
	// The file decoded, so it parses; root stays empty (every line 1)
	// otherwise.
	_ = yaml.Unmarshal(data, &root)
	add := func(err error) {
		r.problems = append(r.problems, problemsOf(err, path, &root)...)
	}
	if err := cfg.Validate(); err != nil {
		add(err)
	}
	doors, err := frontdoor.Load(cfg)
	if err != nil {
		add(err)
	}
	if c, err := console.Load(cfg); err != nil {
		add(err)
	} else if c.Listen != "" {
		cfg.SectionSettings = map[string]any{"console": c}
		r.summary = append(r.summary, "console "+c.Listen)
		if c.OIDC != nil {
			if _, err := c.OIDC.ClientSecret.Read(getenv); err != nil {
				add(fmt.Errorf("config: console.oidc.client_secret: %w", err))
			}
		}
	}
	if err := cfg.CheckLayout(); err != nil {
		add(err)
	}
	r.summary = append(r.summary, "listen "+cfg.Listen)
	if len(doors) > 0 {
		r.summary = append(r.summary, "front doors "+doorList(doors))
	}
	refs, lines := checkPolicies(cfg, pathLine(&root, "policies.dir"))
	r.problems = append(r.problems, lines...)
	if len(lines) == 0 {
		if err := cfg.CheckPolicyRefs(refs); err != nil {
			add(err)
		}
		r.summary = append(r.summary, fmt.Sprintf("%d policy set(s) in %s", len(refs), cfg.Policies.Dir))
	}
	if err := checkTLS(cfg.TLS); err != nil {
		add(err)
	}
	// An invalid telemetry.otlp_endpoint is Validate's problem; what is
	// left is the OTEL_* environment, which serve refuses the same way.
	if cfg.Telemetry.Validate() == nil {
		if endpoint, err := telemetry.TracingEndpoint(cfg.Telemetry, getenv); err != nil {
			add(err)
		} else if endpoint != "" {
			r.summary = append(r.summary, "traces to "+endpoint)
		}
	}
	if err := secretFilesReadable(cfg); err != nil {
		add(err)
	} else if err := configsecrets.Check(cfg, getenv); err != nil {
		add(err)
	}
	if err := checkRedaction(cfg.Redact); err != nil {
		add(err)
	}
	note, err := checkSigningKey(cfg, getenv)
	if err != nil {
		add(err)
	} else {
		r.summary = append(r.summary, note)
	}
	if n := len(cfg.Evidence.TrustedKeys); n > 0 {
		r.summary = append(r.summary, fmt.Sprintf("trusts %d replica key(s)", n))
	}
	return r
}

// checkPolicies loads the policy folder as serve does, and returns its set
// names, or the problems found: each policy problem carries its own
// file:line:col, which is kept; the others are placed at dirLine, the line
// of policies.dir.
func checkPolicies(cfg config.Config, dirLine int) ([]string, []problem) {
	if dirLine == 0 {
		dirLine = 1
	}
	if err := checkPolicyFiles(cfg.Policies.Dir); err != nil {
		return nil, []problem{{line: dirLine, msg: "policies.dir: " + err.Error()}}
	}
	engine, err := policy.Load(cfg.Policies.Dir)
	if err == nil {
		return engine.Refs(), nil
	}
	var out []problem
	for _, msg := range strings.Split(err.Error(), "\n") {
		if m := policyPos.FindStringSubmatch(msg); m != nil {
			// "<dir>/<file>:<line>:<col>: …" points into the policy file
			// itself, where an editor should jump.
			out = append(out, problem{msg: m[2], at: m[1]})
			continue
		}
		out = append(out, problem{line: dirLine, msg: "policies.dir: " + msg})
	}
	return nil, out
}

// policyPos matches a policy problem that names its own file and line.
var policyPos = regexp.MustCompile(`^(\S+:\d+(?::\d+)?): (.*)$`)

// checkPolicyFiles refuses policy files that would hang or exhaust the
// loader: policy.Load reads every <name>.cedar and the schema whole,
// following symbolic links (mounted configuration presents files so), so
// a link to a named pipe or a device would block it or read for ever.
func checkPolicyFiles(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read policy folder: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !(strings.HasSuffix(name, ".cedar") || name == policy.SchemaFile) || strings.HasPrefix(name, ".") {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode().IsRegular() {
			continue // policy.Load reports (or skips) it
		}
		return fmt.Errorf("%s is %s, not a policy file", filepath.Join(dir, name), regularfile.Kind(fi.Mode()))
	}
	return nil
}

// checkSigningKey reads the signing key as serve reads it, through the
// gateway's own reader, never creating it, and says which key signs.
func checkSigningKey(cfg config.Config, getenv func(string) string) (string, error) {
	src := cfg.Evidence.SigningKey
	if src != nil && !src.None && !src.Create {
		if err := regularFile("evidence.signing_key", src.File, "key file"); err != nil {
			return "", err
		}
	}
	_, err := signingkey.PublicKey(cfg, getenv)
	switch {
	case errors.Is(err, signingkey.ErrUnsigned):
		return "manifests unsigned (evidence.signing_key: none)", nil
	case errors.Is(err, signingkey.ErrNoKeyYet):
		dir := filepath.Dir(src.File)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return "", fmt.Errorf("config: evidence.signing_key.file %s: folder %s does not exist, so the key cannot be created there", src.File, dir)
		}
		return "signing key " + src.File + " would be created on first start", nil
	case err != nil:
		return "", err
	case src.Env != "":
		return "manifests signed with the key in $" + src.Env, nil
	default:
		return "manifests signed with " + src.File, nil
	}
}

// checkTLS loads the listener's certificate and key as serve does
// (credentials.NewServerTLSFromFile loads them with tls.LoadX509KeyPair).
// A half-given pair is Validate's to report.
func checkTLS(c config.TLSConfig) error {
	if c.CertFile == "" || c.KeyFile == "" {
		return nil
	}
	err := errors.Join(regularFile("tls.cert_file", c.CertFile, "certificate file"),
		regularFile("tls.key_file", c.KeyFile, "key file"))
	if err != nil {
		return err
	}
	if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
		return fmt.Errorf("config: tls: %w", err)
	}
	return nil
}

// secretFilesReadable refuses secret and key files other than the signing
// key (whose check is checkSigningKey's) that would block or never end.
func secretFilesReadable(cfg config.Config) error {
	var errs []error
	if fk := cfg.Redact.FingerprintKey; fk != nil {
		errs = append(errs, regularFile("redact.fingerprint_key", fk.File, "key file"))
	}
	if wh := cfg.Approvals.Webhook; wh != nil {
		errs = append(errs, regularFile("approvals.webhook.secret", wh.Secret.File, "key file"))
	}
	if mk := cfg.Evidence.SharedMACKey; mk != nil {
		errs = append(errs, regularFile("evidence.shared_mac_key", mk.File, "key file"))
	}
	for i, k := range cfg.Evidence.TrustedKeys {
		errs = append(errs, regularFile(fmt.Sprintf("evidence.trusted_keys[%d]", i), k.File, "key file"))
	}
	return errors.Join(errs...)
}

// regularFile refuses a file, given under key, that exists but is not a
// regular file: serve reads key and rules files whole, so a named pipe
// would block it and a device could never end. what names the file the
// key wants.
func regularFile(key, path, what string) error {
	if path == "" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("config: %s: %s is %s, not a %s", key, path, regularfile.Kind(fi.Mode()), what)
	}
	return nil
}

// trimConfigPrefix drops what a configuration error repeats of the line a
// problem is printed on: the "config: " prefix and the file's own path.
func trimConfigPrefix(msg, path string) string {
	for {
		switch {
		case strings.HasPrefix(msg, "config: "):
			msg = msg[len("config: "):]
		case strings.HasPrefix(msg, path+": "):
			msg = msg[len(path)+2:]
		default:
			return msg
		}
	}
}

// yamlErrors splits yaml.v3's list of decode errors, one per line after
// its header.
const yamlErrors = "yaml: unmarshal errors:\n"

// atLine matches a message that carries its own line: "line 7: …", as
// yaml.v3 and the configuration's own decoders write them.
var atLine = regexp.MustCompile(`(?s)^(.*?)(?:yaml: )?line (\d+): (.*)$`)

// problemsOf turns an error of the configuration's decoding or checks into
// problems at lines of the file: a line the message gives itself, else the
// line of the key its message starts with (looked up in root), else line 1.
func problemsOf(err error, path string, root *yaml.Node) []problem {
	var out []problem
	head := "" // what a list of yaml.v3 errors is an error of
	for _, msg := range strings.Split(err.Error(), "\n") {
		msg = trimConfigPrefix(msg, path)
		switch {
		case strings.HasSuffix(msg, yamlErrors[:len(yamlErrors)-1]):
			head = strings.TrimSuffix(msg, yamlErrors[:len(yamlErrors)-1])
		case strings.HasPrefix(msg, "  "):
			out = append(out, problemOf(head+strings.TrimSpace(msg), root))
		case msg != "":
			head = ""
			out = append(out, problemOf(msg, root))
		}
	}
	return out
}

// problemOf places one line of an error message; see problemsOf.
func problemOf(msg string, root *yaml.Node) problem {
	if m := atLine.FindStringSubmatch(msg); m != nil {
		if line, err := strconv.Atoi(m[2]); err == nil && line > 0 {
			return problem{line: line, msg: strings.TrimSpace(strings.TrimSpace(m[1]) + " " + m[3])}
		}
	}
	line := 0
	if root != nil {
		line = pathLine(root, keyPathOf(msg))
	}
	if line == 0 {
		line = 1
	}
	return problem{line: line, msg: msg}
}

// keyPathOf returns the dotted key path a message starts with:
// "tools.files.read.driver" of `tools.files.read.driver "x": no such driver`.
func keyPathOf(msg string) string {
	if i := strings.IndexAny(msg, " :\"("); i >= 0 {
		return msg[:i]
	}
	return msg
}

// pathLine returns the line of the key that the dotted path (with [i] for
// sequence items) names in the YAML document root, or of the deepest key
// of it that exists, or 0. Map keys may hold dots themselves (tool ids
// do), so the longest key that matches a prefix of the path wins.
func pathLine(root *yaml.Node, path string) int {
	n, line := root, 0
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	// Every step consumes path, except an alias, which is followed at
	// most once per step.
	for steps := 0; path != "" && steps <= 2*len(path)+2; steps++ {
		switch n.Kind {
		case yaml.AliasNode:
			if n.Alias == nil {
				return line
			}
			n = n.Alias
		case yaml.MappingNode:
			best := -1
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if keyPrefix(path, k) && (best < 0 || len(k) > len(n.Content[best].Value)) {
					best = i
				}
			}
			if best < 0 {
				return line
			}
			line = n.Content[best].Line
			path = strings.TrimPrefix(path[len(n.Content[best].Value):], ".")
			n = n.Content[best+1]
		case yaml.SequenceNode:
			end := strings.IndexByte(path, ']')
			if !strings.HasPrefix(path, "[") || end < 0 {
				return line
			}
			i, err := strconv.Atoi(path[1:end])
			if err != nil || i < 0 || i >= len(n.Content) {
				return line
			}
			n = n.Content[i]
			line = n.Line
			path = strings.TrimPrefix(path[end+1:], ".")
		default:
			return line
		}
	}
	return line
}

// keyPrefix reports whether the map key k is the first step of path.
func keyPrefix(path, k string) bool {
	if k == "" || !strings.HasPrefix(path, k) {
		return false
	}
	return len(path) == len(k) || path[len(k)] == '.' || path[len(k)] == '['
}

// doorList is "mcp 127.0.0.1:8788, tpmjs 127.0.0.1:8787".
func doorList(doors []frontdoor.Loaded) string {
	names := make([]string, len(doors))
	for i, d := range doors {
		names[i] = d.Name + " " + d.Config.ListenAddr()
	}
	return strings.Join(names, ", ")
}

// checkRedaction compiles the rule set serve builds its redactor from: the
// default rules, the rules file, and the ids disable_rules names, which
// must exist.
func checkRedaction(c config.RedactConfig) error {
	if err := regularFile("redact.rules_file", c.RulesFile, "rules file"); err != nil {
		return err
	}
	_, err := newRuleRedactor(c)
	if err != nil {
		return redactProblem(err)
	}
	return nil
}

// redactProblem names the key a redaction rule-set error is about: the
// rules file for a problem in it, else disable_rules.
func redactProblem(err error) error {
	msg := strings.TrimPrefix(err.Error(), "redact: ")
	key := "redact.disable_rules"
	if strings.HasPrefix(msg, "rules ") {
		key = "redact.rules_file"
	}
	return fmt.Errorf("config: %s: %s", key, msg)
}
