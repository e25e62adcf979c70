package mcpdoor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// acceptAll is an elicitation handler that accepts whatever it is asked.
func acceptAll(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	return &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}, nil
}

// approvalOf is the approval id in a result's _meta.
func approvalOf(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	a, _ := res.Meta[MetaApproval].(map[string]any)
	id, _ := a["approvalId"].(string)
	if id == "" {
		t.Fatalf("no approval in _meta %v", res.Meta)
	}
	return id
}

// decide decides an approval as caller.
func (e *testEnv) decide(caller, id, decision string) {
	e.t.Helper()
	if _, err := e.gw.DecideApprovalAs(context.Background(), caller, nil, id, decision, "checked"); err != nil {
		e.t.Fatal(err)
	}
}

// retry calls again with a requestState.
func retry(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, state string) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, RequestState: state,
		InputResponses: mcp.InputResponseMap{approvalInputID: &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}}})
	must(t, err)
	return res
}

func TestApprovalInputRequiredRoundTrip(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey, elicit: acceptAll, rawMRTR: true})
	args := map[string]any{"text": "held text"}
	first := call(t, cs, "held", args, nil)
	if !first.NeedsInput() || first.RequestState == "" {
		t.Fatalf("result %+v: want input_required with a requestState", first)
	}
	ask, ok := first.InputRequests[approvalInputID].(*mcp.ElicitParams)
	if !ok || ask.Mode != "form" || !strings.Contains(ask.Message, "rule held_needs_ops: held for ops") {
		t.Fatalf("input requests %+v: want a form elicitation naming the rule", first.InputRequests)
	}
	aid := approvalOf(t, first)
	rid, _ := first.Meta[MetaRequestID].(string)
	state := first.RequestState

	// Still pending: a retry, its elicitation "accepted", asks again with
	// a fresh state and runs nothing.
	pending := retry(t, cs, "held", args, state)
	if !pending.NeedsInput() || e.driver.runs.Load() != 0 {
		t.Fatalf("a retry while pending: needs input %v, driver runs %d", pending.NeedsInput(), e.driver.runs.Load())
	}

	e.decide("alice", aid, "approve")
	for _, tc := range []struct {
		name, caller string
		state        string
		args         map[string]any
	}{
		{"a tampered state is refused", agentKey, tamper(state), args},
		{"another caller's state is refused", aliceKey, state, args},
		{"a state for other arguments runs nothing", agentKey, state, map[string]any{"text": "other text"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := retry(t, e.connect(clientOptions{key: tc.caller, elicit: acceptAll, rawMRTR: true}), "held", tc.args, tc.state)
			t.Logf("answer: %q", text(res))
			if !res.IsError || res.NeedsInput() {
				t.Errorf("isError %v, needs input %v, text %q", res.IsError, res.NeedsInput(), text(res))
			}
		})
	}
	if n := e.driver.runs.Load(); n != 0 {
		t.Fatalf("the driver ran %d times on refused states", n)
	}

	done := retry(t, cs, "held", args, pending.RequestState)
	if done.IsError || done.NeedsInput() || text(done) != "held text" || done.Meta[MetaRequestID] != rid {
		t.Fatalf("after the approval: isError %v, needs input %v, text %q, request %v", done.IsError, done.NeedsInput(), text(done), done.Meta[MetaRequestID])
	}
	again := retry(t, cs, "held", args, pending.RequestState)
	if text(again) != "held text" || e.driver.runs.Load() != 1 {
		t.Errorf("a second retry: text %q, driver runs %d; want the stored answer and one run", text(again), e.driver.runs.Load())
	}
}

func TestExpiredApprovalStateIsRefused(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey, elicit: acceptAll, rawMRTR: true})
	args := map[string]any{"text": "x"}
	first := call(t, cs, "held", args, nil)
	e.decide("alice", approvalOf(t, first), "approve")
	e.door.now = func() time.Time { return time.Now().Add(DefaultStateTTL + time.Second) }
	res := retry(t, cs, "held", args, first.RequestState)
	if !res.IsError || !strings.Contains(text(res), "invalid or expired") || e.driver.runs.Load() != 0 {
		t.Errorf("an expired state: isError %v, text %q, runs %d", res.IsError, text(res), e.driver.runs.Load())
	}
}

