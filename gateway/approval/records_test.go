package approval

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

var asked = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)

// book is a Records over a memory store whose records are sealed with a
// fresh key, at a clock the test moves.
type book struct {
	Records
	store *evidence.MemoryStore
	clock *time.Time
	notes *[]Event
}

type notes struct{ events *[]Event }

func (n notes) Notify(ev Event) { *n.events = append(*n.events, ev) }

func newBook(t *testing.T) book {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	mac := make([]byte, 32)
	if _, err := rand.Read(mac); err != nil {
		t.Fatal(err)
	}
	sealer, err := trust.NewSealer(priv, mac)
	if err != nil {
		t.Fatal(err)
	}
	keyring, err := trust.NewKeyring([]ed25519.PublicKey{sealer.PublicKey()}, mac)
	if err != nil {
		t.Fatal(err)
	}
	store := evidence.NewMemoryStore()
	clock := asked
	events := &[]Event{}
	return book{
		Records: Records{
			Store: store, Seal: sealer.Sign,
			Open: func(key, _ string, raw []byte) ([]byte, error) {
				body, _, err := keyring.OpenSigned(key, raw)
				return body, err
			},
			Redact:  func(s string) string { return strings.ReplaceAll(s, "hunter2", "[REDACTED]") },
			Gateway: "toolgate/test@gw", Now: func() time.Time { return clock }, Notifier: notes{events},
			Log: slog.New(slog.DiscardHandler),
		},
		store: store, clock: &clock, notes: events,
	}
}

