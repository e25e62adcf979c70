package recovery

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// Stored is what recovery reads of a request without a manifest.
type Stored struct {
	ID       string
	Keys     []string
	Request  evidence.RequestRecord
	Attempts []evidence.Attempt
	// Decision is the last attempt's decision, when stored.
	Decision *evidence.DecisionRecord
	// LastActivity is the latest time a record of the request shows.
	LastActivity time.Time
	// Foreign is set when the record that names the last attempt's owner
	// is sealed by another replica's key.
	Foreign bool
}

// Owner names the gateway that owns the last attempt: the one that
// claimed the request, or for a later attempt the one that decided it.
// It is empty when that record is another replica's.
func (s *Stored) Owner() string {
	if s.Foreign {
		return ""
	}
	if s.Decision != nil && s.Decision.Gateway != "" {
		return s.Decision.Gateway
	}
	return s.Request.Gateway
}

// Has reports whether the request's artifact name is stored.
func (s *Stored) Has(name string) bool {
	return slices.Contains(s.Keys, evidence.Key(s.ID, name))
}

// Last is the request's last attempt.
func (s *Stored) Last() evidence.Attempt { return s.Attempts[len(s.Attempts)-1] }

// Missing names what a request whose response is stored lacks for its
// record to be whole; responseReadable says whether response.json
// decodes. Empty: the record is whole.
func (s *Stored) Missing(responseReadable bool) []string {
	var missing []string
	if !responseReadable {
		missing = append(missing, "response.json is unreadable")
	}
	last := s.Last()
	switch {
	case s.Decision == nil:
		missing = append(missing, fmt.Sprintf("attempt %d has no policy decision", last.Number))
	case s.Decision.Decision == "allow" && last.State != evidence.Dispatched:
		missing = append(missing, fmt.Sprintf("attempt %d was allowed but has no dispatch marker", last.Number))
	case s.Decision.Decision == "allow" && !s.Has(evidence.ArtifactToolResult):
		missing = append(missing, "tool_result.json is missing")
	}
	return missing
}

// Reader reads stored requests as recovery judges them. The gateway gives
// it the store and how it authenticates what it acts on.
type Reader struct {
	Store evidence.Store
	// Attempts reads the attempts of request id, whose keys are keys,
	// authenticated as the gateway acts on them.
	Attempts func(ctx context.Context, id string, keys []string) ([]evidence.Attempt, error)
	// OpenOwn checks the seal of a record the gateway would act on as its
	// own; an error Foreign reports true for is another replica's record,
	// any other one (wrapping trust.ErrTampered) a record no trusted
	// gateway wrote.
	OpenOwn func(key string, raw []byte) ([]byte, error)
	Foreign func(error) bool
}

// Read reads the records recovery judges request id by.
func (r Reader) Read(ctx context.Context, id string, keys []string) (*Stored, error) {
	s := &Stored{ID: id, Keys: keys}
	claimKey := evidence.Key(id, evidence.ArtifactRequest)
	raw, err := r.Store.Get(ctx, claimKey)
	if err != nil {
		return nil, err
	}
	if s.Request, err = evidence.ParseRequestRecord(raw); err != nil {
		return nil, fmt.Errorf("request.json is unreadable: %w", err)
	}
	if s.Attempts, err = r.Attempts(ctx, id, keys); err != nil {
		return nil, err
	}
	last := s.Last()
	s.LastActivity = latest(s.Request.ReceivedAt, last.At)
	decisionKey := evidence.AttemptKey(id, last.Number, evidence.ArtifactPolicyDecision)
	var decisionRaw []byte
	if slices.Contains(keys, decisionKey) {
		if decisionRaw, err = r.Store.Get(ctx, decisionKey); err != nil {
			return nil, err
		}
		var d evidence.DecisionRecord
		if err := json.Unmarshal(decisionRaw, &d); err != nil {
			return nil, fmt.Errorf("%s is unreadable: %w", decisionKey, err)
		}
		s.Decision = &d
		s.LastActivity = latest(s.LastActivity, d.DecidedAt)
	}
	if err := r.authenticate(s, claimKey, raw, decisionKey, decisionRaw); err != nil {
		return nil, err
	}
	if s.Has(evidence.ArtifactToolResult) {
		var tr struct {
			StartedAt  time.Time `json:"started_at"`
			DurationMS int64     `json:"duration_ms"`
		}
		if err := r.readJSON(ctx, evidence.Key(id, evidence.ArtifactToolResult), &tr); err == nil {
			s.LastActivity = latest(s.LastActivity, tr.StartedAt.Add(time.Duration(tr.DurationMS)*time.Millisecond))
		}
	}
	return s, nil
}

// authenticate checks, before recovery or a retry acts on s, the records
// that say whose the request is: the claim, and the last attempt's
// decision when it has one. A record no trusted gateway wrote is
// tampering, and nothing is finalised or signed for the request. The
// claim may be another replica's when this gateway owns the decision: a
// retry it ran after checking the caller's request against that claim.
func (r Reader) authenticate(s *Stored, claimKey string, claim []byte, decisionKey string, decision []byte) error {
	_, claimErr := r.OpenOwn(claimKey, claim)
	if claimErr != nil && !r.Foreign(claimErr) {
		return fmt.Errorf("the claim: %w", claimErr)
	}
	if decision == nil {
		s.Foreign = claimErr != nil
		return nil
	}
	_, err := r.OpenOwn(decisionKey, decision)
	switch {
	case err != nil && r.Foreign(err):
		s.Foreign = true
	case err != nil:
		return fmt.Errorf("the decision of attempt %d: %w", s.Last().Number, err)
	}
	return nil
}

func (r Reader) readJSON(ctx context.Context, key string, v any) error {
	raw, err := r.Store.Get(ctx, key)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s is unreadable: %w", key, err)
	}
	return nil
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
