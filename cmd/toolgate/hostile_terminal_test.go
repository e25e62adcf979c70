package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolgate/toolgate/internal/termsafe"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// invisible is text that passes every check for C0 controls yet makes a
// terminal show something else: a C1 CSI (U+009B, the one-rune ESC [),
// DEL, NEL, the right-to-left override and the isolates, the direction
// marks, zero-width characters, the byte order mark, a tag character and
// a Hangul filler. With it, `rm -rf ~ #\u202e/tmp/x` can display as a
// harmless path.
const invisible = "\u009b2J\x7f\u0085\u202e\u202d\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u200b\u2060\ufeff\u00ad\U000E0041\u3164"

// hostileCommand is what an approver is asked to approve: it reads as
// "echo ok" followed by a comment when the overrides act.
const hostileCommand = "rm -rf ~ #\u202e\u2066 echo ok\u2069" + invisible

// assertTerminalSafe fails when out holds a rune that termsafe does not
// let reach a terminal raw (newlines and tabs aside), or does not show
// the right-to-left override escaped.
func assertTerminalSafe(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		if r == '\n' || r == '\t' {
			continue
		}
		if r == utf8.RuneError || !termsafe.Safe(r) {
			t.Fatalf("%s: a raw U+%04X at byte %d reached the terminal:\n%q", what, r, i, out)
		}
	}
	if !strings.Contains(out, `\u202e`) {
		t.Fatalf("%s: the override is not shown escaped:\n%s", what, out)
	}
}

// toolsGateway is a fakeGateway that also lists tools.
type toolsGateway struct {
	*fakeGateway
	tools []*toolgatev1.ToolInfo
}

func (g toolsGateway) ListTools(context.Context, *toolgatev1.ListToolsRequest) (*toolgatev1.ListToolsResponse, error) {
	return &toolgatev1.ListToolsResponse{Tools: g.tools}, nil
}

// TestHostileInvisibleTextOnTheApproversTerminal: an approval's fields and
// the call's arguments come from the requester; what a C0 check lets
// through (C1 controls, DEL, bidi overrides and isolates, invisible format
// characters) reaches the approver's terminal only escaped, in the table,
// in show and in every --json, through the real binary; the JSON still
// parses to the very arguments.
func TestHostileInvisibleTextOnTheApproversTerminal(t *testing.T) {
	t.Parallel()
	args, err := structpb.NewStruct(map[string]any{"command": hostileCommand, "note" + invisible: []any{invisible}})
	if err != nil {
		t.Fatal(err)
	}
	approval := &toolgatev1.Approval{
		ApprovalId: aprOne, RequestId: "req" + invisible, ToolId: "workspace.shell" + invisible, Requester: "mallory" + invisible,
		RuleId: "rule" + invisible, Reason: "reason" + invisible, Approvers: "ops" + invisible, State: "pending",
		Args: args, ExpiresAt: timestamppb.New(time.Now().Add(time.Hour)), RequestHash: "h" + invisible,
		PolicySetDigest: "d" + invisible, PolicyRef: "p" + invisible, EvidenceRefs: []string{"requests/r/" + invisible},
	}
	f := &fakeGateway{approvals: []*toolgatev1.Approval{approval}}
	f.runReply = &toolgatev1.RunToolResponse{
		PolicyCheck:  &toolgatev1.PolicyCheck{Decision: "approval_required", RuleId: "rule" + invisible, Reason: "needs ops" + invisible},
		EvidenceRefs: []string{"requests/r/" + invisible},
		PendingApproval: &toolgatev1.PendingApproval{
			ApprovalId: "apr" + invisible, Approvers: "ops" + invisible, RuleId: "rule" + invisible,
			ExpiresAt: timestamppb.New(time.Now().Add(time.Hour)),
		},
	}
	addr := serveTools(t, toolsGateway{f, []*toolgatev1.ToolInfo{{ToolId: "evil" + invisible, Description: hostileCommand, Driver: "tpmjs", Tags: []string{invisible}}}})
	tests := []struct {
		name   string
		args   []string
		exit   int
		asJSON bool
	}{
		{"ls", []string{"approvals", "ls", "--state", "all"}, exitOK, false},
		{"ls --json", []string{"approvals", "ls", "--state", "all", "--json"}, exitOK, true},
		{"show", []string{"approvals", "show", aprOne}, exitOK, false},
		{"show --json", []string{"approvals", "show", aprOne, "--json"}, exitOK, true},
		{"approve", []string{"approvals", "approve", aprOne, "--reason", "ok"}, exitOK, false},
		{"approve --json", []string{"approvals", "approve", aprOne, "--reason", "ok", "--json"}, exitOK, true},
		{"call's pending reply", []string{"call", "--request-id", "r1", "--tool", "t.x"}, exitPending, false},
		{"tools", []string{"tools"}, exitOK, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runTool(t, t.TempDir(), append(tc.args, "--addr", addr)...)
			if code != tc.exit {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.exit, out, stderr)
			}
			assertTerminalSafe(t, "stdout and stderr", out+stderr)
			if tc.asJSON {
				assertJSONArgs(t, out, tc.args[1] == "ls")
			}
		})
	}
}

