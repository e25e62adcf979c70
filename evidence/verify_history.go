package evidence

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/evidence/trust"
)

// HistoryChecker recomputes the session history facts a decision recorded
// (its DecisionHistory) from the caller's records in the store, opening
// each with open, and returns what does not match; an error only when the
// store fails. Package policy/history implements it.
type HistoryChecker interface {
	CheckHistory(ctx context.Context, s Reader, open func(key string, data []byte) ([]byte, error),
		req RequestRecord, d DecisionRecord) ([]string, error)
}

// checkHistory checks, with VerifyOptions.History, every decision of the
// request that recorded the history it saw.
func (r *requestCopies) checkHistory(ctx context.Context, id string, c *approvalCheck) ([]string, error) {
	if r.v.history == nil {
		return nil, nil
	}
	var decided []DecisionRecord
	c.eachDecision(func(_ Attempt, d DecisionRecord, _ string) {
		if d.History != nil {
			decided = append(decided, d)
		}
	})
	if len(decided) == 0 {
		return nil, nil
	}
	key := Key(id, ArtifactRequest)
	data, err := c.readOne(ctx, key)
	if err != nil {
		return nil, err
	}
	var req RequestRecord
	if err := json.Unmarshal(data, &req); err != nil {
		return []string{fmt.Sprintf("%s: unreadable, so the history its decisions saw cannot be checked: %v", key, err)}, nil
	}
	var problems []string
	for _, d := range decided {
		p, err := r.v.history.CheckHistory(ctx, r.v.store, r.v.openHistory, req, d)
		if err != nil {
			return nil, err
		}
		problems = append(problems, p...)
	}
	return problems, nil
}

// openHistory authenticates a session history record with the trusted
// keys: it must be signed by one of them. Without trusted keys its seal is
// only stripped.
func (v *verifier) openHistory(key string, data []byte) ([]byte, error) {
	if v.ring == nil {
		body, _, err := trust.Split(data)
		return body, err
	}
	body, _, err := v.ring.OpenSigned(key, data)
	return body, err
}
