package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// approvalLayout writes, by hand, the evidence a gateway leaves for calls
// held for a human's approval, as the approvals contract lays it out.
type approvalLayout struct {
	w    *layoutWriter
	hash string
	dir  string // the tour folder the store is in
}

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// ask stores request id's claim, attempt 1 held for approval, its
// approval_request.json asked at t0, and the dispatch record that closes
// the attempt. It returns the approval request and its bytes.
func (l approvalLayout) ask(id string, t0 time.Time) (evidence.ApprovalRequestRecord, []byte) {
	l.w.t.Helper()
	l.w.put(id, evidence.ArtifactRequest, evidence.RequestRecord{RequestID: id, Caller: "bob", ToolID: "fs.delete",
		Args: json.RawMessage(`{"path":"old"}`), ReceivedAt: t0, CanonicalRequestHash: l.hash, Gateway: "toolgate/test@a"})
	a := evidence.ApprovalRequestRecord{RequestID: id, ApprovalID: evidence.NewApprovalID(), Attempt: 1, Caller: "bob",
		Action: "call", ToolID: "fs.delete", Driver: "workspace", CanonicalRequestHash: l.hash, PolicyRef: "default",
		PolicySetDigest: l.hash, RuleID: "ops-deletes", Reason: "deletes files", Approvers: "ops",
		RequestedAt: t0, ExpiresAt: t0.Add(24 * time.Hour), Gateway: "toolgate/test@a"}
	l.w.put(id, evidence.ArtifactPolicyDecision, evidence.DecisionRecord{RequestID: id, Attempt: 1, Caller: "bob",
		ToolID: "fs.delete", Decision: evidence.DecisionApprovalRequired, RuleID: a.RuleID, DecidedAt: t0,
		PolicySetDigest: l.hash, Approval: &evidence.DecisionApproval{ApprovalID: a.ApprovalID, Approvers: "ops", Outcome: evidence.ApprovalPending}})
	l.w.put(id, evidence.ArtifactApprovalRequest, a)
	l.w.put(id, evidence.ArtifactDispatch, evidence.DispatchRecord{RequestID: id, Attempt: 1, State: evidence.NotDispatched,
		Reason: evidence.AwaitingApprovalReason(a.ApprovalID), Gateway: "toolgate/test@a", At: t0})
	return a, l.w.written[id][evidence.ArtifactApprovalRequest]
}

// decide stores approval.json: word decided at at.
func (l approvalLayout) decide(a evidence.ApprovalRequestRecord, aData []byte, word string, at time.Time) []byte {
	l.w.t.Helper()
	v := evidence.ApprovalRecord{RequestID: a.RequestID, ApprovalID: a.ApprovalID, Decision: word, Approver: "alice",
		Reason: "looked fine", DecidedAt: at, CanonicalRequestHash: a.CanonicalRequestHash, PolicySetDigest: a.PolicySetDigest,
		RuleID: a.RuleID, ApprovalRequestSHA256: sha256Hex(aData), Gateway: "toolgate/test@a",
		Authorization: &evidence.ApproverDecision{PolicyRef: "default", PolicySetDigest: a.PolicySetDigest, RuleID: "ops-approve"}}
	if word == evidence.ApprovalExpired {
		v.Approver, v.Authorization = "toolgate/test@a", nil
	}
	l.w.put(a.RequestID, evidence.ArtifactApproval, v)
	return l.w.written[a.RequestID][evidence.ArtifactApproval]
}

// second stores attempt 2's decision, word, naming the approval's
// outcome; an allow is dispatched.
func (l approvalLayout) second(a evidence.ApprovalRequestRecord, vData []byte, word, outcome string, at time.Time) {
	l.w.t.Helper()
	l.w.put(a.RequestID, evidence.AttemptArtifact(2, evidence.ArtifactPolicyDecision), evidence.DecisionRecord{
		RequestID: a.RequestID, Attempt: 2, Caller: "bob", ToolID: "fs.delete", Decision: word, RuleID: a.RuleID, DecidedAt: at,
		PolicySetDigest: l.hash, Approval: &evidence.DecisionApproval{ApprovalID: a.ApprovalID, Approvers: "ops",
			Outcome: outcome, ApprovalSHA256: sha256Hex(vData), Approver: "alice"}})
	if word == "allow" {
		l.w.put(a.RequestID, evidence.AttemptArtifact(2, evidence.ArtifactDispatch), evidence.DispatchRecord{
			RequestID: a.RequestID, Attempt: 2, State: evidence.Dispatched, Gateway: "toolgate/test@a", At: at})
	}
}

