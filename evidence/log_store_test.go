package evidence

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence/tlog"
)

// storeCall stores what a gateway stores for a finished call of request
// id claimed and run by gateway: request.json, the decision and the
// manifest, through s.
func storeCall(t *testing.T, s Store, id, gateway string) {
	t.Helper()
	storeClaim(t, s, id, gateway)
	dec, _ := json.Marshal(DecisionRecord{RequestID: id, Decision: "allow", Gateway: gateway})
	mustPut(t, s, Key(id, ArtifactPolicyDecision), dec)
	putManifest(t, s, id, map[string]string{}, nil)
}

func storeClaim(t *testing.T, s Store, id, gateway string) {
	t.Helper()
	req, _ := json.Marshal(RequestRecord{
		RequestID: id, Caller: "c", ToolID: "t", Args: json.RawMessage(`{}`),
		ReceivedAt:           time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		CanonicalRequestHash: "sha256:" + strings.Repeat("ab", 32), Gateway: gateway,
	})
	mustPut(t, s, Key(id, ArtifactRequest), req)
}

// loggedCalls returns "kind request_id" for each entry of gw-1's log.
func loggedCalls(t *testing.T, s Store) []string {
	t.Helper()
	var out []string
	for _, raw := range logEntries(t, s) {
		e, err := tlog.ParseEntry([]byte(raw))
		if err != nil {
			t.Fatalf("entry %q: %v", raw, err)
		}
		out = append(out, e.Kind+" "+e.RequestID)
	}
	return out
}

func openLogged(t *testing.T, s StoreCloser, cfg LogConfig) (*LogWriter, StoreCloser) {
	t.Helper()
	l, err := OpenLog(context.Background(), s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l, WithLog(s, l)
}

func TestLoggedStoreLogsClaimsAndCompletions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := NewMemoryStore()
	cfg := testLogConfig(t, mem)
	l, s := openLogged(t, mem, cfg)
	storeCall(t, s, "r1", cfg.Gateway)
	storeClaim(t, s, "r2", cfg.Gateway)
	again, _ := mem.Get(ctx, Key("r1", ArtifactRequest))
	if err := s.Put(ctx, Key("r1", ArtifactRequest), again); !errors.Is(err, ErrExist) {
		t.Fatalf("a second claim: %v", err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"claim r1", "completion r1", "claim r2"}
	if got := loggedCalls(t, mem); !slices.Equal(got, want) {
		t.Fatalf("log = %v, want %v", got, want)
	}
}

// A claim the log cannot take is refused before it is stored, so the call
// never runs unlogged; a completion is always stored, since its call ran.
func TestLoggedStoreRefusesClaimsOfAFencedLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := NewMemoryStore()
	cfg := testLogConfig(t, mem)
	old, s := openLogged(t, mem, cfg)
	storeClaim(t, s, "r1", cfg.Gateway)
	newer, _ := openLogged(t, mem, cfg)
	newer.Append([]byte("newer"))
	if err := newer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := old.Flush(ctx); !errors.Is(err, ErrLogFenced) {
		t.Fatalf("not fenced: %v", err)
	}
	req, _ := mem.Get(ctx, Key("r1", ArtifactRequest))
	if err := s.Put(ctx, Key("r2", ArtifactRequest), req); !errors.Is(err, ErrLogFenced) {
		t.Fatalf("claim through a fenced log: %v", err)
	}
	if _, err := mem.Get(ctx, Key("r2", ArtifactRequest)); !errors.Is(err, ErrNotExist) {
		t.Fatal("the refused claim was stored")
	}
	putManifest(t, s, "r1", map[string]string{}, nil)
}

// An approval.json is logged as an approval entry that commits to its
// bytes; like a claim, it is refused before it is stored when the log
// cannot take it, so that no human's decision is stored unlogged.
func TestLoggedStoreLogsApprovalsAndRefusesThemWhenFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := NewMemoryStore()
	cfg := testLogConfig(t, mem)
	old, s := openLogged(t, mem, cfg)
	st := newStory(t, s, "r1", nil).ask(1).settle(ApprovalApprove, hourIn)
	if err := old.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := loggedCalls(t, mem), []string{"claim r1", "approval r1"}; !slices.Equal(got, want) {
		t.Fatalf("log = %v, want %v", got, want)
	}
	e, err := tlog.ParseEntry([]byte(logEntries(t, mem)[1]))
	if err != nil {
		t.Fatal(err)
	}
	if e.ApprovalID != st.a.ApprovalID || e.ApprovalSHA256 != sha(st.vData) || e.Decision != ApprovalApprove ||
		e.Approver != "alice" || !e.DecidedAt.Equal(hourIn) || e.Gateway != storyGateway {
		t.Fatalf("approval entry %+v does not commit to approval.json", e)
	}

	other := newStory(t, s, "r2", nil).ask(1)
	newer, _ := openLogged(t, mem, cfg)
	newer.Append([]byte("newer"))
	if err := newer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := old.Flush(ctx); !errors.Is(err, ErrLogFenced) {
		t.Fatalf("not fenced: %v", err)
	}
	v, _ := json.Marshal(other.approval(ApprovalApprove, hourIn))
	if err := s.Put(ctx, Key("r2", ArtifactApproval), v); !errors.Is(err, ErrLogFenced) {
		t.Fatalf("approval through a fenced log: %v", err)
	}
	if _, err := mem.Get(ctx, Key("r2", ArtifactApproval)); !errors.Is(err, ErrNotExist) {
		t.Fatal("the refused approval was stored")
	}
}

