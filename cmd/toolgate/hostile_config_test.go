package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveMustRefuse runs `toolgate serve ARGS...` in dir and returns its
// stderr, failing the test if the server starts instead of refusing.
func serveMustRefuse(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return serveMustRefuseEnv(t, dir, nil, args...)
}

// serveMustRefuseEnv is serveMustRefuse with extra environment variables.
func serveMustRefuseEnv(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, toolgateBin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	switch {
	case ctx.Err() != nil:
		t.Fatalf("serve %v started instead of refusing:\n%s", args, stderr.String())
	case err == nil:
		t.Fatalf("serve %v exited 0 instead of refusing:\n%s", args, stderr.String())
	case strings.Contains(stderr.String(), "toolgate serving"):
		t.Fatalf("serve %v served before it stopped:\n%s", args, stderr.String())
	}
	return stderr.String()
}

// TestHostileDangerousConfiguration (class 6): a layout that puts the
// gateway's own files within a workspace is refused at start, and a stored
// answer rewritten on disk is not replayed.
func TestHostileDangerousConfiguration(t *testing.T) {
	t.Parallel()
	t.Run("a createFile caller cannot rewrite policy through --workspace .", func(t *testing.T) {
		// Before, this started: a caller allowed only to create files wrote
		// policies/policy.default.cedar, hot reload took it, and the shell
		// was allowed.
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{
			"policies/policy.default.cedar": `@id("create") permit (principal, action, resource == Tool::"workspace.createFile");`,
			"toolgate.yaml":                 "policies: {dir: ./policies, reload_interval: 50ms}\n",
		})
		stderr := serveMustRefuse(t, dir, "--config", "toolgate.yaml", "--workspace", ".")
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"drivers.workspace.root (" + real + ") contains policies.dir (" + filepath.Join(real, "policies") + ")"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
	})

	tests := []struct {
		name    string
		config  string
		files   map[string]string
		symlink [2]string // old, new
		want    string
	}{
		{"workspace inside the policy folder", "drivers: {workspace: {type: workspace, root: ./policies/ws}}", nil, [2]string{},
			"drivers.workspace.root (DIR/policies/ws) lies inside policies.dir (DIR/policies)"},
		{"evidence folder inside the workspace", "evidence: {url: file://./ws/evidence}\ndrivers: {workspace: {type: workspace, root: ./ws}}", nil, [2]string{},
			"drivers.workspace.root (DIR/ws) contains evidence.url (DIR/ws/evidence)"},
		{"workspace inside the evidence folder", "evidence: {url: file://./ev}\ndrivers: {workspace: {type: workspace, root: ./ev/ws}}", nil, [2]string{},
			"drivers.workspace.root (DIR/ev/ws) lies inside evidence.url (DIR/ev)"},
		{"spool inside the workspace", "evidence: {spool_dir: ./ws/spool}\ndrivers: {workspace: {type: workspace, root: ./ws}}", nil, [2]string{},
			"contains evidence.spool_dir (DIR/ws/spool)"},
		{"trace folder inside the workspace", "drivers: {workspace: {type: workspace, root: ./ws}, tpmjs: {type: tpmjs, url: 'http://127.0.0.1:1', trace_dir: ./ws/trace}}", nil, [2]string{},
			"contains drivers.tpmjs.trace_dir (DIR/ws/trace)"},
		{"signing key inside the workspace", "evidence: {signing_key: {file: ./ws/signing.pem}}\ndrivers: {workspace: {type: workspace, root: ./ws}}", nil, [2]string{},
			"contains evidence.signing_key.file (DIR/ws/signing.pem)"},
		{"fingerprint key inside the workspace", "redact: {fingerprint_key: {file: ./ws/fp.key}}\ndrivers: {workspace: {type: workspace, root: ./ws}}", nil, [2]string{},
			"contains redact.fingerprint_key.file (DIR/ws/fp.key)"},
		{"the configuration file inside the workspace", "drivers: {workspace: {type: workspace, root: .}}\npolicies: {dir: ../policies}\nevidence: {url: file://../ev, spool_dir: ../spool, signing_key: {file: ../toolgate-signing.key, create: true}}", nil, [2]string{},
			"contains the configuration file (DIR/cfg/toolgate.yaml)"},
		{"a symlinked alias of the policy folder", "drivers: {workspace: {type: workspace, root: ./alias}}", nil, [2]string{"policies", "alias"},
			"drivers.workspace.root (DIR/policies) is policies.dir (DIR/policies)"},
		{"a ws/../ spelling of the repository", "drivers: {workspace: {type: workspace, root: ./ws/../}}", nil, [2]string{},
			"drivers.workspace.root (DIR) contains policies.dir (DIR/policies)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			writePolicy(t, dir, `@id("reads") permit (principal, action, resource == Tool::"workspace.readFile");`)
			cfgDir := dir
			if strings.Contains(tc.want, "configuration file") {
				cfgDir = filepath.Join(dir, "cfg")
			}
			writeFiles(t, cfgDir, map[string]string{"toolgate.yaml": tc.config})
			if tc.symlink[0] != "" {
				if err := os.Symlink(filepath.Join(dir, tc.symlink[0]), filepath.Join(dir, tc.symlink[1])); err != nil {
					t.Fatal(err)
				}
			}
			stderr := serveMustRefuse(t, cfgDir, "--config", "toolgate.yaml")
			if want := strings.ReplaceAll(tc.want, "DIR", dir); !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		})
	}

	t.Run("a stored answer rewritten on disk is not replayed", func(t *testing.T) {
		dir := tourDir(t)
		srv := startServer(t, dir)
		call := []string{"call", "--addr", srv.addr, "--request-id", "flip-1", "--tool", "workspace.shell", "--args", `{"command": "touch pwned"}`}
		out, _, _ := runTool(t, dir, call...)
		if !strings.Contains(out, `"decision": "deny"`) {
			t.Fatalf("first answer:\n%s", out)
		}
		path := filepath.Join(dir, "toolgate-evidence", "requests", "flip-1", "response.json")
		body, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var resp map[string]any
		if err := json.Unmarshal(body, &resp); err != nil {
			t.Fatal(err)
		}
		resp["ok"] = true
		resp["policy_check"].(map[string]any)["decision"] = "allow"
		flipped, err := json.MarshalIndent(resp, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(flipped, '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
		out, stderr, code := runTool(t, dir, call...)
		if code != exitError || strings.Contains(out, `"allow"`) || !strings.Contains(stderr, "DataLoss") ||
			!strings.Contains(stderr, "does not match its manifest") {
			t.Fatalf("retry: exit %d\n%s%s\nwant DATA_LOSS saying the stored response does not match its manifest", code, out, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "workspace", "pwned")); err == nil {
			t.Fatal("the retry ran the denied command")
		}
	})
}
