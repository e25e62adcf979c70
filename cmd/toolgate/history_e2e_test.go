package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// historyE2EPolicy labels the sessions that read secret/ and the callers
// that read keys/, keeps both out of public/, allows three reads of
// hello.txt per session and two file creations a minute per caller.
const historyE2EPolicy = `
@id("read-secrets") @label("sensitive")
permit (principal, action, resource == Tool::"workspace.readFile")
when { context.args has path && context.args.path like "secret/*" };

@id("read-keys") @caller_label("keyholder")
permit (principal, action, resource == Tool::"workspace.readFile")
when { context.args has path && context.args.path like "keys/*" };

@id("workspace") permit (principal, action, resource in Driver::"workspace");

@id("no-public-after-sensitive") @reason("this session read sensitive data")
forbid (principal, action, resource == Tool::"workspace.createFile")
when { context.session.labels.contains("sensitive") && context.args has path && context.args.path like "public/*" };

@id("no-public-for-keyholders") @reason("this caller read a key")
forbid (principal, action, resource == Tool::"workspace.createFile")
when { context.session.labels.contains("keyholder") && context.args has path && context.args.path like "public/*" };

@id("three-hello-reads") @reason("at most 3 reads of hello.txt per session")
forbid (principal, action, resource == Tool::"workspace.readFile")
when { context.args has path && context.args.path == "hello.txt" && context.session.toolCalls >= 3 };

@id("two-creates-a-minute") @reason("at most 2 file creations a minute")
forbid (principal, action, resource == Tool::"workspace.createFile")
when { context.caller.toolCallsLastMinute >= 2 };
`

// historyWorkspace is what every history test's workspace holds.
var historyWorkspace = map[string]string{
	"ws/hello.txt":   "hello\n",
	"ws/secret/k":    "s3cr3t\n",
	"ws/keys/id.pem": "not really a key\n",
}

// historyStep is one RunTool call of a history test and the decision it
// must get.
type historyStep struct {
	run, tool string
	args      map[string]any
	allow     bool
	rule      string
}

// historyRequest is step's call as request id under ctx.run_id step.run.
func historyRequest(t *testing.T, id string, s historyStep) *toolgatev1.RunToolRequest {
	t.Helper()
	args, err := structpb.NewStruct(s.args)
	if err != nil {
		t.Fatal(err)
	}
	return &toolgatev1.RunToolRequest{RequestId: id, ToolId: s.tool, Args: args, Ctx: &toolgatev1.RunContext{RunId: s.run}}
}

// checkStep fails t unless resp is the decision s wants.
func checkStep(t *testing.T, what string, s historyStep, resp *toolgatev1.RunToolResponse, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	pc := resp.GetPolicyCheck()
	if resp.GetOk() != s.allow || (pc.GetDecision() == "allow") != s.allow || pc.GetRuleId() != s.rule {
		t.Fatalf("%s (run %q, %s %v): ok=%v decision %s by %q (%s), want allow=%v by %q",
			what, s.run, s.tool, s.args, resp.GetOk(), pc.GetDecision(), pc.GetRuleId(), pc.GetReason(), s.allow, s.rule)
	}
}

// retryAfterReason is the retry hint a rate-limit deny's reason carries,
// a Go duration ("31s", "1m1s").
var retryAfterReason = regexp.MustCompile(`\(retry after ([0-9a-z.]+)\)`)

// reasonRetryAfter is the hint in reason, or 0 when there is none.
func reasonRetryAfter(reason string) time.Duration {
	m := retryAfterReason.FindStringSubmatch(reason)
	if m == nil {
		return 0
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		return 0
	}
	return d
}

// verifyClean runs `toolgate evidence verify --all` over b with the
// public keys of keys and fails t unless all n requests verify, waiting
// for the transparency logs to sequence the newest.
func verifyClean(t *testing.T, b *loggedBucket, n int, keys ...string) {
	t.Helper()
	args := []string{"evidence", "verify", "--all", "--evidence", b.url, "--require-signature"}
	for _, k := range keys {
		args = append(args, "--pubkey", k+".pub")
	}
	eventually(t, faultSettle, "evidence verify --all", func() error {
		out, stderr, code := runToolEnv(t, b.dir, b.env, args...)
		if code != exitOK || !strings.Contains(out, fmt.Sprintf("verified %d requests: %d ok", n, n)) {
			return fmt.Errorf("exit %d\n%s%s", code, out, stderr)
		}
		return nil
	})
}

