package approvaluse

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

var (
	hashA   = "sha256:" + strings.Repeat("a", 64)
	hashB   = "sha256:" + strings.Repeat("b", 64)
	digestP = "sha256:" + strings.Repeat("c", 64)
	digestQ = "sha256:" + strings.Repeat("d", 64)
	granted = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
)

// approved is held-1's approval of hashA, approved, unused.
func approved() Approval {
	return Approval{
		Request: evidence.ApprovalRequestRecord{
			RequestID: "held-1", ApprovalID: evidence.NewApprovalID(), Caller: "alice", ToolID: "counting.run",
			CanonicalRequestHash: hashA, PolicySetDigest: digestP, RuleID: "needs_ops", ExpiresAt: granted.Add(time.Hour),
		},
		Verdict: &evidence.ApprovalRecord{Decision: evidence.ApprovalApprove},
	}
}

func sameCall() Call {
	return Call{RequestID: "new-1", Caller: "alice", ToolID: "counting.run", Hash: hashA, PolicySetDigest: digestP, RuleID: "needs_ops"}
}

func TestUsable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(a *Approval, c *Call, now *time.Time)
		want   error
	}{
		{"the identical call", func(*Approval, *Call, *time.Time) {}, nil},
		{"used before by the same request (its retry)", func(a *Approval, _ *Call, _ *time.Time) {
			a.Use = &evidence.ApprovalUseRecord{UsedBy: "new-1"}
		}, nil},
		{"another caller", func(_ *Approval, c *Call, _ *time.Time) { c.Caller = "mallory" }, ErrOtherCall},
		{"another tool", func(_ *Approval, c *Call, _ *time.Time) { c.ToolID = "counting.other" }, ErrOtherCall},
		{"other arguments", func(_ *Approval, c *Call, _ *time.Time) { c.Hash = hashB }, ErrOtherCall},
		{"a guest's call", func(a *Approval, _ *Call, _ *time.Time) { a.Request.ParentRequestID = "parent" }, ErrOtherCall},
		{"a parent waiting on its guest", func(a *Approval, _ *Call, _ *time.Time) { a.Request.NestedRequestID = "held-1:1" }, ErrOtherCall},
		{"a changed policy set", func(_ *Approval, c *Call, _ *time.Time) { c.PolicySetDigest = digestQ }, ErrPolicyChanged},
		{"another approval rule", func(_ *Approval, c *Call, _ *time.Time) { c.RuleID = "needs_two" }, ErrPolicyChanged},
		{"undecided", func(a *Approval, _ *Call, _ *time.Time) { a.Verdict = nil }, ErrNotApproved},
		{"denied", func(a *Approval, _ *Call, _ *time.Time) { a.Verdict.Decision = evidence.ApprovalDeny }, ErrNotApproved},
		{"expired by record", func(a *Approval, _ *Call, _ *time.Time) { a.Verdict.Decision = evidence.ApprovalExpired }, ErrNotApproved},
		{"past its expiry", func(_ *Approval, _ *Call, now *time.Time) { *now = granted.Add(time.Hour) }, ErrExpired},
		{"used by its own request", func(a *Approval, _ *Call, _ *time.Time) {
			a.Use = &evidence.ApprovalUseRecord{UsedBy: "held-1"}
		}, ErrUsed},
		{"used by another request", func(a *Approval, _ *Call, _ *time.Time) {
			a.Use = &evidence.ApprovalUseRecord{UsedBy: "new-0"}
		}, ErrUsed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, c, now := approved(), sameCall(), granted.Add(time.Minute)
			tc.change(&a, &c, &now)
			if err := Usable(a, c, now); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Usable = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestWaitable: a held call waits on another request's approval only
// while it is open and for the identical call under the same policy.
func TestWaitable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(a *Approval, c *Call, now *time.Time)
		want   error
	}{
		{"the identical call, undecided", func(*Approval, *Call, *time.Time) {}, nil},
		{"another caller", func(_ *Approval, c *Call, _ *time.Time) { c.Caller = "mallory" }, ErrOtherCall},
		{"another tool", func(_ *Approval, c *Call, _ *time.Time) { c.ToolID = "counting.other" }, ErrOtherCall},
		{"other arguments", func(_ *Approval, c *Call, _ *time.Time) { c.Hash = hashB }, ErrOtherCall},
		{"a guest's call", func(a *Approval, _ *Call, _ *time.Time) { a.Request.ParentRequestID = "parent" }, ErrOtherCall},
		{"a parent waiting on its guest", func(a *Approval, _ *Call, _ *time.Time) { a.Request.NestedRequestID = "held-1:1" }, ErrOtherCall},
		{"a changed policy set", func(_ *Approval, c *Call, _ *time.Time) { c.PolicySetDigest = digestQ }, ErrPolicyChanged},
		{"another approval rule", func(_ *Approval, c *Call, _ *time.Time) { c.RuleID = "needs_two" }, ErrPolicyChanged},
		{"approved", func(a *Approval, _ *Call, _ *time.Time) {
			a.Verdict = &evidence.ApprovalRecord{Decision: evidence.ApprovalApprove}
		}, ErrDecided},
		{"denied", func(a *Approval, _ *Call, _ *time.Time) {
			a.Verdict = &evidence.ApprovalRecord{Decision: evidence.ApprovalDeny}
		}, ErrDecided},
		{"past its expiry", func(_ *Approval, _ *Call, now *time.Time) { *now = granted.Add(time.Hour) }, ErrExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, c, now := approved(), sameCall(), granted.Add(time.Minute)
			a.Verdict = nil
			tc.change(&a, &c, &now)
			if err := Waitable(a, c, now); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Waitable = %v, want %v", err, tc.want)
			}
		})
	}
}

