// Package approvaluse lets an approval be used by the call it approves
// whatever request id that call arrives with.
//
// An approval is for a call (caller, tool, canonical arguments and ctx,
// under a policy set and rule), not for a request id: a client that cannot
// resend the request id of the call it retries (an MCP client that neither
// elicits nor sends _meta) sends the identical call under a new id. The
// gateway then finds, through an index from the call's canonical request
// hash to the approvals asked for it, an approved approval that nobody has
// used, and claims it by writing approval_use.json into the approval's own
// request: create-only, so that of concurrent identical calls, on any
// replica sharing the store, exactly one uses it; sealed, so that nobody
// who can only write to the store can forge a use. The approval's own
// request claims the same record before it uses its approval, so that an
// approval is used once, by one request, whichever comes first.
//
// The index is only a hint; what decides is the approval's authenticated
// records, which the gateway reads and Usable judges.
package approvaluse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// MaxCandidates bounds the index entries one call looks at: each is an
// approval asked for the identical call, and a caller who asks for more
// than this many unanswered gets a new approval, as before.
const MaxCandidates = 64

// Call is the call that would use an approval.
type Call struct {
	RequestID string
	Caller    string
	ToolID    string
	// Hash is the call's canonical request hash.
	Hash string
	// PolicySetDigest and RuleID are those of the decision that holds the
	// call for approval now.
	PolicySetDigest string
	RuleID          string
}

// Approval is an approval's records, authenticated by whoever read them.
type Approval struct {
	Request evidence.ApprovalRequestRecord
	// Verdict is nil while undecided.
	Verdict *evidence.ApprovalRecord
	// Use is nil while unused.
	Use *evidence.ApprovalUseRecord
}

// Why Usable refuses an approval.
var (
	ErrOtherCall     = errors.New("the approval is for another call")
	ErrPolicyChanged = errors.New("the approval was granted under another policy set or rule")
	ErrNotApproved   = errors.New("the approval is not approved")
	ErrDecided       = errors.New("the approval is decided")
	ErrExpired       = errors.New("the approval has expired")
	ErrUsed          = errors.New("the approval was used")
)

// forCall says whether r is a top-level approval asked for the identical
// call c by the same caller and tool, under the policy set and rule that
// hold c now.
func forCall(r evidence.ApprovalRequestRecord, c Call) error {
	switch {
	case r.NestedRequestID != "" || r.ParentRequestID != "" || r.CanonicalRequestHash != c.Hash ||
		r.Caller != c.Caller || r.ToolID != c.ToolID:
		return ErrOtherCall
	case r.PolicySetDigest != c.PolicySetDigest || r.RuleID != c.RuleID:
		return ErrPolicyChanged
	}
	return nil
}

// Waitable says whether c, held for approval, may wait on a, at now,
// instead of asking for an approval of its own: a is for the identical
// call (as for Usable), nobody has decided it, and it has not expired.
// Retries of a held call under new request ids then wait on one
// approval, rather than each asking approvers for another.
func Waitable(a Approval, c Call, now time.Time) error {
	if err := forCall(a.Request, c); err != nil {
		return err
	}
	switch {
	case a.Verdict != nil:
		return ErrDecided
	case !now.Before(a.Request.ExpiresAt):
		return ErrExpired
	}
	return nil
}

// Usable says whether c may use a, at now: a is its own top-level
// approval for the identical call by the same caller and tool, asked under
// the policy set and rule that hold c now, approved, not expired, and
// unused (or used by c itself, whose earlier attempt claimed it).
func Usable(a Approval, c Call, now time.Time) error {
	r := a.Request
	if err := forCall(r, c); err != nil {
		return err
	}
	switch {
	case a.Verdict == nil || a.Verdict.Decision != evidence.ApprovalApprove:
		return ErrNotApproved
	case !now.Before(r.ExpiresAt):
		return ErrExpired
	case a.Use != nil && a.Use.UsedBy != c.RequestID:
		return fmt.Errorf("%w by request %s", ErrUsed, a.Use.UsedBy)
	}
	return nil
}

// Ledger reads and writes the index and the use records in a store. Seal
// signs a record as it is stored under key; Open authenticates one read
// back from key of request id and returns it without its seal.
type Ledger struct {
	Store evidence.Store
	Seal  func(key string, data []byte) ([]byte, error)
	Open  func(key, requestID string, raw []byte) ([]byte, error)
}

// Index records that approval approvalID of request requestID was asked
// for the call whose canonical request hash is hash. It is create-only
// and written before the approval's request, so that every approval a
// call can find has its entry.
func (l Ledger) Index(ctx context.Context, hash, approvalID, requestID string) error {
	prefix, ok := evidence.ApprovalCallPrefix(hash)
	if !ok {
		return fmt.Errorf("approval call index: canonical request hash %q has no index", hash)
	}
	if err := l.Store.Put(ctx, prefix+approvalID, []byte(requestID)); err != nil {
		return fmt.Errorf("approval call index: %w", err)
	}
	return nil
}

// Candidates returns the requests whose approvals were asked for the call
// whose canonical request hash is hash, at most MaxCandidates, except
// self. Entries that name no valid request are left out.
func (l Ledger) Candidates(ctx context.Context, hash, self string) ([]string, error) {
	prefix, ok := evidence.ApprovalCallPrefix(hash)
	if !ok {
		return nil, nil
	}
	keys, err := l.Store.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("approval call index: %w", err)
	}
	var out []string
	for _, key := range keys {
		if len(out) == MaxCandidates {
			break
		}
		if evidence.ValidApprovalID(strings.TrimPrefix(key, prefix)) != nil {
			continue
		}
		raw, err := l.Store.Get(ctx, key)
		if errors.Is(err, evidence.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("approval call index: %w", err)
		}
		id := string(raw)
		if id != self && evidence.ValidRequestID(id) == nil && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out, nil
}

// Read returns the use record of request id's approval, authenticated,
// or nil when there is none.
func (l Ledger) Read(ctx context.Context, id string) (*evidence.ApprovalUseRecord, []byte, error) {
	key := evidence.Key(id, evidence.ArtifactApprovalUse)
	raw, err := l.Store.Get(ctx, key)
	if errors.Is(err, evidence.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	body, err := l.Open(key, id, raw)
	if err != nil {
		return nil, nil, err
	}
	u, err := evidence.ParseApprovalUseRecord(body, id)
	if err != nil {
		return nil, nil, err
	}
	return &u, raw, nil
}

// Claim writes u, sealed and create-only, as the one use of the approval
// of u.RequestID, and returns the use that stands: u when it was written,
// else the stored one (authenticated), which names another user unless a
// retry of u.UsedBy claimed it before.
func (l Ledger) Claim(ctx context.Context, u evidence.ApprovalUseRecord) (*evidence.ApprovalUseRecord, []byte, error) {
	key := evidence.Key(u.RequestID, evidence.ArtifactApprovalUse)
	body, err := json.Marshal(u)
	if err != nil {
		return nil, nil, fmt.Errorf("encode %s: %w", evidence.ArtifactApprovalUse, err)
	}
	data, err := l.Seal(key, body)
	if err != nil {
		return nil, nil, err
	}
	err = l.Store.Put(ctx, key, data)
	if errors.Is(err, evidence.ErrExist) {
		stored, raw, err := l.Read(ctx, u.RequestID)
		if err == nil && stored == nil {
			err = fmt.Errorf("%s of %s: written, then gone: %w", evidence.ArtifactApprovalUse, u.RequestID, evidence.ErrNotExist)
		}
		return stored, raw, err
	}
	if err != nil {
		return nil, nil, err
	}
	return &u, data, nil
}