// writeApprovalStates stores one request in each approval state, and one
// that never asked, and returns the approval id of each.
func writeApprovalStates(t *testing.T, dir string) map[string]string {
	t.Helper()
	l := approvalLayout{w: newLayoutWriter(t, dir), hash: "sha256:" + strings.Repeat("ab", 32)}
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	ids := map[string]string{}
	a, _ := l.ask("ap-pending", t0)
	ids["ap-pending"] = a.ApprovalID

	a, aData := l.ask("ap-approved", t0)
	l.decide(a, aData, evidence.ApprovalApprove, t0.Add(time.Minute))
	ids["ap-approved"] = a.ApprovalID

	a, aData = l.ask("ap-ran", t0)
	vData := l.decide(a, aData, evidence.ApprovalApprove, t0.Add(time.Minute))
	l.second(a, vData, "allow", evidence.ApprovalApprove, t0.Add(2*time.Minute))
	l.w.finish("ap-ran")
	ids["ap-ran"] = a.ApprovalID

	a, aData = l.ask("ap-denied", t0)
	vData = l.decide(a, aData, evidence.ApprovalDeny, t0.Add(time.Minute))
	l.second(a, vData, "deny", evidence.ApprovalDeny, t0.Add(2*time.Minute))
	l.w.finish("ap-denied")
	ids["ap-denied"] = a.ApprovalID

	old := t0.Add(-48 * time.Hour)
	a, aData = l.ask("ap-expired", old)
	vData = l.decide(a, aData, evidence.ApprovalExpired, a.ExpiresAt.Add(time.Minute))
	l.second(a, vData, "deny", evidence.ApprovalExpired, a.ExpiresAt.Add(time.Minute))
	l.w.finish("ap-expired")
	ids["ap-expired"] = a.ApprovalID

	l.w.claim("ap-plain", 1, "read_only")
	l.w.dispatch("ap-plain", 1, evidence.ArtifactDispatch, evidence.Dispatched, "ap-plain")
	l.w.finish("ap-plain")
	return ids
}

// lsRows runs evidence ls and returns each line's fields after
// received_at.
func lsRows(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	out, stderr, code := runTool(t, dir, append([]string{"evidence", "ls"}, args...)...)
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	var rows []string
	for _, line := range dataLines(t, out) {
		_, rest, _ := strings.Cut(line, "\t")
		rows = append(rows, rest)
	}
	return rows
}

