package evidence

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence/trust"
)

// waitOn writes a parent's attempt n that ran sandboxed code whose guest's
// call, nested, waits for its own approval: allowed by the parent's own
// rule, dispatched, closed not_dispatched, and an approval_request.json
// naming the nested request's approval.
func (st *story) waitOn(n int, nested *story) *story {
	st.t.Helper()
	st.decide(n, DecisionRecord{Decision: "allow", RuleID: "run-code", DecidedAt: storyT0})
	st.dispatch(n, Dispatched, "")
	st.putJSON(AttemptArtifact(n, ArtifactNotDispatched), DispatchRecord{RequestID: st.id, Attempt: n, State: NotDispatched,
		Reason:  "rerun allowed: guest call " + nested.id + " awaits approval " + nested.a.ApprovalID + "; no nested call was dispatched",
		Gateway: storyGateway, At: storyT0})
	st.a = nested.a
	st.a.RequestID, st.a.Attempt, st.a.ToolID, st.a.CanonicalRequestHash = st.id, n, "code.run", st.hash
	st.a.ParentRequestID, st.a.NestedRequestID = "", nested.id
	st.aData = st.putSealed(ArtifactApprovalRequest, st.a)
	return st
}

// rerun writes a parent's attempt n, allowed by its own rule and run.
func (st *story) rerun(n int) *story {
	st.t.Helper()
	st.decide(n, DecisionRecord{Decision: "allow", RuleID: "run-code", DecidedAt: storyT0.Add(2 * time.Hour)})
	st.dispatch(n, Dispatched, "")
	return st
}

func nestedStory(t *testing.T, s Store, parent string, signer *Signer) *story {
	st := newStory(t, s, parent+":c1", signer)
	return st.ask(1, func(a *ApprovalRequestRecord) { a.ParentRequestID = parent })
}

var (
	hourIn    = storyT0.Add(time.Hour)
	twoHours  = storyT0.Add(2 * time.Hour)
	expiredAt = storyExpires.Add(time.Minute)
)