// hold stores request id as a call held for approval asked of ops, and
// returns its approval request as stored.
func (b book) hold(t *testing.T, id, caller string) evidence.ApprovalRequestRecord {
	t.Helper()
	ctx := context.Background()
	hash := "sha256:" + strings.Repeat("a", 64)
	req, err := json.Marshal(evidence.RequestRecord{RequestID: id, Caller: caller, ToolID: "workspace.shell",
		CanonicalRequestHash: hash, Args: json.RawMessage(`{"cmd":"ls"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Put(ctx, evidence.Key(id, evidence.ArtifactRequest), req); err != nil {
		t.Fatal(err)
	}
	a := evidence.ApprovalRequestRecord{
		RequestID: id, ApprovalID: evidence.NewApprovalID(), Attempt: 1, Caller: caller, ToolID: "workspace.shell",
		CanonicalRequestHash: hash, PolicySetDigest: "sha256:" + strings.Repeat("b", 64), RuleID: "shell_needs_ops",
		Approvers: "ops", RequestedAt: asked, ExpiresAt: asked.Add(time.Hour), Gateway: b.Gateway,
	}
	if err := b.Index(ctx, a, true); err != nil {
		t.Fatal(err)
	}
	body, err := marshalJSON(a)
	if err != nil {
		t.Fatal(err)
	}
	stored, _, _, err := b.StoreRequest(ctx, a, body)
	if err != nil {
		t.Fatal(err)
	}
	return stored
}

func allow(context.Context, *View) policy.Decision {
	return policy.Decision{Allow: true, RuleID: "ops_approve"}
}

func refuse(context.Context, *View) policy.Decision {
	return policy.Decision{RuleID: "default_deny", Reason: "not an approver"}
}

func TestDecideRecordsTheFirstDecisionOnly(t *testing.T) {
	t.Parallel()
	b := newBook(t)
	a := b.hold(t, "held-1", "alice")
	ctx := context.Background()

	v, outcome, err := b.Decide(ctx, "bob", a.ApprovalID, Approve, "ok, the password is hunter2", allow)
	if err != nil || outcome != Decided {
		t.Fatalf("Decide = %v, %v; want Decided", outcome, err)
	}
	if got := v.Held.Verdict.Reason; strings.Contains(got, "hunter2") {
		t.Fatalf("the approver's reason is stored unredacted: %q", got)
	}
	if v.Held.Verdict.Authorization == nil || v.Held.Verdict.Authorization.RuleID != "ops_approve" {
		t.Fatalf("the decision does not name the rule that let bob decide: %+v", v.Held.Verdict.Authorization)
	}
	again, outcome, err := b.Decide(ctx, "carol", a.ApprovalID, Deny, "no", allow)
	if err != nil || outcome != Unchanged {
		t.Fatalf("a second decision = %v, %v; want Unchanged", outcome, err)
	}
	if _, err := Already(again, "carol", Deny); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "decided approve by bob") {
		t.Fatalf("Already for carol = %v; want FAILED_PRECONDITION naming bob's decision", err)
	}
	if got, err := Already(again, "bob", Approve); err != nil || got.GetState() != StateApproved {
		t.Fatalf("bob repeating his decision = %v, %v; want it back, approved", got, err)
	}
}

func TestDecideRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		id   func(a evidence.ApprovalRequestRecord) string
		may  MayDecide
		move time.Duration
		code codes.Code
		want Outcome
	}{
		{"an approver policy refuses", func(a evidence.ApprovalRequestRecord) string { return a.ApprovalID }, refuse, 0, codes.PermissionDenied, Unchanged},
		{"an unknown approval", func(evidence.ApprovalRequestRecord) string { return evidence.NewApprovalID() }, allow, 0, codes.NotFound, Unchanged},
		{"a malformed approval id", func(evidence.ApprovalRequestRecord) string { return "../requests/held-1" }, allow, 0, codes.NotFound, Unchanged},
		{"a huge approval id", func(evidence.ApprovalRequestRecord) string { return strings.Repeat("x", 1<<16) }, allow, 0, codes.NotFound, Unchanged},
		{"past its expiry", func(a evidence.ApprovalRequestRecord) string { return a.ApprovalID }, allow, 2 * time.Hour, codes.OK, Expired},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBook(t)
			a := b.hold(t, "held-1", "alice")
			*b.clock = asked.Add(tc.move)
			v, outcome, err := b.Decide(context.Background(), "bob", tc.id(a), Approve, "", tc.may)
			if status.Code(err) != tc.code || outcome != tc.want {
				t.Fatalf("Decide = %v, %v; want %v, %v", outcome, err, tc.want, tc.code)
			}
			if err != nil && len(err.Error()) > 400 {
				t.Fatalf("the error repeats the hostile id at length: %d bytes", len(err.Error()))
			}
			if tc.want == Expired && (v.Held.Verdict == nil || v.Held.Verdict.Decision != evidence.ApprovalExpired) {
				t.Fatalf("the expiry is not recorded: %+v", v.Held.Verdict)
			}
		})
	}
}

func TestReadRefusesForgedRecords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		forge  func(t *testing.T, b book, a evidence.ApprovalRequestRecord)
		sealed bool // the forgery fails authentication rather than a binding check
	}{
		{"an unsigned approval written into the store", func(t *testing.T, b book, a evidence.ApprovalRequestRecord) {
			raw, _ := json.Marshal(evidence.ApprovalRecord{RequestID: a.RequestID, ApprovalID: a.ApprovalID, Decision: evidence.ApprovalApprove})
			b.plant(t, evidence.Key(a.RequestID, evidence.ArtifactApproval), raw)
		}, true},
		{"a signed approval of another request moved here", func(t *testing.T, b book, a evidence.ApprovalRequestRecord) {
			other := b.hold(t, "held-2", "alice")
			if _, _, err := b.Decide(context.Background(), "bob", other.ApprovalID, Approve, "", allow); err != nil {
				t.Fatal(err)
			}
			raw, err := b.store.Get(context.Background(), evidence.Key("held-2", evidence.ArtifactApproval))
			if err != nil {
				t.Fatal(err)
			}
			b.plant(t, evidence.Key(a.RequestID, evidence.ArtifactApproval), raw)
		}, true},
		{"a signed approval naming another approval request", func(t *testing.T, b book, a evidence.ApprovalRequestRecord) {
			v := evidence.ApprovalRecord{RequestID: a.RequestID, ApprovalID: a.ApprovalID, Decision: evidence.ApprovalApprove,
				CanonicalRequestHash: a.CanonicalRequestHash, ApprovalRequestSHA256: strings.Repeat("0", 64)}
			key := evidence.Key(a.RequestID, evidence.ArtifactApproval)
			raw, _ := marshalJSON(v)
			sealed, err := b.Seal(key, raw)
			if err != nil {
				t.Fatal(err)
			}
			b.plant(t, key, sealed)
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBook(t)
			a := b.hold(t, "held-1", "alice")
			tc.forge(t, b, a)
			ctx := context.Background()
			keys, err := b.store.List(ctx, evidence.RequestPrefix("held-1"))
			if err != nil {
				t.Fatal(err)
			}
			h, err := b.Read(ctx, "held-1", keys)
			if err == nil {
				t.Fatalf("Read took the forgery: %+v", h.Verdict)
			}
			if tampered := errors.Is(err, trust.ErrTampered); tampered != tc.sealed {
				t.Fatalf("Read = %v; tampering = %v, want %v", err, tampered, tc.sealed)
			}
			if _, _, err := b.Decide(ctx, "bob", a.ApprovalID, Approve, "", allow); err == nil {
				t.Fatal("a decision was taken on a forged record")
			}
		})
	}
}

// plant writes raw at key as someone with write access to the store would.
func (b book) plant(t *testing.T, key string, raw []byte) {
	t.Helper()
	if err := b.store.Put(context.Background(), key, raw); err != nil {
		t.Fatal(err)
	}
}

func TestListShowsOnlyWhatTheCallerMaySee(t *testing.T) {
	t.Parallel()
	b := newBook(t)
	ctx := context.Background()
	mine := b.hold(t, "held-1", "alice")
	b.hold(t, "held-2", "mallory")
	shown := func(_ context.Context, v *View) bool { return v.Held.Request.Caller == "alice" }
	resp, err := b.List(ctx, &toolgatev1.ListApprovalsRequest{}, StatePending, 10, shown)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetApprovals()) != 1 || resp.GetApprovals()[0].GetApprovalId() != mine.ApprovalID {
		t.Fatalf("alice sees %v; want only her own approval", resp.GetApprovals())
	}
	if args := resp.GetApprovals()[0].GetArgs().AsMap(); args["cmd"] != "ls" {
		t.Fatalf("the held call's arguments are not shown: %v", args)
	}
	b.plant(t, IndexKey(evidence.NewApprovalID()), []byte("../../etc/passwd"))
	if resp, err = b.List(ctx, &toolgatev1.ListApprovalsRequest{State: StateAll}, StateAll, 10, shown); err != nil || len(resp.GetApprovals()) != 1 {
		t.Fatalf("a hostile index entry: List = %v, %v; want it skipped", resp.GetApprovals(), err)
	}
	if _, err := b.List(ctx, &toolgatev1.ListApprovalsRequest{RequestId: "../held-1"}, StateAll, 10, shown); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a malformed request_id filter: %v; want INVALID_ARGUMENT", err)
	}
}

func TestStates(t *testing.T) {
	t.Parallel()
	approve := &evidence.ApprovalRecord{Decision: evidence.ApprovalApprove}
	tests := []struct {
		name string
		v    View
		want string
	}{
		{"undecided", View{Held: &Held{}, now: asked}, StatePending},
		{"undecided past its expiry", View{Held: &Held{}, now: asked.Add(2 * time.Hour)}, StateExpired},
		{"denied", View{Held: &Held{Verdict: &evidence.ApprovalRecord{Decision: evidence.ApprovalDeny}}, now: asked}, StateDenied},
		{"approved", View{Held: &Held{Verdict: approve}, now: asked}, StateApproved},
		{"approved and used", View{Held: &Held{Verdict: approve, Use: &evidence.ApprovalUseRecord{}}, now: asked}, StateConsumed},
		{"approved, its attempt dispatched", View{Held: &Held{Verdict: approve}, Consumed: true, now: asked}, StateConsumed},
		{"approved, not used in time", View{Held: &Held{Verdict: approve}, now: asked.Add(2 * time.Hour)}, StateExpired},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.v.Held.Request.ExpiresAt = asked.Add(time.Hour)
			if got := tc.v.State(); got != tc.want {
				t.Fatalf("State = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	t.Parallel()
	a := evidence.ApprovalRequestRecord{RequestID: "held-1", ApprovalID: "apr_x", RuleID: "needs_ops", ExpiresAt: asked.Add(time.Hour)}
	held := func(decision string, usedBy string) *Held {
		h := &Held{Request: a, User: "held-1", Verdict: &evidence.ApprovalRecord{Decision: decision, Reason: "because"}}
		if usedBy != "" {
			h.Use = &evidence.ApprovalUseRecord{UsedBy: usedBy}
		}
		return h
	}
	asksSame := policy.Decision{ApprovalRequired: true, RuleID: "needs_ops"}
	tests := []struct {
		name    string
		h       *Held
		d       policy.Decision
		now     time.Time
		allow   bool
		rule    string
		outcome string
	}{
		{"approved, same rule", held(evidence.ApprovalApprove, ""), asksSame, asked, true, "needs_ops", evidence.ApprovalApprove},
		{"approved, policy now asks another rule", held(evidence.ApprovalApprove, ""),
			policy.Decision{ApprovalRequired: true, RuleID: "needs_sec"}, asked, false, RuleStale, evidence.ApprovalApprove},
		{"denied", held(evidence.ApprovalDeny, ""), asksSame, asked, false, "needs_ops", evidence.ApprovalDeny},
		{"approved, not used before it expired", held(evidence.ApprovalApprove, ""), asksSame, asked.Add(2 * time.Hour), false, "needs_ops", evidence.ApprovalExpired},
		{"approved, used by another request", held(evidence.ApprovalApprove, "held-9"), asksSame, asked, false, "needs_ops", evidence.ApprovalUsed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, link := Judge(tc.h, tc.d, tc.now)
			if d.Allow != tc.allow || d.RuleID != tc.rule || link.Outcome != tc.outcome {
				t.Fatalf("Judge = allow %v rule %q outcome %q; want %v %q %q", d.Allow, d.RuleID, link.Outcome, tc.allow, tc.rule, tc.outcome)
			}
		})
	}
}

func TestNotifyTellsTheApprovalAsListed(t *testing.T) {
	t.Parallel()
	b := newBook(t)
	a := b.hold(t, "held-1", "alice")
	b.Notify(context.Background(), EventPending, "held-1")
	b.Notify(context.Background(), EventPending, "no-such-request")
	if len(*b.notes) != 1 || (*b.notes)[0].Approval.GetApprovalId() != a.ApprovalID || (*b.notes)[0].Type != EventPending {
		t.Fatalf("notified %v; want the one approval that exists", *b.notes)
	}
}
