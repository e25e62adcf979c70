package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// TestHostileApprovalTextOnTheApproversTerminal: everything an approval
// shows comes from someone else (the requester's arguments and name, the
// gateway's messages); a terminal escape in any of it reaches the
// approver's terminal only quoted, through the real binary.
func TestHostileApprovalTextOnTheApproversTerminal(t *testing.T) {
	t.Parallel()
	const esc = "\x1b]0;owned\x07\x1b[2J"
	args, err := structpb.NewStruct(map[string]any{"cmd": "ls" + esc, esc: "key"})
	if err != nil {
		t.Fatal(err)
	}
	hostile := &toolgatev1.Approval{
		ApprovalId: aprOne, RequestId: "req" + esc, ToolId: "tool" + esc, Requester: "mallory" + esc,
		RuleId: "rule" + esc, Reason: "reason\n" + esc, Approvers: "ops" + esc, State: "pending" + esc,
		Args: args, ExpiresAt: timestamppb.New(time.Now().Add(time.Hour)),
		DecidedBy: "x" + esc, DecisionReason: "y\r" + esc, RequestHash: "h" + esc, PolicySetDigest: "d" + esc,
		PolicyRef: "p" + esc, EvidenceRefs: []string{"requests/r/" + esc},
	}
	f := &fakeGateway{approvals: []*toolgatev1.Approval{hostile}}
	f.runReply = &toolgatev1.RunToolResponse{
		PolicyCheck:  &toolgatev1.PolicyCheck{Decision: "deny", RuleId: "rule" + esc, Reason: "approval required" + esc},
		EvidenceRefs: []string{"requests/r/" + esc},
		PendingApproval: &toolgatev1.PendingApproval{
			ApprovalId: "apr" + esc, Approvers: "ops" + esc, RuleId: "rule" + esc, Reason: esc,
			ExpiresAt: timestamppb.New(time.Now().Add(time.Hour)),
		},
	}
	addr := serveFake(t, f)
	tests := []struct {
		name string
		args []string
		exit int
	}{
		{"ls shows the requester and tool", []string{"approvals", "ls", "--state", "all", "--addr", addr}, exitOK},
		{"show shows every field and the args", []string{"approvals", "show", aprOne, "--addr", addr}, exitOK},
		{"show --json shows every field and the args", []string{"approvals", "show", aprOne, "--json", "--addr", addr}, exitOK},
		{"approve echoes what was approved", []string{"approvals", "approve", aprOne, "--reason", "ok", "--addr", addr}, exitOK},
		{"call prints a pending reply", []string{"call", "--request-id", "r1", "--tool", "t.x", "--addr", addr}, exitPending},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runTool(t, t.TempDir(), tc.args...)
			if code != tc.exit {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.exit, out, stderr)
			}
			if strings.ContainsAny(out+stderr, "\x1b\x07\r") {
				t.Fatalf("a raw control character reached the terminal:\n%q\n%q", out, stderr)
			}
			if !strings.Contains(out+stderr, `\x1b]0;owned`) && !strings.Contains(out+stderr, `\u001b]0;owned`) {
				t.Fatalf("the hostile text is not shown quoted:\n%s%s", out, stderr)
			}
		})
	}
	t.Run("a refusal message is quoted too", func(t *testing.T) {
		f.setErr(status.Error(codes.PermissionDenied, "no"+esc))
		defer f.setErr(nil)
		out, stderr, code := runTool(t, t.TempDir(), "approvals", "deny", aprOne, "--reason", "r", "--addr", addr)
		if code != exitFailure || strings.ContainsAny(out+stderr, "\x1b\x07") {
			t.Fatalf("exit %d:\n%q%q", code, out, stderr)
		}
	})
}

// webhookDir is a folder with a configuration whose approvals.webhook
// section is hook, and the shipped policies.
func webhookDir(t *testing.T, hook string) string {
	t.Helper()
	dir := tourDir(t)
	cfg := "evidence: {url: file://./audit}\n" +
		"drivers: {workspace: {type: workspace, root: ./ws}}\n" +
		"approvals:\n  webhook:\n" + hook
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestHostileWebhookConfiguration: a webhook that would send the pending
// call in clear text across the network, carry credentials in its URL, or
// sign with no key is refused at start, naming the key.
func TestHostileWebhookConfiguration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		hook string
		env  []string
		want string
	}{
		{"http to another host", "    url: http://hooks.example/toolgate\n    secret: {env: HOOK_KEY}\n", nil,
			"approvals.webhook.url \"http://hooks.example/toolgate\": http:// only to a loopback host"},
		{"credentials in the url", "    url: https://user:pw@hooks.example/toolgate\n    secret: {env: HOOK_KEY}\n", nil,
			"approvals.webhook.url: must not carry credentials"},
		{"no secret at all", "    url: https://hooks.example/toolgate\n", nil,
			"approvals.webhook.secret: give file or env"},
		{"a secret variable that is unset", "    url: https://hooks.example/toolgate\n    secret: {env: HOOK_KEY_UNSET}\n", nil,
			"approvals.webhook.secret: environment variable HOOK_KEY_UNSET is empty or unset"},
		{"a secret file that is missing", "    url: https://hooks.example/toolgate\n    secret: {file: ./nope.key}\n", nil,
			"approvals.webhook.secret: open ./nope.key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stderr := serveMustRefuse(t, webhookDir(t, tc.hook), "--config", "toolgate.yaml")
			if !strings.Contains(stderr, tc.want) {
				t.Fatalf("stderr lacks %q:\n%s", tc.want, stderr)
			}
		})
	}
}

