package gateway

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/execbox"
	"github.com/toolgate/toolgate/drivers/tpmjs"
	"github.com/toolgate/toolgate/drivers/workspace"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// The one line a new kind needs: its registration. Everything else about
// "fake" (its keys, defaults, validation, published tool, secret and
// folder) lives in the types below, as it would in the kind's package.
func init() {
	drivers.Register(drivers.Kind{Type: "fake", New: func() drivers.Config { return &fakeConfig{Greeting: "hello"} }})
}

type fakeConfig struct {
	// Greeting is what the greet tool answers (default hello).
	Greeting string `yaml:"greeting"`
	// SecretEnv names a variable holding a secret the driver prints.
	SecretEnv string `yaml:"secret_env"`
	// Box is a folder callers write.
	Box string `yaml:"box"`
}

func (c *fakeConfig) Validate(drivers.Validation) error {
	if c.Greeting == "" {
		return errors.New("greeting: must not be empty")
	}
	return nil
}

func (c *fakeConfig) Build(_ context.Context, _ string, env drivers.BuildEnv) (drivers.Driver, error) {
	return fakeDriver{greeting: c.Greeting, secret: env.Getenv(c.SecretEnv)}, nil
}

func (c *fakeConfig) Footprint(getenv func(string) string) drivers.Footprint {
	return drivers.Footprint{Secrets: []string{getenv(c.SecretEnv)}, Workspaces: []drivers.NamedPath{{Key: "box", Path: c.Box}}}
}

func (c *fakeConfig) Published() []drivers.PublishedTool {
	return []drivers.PublishedTool{{Target: "greet", Description: "greets", Tags: []string{"fake"}}}
}

type fakeDriver struct{ greeting, secret string }

func (fakeDriver) Engine() string { return "fake" }

func (d fakeDriver) Run(_ context.Context, c drivers.Call) (drivers.Result, error) {
	if c.Target != "greet" {
		return drivers.Result{}, drivers.ErrUnknownTarget
	}
	return drivers.Result{Stdout: d.greeting + " " + d.secret + "\n"}, nil
}

func TestAKindNeedsOneLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pol := filepath.Join(dir, "policies")
	if err := os.Mkdir(pol, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pol, "policy.default.cedar"), []byte("permit (principal, action, resource);\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const secret = "fake-secret-value-0123456789"
	getenv := func(name string) string {
		if name == "FAKE_SECRET" {
			return secret
		}
		return ""
	}
	text := func(box string) string {
		return "instance: kinds\nlisten: 127.0.0.1:1\npolicies: {dir: " + pol + "}\nevidence: {url: 'mem://', spool_dir: none, signing_key: none}\n" +
			"drivers:\n  f: {type: fake, secret_env: FAKE_SECRET, box: " + box + "}\n"
	}

	t.Run("its folder is kept apart from the gateway's files", func(t *testing.T) {
		cfg, err := config.ParseConfig([]byte(text(filepath.Join(pol, "box"))))
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.CheckLayout(); err == nil || !strings.Contains(err.Error(), "drivers.f.box") {
			t.Fatalf("CheckLayout = %v, want drivers.f.box refused inside policies.dir", err)
		}
	})
	t.Run("its unknown keys are refused", func(t *testing.T) {
		_, err := config.ParseConfig([]byte(text(filepath.Join(dir, "box")) + "  g: {type: fake, greting: hi}\n"))
		if err == nil || !strings.Contains(err.Error(), "greting") {
			t.Fatalf("ParseConfig = %v", err)
		}
	})

	cfg, err := config.ParseConfig([]byte(text(filepath.Join(dir, "box"))))
	if err != nil {
		t.Fatal(err)
	}
	g, closer, err := Build(context.Background(), cfg, getenv, nil)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Cleanup(func() { closer.Close() })
	conn := serve(t, g)
	e := &env{t: t, store: g.store, gw: g, conn: conn, client: toolgatev1.NewToolGatewayClient(conn)}
	resp := e.mustCall("fake-1", "f.greet", map[string]any{})
	body, _ := protojson.Marshal(resp.GetToolResult())
	if !strings.Contains(string(body), "hello") {
		t.Fatalf("the published tool did not answer with the kind's default greeting: %s", body)
	}
	if strings.Contains(string(body), secret) {
		t.Fatalf("the kind's secret was not redacted: %s", body)
	}
}