// tamper flips one character of a state's payload.
func tamper(s string) string {
	i := strings.Index(s, ".") + 5
	b := []byte(s)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

func TestElicitationAcceptIsNeverAnApproval(t *testing.T) {
	e := newTestEnv(t, nil)
	// The SDK's own multi round-trip: it answers every elicitation with
	// "accept" and retries, up to its limit.
	cs := e.connect(clientOptions{key: agentKey, elicit: acceptAll})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "held", Arguments: map[string]any{"text": "self-approved?"},
		Meta: mcp.Meta{MetaIdempotencyKey: "self-approve"}})
	t.Logf("the client's own retries ended with err %v", err)
	if err == nil && !res.NeedsInput() {
		t.Fatalf("the call completed (isError %v, %q) with its approval pending", res.IsError, text(res))
	}
	if n := e.driver.runs.Load(); n != 0 {
		t.Fatalf("the driver ran %d times on the client's own say-so", n)
	}
	list, err := e.gw.ListApprovalsAs(context.Background(), "alice", nil, &toolgatev1.ListApprovalsRequest{RequestId: "self-approve"})
	must(t, err)
	if len(list.GetApprovals()) != 1 || list.GetApprovals()[0].GetState() != "pending" {
		t.Errorf("approvals %v: want one, still pending", list.GetApprovals())
	}
}

func TestApprovalFallbackForLegacyClients(t *testing.T) {
	e := newTestEnv(t, nil)
	for _, tc := range []struct {
		name string
		o    clientOptions
	}{
		{"a 2025-06-18 client that elicits", clientOptions{key: agentKey, legacy: true, elicit: acceptAll}},
		{"a 2026-07-28 client that does not elicit", clientOptions{key: agentKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := e.connect(tc.o)
			key := "fallback-" + map[bool]string{true: "legacy", false: "noelicit"}[tc.o.legacy]
			args := map[string]any{"text": key}
			first := call(t, cs, "held", args, mcp.Meta{MetaIdempotencyKey: key})
			aid := approvalOf(t, first)
			if first.NeedsInput() || !first.IsError ||
				!strings.Contains(text(first), "Approval "+aid+" is required (rule held_needs_ops: held for ops)") ||
				!strings.Contains(text(first), `{"io.github.toolgate/idempotencyKey": "`+key+`"}`) {
				t.Fatalf("isError %v, text %q: want a tool error with the approval and the key", first.IsError, text(first))
			}
			before := e.driver.runs.Load()
			e.decide("alice", aid, "approve")
			done := call(t, cs, "held", args, mcp.Meta{MetaIdempotencyKey: key})
			if done.IsError || text(done) != key || e.driver.runs.Load() != before+1 {
				t.Errorf("after the approval: isError %v, text %q", done.IsError, text(done))
			}
		})
	}
}

// TestApprovalWithoutMetaRunsOnce: a client that neither elicits nor
// sends _meta gets a fresh request id on every call; once the approval
// is decided, the identical call uses it, once.
func TestApprovalWithoutMetaRunsOnce(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey, legacy: true})
	args := map[string]any{"text": "no-meta"}
	first := call(t, cs, "held", args, nil)
	aid := approvalOf(t, first)
	if !first.IsError || !strings.Contains(text(first), "call this tool again with the same arguments") {
		t.Fatalf("isError %v, text %q", first.IsError, text(first))
	}
	// Called again while pending, it waits on the same approval, and
	// nothing runs.
	if again := call(t, cs, "held", args, nil); !again.IsError || approvalOf(t, again) != aid || e.driver.runs.Load() != 0 {
		t.Fatalf("a retry while pending: isError %v, text %q, %d runs", again.IsError, text(again), e.driver.runs.Load())
	}
	before := e.driver.runs.Load()
	e.decide("alice", aid, "approve")
	done := call(t, cs, "held", args, nil)
	if done.IsError || text(done) != "no-meta" || e.driver.runs.Load() != before+1 {
		t.Fatalf("after the approval: isError %v, text %q, %d runs", done.IsError, text(done), e.driver.runs.Load()-before)
	}
	if rid := done.Meta[MetaRequestID]; rid == first.Meta[MetaRequestID] {
		t.Fatalf("the retry had the held call's request id %v", rid)
	}
	if third := call(t, cs, "held", args, nil); !third.IsError || approvalOf(t, third) == aid || e.driver.runs.Load() != before+1 {
		t.Fatalf("a used approval ran again: isError %v, text %q", third.IsError, text(third))
	}
}

