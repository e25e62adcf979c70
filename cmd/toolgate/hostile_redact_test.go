package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// redactSecret is the configured secret (redact.secrets_env) the attacks
// try to get into evidence. It has a '/' so that an escaped-slash JSON
// form differs from the plain one.
const redactSecret = "hostile/Value+q8Zr27vkP0x_4f9c2a7e1b"

// hostileRedactServer starts the real binary on a configuration whose
// workspace tools are all allowed and whose redactor knows redactSecret,
// and returns it with its evidence folder.
func hostileRedactServer(t *testing.T) (*server, string) {
	t.Helper()
	dir := t.TempDir()
	writePolicy(t, dir, `@id("all_workspace") permit (principal, action, resource in Driver::"workspace");`)
	cfg := `listen: 127.0.0.1:0
policies: {dir: ./policies}
evidence: {url: file://./toolgate-evidence, spool_dir: none}
redact: {secrets_env: [HOSTILE_SECRET]}
drivers:
  workspace: {type: workspace, root: ./workspace}
`
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "workspace"), 0o700); err != nil {
		t.Fatal(err)
	}
	srv := startServerEnv(t, dir, []string{"HOSTILE_SECRET=" + redactSecret}, "--config", "toolgate.yaml")
	return srv, filepath.Join(dir, "toolgate-evidence", "requests")
}

// redactCall makes one RunTool call over a real gRPC connection, with room
// for replies larger than gRPC's default 4 MiB.
func redactCall(t *testing.T, addr, id, tool string, args map[string]any) (*toolgatev1.RunToolResponse, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return toolgatev1.NewToolGatewayClient(conn).RunTool(ctx, &toolgatev1.RunToolRequest{RequestId: id, ToolId: tool, Args: s})
}

// evidenceStrings returns every string (and key) of every JSON artifact of
// a request, decoded, line breaks removed, so that a search sees text the
// way a reader of the evidence does, and wrapped encodings whole.
func evidenceStrings(t *testing.T, requests, id string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(requests, id))
	if err != nil || len(entries) == 0 {
		t.Fatalf("no evidence for %s (%v)", id, err)
	}
	var b strings.Builder
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(requests, id, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s/%s is not JSON: %v", id, e.Name(), err)
		}
		collectJSONStrings(v, &b)
	}
	return strings.NewReplacer("\r", "", "\n", "").Replace(b.String())
}

func collectJSONStrings(v any, b *strings.Builder) {
	switch x := v.(type) {
	case string:
		b.WriteString(x)
		b.WriteByte(0)
	case []any:
		for _, e := range x {
			collectJSONStrings(e, b)
		}
	case map[string]any:
		for k, e := range x {
			b.WriteString(k)
			b.WriteByte(0)
			collectJSONStrings(e, b)
		}
	}
}

// TestHostileBlinding: a caller picks environment values that equal what
// its own evidence must show — the tool id, the decision word, the rule id
// that allowed it, the URL it fetched — hoping the redactor erases them.
// Values the gateway writes itself or too short to be secrets are refused
// before anything is recorded; the others are hidden only in the tool's
// output, where they stand alone.
func TestHostileBlinding(t *testing.T) {
	t.Parallel()
	srv, requests := hostileRedactServer(t)
	refused := []struct{ name, value string }{
		{"the tool id", "workspace.shell"},
		{"the decision word", "allow"},
		{"a common word", "localhost"},
		{"a value too short to be a secret", "s3cr3t"},
	}
	for i, tc := range refused {
		t.Run("a value equal to "+tc.name+" is refused", func(t *testing.T) {
			id := "blind-refused-" + string(rune('a'+i))
			_, err := redactCall(t, srv.addr, id, "workspace.shell", map[string]any{
				"command": "true", "env": map[string]any{"BLIND": tc.value},
			})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "args.env.BLIND") {
				t.Fatalf("got %v, want INVALID_ARGUMENT naming args.env.BLIND", err)
			}
			if _, err := os.Stat(filepath.Join(requests, id)); !os.IsNotExist(err) {
				t.Errorf("the refused request was claimed (%v)", err)
			}
		})
	}
	blinders := []struct{ name, value, mustStay string }{
		{"the rule id", "all_workspace", `"rule_id": "all_workspace"`},
		{"the fetched URL", "https://downloads.example.net/report.csv", "fetched https://downloads.example.net/report.csv by rule all_workspace"},
	}
	for i, tc := range blinders {
		t.Run("a value equal to "+tc.name+" does not blind the evidence", func(t *testing.T) {
			id := "blind-kept-" + string(rune('a'+i))
			resp, err := redactCall(t, srv.addr, id, "workspace.shell", map[string]any{
				"command": `echo "fetched https://downloads.example.net/report.csv by rule all_workspace"; echo "$BLIND"`,
				"env":     map[string]any{"BLIND": tc.value},
			})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetPolicyCheck().GetDecision() != "allow" || resp.GetPolicyCheck().GetRuleId() != "all_workspace" {
				t.Errorf("the reply's policy check was blinded: %v", resp.GetPolicyCheck())
			}
			var all []byte
			for _, name := range []string{"request.json", "policy_decision.json", "response.json"} {
				b, err := os.ReadFile(filepath.Join(requests, id, name))
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, b...)
			}
			for _, want := range []string{tc.mustStay, `"decision": "allow"`, `"tool_id": "workspace.shell"`, `"BLIND": "[REDACTED:caller-secret]"`} {
				if !bytes.Contains(all, []byte(want)) {
					t.Errorf("the evidence lost %q", want)
				}
			}
		})
	}
}