func TestUnknownKeyIsAnErrorInEveryKind(t *testing.T) {
	t.Parallel()
	for _, kind := range drivers.KindTypes() {
		t.Run(kind, func(t *testing.T) {
			_, err := config.ParseConfig([]byte("listen: 127.0.0.1:1\ndrivers:\n  x:\n    type: " + kind + "\n    roots: /tmp/x\n"))
			if err == nil || !strings.Contains(err.Error(), "roots") || !strings.Contains(err.Error(), "line 5") {
				t.Fatalf("ParseConfig error = %v, want the misspelt key refused at line 5", err)
			}
		})
	}
	t.Run("a key of another kind is unknown too", func(t *testing.T) {
		_, err := config.ParseConfig([]byte("drivers: {w: {type: workspace, root: w, url: 'http://x'}}\n"))
		if err == nil || !strings.Contains(err.Error(), "field url not found") {
			t.Fatalf("ParseConfig error = %v, want tpmjs's url refused in a workspace section", err)
		}
	})
	t.Run("a value of the wrong type is reported at its line", func(t *testing.T) {
		_, err := config.ParseConfig([]byte("drivers:\n  w:\n    type: workspace\n    output_limit: lots\n"))
		if err == nil || !strings.Contains(err.Error(), "line 4") {
			t.Fatalf("ParseConfig error = %v", err)
		}
	})
}

func TestDefaultsLiveInTheKind(t *testing.T) {
	t.Parallel()
	cfg, err := config.ParseConfig([]byte(`drivers:
  w: {type: workspace, root: w}
  w2: {type: workspace, root: w, output_limit: 10, sandbox: none}
  t: {type: tpmjs, url: 'http://127.0.0.1:1'}
  e: {type: execbox, command: [runner]}
`))
	if err != nil {
		t.Fatal(err)
	}
	w := cfg.Drivers["w"].Config.(*workspace.DriverConfig)
	if w.OutputLimit != 1<<20 || w.DefaultTimeout != 30*time.Second || w.Sandbox != workspace.SandboxNamespaces ||
		w.Network != "" || w.MaxProcesses != 256 || w.MaxMemoryBytes != 4<<30 || w.MaxFileBytes != 1<<30 {
		t.Errorf("workspace defaults = %+v", w)
	}
	if w2 := cfg.Drivers["w2"].Config.(*workspace.DriverConfig); w2.OutputLimit != 10 || w2.Sandbox != workspace.SandboxNone || w2.DefaultTimeout != 30*time.Second {
		t.Errorf("set keys did not win over the defaults, or unset ones lost theirs: %+v", w2)
	}
	tp := cfg.Drivers["t"].Config.(*tpmjs.DriverConfig)
	if tp.HealthTimeout != time.Second || tp.CallTimeout != 120*time.Second || tp.MaxResponseBytes != 10<<20 || tp.RegistryVersion != "latest" {
		t.Errorf("tpmjs defaults = %+v", tp)
	}
	ex := cfg.Drivers["e"].Config.(*execbox.DriverConfig)
	if ex.Timeout != 30*time.Second || ex.MemoryLimitBytes != 64<<20 || ex.MaxLogLines != 1000 || ex.MaxLogChars != 64000 ||
		ex.Pool != 0 || ex.MaxNestedCalls != nil {
		t.Errorf("execbox defaults = %+v", ex)
	}
	// Two sections of one kind do not share settings.
	if cfg.Drivers["w"].Config == cfg.Drivers["w2"].Config {
		t.Error("two sections share one settings value")
	}
}

func TestExecboxPoolValidatedOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, yaml, want string }{
		{"a pool over the driver's bound is a configuration error", "drivers: {x: {type: execbox, command: [r], pool: 100}}",
			"config: drivers.x.pool: must be between 0 and 64, got 100"},
		{"a pool for a WebSocket runner is a configuration error", "drivers: {x: {type: execbox, url: 'ws://127.0.0.1:1', pool: 2}}",
			"config: drivers.x.pool: applies to command runners only"},
		{"a negative pool keeps its message", "drivers: {x: {type: execbox, command: [r], pool: -1}}",
			"config: drivers.x: pool, timeout and limits must not be negative"},
		{"a sub-millisecond timeout is a configuration error", "drivers: {x: {type: execbox, command: [r], timeout: 1us}}",
			"config: drivers.x.timeout: must be at least 1ms, got 1µs"},
		{"a pool at the bound is valid", "drivers: {x: {type: execbox, command: [r], pool: 64}}", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.ParseConfig([]byte("listen: 127.0.0.1:1\n" + tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			err = cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDriverTypeErrorsNameTheKinds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"drivers: {x: {root: w}}", "config: drivers.x.type: required (execbox, fake, tpmjs or workspace)"},
		{"drivers: {x: {type: ftp, host: y}}", `config: drivers.x.type "ftp": unknown driver type (this build has: execbox, fake, tpmjs, workspace)`},
	} {
		cfg, err := config.ParseConfig([]byte("listen: 127.0.0.1:1\n" + tc.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("Validate = %v, want %q", err, tc.want)
		}
	}
}