// Every state an honest gateway leaves a request in while and after it
// asks for approval passes verification with every requirement on: a
// trusted signature on every manifest and every claim, approval and
// completion logged.
func TestEveryHonestApprovalStatePassesVerification(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := NewMemoryStore()
	signer := newSigner(t)
	cfg := signedLogConfig(t, mem, signer)
	l, s := openLogged(t, mem, cfg)
	cases := []struct {
		id, verdict, state string
		write              func(t *testing.T, id string)
	}{
		{"pending", StatusAwaitingApproval, ApprovalStatePending, func(t *testing.T, id string) {
			newStory(t, s, id, signer).ask(1)
		}},
		{"approved-unused", StatusAwaitingApproval, ApprovalStateApproved, func(t *testing.T, id string) {
			newStory(t, s, id, signer).ask(1).settle(ApprovalApprove, hourIn)
		}},
		{"approved-retry-not-dispatched", StatusAwaitingApproval, ApprovalStateApproved, func(t *testing.T, id string) {
			st := newStory(t, s, id, signer).ask(1).settle(ApprovalApprove, hourIn).use(2, twoHours)
			st.putJSON(AttemptArtifact(2, ArtifactNotDispatched), DispatchRecord{RequestID: id, Attempt: 2,
				State: NotDispatched, Reason: "connection refused", Gateway: storyGateway, At: twoHours})
		}},
		{"approved-and-ran", StatusOK, ApprovalStateConsumed, func(t *testing.T, id string) {
			newStory(t, s, id, signer).ask(1).settle(ApprovalApprove, hourIn).use(2, twoHours).finish()
		}},
		// Replicas' clocks disagree: the approver's replica runs an hour
		// behind the one that asked, and the one that ran behind both. The
		// digests, not the clocks, prove the order.
		{"approved-and-ran-on-replicas-whose-clocks-disagree", StatusOK, ApprovalStateConsumed, func(t *testing.T, id string) {
			newStory(t, s, id, signer).ask(1).settle(ApprovalApprove, storyT0.Add(-time.Hour)).use(2, storyT0.Add(-2*time.Hour)).finish()
		}},
		{"approved-ran-after-a-second-try", StatusOK, ApprovalStateConsumed, func(t *testing.T, id string) {
			st := newStory(t, s, id, signer).ask(1).settle(ApprovalApprove, hourIn).use(2, twoHours)
			st.putJSON(AttemptArtifact(2, ArtifactNotDispatched), DispatchRecord{RequestID: id, Attempt: 2,
				State: NotDispatched, Reason: "connection refused", Gateway: storyGateway, At: twoHours})
			st.use(3, twoHours.Add(time.Minute)).finish()
		}},
		{"approved-ran-under-a-changed-policy-set", StatusOK, ApprovalStateConsumed, func(t *testing.T, id string) {
			newStory(t, s, id, signer).ask(1).settle(ApprovalApprove, hourIn).
				use(2, twoHours, func(d *DecisionRecord) { d.Approval.PolicySetChanged = true }).finish()
		}},
		{"denied-final", StatusOK, ApprovalStateDenied, func(t *testing.T, id string) {
			newStory(t, s, id, signer).ask(1).settle(ApprovalDeny, hourIn).end(2, storyRule, twoHours).finish()
		}},
		{"denied-not-yet-final", StatusNotDispatched, ApprovalStateDenied, func(t *testing.T, id string) {
			newStory(t, s, id, signer).ask(1).settle(ApprovalDeny, hourIn)
		}},
		{"expired-final", StatusOK, ApprovalStateExpired, func(t *testing.T, id string) {
			newStory(t, s, id, signer).ask(1).settle(ApprovalExpired, expiredAt).end(2, storyRule, expiredAt).finish()
		}},
		{"approved-but-retried-after-expiry", StatusOK, ApprovalStateApproved, func(t *testing.T, id string) {
			newStory(t, s, id, signer).ask(1).settle(ApprovalApprove, hourIn).end(2, storyRule, expiredAt, ApprovalExpired).finish()
		}},
		{"approval-stale", StatusOK, ApprovalStateApproved, func(t *testing.T, id string) {
			newStory(t, s, id, signer).ask(1).settle(ApprovalApprove, hourIn).end(2, "approval_stale", twoHours).finish()
		}},
		{"asked-after-a-failed-ask", StatusAwaitingApproval, ApprovalStatePending, func(t *testing.T, id string) {
			st := newStory(t, s, id, signer)
			st.decide(1, DecisionRecord{Decision: DecisionApprovalRequired, RuleID: storyRule, DecidedAt: storyT0,
				Approval: &DecisionApproval{ApprovalID: NewApprovalID(), Approvers: "ops", Outcome: ApprovalPending}})
			st.dispatch(1, NotDispatched, "approval request not stored: store unavailable")
			st.ask(2)
		}},
		{"parent", StatusAwaitingApproval, ApprovalStatePending, func(t *testing.T, id string) {
			newStory(t, s, id, signer).waitOn(1, nestedStory(t, s, id, signer))
		}},
		{"parent-asking-with-its-guest-call-hash", StatusAwaitingApproval, ApprovalStatePending, func(t *testing.T, id string) {
			nested := nestedStory(t, s, id, signer)
			st := newStory(t, s, id, signer, "sha256:"+strings.Repeat("0e", 32))
			st.hash = nested.hash
			st.waitOn(1, nested)
		}},
		{"parent-ran", StatusOK, ApprovalStateConsumed, func(t *testing.T, id string) {
			nested := nestedStory(t, s, id, signer).settle(ApprovalApprove, hourIn)
			newStory(t, s, id, signer).waitOn(1, nested).rerun(2).finish()
			nested.use(2, twoHours).finish()
		}},
	}
	for _, c := range cases {
		c.write(t, c.id)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	reports := map[string]VerifyReport{}
	opts := VerifyOptions{TrustedKeys: []ed25519.PublicKey{signer.PublicKey()}, RequireSignature: true, RequireLog: true,
		TempDir: t.TempDir(), LogGrace: time.Nanosecond}
	if err := VerifyAll(ctx, mem, opts, func(r VerifyReport) error { reports[r.RequestID] = r; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.id, func(t *testing.T) {
			r := reports[c.id]
			if r.Verdict() != c.verdict || r.Failed() || r.Log != LogLogged {
				t.Fatalf("verdict %s (failed %v, log %s), want %s; problems %q", r.Verdict(), r.Failed(), r.Log, c.verdict, r.Problems)
			}
			if r.Approval == nil || r.Approval.State != c.state || !strings.HasPrefix(r.Approval.ApprovalID, "apr_") {
				t.Fatalf("approval %+v, want state %s", r.Approval, c.state)
			}
		})
	}
	if r := reports["parent:c1"]; r.Verdict() != StatusAwaitingApproval || r.Approval.State != ApprovalStatePending {
		t.Fatalf("the nested request waiting for approval: %s %+v %q", r.Verdict(), r.Approval, r.Problems)
	}
}

// Every forgery or removal of approval evidence is a mismatch, even where
// the gateway's own key signed what was forged: the approval, the
// attempts and the claim must tell one story.
func TestVerifyCatchesEveryTamperWithAnApproval(t *testing.T) {
	t.Parallel()
	signer := newSigner(t)
	tests := []struct {
		name    string
		write   func(t *testing.T, s Store) // writes request "r"
		problem string                      // a substring of one problem
	}{
		{"approval.json deleted from a request that ran under the approval", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1).settle(ApprovalApprove, hourIn).use(2, twoHours).finish()
			s.(*MemoryStore).remove(Key(st.id, ArtifactApproval))
		}, "approval.json: listed in the manifest but missing"},
		{"approval.json deleted before a run that names it, with no manifest yet", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1).settle(ApprovalApprove, hourIn).use(2, twoHours)
			s.(*MemoryStore).remove(Key(st.id, ArtifactApproval))
		}, "but no valid approval.json approves it"},
		{"approval.json whose approval_request_sha256 is not the stored request's", func(t *testing.T, s Store) {
			newStory(t, s, "r", signer).ask(1).settle(ApprovalApprove, hourIn, func(v *ApprovalRecord) {
				v.ApprovalRequestSHA256 = strings.Repeat("0", 64)
			})
		}, "approval_request_sha256"},
		{"an approval decided after it expired", func(t *testing.T, s Store) {
			newStory(t, s, "r", signer).ask(1).settle(ApprovalApprove, expiredAt).use(2, expiredAt).finish()
		}, "at or after expires_at"},
		{"a deny decided after the approval expired", func(t *testing.T, s Store) {
			newStory(t, s, "r", signer).ask(1).settle(ApprovalDeny, expiredAt)
		}, "at or after expires_at"},
		{"an expiry recorded before the approval expired", func(t *testing.T, s Store) {
			newStory(t, s, "r", signer).ask(1).settle(ApprovalExpired, hourIn)
		}, "before expires_at"},
		{"approval_request.json for another call's hash", func(t *testing.T, s Store) {
			newStory(t, s, "r", signer).ask(1, func(a *ApprovalRequestRecord) {
				a.CanonicalRequestHash = "sha256:" + strings.Repeat("ef", 32)
			})
		}, "request.json: canonical_request_hash is"},
		{"approval.json bound to another rule", func(t *testing.T, s Store) {
			newStory(t, s, "r", signer).ask(1).settle(ApprovalApprove, hourIn, func(v *ApprovalRecord) { v.RuleID = "read-only" })
		}, "bound to another call, policy set or rule"},
		{"approval.json deciding another approval id", func(t *testing.T, s Store) {
			newStory(t, s, "r", signer).ask(1).settle(ApprovalApprove, hourIn, func(v *ApprovalRecord) { v.ApprovalID = NewApprovalID() })
		}, "decides approval"},
		{"approval.json of another request", func(t *testing.T, s Store) {
			newStory(t, s, "r", signer).ask(1).settle(ApprovalApprove, hourIn, func(v *ApprovalRecord) { v.RequestID = "other" })
		}, `request_id is "other"`},
		{"approval.json with a field the format does not have", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1)
			st.put(ArtifactApproval, st.seal(ArtifactApproval, []byte(`{"request_id":"r","override":true}`)))
		}, "unknown field"},
		{"a run that names an approval nobody decided", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1)
			st.vData = []byte("never stored")
			st.use(2, twoHours).finish()
		}, "but no valid approval.json approves it"},
		{"a run after a denied approval", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1).settle(ApprovalDeny, hourIn)
			st.use(2, twoHours, func(d *DecisionRecord) { d.Approval.ApprovalSHA256 = sha(st.vData) }).finish()
		}, "which was deny"},
		{"a run allowed after the ask without naming the approval", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1).settle(ApprovalApprove, hourIn)
			st.use(2, twoHours, func(d *DecisionRecord) { d.Approval = nil }).finish()
		}, "without naming its approval"},
		{"a run whose approval_sha256 is another approval's", func(t *testing.T, s Store) {
			newStory(t, s, "r", signer).ask(1).settle(ApprovalApprove, hourIn).
				use(2, twoHours, func(d *DecisionRecord) { d.Approval.ApprovalSHA256 = strings.Repeat("1", 64) }).finish()
		}, "approval_sha256"},
		{"a run decided after the approval expired", func(t *testing.T, s Store) {
			newStory(t, s, "r", signer).ask(1).settle(ApprovalApprove, hourIn).use(2, expiredAt).finish()
		}, "at or after expires_at"},
		{"a decision approval_required followed by a dispatch in the same attempt", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer)
			st.decide(1, DecisionRecord{Decision: DecisionApprovalRequired, RuleID: storyRule, DecidedAt: storyT0})
			st.dispatch(1, Dispatched, "")
			st.finish()
		}, "yet attempt 1 was dispatched"},
		{"an attempt awaiting an approval whose request was deleted", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1)
			s.(*MemoryStore).remove(Key(st.id, ArtifactApprovalRequest))
		}, "but the request has no approval_request.json"},
		{"a run allowed by the approval rule once every trace of its approval was removed", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer)
			st.decide(1, DecisionRecord{Decision: DecisionApprovalRequired, RuleID: storyRule, DecidedAt: storyT0})
			st.dispatch(1, NotDispatched, "connection refused")
			st.decide(2, DecisionRecord{Decision: "allow", RuleID: storyRule, DecidedAt: twoHours})
			st.dispatch(2, Dispatched, "")
			st.finish()
		}, `allowed by rule "ops-deletes", which under the same policy set held the call for approval at attempt 1`},
		{"approval.json without approval_request.json", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1).settle(ApprovalApprove, hourIn)
			s.(*MemoryStore).remove(Key(st.id, ArtifactApprovalRequest))
		}, "present without approval_request.json"},
		{"the asking attempt was allowed, not held for approval", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1)
			st.a.Attempt = 2
			st.decide(2, DecisionRecord{Decision: "allow", RuleID: storyRule, DecidedAt: storyT0})
			s.(*MemoryStore).remove(Key(st.id, ArtifactApprovalRequest))
			st.aData = st.putSealed(ArtifactApprovalRequest, st.a)
		}, `asked for approval, but its decision is "allow"`},
		{"a second ask after the approval was asked for", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1)
			st.decide(2, DecisionRecord{Decision: DecisionApprovalRequired, RuleID: storyRule, DecidedAt: twoHours})
		}, "asks for approval again"},
		{"a request finished with its approval undecided", func(t *testing.T, s Store) {
			newStory(t, s, "r", signer).ask(1).finish()
		}, "has no approval.json"},
		{"a final deny that says approved where approval.json says denied", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1).settle(ApprovalDeny, hourIn)
			st.v.Decision = ApprovalApprove
			st.end(2, storyRule, twoHours).finish()
		}, `says approval`},
		{"a final deny that says the approval expired before it did", func(t *testing.T, s Store) {
			newStory(t, s, "r", signer).ask(1).settle(ApprovalApprove, hourIn).end(2, storyRule, twoHours, ApprovalExpired).finish()
		}, `says approval`},
		{"approval.json stored in an attempt's folder", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1)
			st.put(AttemptArtifact(2, ArtifactApproval), []byte(`{}`))
		}, "attempts/2/approval.json: not an attempt's artifact"},
		{"approval_request.json stored in an attempt's folder", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1)
			st.put(AttemptArtifact(2, ArtifactApprovalRequest), st.aData)
		}, "attempts/2/approval_request.json: not an attempt's artifact"},
		{"approval.json added after the manifest", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1).settle(ApprovalDeny, hourIn).end(2, storyRule, twoHours)
			st.keys = slices.DeleteFunc(st.keys, func(k string) bool { return k == Key(st.id, ArtifactApproval) })
			st.finish()
		}, "approval.json: present but not listed in the manifest"},
		{"a parent waiting on a guest's approval with an approval.json of its own", func(t *testing.T, s Store) {
			nested := nestedStory(t, s, "r", signer)
			st := newStory(t, s, "r", signer).waitOn(1, nested)
			st.put(ArtifactApproval, nested.vData)
		}, "has no approval.json of its own"},
		{"a parent naming a guest approval the nested request never asked for", func(t *testing.T, s Store) {
			nestedStory(t, s, "r", signer)
			other := nestedStory(t, NewMemoryStore(), "r", signer)
			newStory(t, s, "r", signer).waitOn(1, other)
		}, "waits on approval"},
		{"a parent waiting on a guest's approval with a third call's hash", func(t *testing.T, s Store) {
			nested := nestedStory(t, s, "r", signer)
			st := newStory(t, s, "r", signer)
			st.hash = "sha256:" + strings.Repeat("0e", 32)
			st.waitOn(1, nested)
		}, "neither the parent's claim's nor its guest call's"},
		{"a parent waiting on a guest's approval whose own attempt was never dispatched", func(t *testing.T, s Store) {
			nested := nestedStory(t, s, "r", signer)
			st := newStory(t, s, "r", signer)
			st.a = nested.a
			st.a.RequestID, st.a.ParentRequestID, st.a.NestedRequestID = "r", "", nested.id
			st.decide(1, DecisionRecord{Decision: "allow", RuleID: "run-code", DecidedAt: storyT0})
			st.dispatch(1, NotDispatched, "connection refused")
			st.putSealed(ArtifactApprovalRequest, st.a)
		}, "was not dispatched and then closed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewMemoryStore()
			tc.write(t, s)
			rep, err := Verify(context.Background(), s, "r", VerifyOptions{TrustedKeys: []ed25519.PublicKey{signer.PublicKey()}, RequireSignature: true})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Status != StatusMismatch || !rep.Failed() || !rep.Tampered() {
				t.Fatalf("status %s (failed %v), want %s; problems %q", rep.Status, rep.Failed(), StatusMismatch, rep.Problems)
			}
			if !strings.Contains(fmt.Sprint(rep.Problems), tc.problem) {
				t.Fatalf("problems %q do not mention %q", rep.Problems, tc.problem)
			}
		})
	}
}