// testLedger seals by prefixing "sealed:", and opens only what it sealed.
func testLedger(s evidence.Store) Ledger {
	return Ledger{
		Store: s,
		Seal:  func(key string, data []byte) ([]byte, error) { return append([]byte("sealed:"+key+":"), data...), nil },
		Open: func(key, _ string, raw []byte) ([]byte, error) {
			body, ok := strings.CutPrefix(string(raw), "sealed:"+key+":")
			if !ok {
				return nil, errors.New("not sealed")
			}
			return []byte(body), nil
		},
	}
}

func use(by string) evidence.ApprovalUseRecord {
	a := approved().Request
	return evidence.ApprovalUseRecord{
		RequestID: a.RequestID, ApprovalID: a.ApprovalID, UsedBy: by, CanonicalRequestHash: a.CanonicalRequestHash,
		PolicySetDigest: a.PolicySetDigest, RuleID: a.RuleID, ApprovalSHA256: strings.Repeat("e", 64),
		UsedAt: granted, Gateway: "toolgate/test",
	}
}

// TestClaimHasOneWinner: of many requests claiming one approval at once,
// exactly one's use is stored, and every claimant is told that one.
func TestClaimHasOneWinner(t *testing.T) {
	t.Parallel()
	l := testLedger(evidence.NewMemoryStore())
	const n = 64
	got := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			u, _, err := l.Claim(context.Background(), use(fmt.Sprintf("new-%d", i)))
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = u.UsedBy
		})
	}
	close(start)
	wg.Wait()
	winners := 0
	for i, by := range got {
		if by != got[0] {
			t.Fatalf("claimant %d was told %s used it, claimant 0 %s", i, by, got[0])
		}
		if by == fmt.Sprintf("new-%d", i) {
			winners++
		}
	}
	if winners != 1 {
		t.Fatalf("%d claimants won", winners)
	}
	// The winner's retry claims again and keeps it.
	u, _, err := l.Claim(context.Background(), use(got[0]))
	if err != nil || u.UsedBy != got[0] {
		t.Fatalf("the winner's second claim: %+v %v", u, err)
	}
}

// TestClaimRefusesAForgedUse: a use record written into the store without
// the gateway's seal is not a use anyone may rely on.
func TestClaimRefusesAForgedUse(t *testing.T) {
	t.Parallel()
	s := evidence.NewMemoryStore()
	l := testLedger(s)
	forged := []byte(`{"request_id":"held-1"}`)
	if err := s.Put(context.Background(), evidence.Key("held-1", evidence.ArtifactApprovalUse), forged); err != nil {
		t.Fatal(err)
	}
	if u, _, err := l.Claim(context.Background(), use("new-1")); err == nil {
		t.Fatalf("a forged use was taken as %+v", u)
	}
	if u, _, err := l.Read(context.Background(), "held-1"); err == nil {
		t.Fatalf("a forged use was read as %+v", u)
	}
}

// TestCandidates: the index names the requests of one call's approvals;
// entries of malformed ids, naming no valid request or the caller's own
// request are left out, and no more than MaxCandidates are returned.
func TestCandidates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := evidence.NewMemoryStore()
	l := testLedger(s)
	prefix, _ := evidence.ApprovalCallPrefix(hashA)
	for i := range MaxCandidates + 3 {
		if err := l.Index(ctx, hashA, evidence.NewApprovalID(), fmt.Sprintf("held-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for key, id := range map[string]string{prefix + "not-an-id": "x", prefix + evidence.NewApprovalID(): "../x"} {
		if err := s.Put(ctx, key, []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Index(ctx, hashB, evidence.NewApprovalID(), "other-call"); err != nil {
		t.Fatal(err)
	}
	ids, err := l.Candidates(ctx, hashA, "held-0")
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != MaxCandidates {
		t.Fatalf("%d candidates, want %d", len(ids), MaxCandidates)
	}
	for _, id := range ids {
		if !strings.HasPrefix(id, "held-") || id == "held-0" {
			t.Fatalf("candidate %q", id)
		}
	}
	if err := l.Index(ctx, "md5:abc", evidence.NewApprovalID(), "x"); err == nil {
		t.Fatal("a malformed hash was indexed")
	}
}