// TestHostileWebhookSecretInTheEvidence: a caller who learnt the webhook's
// HMAC key (or guesses it) and sends it as an argument finds it redacted
// from the evidence and the reply, like every configured secret: the
// evidence must not teach readers how to forge notifications.
func TestHostileWebhookSecretInTheEvidence(t *testing.T) {
	t.Parallel()
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	const key = "hook-hmac-0123456789-abcdef"
	dir := webhookDir(t, "    url: "+rcv.URL+"/hook\n    secret: {env: HOOK_KEY}\n")
	srv := startServerEnv(t, dir, []string{"HOOK_KEY=" + key}, "--config", "toolgate.yaml")
	out, stderr, code := runTool(t, dir, "call", "--addr", srv.addr, "--request-id", "leak-1",
		"--tool", "workspace.readFile", "--args", `{"path":"`+key+`.txt"}`)
	if code == exitError {
		t.Fatalf("call failed: exit %d\n%s%s", code, out, stderr)
	}
	if strings.Contains(out+stderr, key) {
		t.Errorf("the reply carries the webhook key:\n%s%s", out, stderr)
	}
	err := filepath.Walk(filepath.Join(dir, "audit"), func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if bytes.Contains(data, []byte(key)) {
			t.Errorf("%s carries the webhook key", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(srv.log.String(), key) {
		t.Errorf("the gateway log carries the webhook key:\n%s", srv.log.String())
	}
}

// stuckHook is a webhook receiver that never answers until the test ends,
// and counts the deliveries it was sent.
func stuckHook(t *testing.T) (url string, got func() int) {
	t.Helper()
	release := make(chan struct{})
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	return srv.URL, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// TestHostileWebhookReceiver: a receiver that never answers cannot hold
// up a held call's reply, an approver's decision, nor the gateway's
// shutdown.
func TestHostileWebhookReceiver(t *testing.T) {
	t.Parallel()
	url, got := stuckHook(t)
	dir := t.TempDir()
	writePolicy(t, dir, heldCreatePolicy)
	cfg := `auth:
  keys:
    - {caller: alice, env: KEY_ALICE, groups: [dev]}
    - {caller: bob, env: KEY_BOB, groups: [ops]}
evidence: {url: file://./audit}
drivers: {workspace: {type: workspace, root: ./ws}}
approvals:
  webhook: {url: '` + url + `', secret: {env: HOOK_KEY}, timeout: 60s, retries: 20}
`
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"KEY_ALICE=k-alice-0123456789", "KEY_BOB=k-bob-0123456789", "HOOK_KEY=" + webhookKey}
	d := &approvalDeployment{dir: dir, srv: startServerEnv(t, dir, env, "--config", "toolgate.yaml"), env: env}

	for i := range 3 {
		start := time.Now()
		id, out, stderr, code := d.create(t, "stuck-"+strconv.Itoa(i), "f.txt")
		if code != exitPending {
			t.Fatalf("held call %d: exit %d\n%s%s", i, code, out, stderr)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("held call %d took %v behind a stuck webhook receiver", i, took)
		}
		if i == 0 {
			start = time.Now()
			if _, stderr, code := d.as(t, "bob", "approvals", "deny", id, "--reason", "no"); code != exitOK {
				t.Fatalf("deny: exit %d\n%s", code, stderr)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("a decision took %v behind a stuck webhook receiver", took)
			}
		}
	}
	if got() == 0 {
		t.Fatal("the receiver was never sent a notification")
	}
	if err := d.srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.srv.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not stop within 30s of SIGTERM with a stuck webhook receiver")
	}
	if !strings.Contains(d.srv.log.String(), "approval webhook: notification dropped") {
		t.Errorf("the notifications left at shutdown were not logged as dropped:\n%s", d.srv.log.String())
	}
}