// TestHistoryEndToEnd: the real binary over a real listener decides calls
// on their session's history, as the policy author wrote it in Cedar:
// information-flow labels per run and per caller, a per-session count
// and a per-caller rate limit with a retry hint; verify recomputes every
// decision's history from the signed records and finds it clean.
func TestHistoryEndToEnd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		steps []historyStep
		// retryHint, for the last step: its deny says when to retry.
		retryHint bool
	}{
		{name: "a run that read a secret may not write to public/, a fresh run may", steps: []historyStep{
			{"run-1", "workspace.readFile", map[string]any{"path": "secret/k"}, true, "read-secrets"},
			{"run-1", "workspace.createFile", map[string]any{"path": "public/leak", "content": "s3cr3t"}, false, "no-public-after-sensitive"},
			{"run-2", "workspace.createFile", map[string]any{"path": "public/leak", "content": "s3cr3t"}, true, "workspace"},
		}},
		{name: "a caller-scoped label survives a new run", steps: []historyStep{
			{"run-1", "workspace.readFile", map[string]any{"path": "keys/id.pem"}, true, "read-keys"},
			{"run-2", "workspace.createFile", map[string]any{"path": "public/leak", "content": "x"}, false, "no-public-for-keyholders"},
			{"", "workspace.createFile", map[string]any{"path": "public/leak", "content": "x"}, false, "no-public-for-keyholders"},
		}},
		{name: "at most 3 calls of a tool per session allows exactly 3", steps: []historyStep{
			{"run-1", "workspace.readFile", map[string]any{"path": "hello.txt"}, true, "workspace"},
			{"run-1", "workspace.readFile", map[string]any{"path": "hello.txt"}, true, "workspace"},
			{"run-1", "workspace.readFile", map[string]any{"path": "hello.txt"}, true, "workspace"},
			{"run-1", "workspace.readFile", map[string]any{"path": "hello.txt"}, false, "three-hello-reads"},
			{"run-1", "workspace.readFile", map[string]any{"path": "hello.txt"}, false, "three-hello-reads"},
			{"run-2", "workspace.readFile", map[string]any{"path": "hello.txt"}, true, "workspace"},
		}},
		{name: "a 60-second caller rate limit denies the call over it with a retry hint", retryHint: true, steps: []historyStep{
			{"run-1", "workspace.createFile", map[string]any{"path": "a", "content": "x"}, true, "workspace"},
			{"run-2", "workspace.createFile", map[string]any{"path": "b", "content": "x"}, true, "workspace"},
			{"run-3", "workspace.createFile", map[string]any{"path": "c", "content": "x"}, false, "two-creates-a-minute"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := fileLoggedBucket(t)
			writePolicy(t, b.dir, historyE2EPolicy)
			writeFiles(t, b.dir, historyWorkspace)
			newReplicaKey(t, b.dir, "gw")
			srv := startServerEnv(t, b.dir, b.env, "--config", replicaConfig(t, b, "gw", nil))
			client := dial(t, srv.addr)
			var last *toolgatev1.RunToolResponse
			for i, s := range tc.steps {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				resp, err := client.RunTool(ctx, historyRequest(t, fmt.Sprintf("step-%d", i), s))
				cancel()
				checkStep(t, fmt.Sprintf("step %d", i), s, resp, err)
				last = resp
			}
			if tc.retryHint {
				// The hint is a field a client reads, and the same in the
				// reason a person reads.
				pc := last.GetPolicyCheck()
				if ms := pc.GetRetryAfterMs(); ms <= 0 || ms > 61000 || time.Duration(ms)*time.Millisecond != reasonRetryAfter(pc.GetReason()) {
					t.Errorf("the rate-limit deny's policy_check.retry_after_ms = %d, reason %q: want whole seconds in (0, 61s], as the reason says", ms, pc.GetReason())
				}
				after := reasonRetryAfter(last.GetPolicyCheck().GetReason())
				// The window counts whole seconds: the hint is the instant
				// the oldest counted call's second has left it, at most
				// a minute and a second away.
				if after <= 0 || after > time.Minute+time.Second {
					t.Errorf("the rate-limit deny's reason %q gives retry after %v, want within (0, 61s]", last.GetPolicyCheck().GetReason(), after)
				}
			}
			verifyClean(t, b, len(tc.steps), "gw")
		})
	}
}