// TestHostileRedactionCost: an allowed read of a 10 MB file dense with
// secrets, and a denied call with 1 MiB of args dense with rule keywords,
// both complete, each with a manifest under 256 KiB. Time and memory per
// input byte are measured by redact's BenchmarkHostile.
func TestHostileRedactionCost(t *testing.T) {
	t.Parallel()
	srv, requests := hostileRedactServer(t)
	line := "mirror=" + redactSecret + " copy=" + redactSecret + "\n"
	dense := strings.Repeat(line, 10_000_000/len(line))
	if err := os.WriteFile(filepath.Join(srv.dir, "workspace", "dense.txt"), []byte(dense), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, id, tool string
		args           map[string]any
	}{
		{"a 10 MB file dense with secrets, read", "cost-read", "workspace.readFile", map[string]any{"path": "dense.txt"}},
		{"1 MiB of keyword-dense args, denied", "cost-deny", "other.tool",
			map[string]any{"q": strings.Repeat("password token secret api_key bearer ", (1<<20-64)/37)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := redactCall(t, srv.addr, tc.id, tc.tool, tc.args); err != nil {
				t.Fatalf("the call did not complete: %v", err)
			}
			data, err := os.ReadFile(filepath.Join(requests, tc.id, "manifest.json"))
			if err != nil {
				t.Fatalf("no manifest: %v", err)
			}
			if len(data) >= 256<<10 {
				t.Errorf("manifest is %d bytes, want under 256 KiB", len(data))
			}
			var m struct {
				Outcome    string `json:"outcome"`
				Redactions []struct {
					Omitted int64 `json:"omitted"`
				} `json:"redactions"`
			}
			if err := json.Unmarshal(data, &m); err != nil || m.Outcome != "completed" {
				t.Fatalf("manifest outcome %q (%v), want completed", m.Outcome, err)
			}
			if strings.Contains(string(data), redactSecret) {
				t.Error("the manifest holds the secret")
			}
		})
	}
}