// countingReader counts a Reader's Gets.
type countingReader struct {
	Reader
	gets *int
}

func (c countingReader) Get(ctx context.Context, key string) ([]byte, error) {
	*c.gets++
	return c.Reader.Get(ctx, key)
}

// BenchmarkVerifyApprovedRequest measures what checking an approval adds
// to verifying one request: a plain allowed run against one approved and
// run in its second attempt, and one that waits for approval.
func BenchmarkVerifyApprovedRequest(b *testing.B) {
	signer := newSigner(b)
	opts := VerifyOptions{TrustedKeys: []ed25519.PublicKey{signer.PublicKey()}, RequireSignature: true}
	for _, bc := range []struct {
		name  string
		write func(s Store)
	}{
		{"plain allow", func(s Store) {
			st := newStory(b, s, "r", signer)
			st.decide(1, DecisionRecord{Decision: "allow", RuleID: "read", DecidedAt: storyT0})
			st.dispatch(1, Dispatched, "")
			st.finish()
		}},
		{"approved and ran", func(s Store) {
			newStory(b, s, "r", signer).ask(1).settle(ApprovalApprove, hourIn).use(2, twoHours).finish()
		}},
		{"awaiting approval", func(s Store) { newStory(b, s, "r", signer).ask(1) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := NewMemoryStore()
			bc.write(s)
			gets := 0
			r := countingReader{s, &gets}
			for b.Loop() {
				if rep, err := Verify(context.Background(), r, "r", opts); err != nil || rep.Failed() {
					b.Fatalf("%+v, %v", rep, err)
				}
			}
			b.ReportMetric(float64(gets)/float64(b.N), "gets/op")
		})
	}
}