// TestHistoryReplicasOnMinIO: two gateway processes with keys of their
// own, trusting each other's, over one real MinIO bucket decide as one
// gateway would: 32 concurrent calls of one session, spread over both,
// against "at most 5" are let through exactly 5 times, and a label a
// call acquires on one replica blocks the session's next call on the
// other. Verify with both public keys finds every decision's history
// clean.
func TestHistoryReplicasOnMinIO(t *testing.T) {
	t.Parallel()
	const concurrent, atMost = 32, 5
	m := evidencetest.StartMinIO(t)
	b := minioLoggedBucket(t, m, "history")
	writePolicy(t, b.dir, historyE2EPolicy+fmt.Sprintf(`
@id("five-per-session") @reason("at most %d calls per session")
forbid (principal, action, resource == Tool::"workspace.readFile")
when { context.args has path && context.args.path == "five.txt" && context.session.toolCalls >= %d };
`, atMost, atMost))
	writeFiles(t, b.dir, historyWorkspace)
	writeFiles(t, b.dir, map[string]string{"ws/five.txt": "five\n"})
	d := startReplicaPair(t, b, true)

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		allowed [2]int
		rules   = map[string]int{}
	)
	for i := range concurrent {
		wg.Go(func() {
			s := historyStep{run: "burst", tool: "workspace.readFile", args: map[string]any{"path": "five.txt"}}
			resp, err := d.call(i%2, historyRequest(t, fmt.Sprintf("burst-%d", i), s))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("burst-%d on replica %d: %v", i, i%2, err)
			case resp.GetOk():
				allowed[i%2]++
				rules[resp.GetPolicyCheck().GetRuleId()]++
			default:
				rules[resp.GetPolicyCheck().GetRuleId()]++
			}
		})
	}
	wg.Wait()
	if got := allowed[0] + allowed[1]; got != atMost || rules["workspace"] != atMost || rules["five-per-session"] != concurrent-atMost {
		t.Fatalf("%d concurrent calls against at most %d: %d allowed (gw-a %d, gw-b %d), rules %v; want exactly %d allowed, the rest denied by five-per-session",
			concurrent, atMost, got, allowed[0], allowed[1], rules, atMost)
	}

	flow := []struct {
		replica int
		step    historyStep
	}{
		{0, historyStep{"flow", "workspace.readFile", map[string]any{"path": "secret/k"}, true, "read-secrets"}},
		{1, historyStep{"flow", "workspace.createFile", map[string]any{"path": "public/leak", "content": "s3cr3t"}, false, "no-public-after-sensitive"}},
		{0, historyStep{"flow", "workspace.createFile", map[string]any{"path": "public/leak", "content": "s3cr3t"}, false, "no-public-after-sensitive"}},
		{1, historyStep{"other-flow", "workspace.createFile", map[string]any{"path": "public/ok", "content": "x"}, true, "workspace"}},
	}
	for i, f := range flow {
		resp, err := d.call(f.replica, historyRequest(t, fmt.Sprintf("flow-%d", i), f.step))
		checkStep(t, fmt.Sprintf("flow-%d on replica %d", i, f.replica), f.step, resp, err)
	}
	verifyClean(t, b, concurrent+len(flow), "gw-a", "gw-b")
}

// TestHistoryRetryHintOverTheTPMJSDoor: through the real binary's TPMJS
// door, a call over a caller rate limit is a POLICY_DENIED reply whose
// toolgate.retry_after_ms and Retry-After header say when to retry, in
// agreement; the executor never sees it.
func TestHistoryRetryHintOverTheTPMJSDoor(t *testing.T) {
	t.Parallel()
	base, exec, _ := tpmjsDoorGatewayWith(t, tpmjsDoorPolicy+`
@id("one-echo-a-minute") @reason("one echo a minute")
forbid (principal, action == Action::"RunTool", resource == Tool::"fake.echo")
when { context.caller.toolCallsLastMinute >= 1 };
`)
	post := func(key string) (*http.Response, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+"/execute-tool", strings.NewReader(doorBody(tpmjstest.EchoTool, `{"a":1}`, `{}`)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tpmjsDoorKey)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatalf("%s: the answer is not JSON: %v", key, err)
		}
		return resp, m
	}
	if resp, m := post("echo-1"); resp.StatusCode != http.StatusOK || m["success"] != true || resp.Header.Get("Retry-After") != "" {
		t.Fatalf("the first echo: %d %v (Retry-After %q)", resp.StatusCode, m, resp.Header.Get("Retry-After"))
	}
	resp, m := post("echo-2")
	ext, _ := m["toolgate"].(map[string]any)
	ms, _ := ext["retry_after_ms"].(float64)
	header, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if doorCode(m) != "POLICY_DENIED" || ext["rule_id"] != "one-echo-a-minute" || ms <= 0 || ms > 61000 || err != nil || float64(header)*1000 != ms {
		t.Fatalf("the second echo in a minute: %d %v, Retry-After %q; want POLICY_DENIED by one-echo-a-minute with retry_after_ms in (0, 61s] and the header its seconds",
			resp.StatusCode, m, resp.Header.Get("Retry-After"))
	}
	if n := doorExecutions(exec); n != 1 {
		t.Errorf("the executor ran %d calls, want 1", n)
	}
}
