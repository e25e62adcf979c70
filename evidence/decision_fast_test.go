package evidence

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence/trust"
)

// fastDecisionSeeds are decision records as a gateway writes them (compact,
// indented, sealed), and the ways a hostile store could bend them.
func fastDecisionSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	d := DecisionRecord{RequestID: "r1", ParentRequestID: "p0", Attempt: 2, Caller: "agent-é", Action: "RunTool",
		ToolID: "workspace.readFile", Driver: "workspace", Decision: "allow", RuleID: "allow-read", Reason: "matched",
		PolicyRef: "main", PolicySetDigest: "sha256:" + strings.Repeat("cd", 32), Errors: []string{},
		DecidedAt: time.Date(2026, 11, 1, 12, 0, 0, 123456789, time.UTC), Gateway: "toolgate/0.1.0@a",
		Principal: &DecisionPrincipal{Groups: []string{"eng"}, Roles: []string{}},
		Tool:      &DecisionTool{Package: "workspace", Export: "readFile", Version: "1", Tags: []string{"read", "fs"}}}
	compact, indented, sealed := gatewayForms(tb, Key("r1", ArtifactPolicyDecision), d)
	c := string(compact)
	seeds := [][]byte{compact, indented, sealed, []byte(`{}`), []byte(`[]`), []byte(``), []byte(`null`)}
	for _, edit := range [][2]string{
		{`"attempt":2`, `"attempt":2.0`},
		{`"attempt":2`, `"attempt":1e0`},
		{`"attempt":2`, `"attempt":-2`},
		{`"attempt":2`, `"attempt":99999999999999999999`},
		{`"attempt":2`, `"Attempt":2`},
		{`"attempt":2`, `"attempt":2,"attempt":3`},
		{`"request_id":"r1"`, `"request_id":"r\u0031"`},
		{`"request_id":"r1"`, `"request_id":"r1\xff"`},
		{`"request_id":"r1"`, `"request_id":"r1","extra":1`},
		{`"errors":[]`, `"errors":null`},
		{`"errors":[]`, `"errors":["a","b"]`},
		{`"errors":[]`, `"errors":[1]`},
		{`"roles":[]`, `"roles":null`},
		{`"groups":["eng"]`, `"groups":["eng"],"groups":[]`},
		{`"tags":["read","fs"]`, `"tags":"read"`},
		{`"tool":{`, `"shadow":{"decision":"deny"},"tool":{`},
		{`"tool":{`, `"history":{"slot":1},"tool":{`},
		{`"tool":{`, `"approval":{"id":"x"},"tool":{`},
		{`"decided_at":"2026`, `"decided_at":"x2026`},
		{`"decided_at":"2026-11-01T12:00:00.123456789Z"`, `"decided_at":"2026-11-01T13:00:00+01:00"`},
		{`"principal":{`, `"principal":null,"p":{`},
		{`}`, `} `},
		{`}`, `}}`},
	} {
		if strings.Contains(c, edit[0]) {
			seeds = append(seeds, []byte(strings.Replace(c, edit[0], edit[1], 1)))
		}
	}
	return append(seeds, []byte(c+"x"), []byte(c[:len(c)-1]), []byte(" \n"+c+"\t\r\n"))
}

// gatewayForms returns record v as gateways may store it under key:
// compact, indented, and indented and sealed.
func gatewayForms(tb testing.TB, key string, v any) (compact, indented, sealed []byte) {
	tb.Helper()
	compact, err := json.Marshal(v)
	if err == nil {
		indented, err = json.MarshalIndent(v, "", "  ")
	}
	if err != nil {
		tb.Fatal(err)
	}
	sealer, err := newSigner(tb).Sealer()
	if err == nil {
		sealed, err = sealer.MAC(key, indented)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return compact, indented, sealed
}

// parseDecisionBefore is parseDecision as it was before the fast path:
// the reference the fuzz test holds it to.
func parseDecisionBefore(data []byte) (kept *DecisionRecord, got DecisionRecord, err error) {
	var d DecisionRecord
	if decodeStrict(data, &d) == nil {
		kept = &d
		if _, seal, _ := trust.Split(data); seal == nil {
			return kept, d, nil
		}
	}
	var lenient DecisionRecord
	err = json.Unmarshal(data, &lenient)
	return kept, lenient, err
}

// FuzzDecisionFastDecode checks verification's reading of decision
// records, fast path and all, against how it read them before: the same
// record kept for replay (or none), the same record returned, the same
// refusal. And whatever the fast path accepts, the strict decode reads
// the same way.
func FuzzDecisionFastDecode(f *testing.F) {
	for _, seed := range fastDecisionSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &requestCopies{}
		got, gotErr := r.parseDecision("k", data)
		wantKept, want, wantErr := parseDecisionBefore(data)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("parseDecision(%q): error %v, before %v", data, gotErr, wantErr)
		}
		if gotErr == nil && !sameDecision(got, want) {
			t.Fatalf("parseDecision(%q) = %+v, before %+v", data, got, want)
		}
		kept, ok := r.decisions["k"]
		if ok != (wantKept != nil) || (ok && !sameDecision(kept, *wantKept)) {
			t.Fatalf("parseDecision(%q) kept %v %+v, before %+v", data, ok, kept, wantKept)
		}
		body, _, _ := trust.Split(data)
		fast, fastOK := decodeDecisionFast(body)
		if !fastOK {
			return
		}
		var strict DecisionRecord
		if err := decodeStrict(data, &strict); err != nil {
			t.Fatalf("the fast path accepts %q, which the strict decode refuses: %v", data, err)
		}
		if !sameDecision(fast, strict) {
			t.Fatalf("the fast path reads %q as %+v, the strict decode as %+v", data, fast, strict)
		}
	})
}

func sameDecision(a, b DecisionRecord) bool {
	return sameRecord(a, b, func(d *DecisionRecord) *time.Time { return &d.DecidedAt })
}
