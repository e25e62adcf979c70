package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// heldCreatePolicy holds workspace.createFile for the ops group and lets
// ops members approve it; everything else of the workspace may be read.
const heldCreatePolicy = `@id("create_needs_ops") @approval("ops") @reason("writes to the workspace")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.createFile");

@id("ops_may_approve")
permit (principal, action == Action::"Approve", resource == Tool::"workspace.createFile")
when { principal.groups.contains(context.group) };
`

const webhookKey = "e2e-hook-hmac-0123456789"

// hookEvent is one delivery the test's webhook receiver verified.
type hookEvent struct {
	Type       string `json:"type"`
	ApprovalID string `json:"approval_id"`
	ToolID     string `json:"tool_id"`
	State      string `json:"state"`
	Delivery   string `json:"-"`
	Body       string `json:"-"`
}

// hookReceiver is a loopback webhook endpoint that accepts only
// deliveries signed with webhookKey over the timestamp and the body.
type hookReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	events []hookEvent
	forged int
}

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		mac := hmac.New(sha256.New, []byte(webhookKey))
		mac.Write([]byte(req.Header.Get("X-Toolgate-Timestamp") + "." + string(body)))
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		r.mu.Lock()
		defer r.mu.Unlock()
		if !hmac.Equal([]byte(want), []byte(req.Header.Get("X-Toolgate-Signature"))) {
			r.forged++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var ev hookEvent
		json.Unmarshal(body, &ev)
		ev.Delivery, ev.Body = req.Header.Get("X-Toolgate-Delivery"), string(body)
		r.events = append(r.events, ev)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

// waitFor returns the verified events once one of type typ has arrived.
func (r *hookReceiver) waitFor(t *testing.T, typ string) []hookEvent {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		events := append([]hookEvent(nil), r.events...)
		r.mu.Unlock()
		for _, ev := range events {
			if ev.Type == typ {
				return events
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s delivery within 10s", typ)
	return nil
}

// approvalDeployment is a gateway with alice (dev) and bob (ops), the
// held-create policy and a webhook.
type approvalDeployment struct {
	dir  string
	srv  *server
	hook *hookReceiver
	env  []string
}

func startApprovalDeployment(t *testing.T) *approvalDeployment {
	t.Helper()
	dir := t.TempDir()
	writePolicy(t, dir, heldCreatePolicy)
	hook := newHookReceiver(t)
	cfg := `auth:
  keys:
    - {caller: alice, env: KEY_ALICE, groups: [dev]}
    - {caller: bob, env: KEY_BOB, groups: [ops]}
evidence: {url: file://./audit}
drivers: {workspace: {type: workspace, root: ./ws}}
approvals:
  webhook: {url: '` + hook.URL + `/hook', secret: {env: HOOK_KEY}, retries: 1}
`
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"KEY_ALICE=k-alice-0123456789", "KEY_BOB=k-bob-0123456789", "HOOK_KEY=" + webhookKey}
	srv := startServerEnv(t, dir, env, "--config", "toolgate.yaml")
	return &approvalDeployment{dir: dir, srv: srv, hook: hook, env: env}
}

// as runs the toolgate binary as caller (its key in --key-env).
func (d *approvalDeployment) as(t *testing.T, caller string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	args = append(args, "--addr", d.srv.addr, "--key-env", "KEY_"+strings.ToUpper(caller))
	return runToolEnv(t, d.dir, d.env, args...)
}

// create asks, as alice, for path to be created under request id.
func (d *approvalDeployment) create(t *testing.T, id, path string) (pendingID string, stdout, stderr string, code int) {
	t.Helper()
	stdout, stderr, code = d.as(t, "alice", "call", "--request-id", id, "--tool", "workspace.createFile",
		"--args", `{"path":"`+path+`","content":"hello; token=ghp_R8xk2Lq9ZtV4mW7nB1cJ5hD3fG6sA0pE2yU8"}`)
	var reply struct {
		PendingApproval struct {
			ApprovalID string `json:"approval_id"`
		} `json:"pending_approval"`
	}
	json.Unmarshal([]byte(stdout), &reply)
	return reply.PendingApproval.ApprovalID, stdout, stderr, code
}

func TestApprovalsEndToEnd(t *testing.T) {
	t.Parallel()
	d := startApprovalDeployment(t)
	target := filepath.Join(d.dir, "ws", "approved.txt")

	id, out, stderr, code := d.create(t, "e2e-1", "approved.txt")
	if code != exitPending || !approvalIDPattern.MatchString(id) {
		t.Fatalf("call: exit %d, want 3 with an approval id\n%s%s", code, out, stderr)
	}
	if !strings.Contains(stderr, "waiting for approval "+id+" by a member of ops (rule create_needs_ops)") {
		t.Errorf("call does not say what it waits for:\n%s", stderr)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the held call ran: %v", err)
	}
	if again, _, _, code := d.create(t, "e2e-1", "approved.txt"); code != exitPending || again != id {
		t.Fatalf("retry while pending: exit %d, approval %q; want 3 and %s", code, again, id)
	}

	out, stderr, code = d.as(t, "bob", "approvals", "ls")
	if code != exitOK || !strings.Contains(out, id) || !strings.Contains(out, "workspace.createFile") ||
		!strings.Contains(out, "alice") || !strings.Contains(out, "create_needs_ops") || !strings.Contains(out, "pending") {
		t.Fatalf("approvals ls as bob: exit %d\n%s%s", code, out, stderr)
	}
	out, _, code = d.as(t, "bob", "approvals", "show", id)
	if code != exitOK || !strings.Contains(out, "request_id:        e2e-1") || !strings.Contains(out, `"path": "approved.txt"`) ||
		strings.Contains(out, "ghp_R8xk") || !strings.Contains(out, "requests/e2e-1/approval_request.json") {
		t.Fatalf("approvals show as bob: exit %d\n%s", code, out)
	}

	_, stderr, code = d.as(t, "alice", "approvals", "approve", id, "--reason", "looks fine to me")
	if code != exitFailure || !strings.Contains(stderr, "PermissionDenied") {
		t.Fatalf("alice approving her own call: exit %d, want 1 (refused)\n%s", code, stderr)
	}
	out, stderr, code = d.as(t, "bob", "approvals", "approve", id, "--reason", "one file, checked")
	if code != exitOK || !strings.Contains(out, "approved "+id) {
		t.Fatalf("approvals approve as bob: exit %d\n%s%s", code, out, stderr)
	}

	if _, out, stderr, code = d.create(t, "e2e-1", "approved.txt"); code != exitOK {
		t.Fatalf("retry after approval: exit %d, want 0\n%s%s", code, out, stderr)
	}
	if data, err := os.ReadFile(target); err != nil || !strings.HasPrefix(string(data), "hello") {
		t.Fatalf("the approved call did not create the file: %q, %v", data, err)
	}
	os.Remove(target)
	if _, out, _, code = d.create(t, "e2e-1", "approved.txt"); code != exitOK {
		t.Fatalf("second retry: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the second retry ran the call again instead of replaying it: %v", err)
	}

	out, _, code = d.as(t, "bob", "approvals", "ls", "--state", "all")
	if code != exitOK || !strings.Contains(out, id) || !strings.Contains(out, "consumed") {
		t.Fatalf("approvals ls --state all: exit %d\n%s", code, out)
	}
	if out, _, _ = d.as(t, "bob", "approvals", "ls"); strings.Contains(out, id) {
		t.Errorf("a consumed approval is still listed as pending:\n%s", out)
	}

	events := d.hook.waitFor(t, "approval.decided")
	d.hook.mu.Lock()
	forged := d.hook.forged
	d.hook.mu.Unlock()
	if forged != 0 {
		t.Errorf("%d webhook deliveries failed signature verification", forged)
	}
	for _, ev := range events {
		if ev.ApprovalID != id || ev.ToolID != "workspace.createFile" || ev.Delivery != id+"/"+ev.Type {
			t.Errorf("webhook event %+v", ev)
		}
		if strings.Contains(ev.Body, "ghp_R8xk") || strings.Contains(ev.Body, webhookKey) {
			t.Errorf("the webhook body carries a secret:\n%s", ev.Body)
		}
	}
	if events[0].Type != "approval.pending" {
		t.Errorf("first webhook event %q, want approval.pending", events[0].Type)
	}
}

func TestApprovalsDenyEndToEnd(t *testing.T) {
	t.Parallel()
	d := startApprovalDeployment(t)
	id, out, _, code := d.create(t, "e2e-deny", "denied.txt")
	if code != exitPending {
		t.Fatalf("call: exit %d\n%s", code, out)
	}
	out, stderr, code := d.as(t, "bob", "approvals", "deny", id, "--reason", "not on a Friday")
	if code != exitOK || !strings.Contains(out, "denied "+id) {
		t.Fatalf("approvals deny: exit %d\n%s%s", code, out, stderr)
	}
	_, stderr, code = d.as(t, "bob", "approvals", "approve", id, "--reason", "changed my mind")
	if code != exitFailure || !strings.Contains(stderr, "FailedPrecondition") {
		t.Fatalf("approving a denied approval: exit %d, want 1\n%s", code, stderr)
	}
	_, out, stderr, code = d.create(t, "e2e-deny", "denied.txt")
	if code != exitFailure || !strings.Contains(out, `"rule_id": "create_needs_ops"`) || !strings.Contains(out, "not on a Friday") {
		t.Fatalf("retry after deny: exit %d, want 1 naming the rule and the reason\n%s%s", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(d.dir, "ws", "denied.txt")); !os.IsNotExist(err) {
		t.Fatalf("the denied call ran: %v", err)
	}
	for _, args := range [][]string{
		{"approvals", "show", "apr_zzzzzzzzzzzzzzzzzzzzzzzzzz"},
		{"approvals", "approve", "apr_zzzzzzzzzzzzzzzzzzzzzzzzzz", "--reason", "x"},
	} {
		if _, stderr, code := d.as(t, "bob", args...); code != exitFailure {
			t.Errorf("%s of an unknown approval: exit %d, want 1\n%s", args[1], code, stderr)
		}
	}
	out, _, code = d.as(t, "bob", "approvals", "ls", "--state", "denied", "--json")
	if code != exitOK || !strings.Contains(out, `"decision_reason": "not on a Friday"`) || !strings.Contains(out, `"decided_by": "bob"`) {
		t.Fatalf("approvals ls --state denied --json: exit %d\n%s", code, out)
	}
}