// TestEvidenceApprovals reads hand-built evidence of calls held for
// approval with ls, show and verify, as an auditor would.
func TestEvidenceApprovals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ids := writeApprovalStates(t, dir)

	t.Run("ls shows each request's approval state beside its last decision", func(t *testing.T) {
		want := []string{
			"ap-approved\tbob\tfs.delete\tapproval_required\tops-deletes\t-\tapproved",
			"ap-denied\tbob\tfs.delete\tdeny\tops-deletes\ttrue\tdenied",
			"ap-expired\tbob\tfs.delete\tdeny\tops-deletes\ttrue\texpired",
			"ap-pending\tbob\tfs.delete\tapproval_required\tops-deletes\t-\tpending",
			"ap-plain\tagent\tworkspace.readFile\tallow\tread_only\ttrue\t-",
			"ap-ran\tbob\tfs.delete\tallow\tops-deletes\ttrue\tconsumed",
		}
		if got := lsRows(t, dir); !slices.Equal(got, want) {
			t.Fatalf("ls =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("ls --decision approval_required lists every request that asked, whatever came of it", func(t *testing.T) {
		var got []string
		for _, row := range lsRows(t, dir, "--decision", "approval_required") {
			id, _, _ := strings.Cut(row, "\t")
			got = append(got, id)
		}
		if want := []string{"ap-approved", "ap-denied", "ap-expired", "ap-pending", "ap-ran"}; !slices.Equal(got, want) {
			t.Fatalf("ls --decision approval_required = %v, want %v", got, want)
		}
	})

	t.Run("ls --decision allow matches the last decision, approved runs included", func(t *testing.T) {
		var got []string
		for _, row := range lsRows(t, dir, "--decision", "allow") {
			id, _, _ := strings.Cut(row, "\t")
			got = append(got, id)
		}
		if want := []string{"ap-plain", "ap-ran"}; !slices.Equal(got, want) {
			t.Fatalf("ls --decision allow = %v, want %v", got, want)
		}
	})

	t.Run("show prints the approval asked for and decided before the attempts, then its state", func(t *testing.T) {
		_, headers := showHeaders(t, dir, "ap-ran")
		want := []string{
			"== requests/ap-ran/request.json ==",
			"== requests/ap-ran/approval_request.json ==",
			"== requests/ap-ran/approval.json ==",
			"== requests/ap-ran/policy_decision.json ==",
			"== requests/ap-ran/dispatch.json ==",
			"== requests/ap-ran/attempts/2/policy_decision.json ==",
			"== requests/ap-ran/attempts/2/dispatch.json ==",
			"== requests/ap-ran/tool_result.json ==",
			"== requests/ap-ran/response.json ==",
			"== requests/ap-ran/manifest.json ==",
			"== approval " + ids["ap-ran"] + ": consumed by alice; records not signed ==",
		}
		if !slices.Equal(headers, want) {
			t.Fatalf("show headers =\n%s\nwant\n%s", strings.Join(headers, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("verify --all passes every honest state and says which wait for approval", func(t *testing.T) {
		out, stderr, code := runTool(t, dir, "evidence", "verify", "--all")
		if code != exitOK {
			t.Fatalf("exit %d, output:\n%s%s", code, out, stderr)
		}
		for _, want := range []string{
			"awaiting-approval ap-pending: nothing ran; it waits for a human's approval, or, once approved, for its retry\n",
			"  approval " + ids["ap-pending"] + ": pending; records not signed\n",
			"awaiting-approval ap-approved: ",
			"  approval " + ids["ap-approved"] + ": approved by alice; records not signed\n",
			"verified 6 requests: 2 awaiting-approval, 4 unsigned\n",
			"note: 2 request(s) never ran and wait for a human's approval, or for their retry once approved\n",
			"note: 5 request(s) have approval records no gateway signed; with --pubkey they fail as tampered\n",
		} {
			if !strings.Contains(out, want) {
				t.Fatalf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("verify --json carries each request's approval", func(t *testing.T) {
		out, _, code := runTool(t, dir, "evidence", "verify", "--all", "--json")
		if code != exitOK {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		got := map[string]string{}
		for line := range strings.Lines(out) {
			var r struct {
				RequestID string                    `json:"request_id"`
				Verdict   string                    `json:"verdict"`
				Approval  *evidence.ApprovalSummary `json:"approval"`
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			state := "-"
			if r.Approval != nil {
				state = r.Approval.State + " " + r.Approval.ApprovalID + " " + r.Approval.Approver
			}
			got[r.RequestID] = r.Verdict + " " + state
		}
		want := map[string]string{
			"ap-pending":  "awaiting-approval pending " + ids["ap-pending"] + " ",
			"ap-approved": "awaiting-approval approved " + ids["ap-approved"] + " alice",
			"ap-ran":      "unsigned consumed " + ids["ap-ran"] + " alice",
			"ap-denied":   "unsigned denied " + ids["ap-denied"] + " alice",
			"ap-expired":  "unsigned expired " + ids["ap-expired"] + " toolgate/test@a",
			"ap-plain":    "unsigned -",
		}
		for id, w := range want {
			if got[id] != w {
				t.Errorf("%s: %q, want %q", id, got[id], w)
			}
		}
	})

	// What a gateway from before signed approvals left, or anyone without
	// the key wrote: with the gateway's key given, every approval record
	// must be signed by it.
	t.Run("verify --pubkey fails approval records no trusted key signed", func(t *testing.T) {
		keyDir := t.TempDir()
		if _, stderr, code := runTool(t, dir, "evidence", "keygen", "--out", filepath.Join(keyDir, "k.pem")); code != exitOK {
			t.Fatalf("keygen: %s", stderr)
		}
		pub, stderr, code := runTool(t, dir, "evidence", "pubkey", "--key", filepath.Join(keyDir, "k.pem"))
		if code != exitOK {
			t.Fatalf("pubkey: %s", stderr)
		}
		if err := os.WriteFile(filepath.Join(keyDir, "k.pub"), []byte(pub), 0o600); err != nil {
			t.Fatal(err)
		}
		out, _, code := runTool(t, dir, "evidence", "verify", "--all", "--pubkey", filepath.Join(keyDir, "k.pub"))
		if code != exitFailure || !strings.Contains(out, "mismatch ap-pending: TAMPERED\n") ||
			!strings.Contains(out, "  requests/ap-pending/approval_request.json: failed authentication: the record carries no seal\n") ||
			!strings.Contains(out, "mismatch ap-ran: TAMPERED\n") || strings.Contains(out, "ap-plain: TAMPERED") {
			t.Fatalf("exit %d, want 1 with every unsigned approval tampered:\n%s", code, out)
		}
	})
}

// An approval forged or removed behind the gateway's back fails verify,
// and ls marks an unreadable one rather than guess.
func TestEvidenceApprovalTampering(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := approvalLayout{w: newLayoutWriter(t, dir), hash: "sha256:" + strings.Repeat("ab", 32)}
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	// Approved for another ask: the digest is not of the stored request.
	a, _ := l.ask("ap-forged", t0)
	l.decide(a, []byte("another approval request"), evidence.ApprovalApprove, t0.Add(time.Minute))
	// A decision that is not one of the format's.
	l.ask("ap-garbled", t0)
	l.w.putRaw("ap-garbled", evidence.ArtifactApproval, []byte(`{"decision":"approve","admin":true}`))

	out, _, code := runTool(t, dir, "evidence", "verify", "--all")
	for _, want := range []string{
		"mismatch ap-forged: TAMPERED\n  requests/ap-forged/approval.json: approval_request_sha256 ",
		"mismatch ap-garbled: TAMPERED\n  requests/ap-garbled/approval.json: evidence: approval record: json: unknown field \"admin\"",
	} {
		if code != exitFailure || !strings.Contains(out, want) {
			t.Fatalf("exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	out, stderr, code := runTool(t, dir, "evidence", "ls")
	rows := dataLines(t, out)
	if code != exitOK || len(rows) != 2 || !strings.HasSuffix(rows[1], "\tap-garbled\tbob\tfs.delete\tapproval_required\tops-deletes\t-\t?") ||
		!strings.Contains(stderr, "unknown field") {
		t.Fatalf("exit %d, ls:\n%s\nstderr:\n%s", code, out, stderr)
	}
}