// TestHostileSecretEncodings: a permitted shell command prints a configured
// secret in the encodings tools print — base64 as `base64` wraps it, base64
// at 64 columns, `xxd -p`, lower-case percent-encoding, hex, JSON with
// escaped slashes — and none of them reaches the evidence.
func TestHostileSecretEncodings(t *testing.T) {
	t.Parallel()
	srv, requests := hostileRedactServer(t)
	// The secret reaches the command through a file, so that the request
	// itself does not hold it.
	if err := os.WriteFile(filepath.Join(srv.dir, "workspace", "s"), []byte(redactSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	// Padding before the secret puts it at each alignment of the encoding
	// and across line breaks.
	const pad = `printf 'prefix-bytes-that-move-the-secret-across-lines:'; cat s; printf ':suffix'`
	encodings := []struct{ name, command string }{
		{"base64 (76 columns)", "{ " + pad + "; } | base64"},
		{"base64 -w 64", "{ " + pad + "; } | base64 -w 64"},
		{"base64 of the secret alone", "base64 < s"},
		{"xxd -p", "{ " + pad + "; } | if command -v xxd >/dev/null; then xxd -p; else od -An -v -tx1 | tr -d ' \\n' | fold -w 60; fi"},
		{"upper-case hex", "od -An -v -tx1 < s | tr -d ' \\n' | tr a-f A-F"},
		{"lower-case percent-encoding", "od -An -v -tx1 < s | tr -d ' \\n' | sed 's/../%&/g'"},
		{"JSON with escaped slashes", `printf '{"note":"%s"}' "$(sed 's,/,\\/,g' s)"`},
	}
	secretHex := hex.EncodeToString([]byte(redactSecret))
	forms := []string{
		redactSecret, secretHex, strings.ToUpper(secretHex),
		strings.ReplaceAll(redactSecret, "/", `\/`),
		base64.StdEncoding.EncodeToString([]byte(redactSecret))[:40],
	}
	for i, enc := range encodings {
		t.Run(enc.name, func(t *testing.T) {
			id := "enc-" + string(rune('a'+i))
			resp, err := redactCall(t, srv.addr, id, "workspace.shell", map[string]any{"command": enc.command})
			if err != nil || resp.GetToolResult().GetExitCode() != 0 {
				t.Fatalf("the command did not run: %v %v", err, resp)
			}
			if !strings.Contains(resp.GetToolResult().GetStdout(), "[REDACTED:known-secret]") {
				t.Errorf("nothing was redacted from %q", resp.GetToolResult().GetStdout())
			}
			text := strings.ToLower(evidenceStrings(t, requests, id))
			for _, f := range append(forms, "%"+strings.Join(splitPairs(secretHex), "%")) {
				if strings.Contains(text, strings.ToLower(f)) {
					t.Errorf("the evidence holds the secret as %q", f)
				}
			}
			// Any 12 characters of the base64 of the secret at any
			// alignment would do: check the three.
			for align := range 3 {
				b := base64.StdEncoding.EncodeToString(append(bytes.Repeat([]byte{0}, align), redactSecret...))
				if mid := strings.ToLower(b[4 : len(b)-4]); strings.Contains(text, mid) {
					t.Errorf("the evidence holds the secret's base64 at alignment %d", align)
				}
			}
		})
	}
}

// splitPairs cuts s into two-character pieces.
func splitPairs(s string) []string {
	var out []string
	for i := 0; i+2 <= len(s); i += 2 {
		out = append(out, s[i:i+2])
	}
	return out
}

// TestHostileLogLeak: a caller puts a configured secret and a token the
// rules detect into the tool_id and the arguments of calls that fail;
// neither reaches serve's log.
func TestHostileLogLeak(t *testing.T) {
	t.Parallel()
	srv, _ := hostileRedactServer(t)
	token := "ghp_" + "R7kQ2mX9vL4pT8wZ1nB6cY3dF5gH0jK2sA4e"
	redactCall(t, srv.addr, "log-a", "tool-"+redactSecret, map[string]any{})
	redactCall(t, srv.addr, "log-b", "x."+token, map[string]any{})
	redactCall(t, srv.addr, "log-c", "workspace.readFile", map[string]any{"path": token + "/" + redactSecret})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(srv.log.String(), "log-c") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	log := srv.log.String()
	if !strings.Contains(log, "log-a") || !strings.Contains(log, "log-b") {
		t.Fatalf("the calls were not logged:\n%s", log)
	}
	for _, secret := range []string{redactSecret, token} {
		if strings.Contains(log, secret) {
			t.Errorf("serve's log holds %q:\n%s", secret, log)
		}
	}
}

// TestHostileOutputCapCut: a command pads its output so that the shell's
// output cap falls inside a token. The rules need the whole token to
// recognise it, so a cut that kept its first characters would put them in
// the evidence unredacted; the cut must take the token's run with it.
func TestHostileOutputCapCut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, `@id("shell") permit (principal, action, resource == Tool::"workspace.shell");`)
	cfg := "evidence: {url: file://./toolgate-evidence, spool_dir: none}\n" +
		"drivers: {workspace: {type: workspace, root: ./workspace, output_limit: 4096}}\n"
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, dir, "--config", "toolgate.yaml")
	requests := filepath.Join(dir, "toolgate-evidence", "requests")
	const token = "ghp_0123456789abcdefghijABCDEFGHIJ0123456789"
	for _, kept := range []int{4, 12, 30} {
		id := "cap-" + strconv.Itoa(kept)
		// 4096 - kept bytes of lines, then the token: the cap keeps its
		// first kept characters.
		command := fmt.Sprintf("yes 'padding line' | head -c %d; printf '%%s\\n' %s", 4096-kept, token)
		resp, err := redactCall(t, srv.addr, id, "workspace.shell", map[string]any{"command": command})
		if err != nil || resp.GetToolResult().GetExitCode() != 0 {
			t.Fatalf("the command did not run: %v %v", err, resp)
		}
		if !strings.Contains(resp.GetToolResult().GetStdout(), "[output truncated:") {
			t.Fatalf("kept %d: the output was not cut: %q", kept, resp.GetToolResult().GetStdout())
		}
		if text := evidenceStrings(t, requests, id); strings.Contains(text, token[:4]) {
			t.Errorf("kept %d: the evidence holds the token's first characters", kept)
		}
	}
}
