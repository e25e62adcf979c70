package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
)

// gapToken is a token the rules detect (a GitHub PAT), gapCallerSecret an
// environment value a caller hands a tool.
const (
	gapToken        = "ghp_" + "R7kQ2mX9vL4pT8wZ1nB6cY3dF5gH0jK2sA4e"
	gapCallerSecret = "c4ll3r-S3cret-9f8e7d6c5b4a39281706"
)

// base64Windows returns every 8 characters of the base64 of secret at each
// of the three alignments, in both alphabets: any of them in the evidence
// decodes to part of the secret.
func base64Windows(secret string) []string {
	var out []string
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for align := range 3 {
			b := enc.EncodeToString(append(bytes.Repeat([]byte{0}, align), secret...))
			mid := b[4 : len(b)-4]
			for i := 0; i+8 <= len(mid); i++ {
				out = append(out, mid[i:i+8])
			}
		}
	}
	return out
}

// leakIn returns the first of forms text holds, or "".
func leakIn(text string, forms []string) string {
	for _, f := range forms {
		if strings.Contains(text, f) {
			return f
		}
	}
	return ""
}

// aligned returns a file that holds secret after key= at byte alignment
// align, among lines of ordinary text.
func aligned(key, secret string, align int) string {
	head := strings.Repeat("# deploy settings, read by the release job\n", 2) + key + "="
	for len(head)%3 != align {
		head = " " + head
	}
	return head + secret + "\nretries: 3\n" + strings.Repeat("log_level: info\n", 3)
}

// TestHostileBase64Read: a file holding a token the rules detect and the
// configured secret, read with encoding base64, or printed by `base64` at 76
// and 64 columns, reaches neither the reply nor the evidence in any way
// that decodes to either, at any alignment of either in the file.
func TestHostileBase64Read(t *testing.T) {
	t.Parallel()
	srv, requests := hostileRedactServer(t)
	forms := append(base64Windows(gapToken), base64Windows(redactSecret)...)
	for align := range 3 {
		file := aligned("GITHUB_TOKEN", gapToken, align) + aligned("DEPLOY_KEY", redactSecret, (align+1)%3)
		name := fmt.Sprintf("deploy-%d.env", align)
		if err := os.WriteFile(filepath.Join(srv.dir, "workspace", name), []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		calls := []struct {
			name, tool string
			args       map[string]any
		}{
			{"readFile with encoding base64", "workspace.readFile", map[string]any{"path": name, "encoding": "base64"}},
			{"base64 at 76 columns", "workspace.shell", map[string]any{"command": "base64 < " + name}},
			{"base64 -w 64 with CRLF", "workspace.shell", map[string]any{"command": "base64 -w 64 < " + name + " | sed 's/$/\\r/'"}},
		}
		for i, c := range calls {
			t.Run(fmt.Sprintf("%s/alignment %d", c.name, align), func(t *testing.T) {
				id := fmt.Sprintf("b64-%d-%d", align, i)
				resp, err := redactCall(t, srv.addr, id, c.tool, c.args)
				if err != nil || resp.GetToolResult().GetExitCode() != 0 {
					t.Fatalf("the call did not run: %v %v", err, resp)
				}
				reply, _ := protojson.Marshal(resp)
				replyText := strings.NewReplacer(`\r`, "", `\n`, "").Replace(string(reply))
				if f := leakIn(replyText, forms); f != "" {
					t.Errorf("the reply holds %q of an encoded secret", f)
				}
				if f := leakIn(evidenceStrings(t, requests, id), forms); f != "" {
					t.Errorf("the evidence holds %q of an encoded secret", f)
				}
				if !strings.Contains(string(reply), "[REDACTED:github-pat]") {
					t.Errorf("the reply names no github-pat redaction: %s", reply)
				}
			})
		}
	}
}

// TestHostileCallerSecretEchoes: a tool echoes the caller's environment
// secret in part — all but its last characters, a slice of its middle —
// reversed, and base64-encoded, line-wrapped with CRLF, at each alignment.
// None of it reaches the reply, tool_result.json, response.json or the
// driver's trace.
func TestHostileCallerSecretEchoes(t *testing.T) {
	t.Parallel()
	exec := tpmjstest.New(t, tpmjstest.NodeV10)
	exec.RegisterTool(tpmjstest.Package, "leakyTool", func(_ map[string]any, env map[string]string) (any, error) {
		s := env["API_KEY"]
		rev := []byte(s)
		for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
			rev[i], rev[j] = rev[j], rev[i]
		}
		out := map[string]any{
			"prefix":   "key starts " + s[:len(s)-3] + "\n",
			"middle":   "[" + s[4:28] + "]",
			"reversed": string(rev),
		}
		for align := range 3 {
			enc := base64.StdEncoding.EncodeToString([]byte(aligned("API_KEY", s, align)))
			var b strings.Builder
			for len(enc) > 76 {
				b.WriteString(enc[:76] + "\r\n")
				enc = enc[76:]
			}
			b.WriteString(enc + "\r\n")
			out[fmt.Sprintf("base64_%d", align)] = b.String()
		}
		return out, nil
	})
	dir := t.TempDir()
	writePolicy(t, dir, `@id("leaky") permit (principal, action, resource == Tool::"fake.leaky");`)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
policies: {dir: ./policies}
evidence: {url: file://./toolgate-evidence, spool_dir: none}
drivers:
  tpmjs: {type: tpmjs, url: %q, trace_dir: ./traces}
tools:
  fake.leaky: {driver: tpmjs, package: %q, version: "1.0.0", export: leakyTool, caller_env: [API_KEY]}
`, exec.URL, tpmjstest.Package)
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, dir, "--config", "toolgate.yaml")
	resp, err := redactCall(t, srv.addr, "echoes-1", "fake.leaky", map[string]any{"_env": map[string]any{"API_KEY": gapCallerSecret}})
	if err != nil {
		t.Fatalf("the call failed: %v", err)
	}
	rev := []byte(gapCallerSecret)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	// Runs of 17 bytes (half the secret) are redacted: any 17 of them left
	// would be a leak.
	var forms []string
	for i := 0; i+17 <= len(gapCallerSecret); i++ {
		forms = append(forms, gapCallerSecret[i:i+17])
	}
	forms = append(append(forms, string(rev)), base64Windows(gapCallerSecret)...)
	reply, _ := protojson.Marshal(resp)
	texts := map[string]string{"the reply": strings.NewReplacer(`\r`, "", `\n`, "").Replace(string(reply))}
	for _, name := range []string{"tool_result.json", "response.json"} {
		b, err := os.ReadFile(filepath.Join(dir, "toolgate-evidence", "requests", "echoes-1", name))
		if err != nil {
			t.Fatal(err)
		}
		texts[name] = strings.NewReplacer(`\r`, "", `\n`, "").Replace(string(b))
	}
	trace, err := os.ReadFile(filepath.Join(dir, "traces", "echoes-1.jsonl"))
	if err != nil {
		t.Fatalf("no trace: %v", err)
	}
	texts["the trace"] = strings.NewReplacer(`\r`, "", `\n`, "").Replace(string(trace))
	for where, text := range texts {
		if f := leakIn(text, forms); f != "" {
			t.Errorf("%s holds %q of the caller's secret", where, f)
		}
		if !strings.Contains(text, "[REDACTED:caller-secret]") {
			t.Errorf("%s names no caller-secret redaction: %s", where, text)
		}
	}
}
