package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// The attacks below come through the evidence store: someone with write
// access to the bucket forges or removes a human's approval, to make a run
// look approved when it was not, or an approval look given to another
// call, or a held-back call look as if it never asked. verify must refuse
// each, whether or not a manifest was written yet, and never print what
// the forger wrote raw to the auditor's terminal.

// hostileApprovalCase writes request "r1" into a fresh folder and runs
// verify on it.
type hostileApprovalCase struct {
	name  string
	write func(l approvalLayout, t0 time.Time)
	want  string // in verify's output
}

func runHostileApprovalCases(t *testing.T, tests []hostileApprovalCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := approvalLayout{w: newLayoutWriter(t, dir), hash: "sha256:" + strings.Repeat("ab", 32), dir: dir}
			tc.write(l, time.Now().UTC().Add(-time.Hour).Truncate(time.Second))
			out, code := hostileVerify(t, dir, "r1")
			if code != exitFailure || !strings.HasPrefix(out, "mismatch r1: TAMPERED") || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, output lacks %q:\n%s", code, tc.want, out)
			}
		})
	}
}

// TestHostileApprovalRecords: a forged approval.json is refused, whatever
// it claims.
func TestHostileApprovalRecords(t *testing.T) {
	t.Parallel()
	runHostileApprovalCases(t, []hostileApprovalCase{
		{"an approval of another ask, reused for this one", func(l approvalLayout, t0 time.Time) {
			a, _ := l.ask("r1", t0)
			l.decide(a, []byte(`{"request_id":"r0"}`), evidence.ApprovalApprove, t0.Add(time.Minute))
		}, "is not the SHA-256 of the stored approval_request.json"},
		{"an approver name that drives the terminal", func(l approvalLayout, t0 time.Time) {
			a, aData := l.ask("r1", t0)
			v := l.decide(a, aData, evidence.ApprovalApprove, t0.Add(time.Minute))
			forged := strings.Replace(string(v), `"approver":"alice"`, `"approver":"alice\u001b[2J\u0007"`, 1)
			if err := os.WriteFile(evidenceFile(l.dir, "r1", evidence.ArtifactApproval), []byte(forged), 0o640); err != nil {
				l.w.t.Fatal(err)
			}
		}, "approver"},
		{"an approval dated after the ask expired", func(l approvalLayout, t0 time.Time) {
			a, aData := l.ask("r1", t0)
			l.decide(a, aData, evidence.ApprovalApprove, a.ExpiresAt.Add(time.Second))
		}, "at or after expires_at"},
		{"an approval without its ask", func(l approvalLayout, t0 time.Time) {
			a, aData := l.ask("r1", t0)
			l.decide(a, aData, evidence.ApprovalApprove, t0.Add(time.Minute))
			if err := os.Remove(evidenceFile(l.dir, "r1", evidence.ArtifactApprovalRequest)); err != nil {
				l.w.t.Fatal(err)
			}
		}, "present without approval_request.json"},
		{"an approval planted in an attempt's folder", func(l approvalLayout, t0 time.Time) {
			a, aData := l.ask("r1", t0)
			v := l.decide(a, aData, evidence.ApprovalApprove, t0.Add(time.Minute))
			l.w.putRaw("r1", evidence.AttemptArtifact(2, evidence.ArtifactApproval), v)
		}, "attempts/2/approval.json: not an attempt's artifact"},
	})
}

// TestHostileApprovalRuns: a run the approval does not cover is refused.
func TestHostileApprovalRuns(t *testing.T) {
	t.Parallel()
	runHostileApprovalCases(t, []hostileApprovalCase{
		{"a run whose approval was deleted before the manifest", func(l approvalLayout, t0 time.Time) {
			a, aData := l.ask("r1", t0)
			v := l.decide(a, aData, evidence.ApprovalApprove, t0.Add(time.Minute))
			l.second(a, v, "allow", evidence.ApprovalApprove, t0.Add(2*time.Minute))
			if err := os.Remove(evidenceFile(l.dir, "r1", evidence.ArtifactApproval)); err != nil {
				l.w.t.Fatal(err)
			}
		}, "but no valid approval.json approves it"},
		{"a run under a denied approval", func(l approvalLayout, t0 time.Time) {
			a, aData := l.ask("r1", t0)
			v := l.decide(a, aData, evidence.ApprovalDeny, t0.Add(time.Minute))
			l.second(a, v, "allow", evidence.ApprovalApprove, t0.Add(2*time.Minute))
			l.w.finish("r1")
		}, "which was deny"},
		{"a run after the approval expired", func(l approvalLayout, t0 time.Time) {
			a, aData := l.ask("r1", t0)
			v := l.decide(a, aData, evidence.ApprovalApprove, t0.Add(time.Minute))
			l.second(a, v, "allow", evidence.ApprovalApprove, a.ExpiresAt.Add(time.Minute))
			l.w.finish("r1")
		}, "at or after expires_at"},
		{"a held-back call whose ask was deleted", func(l approvalLayout, t0 time.Time) {
			l.ask("r1", t0)
			if err := os.Remove(evidenceFile(l.dir, "r1", evidence.ArtifactApprovalRequest)); err != nil {
				l.w.t.Fatal(err)
			}
		}, "but the request has no approval_request.json"},
	})
}