// A call held for approval whose approval_request.json could not be
// stored asked nobody; if policy changed before the retry and now allows
// it by the same rule, the run is honest, and so is a retry that asks
// again under the same set.
func TestACallThatNeverManagedToAskIsNoTamper(t *testing.T) {
	t.Parallel()
	signer := newSigner(t)
	for _, tc := range []struct {
		name       string
		second     func(st *story)
		wantStatus string
	}{
		{"allowed under a new policy set by the same rule", func(st *story) {
			st.putJSON(AttemptArtifact(2, ArtifactPolicyDecision), DecisionRecord{RequestID: st.id, Attempt: 2, Decision: "allow",
				RuleID: storyRule, PolicySetDigest: "sha256:" + strings.Repeat("9a", 32), DecidedAt: twoHours, Gateway: storyGateway})
			st.dispatch(2, Dispatched, "")
			st.finish()
		}, StatusOK},
		{"held again under the same policy set, and never retried", func(st *story) {
			st.decide(2, DecisionRecord{Decision: DecisionApprovalRequired, RuleID: storyRule, DecidedAt: twoHours})
			st.dispatch(2, NotDispatched, "approval request not stored: store unavailable")
		}, StatusNotDispatched},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewMemoryStore()
			st := newStory(t, s, "r", signer)
			st.decide(1, DecisionRecord{Decision: DecisionApprovalRequired, RuleID: storyRule, DecidedAt: storyT0,
				Approval: &DecisionApproval{ApprovalID: NewApprovalID(), Approvers: "ops", Outcome: ApprovalPending}})
			st.dispatch(1, NotDispatched, "approval request not stored: store unavailable")
			tc.second(st)
			rep, err := Verify(context.Background(), s, "r", VerifyOptions{TrustedKeys: []ed25519.PublicKey{signer.PublicKey()}, RequireSignature: true})
			if err != nil || rep.Status != tc.wantStatus || rep.Failed() || rep.Approval != nil {
				t.Fatalf("status %s (failed %v), approval %+v, want %s; problems %q, %v", rep.Status, rep.Failed(), rep.Approval, tc.wantStatus, rep.Problems, err)
			}
		})
	}
}

