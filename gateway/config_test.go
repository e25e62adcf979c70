package gateway

import (
	"slices"
	"testing"

	"github.com/toolgate/toolgate/config"
)

func TestGatewayPathsHideEveryFileOfTheGateway(t *testing.T) {
	t.Parallel()
	cfg, err := config.ParseConfig([]byte(`
policies: {dir: /srv/tg/policies}
tls: {cert_file: /etc/tg/cert.pem, key_file: /etc/tg/key.pem}
evidence: {url: file:///srv/tg/evidence, spool_dir: /srv/tg/spool, signing_key: {file: /etc/tg/signing.pem}}
redact: {rules_file: /etc/tg/rules.toml, fingerprint_key: {file: /etc/tg/fp.key}}
approvals: {webhook: {url: 'https://hooks.example/x', secret: {file: /etc/tg/webhook.key}}}
drivers:
  ws: {type: workspace, root: /srv/tg/ws}
  js: {type: tpmjs, url: 'http://127.0.0.1:1', trace_dir: /srv/tg/traces}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.File = "/etc/tg/toolgate.yaml"
	cfg.DoorSettings = map[string]any{"door": &struct {
		StateKeyFile string `yaml:"state_key_file" secret:"file"`
	}{"/etc/tg/door-state.key"}}
	got := hiddenPaths(cfg)
	for _, want := range []string{"/srv/tg/policies", "/etc/tg/cert.pem", "/etc/tg/key.pem", "/srv/tg/evidence", "/srv/tg/spool",
		"/etc/tg/signing.pem", "/etc/tg/rules.toml", "/etc/tg/fp.key", "/srv/tg/traces", "/etc/tg/toolgate.yaml",
		"/etc/tg/webhook.key", "/etc/tg/door-state.key"} {
		if !slices.Contains(got, want) {
			t.Errorf("hiddenPaths lacks %s: %v", want, got)
		}
	}
	if slices.Contains(got, "/srv/tg/ws") || slices.Contains(got, "") {
		t.Errorf("hiddenPaths holds the workspace or an empty path: %v", got)
	}
}
