package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	cedar "github.com/cedar-policy/cedar-go"
)

// fullScan lists every policy of a set, in file order: what plain
// cedar.Authorize evaluates.
func fullScan(set *policySet) candidateList {
	all := make([]int, len(set.policies))
	for i := range all {
		all[i] = i
	}
	return candidateList{set: set, lists: [3][]int{all}}
}

// plainDecision decides req the way plain cedar.Authorize does over the whole
// set, in the terms Decide reports.
func plainDecision(t testing.TB, set *policySet, req Request) (allow bool, ruleID string) {
	t.Helper()
	creq, entities, err := cedarRequest(req, nil)
	if err != nil {
		t.Fatal(err)
	}
	dec, diag := cedar.Authorize(fullScan(set), entities, creq)
	switch {
	case len(diag.Errors) > 0:
		return false, RulePolicyError
	case len(diag.Reasons) > 0:
		return dec == cedar.Allow, set.byID[diag.Reasons[0].PolicyID].ruleID
	default:
		return false, RuleDefaultDeny
	}
}

// randomPolicy writes one policy with a random effect, scope and condition.
func randomPolicy(rng *rand.Rand, i int) string {
	effect := []string{"permit", "forbid"}[rng.IntN(2)]
	principal := []string{
		"principal",
		fmt.Sprintf(`principal == Caller::"c%d"`, rng.IntN(5)),
		fmt.Sprintf(`principal in Caller::"c%d"`, rng.IntN(5)),
	}[rng.IntN(3)]
	action := []string{"action", `action == Action::"RunTool"`, `action in [Action::"RunTool", Action::"CallTool"]`}[rng.IntN(3)]
	resource := []string{
		"resource",
		fmt.Sprintf(`resource == Tool::"t%d"`, rng.IntN(8)),
		fmt.Sprintf(`resource in Driver::"d%d"`, rng.IntN(3)),
	}[rng.IntN(3)]
	cond := []string{
		"",
		fmt.Sprintf(`when { context.args has n && context.args.n > %d }`, rng.IntN(10)),
		fmt.Sprintf(`when { resource.tags.contains("g%d") }`, rng.IntN(3)),
		fmt.Sprintf(`when { principal.groups.contains("g%d") }`, rng.IntN(3)),
		`when { context.args has n && context.args.n like "1*" }`, // errors when evaluated
		`unless { context has runId }`,
	}[rng.IntN(6)]
	return fmt.Sprintf("@id(\"p%d\")\n%s (%s, %s, %s) %s;\n", i, effect, principal, action, resource, cond)
}

func randomRequest(rng *rand.Rand) Request {
	tags := []string{}
	if rng.IntN(2) == 0 {
		tags = append(tags, fmt.Sprintf("g%d", rng.IntN(3)))
	}
	req := Request{
		Caller:      fmt.Sprintf("c%d", rng.IntN(6)),
		CallerAttrs: CallerAttributes{Groups: tags},
		Action:      []string{ActionRunTool, ActionCallTool}[rng.IntN(2)],
		ToolID:      fmt.Sprintf("t%d", rng.IntN(9)),
		Driver:      fmt.Sprintf("d%d", rng.IntN(4)),
		Tool:        ToolAttributes{Tags: tags},
		RequestID:   "r",
		Args:        map[string]any{},
	}
	if rng.IntN(2) == 0 {
		req.Args["n"] = json.Number(fmt.Sprint(rng.IntN(12)))
	}
	if rng.IntN(3) == 0 {
		req.RunID = "run"
	}
	return req
}

// TestIndexMatchesPlainAuthorize is a property test: over random policy
// sets and random requests, the indexed decision equals plain
// cedar.Authorize over every policy.
func TestIndexMatchesPlainAuthorize(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 40 {
		var src strings.Builder
		for i := range 5 + rng.IntN(60) {
			src.WriteString(randomPolicy(rng, i))
		}
		e := mustLoad(t, policyDir(t, map[string]string{DefaultRef + ".cedar": src.String()}))
		set := e.sets[DefaultRef]
		for range 60 {
			req := randomRequest(rng)
			got := e.Decide(context.Background(), req)
			allow, rule := plainDecision(t, set, req)
			if got.Allow != allow || got.RuleID != rule {
				t.Fatalf("round %d, request %+v: indexed allow=%v rule=%s, plain allow=%v rule=%s\npolicies:\n%s",
					round, req, got.Allow, got.RuleID, allow, rule, src.String())
			}
		}
	}
}

// BenchmarkDecisionLatency compares indexed decisions with plain
// cedar.Authorize over every policy, at 10, 1,000 and 10,000 policies that
// each pin a tool (as catalog rules do), in one run, and reports the
// median as p50-ns.
func BenchmarkDecisionLatency(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		var src strings.Builder
		for i := range n {
			fmt.Fprintf(&src, "@id(\"p%d\")\npermit (principal, action == Action::\"RunTool\", resource == Tool::\"tool%d\")\nwhen { context.args has path && context.args.path like \"docs/*\" };\n", i, i)
		}
		e := mustLoad(b, policyDir(b, map[string]string{DefaultRef + ".cedar": src.String()}))
		set := e.sets[DefaultRef]
		req := Request{
			Caller: "alice", Action: ActionRunTool, RequestID: "req-1",
			ToolID: fmt.Sprintf("tool%d", n/2), Driver: "tpmjs",
			Args: map[string]any{"path": "docs/readme.md", "limit": json.Number("10")},
		}
		full := fullScan(set)
		cases := []struct {
			name   string
			decide func() bool
		}{
			{"indexed", func() bool { return e.Decide(context.Background(), req).Allow }},
			// The same work but the index: build the Cedar request, then
			// authorize against every policy.
			{"plain", func() bool {
				creq, entities, err := cedarRequest(req, nil)
				if err != nil {
					return false
				}
				d, _ := cedar.Authorize(full, entities, creq)
				return d == cedar.Allow
			}},
		}
		for _, c := range cases {
			b.Run(fmt.Sprintf("policies=%d/%s", n, c.name), func(b *testing.B) {
				var samples []time.Duration
				for b.Loop() {
					start := time.Now()
					if !c.decide() {
						b.Fatal("want allow")
					}
					samples = append(samples, time.Since(start))
				}
				slices.Sort(samples)
				b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "p50-ns")
			})
		}
	}
}