// Approvals are signed decisions: with the gateway's public key, an
// approval record it did not sign is tampering, named with its reason,
// however well its digests agree; without a key, the seals are reported
// unchecked.
func TestVerifyAuthenticatesApprovalRecords(t *testing.T) {
	t.Parallel()
	signer, stranger := newSigner(t), newSigner(t)
	keys := VerifyOptions{TrustedKeys: []ed25519.PublicKey{signer.PublicKey()}}
	resealed := func(st *story, name string, by *Signer, change func([]byte) []byte) {
		t.Helper()
		key := Key(st.id, name)
		body, _, _ := trust.Split(mustGet(t, st.s, key))
		st.s.(*MemoryStore).remove(key)
		other := &story{t: t, s: st.s, id: st.id, signer: by}
		mustPut(t, st.s, key, other.seal(name, change(body)))
	}
	same := func(b []byte) []byte { return b }
	for _, tc := range []struct {
		name    string
		write   func(t *testing.T, s Store)
		problem string
	}{
		{"an unsigned approval.json with the digests copied", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1).settle(ApprovalApprove, hourIn).use(2, twoHours)
			resealed(st, ArtifactApproval, nil, same)
			st.finish()
		}, "requests/r/approval.json: failed authentication: the record carries no seal"},
		{"an approval.json signed by an untrusted key", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1).settle(ApprovalApprove, hourIn)
			resealed(st, ArtifactApproval, stranger, same)
		}, "requests/r/approval.json: failed authentication: the record is sealed by a key that is not trusted"},
		{"an approval.json altered after it was signed", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1).settle(ApprovalDeny, hourIn)
			key := Key(st.id, ArtifactApproval)
			altered := strings.Replace(string(mustGet(t, s, key)), `"decision":"deny"`, `"decision":"approve"`, 1)
			s.(*MemoryStore).remove(key)
			mustPut(t, s, key, []byte(altered))
		}, "requests/r/approval.json: failed authentication: the signature by"},
		{"an approval.json moved from another request", func(t *testing.T, s Store) {
			other := newStory(t, s, "o", signer).ask(1).settle(ApprovalApprove, hourIn)
			st := newStory(t, s, "r", signer).ask(1)
			st.put(ArtifactApproval, other.vData)
		}, "requests/r/approval.json: failed authentication: the signature by"},
		{"an unsigned approval_request.json, as an older version wrote it", func(t *testing.T, s Store) {
			st := newStory(t, s, "r", signer).ask(1)
			resealed(st, ArtifactApprovalRequest, nil, same)
		}, "requests/r/approval_request.json: failed authentication: the record carries no seal"},
		{"a nested request's approval.json signed by an untrusted key", func(t *testing.T, s Store) {
			nested := nestedStory(t, s, "r", signer).settle(ApprovalApprove, hourIn)
			newStory(t, s, "r", signer).waitOn(1, nested)
			resealed(nested, ArtifactApproval, stranger, same)
		}, "requests/r:c1/approval.json: failed authentication"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewMemoryStore()
			tc.write(t, s)
			rep, err := Verify(context.Background(), s, "r", keys)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Status != StatusMismatch || !rep.Tampered() || !strings.Contains(fmt.Sprint(rep.Problems), tc.problem) {
				t.Fatalf("status %s, problems %q; want a mismatch naming %q", rep.Status, rep.Problems, tc.problem)
			}
		})
	}
	t.Run("signed records, checked and unchecked", func(t *testing.T) {
		s := NewMemoryStore()
		newStory(t, s, "r", signer).ask(1).settle(ApprovalApprove, hourIn).use(2, twoHours).finish()
		for _, c := range []struct {
			opts VerifyOptions
			want string
		}{{keys, SignatureValid}, {VerifyOptions{}, SignatureUnchecked}} {
			rep, err := Verify(context.Background(), s, "r", c.opts)
			if err != nil || rep.Failed() || rep.Approval == nil || rep.Approval.Signature != c.want ||
				rep.Approval.KeyID != signer.KeyID() {
				t.Fatalf("%+v, %v; want the approval %s by %s", rep, err, c.want, signer.KeyID())
			}
		}
		sum, found, err := ReadApproval(context.Background(), s, "r", mustList(t, s, RequestPrefix("r")))
		if err != nil || !found || sum.State != ApprovalStateConsumed || sum.Signature != SignatureUnchecked {
			t.Fatalf("ReadApproval = %+v, %v, %v", sum, found, err)
		}
	})
	t.Run("unsigned records, unchecked", func(t *testing.T) {
		s := NewMemoryStore()
		newStory(t, s, "r", nil).ask(1).settle(ApprovalApprove, hourIn)
		rep, err := Verify(context.Background(), s, "r")
		if err != nil || rep.Failed() || rep.Approval == nil || rep.Approval.Signature != SignatureUnsigned {
			t.Fatalf("%+v, %v; want an unsigned approval, not failed", rep, err)
		}
	})
}