// serveTools serves g on a loopback listener and returns its address.
func serveTools(t *testing.T, g toolsGateway) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	toolgatev1.RegisterToolGatewayServer(srv, g)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// assertJSONArgs checks that the printed JSON, parsed, holds the hostile
// command exactly: escaping changed the bytes, not the value.
func assertJSONArgs(t *testing.T, out string, list bool) {
	t.Helper()
	type approval struct {
		Args      map[string]any `json:"args"`
		Requester string         `json:"requester"`
	}
	var a approval
	if list {
		var l struct{ Approvals []approval }
		if err := json.Unmarshal([]byte(out), &l); err != nil || len(l.Approvals) != 1 {
			t.Fatalf("ls --json: %v, %d approvals\n%s", err, len(l.Approvals), out)
		}
		a = l.Approvals[0]
	} else if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if a.Args["command"] != hostileCommand || a.Requester != "mallory"+invisible {
		t.Fatalf("the JSON parses to command %q, requester %q; want the originals", a.Args["command"], a.Requester)
	}
	if fmt.Sprint(a.Args["note"+invisible]) != fmt.Sprint([]any{invisible}) {
		t.Fatalf("the JSON lost a hostile key or value: %v", a.Args)
	}
}

// TestHostileInvisibleTextInTheEvidence: a real gateway records a call
// whose arguments and output carry invisible and bidi controls; the
// caller's `toolgate call`, `evidence show`, `evidence ls` and `evidence
// verify --json` print them only escaped.
func TestHostileInvisibleTextInTheEvidence(t *testing.T) {
	t.Parallel()
	dir := tourDir(t)
	srv := startServer(t, dir)
	argsJSON, err := json.Marshal(map[string]string{"command": hostileCommand})
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runTool(t, dir, "call", "--addr", srv.addr, "--request-id", "ev-shell", "--tool", "workspace.shell", "--args", string(argsJSON))
	if code != exitFailure {
		t.Fatalf("denied shell call: exit %d\n%s%s", code, out, stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "workspace", "notes.txt"), []byte("fine\n"+hostileCommand+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, code = runTool(t, dir, "call", "--addr", srv.addr, "--request-id", "ev-read", "--tool", "workspace.readFile", "--args", `{"path": "notes.txt"}`)
	if code != exitOK {
		t.Fatalf("read: exit %d\n%s%s", code, out, stderr)
	}
	assertTerminalSafe(t, "call printing the file read", out+stderr)
	stopServer(t, srv)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"show the denied call", []string{"evidence", "show", "ev-shell"}},
		{"show the read", []string{"evidence", "show", "ev-read"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runTool(t, dir, tc.args...)
			if code != exitOK {
				t.Fatalf("exit %d\n%s%s", code, out, stderr)
			}
			assertTerminalSafe(t, strings.Join(tc.args, " "), out+stderr)
		})
	}
	t.Run("a non-JSON artifact", func(t *testing.T) {
		if err := os.WriteFile(evidenceFile(dir, "ev-read", "extra.txt"), []byte(hostileCommand), 0o600); err != nil {
			t.Fatal(err)
		}
		out, stderr, _ := runTool(t, dir, "evidence", "show", "ev-read")
		assertTerminalSafe(t, "evidence show", out+stderr)
		out, stderr, _ = runTool(t, dir, "evidence", "verify", "--json", "ev-read")
		for i, r := range out + stderr {
			if r != '\n' && (r == utf8.RuneError || !termsafe.Safe(r)) {
				t.Fatalf("verify --json: a raw U+%04X at byte %d:\n%q", r, i, out+stderr)
			}
		}
	})
}