func TestDeniedApprovalIsAToolError(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey, elicit: acceptAll, rawMRTR: true})
	args := map[string]any{"text": "x"}
	first := call(t, cs, "held", args, nil)
	e.decide("alice", approvalOf(t, first), "deny")
	res := retry(t, cs, "held", args, first.RequestState)
	if !res.IsError || res.NeedsInput() || e.driver.runs.Load() != 0 {
		t.Errorf("a denied approval: isError %v, needs input %v, text %q", res.IsError, res.NeedsInput(), text(res))
	}
}

func TestStateKeyFileIsCreatedOnceAndShared(t *testing.T) {
	path := t.TempDir() + "/state.key"
	a, err := loadStateKey(path)
	must(t, err)
	b, err := loadStateKey(path)
	must(t, err)
	if string(a) != string(b) || len(a) != stateKeySize {
		t.Fatal("two loads of one state_key_file gave different keys")
	}
	if fi, err := statMode(path); err != nil || fi != 0o600 {
		t.Errorf("mode %v (%v), want 0600", fi, err)
	}
	must(t, writeFile(path, []byte("short")))
	if _, err := loadStateKey(path); err == nil || !strings.Contains(err.Error(), "state_key_file") {
		t.Errorf("a short key file: %v", err)
	}
	// Replicas sharing the file open each other's states.
	d1, d2 := &Door{stateKey: a}, &Door{stateKey: b}
	st := approvalState{RequestID: "r1", Tool: "held", Caller: "agent", Expires: time.Now().Add(time.Minute).Unix()}
	if _, err := d2.openState(d1.sealState(st), "agent", "held", time.Now()); err != nil {
		t.Errorf("a replica refused another's state: %v", err)
	}
	other := &Door{stateKey: make([]byte, stateKeySize)}
	if _, err := other.openState(d1.sealState(st), "agent", "held", time.Now()); !errors.Is(err, errBadState) {
		t.Errorf("another key opened the state: %v", err)
	}
}

// A requestState has one spelling. Base64 without padding leaves spare
// bits in its last character; a door that ignored them would open
// states it never wrote out, letting a client replay one grant under
// names that a log or a deduplicating cache would count apart.
func TestStateOpensOnlyInTheSpellingSealed(t *testing.T) {
	d := &Door{stateKey: []byte("0123456789abcdef0123456789abcdef")}
	now := time.Unix(1_800_000_000, 0)
	// A hash of two bytes makes a payload whose length leaves spare bits.
	sealed := d.sealState(approvalState{RequestID: "mcp-abc", Tool: "held", Caller: "agent", Hash: "hh", ApprovalID: "apr_x", Expires: now.Unix() + 60})
	version, rest, _ := strings.Cut(sealed, ".")
	payload, mac, _ := strings.Cut(rest, ".")
	for _, tc := range []struct{ name, state string }{
		{"mac's spare bits set", version + "." + payload + "." + spareBitsSet(t, mac)},
		{"line break inside the mac", version + "." + payload + "." + mac[:8] + "\n" + mac[8:]},
		{"line break at the mac's end", version + "." + payload + "." + mac + "\r\n"},
		{"payload's spare bits set", version + "." + spareBitsSet(t, payload) + "." + mac},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := d.openState(tc.state, "agent", "held", now); !errors.Is(err, errBadState) {
				t.Errorf("opened %q: %v", tc.state, err)
			}
		})
	}
	if _, err := d.openState(sealed, "agent", "held", now); err != nil {
		t.Fatalf("the sealed spelling itself: %v", err)
	}
}

// spareBitsSet respells s, unpadded base64url, with the unused low bits
// of its last character set; the decoded bytes stay the same.
func spareBitsSet(t *testing.T, s string) string {
	t.Helper()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	spare := map[int]int{2: 0b1111, 3: 0b11}[len(s)%4]
	if spare == 0 {
		t.Fatalf("%q has no spare bits to set", s)
	}
	last := strings.IndexByte(alphabet, s[len(s)-1])
	return s[:len(s)-1] + string(alphabet[last|spare])
}
