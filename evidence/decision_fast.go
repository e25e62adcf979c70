package evidence

// Reading decision records quickly. Every request verified has at least
// one policy_decision.json, and its strict decode (encoding/json with
// unknown fields refused, then a second pass for duplicate names) was the
// largest single cost of verifying a request after the manifest's. As for
// manifests (see manifest_fast.go), decodeDecisionFast reads the records a
// gateway writes in one pass and declines everything it is not sure the
// strict decode reads the same way: besides what the manifest reader
// declines, a record with a shadow decision, an approval or a session
// history, which are rarer and richer. The strict decode then reads it, so
// what is accepted and rejected is exactly what it was
// (FuzzDecisionFastDecode).

// decisionFields are the names decodeDecisionFast knows.
var decisionFields = [...]string{"request_id", "parent_request_id", "attempt", "caller", "action", "tool_id",
	"driver", "decision", "rule_id", "reason", "suggestion", "policy_ref", "policy_set_digest", "errors",
	"decided_at", "gateway", "principal", "tool"}

var (
	principalFields = []string{"groups", "roles"}
	toolFields      = []string{"package", "export", "version", "tags"}
)

// decodeDecisionFast decodes an unsealed decision record; ok is false when
// it declines.
func decodeDecisionFast(data []byte) (d DecisionRecord, ok bool) {
	s := jsonScan{data: data}
	ok = s.object(func(name string) bool {
		switch name {
		case "request_id":
			return s.str(&d.RequestID)
		case "parent_request_id":
			return s.str(&d.ParentRequestID)
		case "attempt":
			var n int64
			ok := s.integer(&n)
			d.Attempt = int(n)
			return ok
		case "caller":
			return s.str(&d.Caller)
		case "action":
			return s.str(&d.Action)
		case "tool_id":
			return s.str(&d.ToolID)
		case "driver":
			return s.str(&d.Driver)
		case "decision":
			return s.str(&d.Decision)
		case "rule_id":
			return s.str(&d.RuleID)
		case "reason":
			return s.str(&d.Reason)
		case "suggestion":
			return s.str(&d.Suggestion)
		case "policy_ref":
			return s.str(&d.PolicyRef)
		case "policy_set_digest":
			return s.str(&d.PolicySetDigest)
		case "errors":
			return s.strings(&d.Errors)
		case "decided_at":
			return s.timestamp(&d.DecidedAt)
		case "gateway":
			return s.str(&d.Gateway)
		case "principal":
			d.Principal = &DecisionPrincipal{}
			return s.principal(d.Principal)
		case "tool":
			d.Tool = &DecisionTool{}
			return s.tool(d.Tool)
		}
		return false
	}, decisionFields[:])
	if !ok || !s.end() {
		return DecisionRecord{}, false
	}
	return d, true
}

func (s *jsonScan) principal(p *DecisionPrincipal) bool {
	return s.object(func(name string) bool {
		if name == "groups" {
			return s.strings(&p.Groups)
		}
		return s.strings(&p.Roles)
	}, principalFields)
}

func (s *jsonScan) tool(t *DecisionTool) bool {
	return s.object(func(name string) bool {
		switch name {
		case "package":
			return s.str(&t.Package)
		case "export":
			return s.str(&t.Export)
		case "version":
			return s.str(&t.Version)
		}
		return s.strings(&t.Tags)
	}, toolFields)
}

// strings reads an array of strings into a new, non-nil slice, as
// encoding/json does for "[]"; null is declined.
func (s *jsonScan) strings(dst *[]string) bool {
	list := []string{}
	ok := s.array(func() bool {
		var v string
		if !s.str(&v) {
			return false
		}
		list = append(list, v)
		return true
	})
	if ok {
		*dst = list
	}
	return ok
}