// A gateway killed after storing an approval.json, before its entry was
// sequenced, loses no entry: the next process of the instance that wrote
// it logs it, as the approval carries its seal; another instance's
// approval is left to its own log.
func TestLogCatchesUpApprovalsAfterACrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := NewMemoryStore()
	tl := newTrustLog(t, mem, "")
	l, s := tl.open(t, mem)
	newStory(t, s, "mine", nil).ask(1)
	theirs := newStory(t, s, "theirs", nil).ask(1)
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		st      *story
		word    string
		gateway string
	}{{&story{t: t, s: s, id: "mine"}, ApprovalApprove, tl.cfg.Gateway}, {theirs, ApprovalDeny, "toolgate/test@gw-2"}} {
		a.st.a, a.st.aData = readApprovalRequest(t, mem, a.st.id)
		v := a.st.approval(a.word, hourIn)
		v.Gateway = a.gateway
		data, _ := json.Marshal(v)
		data, err := tl.cfg.Sealer.Sign(Key(a.st.id, ArtifactApproval), data)
		if err != nil {
			t.Fatal(err)
		}
		mustPut(t, s, Key(a.st.id, ArtifactApproval), data)
	}
	// The process dies here: no Flush, no Close.
	next, _ := tl.open(t, mem)
	if err := next.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := loggedCalls(t, mem), []string{"claim mine", "claim theirs", "approval mine"}; !slices.Equal(got, want) {
		t.Fatalf("log = %v, want %v", got, want)
	}
	if n := tl.tampered.Load(); n != 0 {
		t.Fatalf("%d honest records reported as tampering", n)
	}
}

func readApprovalRequest(t *testing.T, s Store, id string) (ApprovalRequestRecord, []byte) {
	t.Helper()
	data := mustGet(t, s, Key(id, ArtifactApprovalRequest))
	a, err := ParseApprovalRequestRecord(data, id)
	if err != nil {
		t.Fatal(err)
	}
	return a, data
}

// A write that timed out but landed is logged once the log reads it back.
func TestLoggedStoreResolvesWritesOfUnknownOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := NewMemoryStore()
	cfg := testLogConfig(t, mem)
	l, err := OpenLog(ctx, mem, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := WithLog(lyingStore{mem}, l)
	req, _ := json.Marshal(RequestRecord{RequestID: "r1", CanonicalRequestHash: "sha256:" + strings.Repeat("0", 64),
		Gateway: cfg.Gateway, ReceivedAt: time.Unix(0, 0).UTC(), Args: json.RawMessage(`{}`)})
	if err := s.Put(ctx, Key("r1", ArtifactRequest), req); err == nil {
		t.Fatal("lyingStore reported success")
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := loggedCalls(t, mem); !slices.Equal(got, []string{"claim r1"}) {
		t.Fatalf("log = %v", got)
	}
}

// lyingStore stores every artifact but says the write timed out.
type lyingStore struct{ *MemoryStore }

func (s lyingStore) Put(ctx context.Context, key string, data []byte) error {
	if err := s.MemoryStore.Put(ctx, key, data); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// A gateway killed with entries queued loses none of them: the next
// process of the same instance finds its artifacts and logs them, once,
// and leaves other instances' requests to their own logs. (What it does
// with artifacts it cannot authenticate: TestLogCatchUpLogsOnlyWhatItAuthenticates.)
func TestLogCatchesUpAfterACrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := NewMemoryStore()
	tl := newTrustLog(t, mem, "")
	l, s := tl.open(t, mem)
	sealedCall(t, s, tl, "a")
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sealedCall(t, s, tl, "b")
	sealedClaim(t, s, tl, "c", tl.cfg.Gateway)
	sealedClaim(t, mem, tl, "other", "toolgate/test@gw-2")
	// The process dies here: no Flush, no Close.
	next, _ := tl.open(t, mem)
	if err := next.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"claim a", "completion a", "claim b", "claim c", "completion b"}
	got := loggedCalls(t, mem)
	if !slices.Equal(got[:2], want[:2]) || !sameSet(got[2:], want[2:]) {
		t.Fatalf("log = %v, want %v (the last three in any order)", got, want)
	}
	// A clean restart finds nothing more to log.
	again, _ := tl.open(t, mem)
	if err := again.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(loggedCalls(t, mem)); n != len(want) {
		t.Fatalf("log has %d entries after a clean restart, want %d", n, len(want))
	}
}

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}
