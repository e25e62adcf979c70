package evidence

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/evidence/tlog"
)

// witnessedPair is a store shared by two replicas that trust and witness
// each other: gw-a ran a1…a4 and gw-b b1, and each witnessed the other
// after every step, so gw-a's log holds 8 entries of its requests and one
// witness entry, 9 in all, and gw-b witnessed size 9 of it. older is
// gw-a's log after a1 and a2 and its witness entry, as a bucket owner may
// have copied it.
type witnessedPair struct {
	s     *MemoryStore
	a, b  *replica
	older map[string][]byte
}

func newWitnessedPair(t *testing.T) *witnessedPair {
	t.Helper()
	s := NewMemoryStore()
	sa, sb := testSigner(t, 1), testSigner(t, 2)
	p := &witnessedPair{s: s, a: newReplica(t, s, "gw-a", sa, sb), b: newReplica(t, s, "gw-b", sb, sa)}
	p.a.calls(t, "a1", "a2")
	p.b.calls(t, "b1")
	p.rounds(t)
	p.older = snapshot(t, s, LogPrefix("gw-a"))
	p.a.calls(t, "a3", "a4")
	p.rounds(t)
	if size := p.a.log.Size(); size != 9 {
		t.Fatalf("gw-a's log has %d entries, want 9", size)
	}
	return p
}

func (p *witnessedPair) rounds(t *testing.T) {
	t.Helper()
	p.b.round(t)
	p.a.round(t)
}

// audit runs VerifyAll with the keys given, requiring signatures and the
// log, and returns the verdicts and the log reports by instance.
func (p *witnessedPair) audit(t *testing.T, keys ...*Signer) (map[string]string, map[string]LogReport) {
	t.Helper()
	opts := VerifyOptions{RequireLog: true, RequireSignature: true, TempDir: t.TempDir()}
	for _, k := range keys {
		opts.TrustedKeys = append(opts.TrustedKeys, k.PublicKey())
	}
	logs := map[string]LogReport{}
	opts.OnLog = func(r LogReport) error { logs[r.Instance] = r; return nil }
	verdicts := map[string]string{}
	err := VerifyAll(context.Background(), p.s, opts, func(r VerifyReport) error { verdicts[r.RequestID] = r.Verdict(); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return verdicts, logs
}

func (p *witnessedPair) deleteRequests(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		for _, k := range mustList(t, p.s, RequestPrefix(id)) {
			p.s.remove(k)
		}
	}
}

// The attack of the issue, against two replicas that witness each other:
// gw-a's log replaced by an older copy and its newest requests deleted.
// Without a kept checkpoint or an external witness, VerifyAll still
// reports gw-a's log rolled back, naming gw-b as the witness that caught
// it, from gw-b's witness entries (and its cosigned checkpoints, while
// they are there). So it does for a fork and for a log deleted whole.
func TestVerifyAllCatchesARollbackAPeerWitnessed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		tamper func(t *testing.T, p *witnessedPair)
		want   []string
	}{
		{"rolled back to an older copy, the newest requests deleted", func(t *testing.T, p *witnessedPair) {
			restore(t, p.s, LogPrefix("gw-a"), p.older)
			p.deleteRequests(t, "a3", "a4")
		}, []string{"rolled back or truncated: the gateway of gw-b witnessed size 9 (log/gw-b/ entry",
			"rolled back or truncated: the gateway of gw-b witnessed size 9 (log/gw-b/witnessed/gw-a/00000000000000000009)"}},
		{"rolled back, and gw-b's cosigned checkpoints deleted too", func(t *testing.T, p *witnessedPair) {
			restore(t, p.s, LogPrefix("gw-a"), p.older)
			p.deleteRequests(t, "a3", "a4")
			for _, k := range peerCosignedKeys(t, p.s, "gw-b", "gw-a") {
				p.s.remove(k)
			}
		}, []string{"rolled back or truncated: the gateway of gw-b witnessed size 9 (log/gw-b/ entry"}},
		{"forked at the witnessed size with the real key", func(t *testing.T, p *witnessedPair) {
			forkInto(t, p.s, "gw-a", p.a.signer, "other", 9)
		}, []string{"forked: the gateway of gw-b witnessed another root at size 9"}},
		{"rewritten longer with the real key", func(t *testing.T, p *witnessedPair) {
			forkInto(t, p.s, "gw-a", p.a.signer, "other", 14)
		}, []string{"forked: the gateway of gw-b witnessed another root at size 9"}},
		{"the log and its requests deleted altogether", func(t *testing.T, p *witnessedPair) {
			for _, k := range mustList(t, p.s, LogPrefix("gw-a")) {
				p.s.remove(k)
			}
			p.deleteRequests(t, "a1", "a2", "a3", "a4")
		}, []string{"log/gw-a/: the log is gone from the store, though the gateway of gw-b witnessed it at size 9"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newWitnessedPair(t)
			verdicts, logs := p.audit(t, p.a.signer, p.b.signer)
			if a := logs["gw-a"]; a.Status != LogOK || len(a.PeerWitnessed) != 1 || a.PeerWitnessed[0].By != "gw-b" || a.PeerWitnessed[0].Size != 9 {
				t.Fatalf("the untouched store: gw-a %+v", a)
			}
			if b := logs["gw-b"]; b.Status != LogOK || len(b.PeerWitnessed) != 1 || b.PeerWitnessed[0].By != "gw-a" {
				t.Fatalf("the untouched store: gw-b %+v", b)
			}
			for id, v := range verdicts {
				if v != "ok" {
					t.Fatalf("the untouched store: %s is %s", id, v)
				}
			}
			tc.tamper(t, p)
			_, logs = p.audit(t, p.a.signer, p.b.signer)
			a := logs["gw-a"]
			problems := strings.Join(a.Problems, "\n")
			if a.Status != LogInconsistent {
				t.Fatalf("gw-a after the tamper: %+v", a)
			}
			for _, w := range tc.want {
				if !strings.Contains(problems, w) {
					t.Errorf("gw-a's problems lack %q:\n%s", w, problems)
				}
			}
			if b := logs["gw-b"]; b.Status != LogOK {
				t.Errorf("gw-b, untouched, is %s: %v", b.Status, b.Problems)
			}
		})
	}
}

// Claims about a log are believed only under trusted keys: a log
// planted with another key cannot make an honest log look rolled back,
// nor can a cosigned checkpoint no trusted key cosigned.
func TestVerifyAllBelievesWitnessesOnlyUnderTrustedKeys(t *testing.T) {
	t.Parallel()
	p := newWitnessedPair(t)
	// The attacker's own replica, trusting gw-a, witnesses it, and then
	// its log and cosigned checkpoint are doctored to claim size 50.
	x := newReplica(t, p.s, "gw-x", testSigner(t, 9), p.a.signer)
	x.round(t)
	keys := peerCosignedKeys(t, p.s, "gw-x", "gw-a")
	lie, err := tlog.SignCheckpoint(mustCheckpointSigner(t, p.a.signer, p.a.log.Origin()), 8, tlog.Hash{})
	if err != nil {
		t.Fatal(err)
	}
	cosigned, err := tlog.AppendCosignature(lie, mustCosigner(t, testSigner(t, 9), x.log.Origin()))
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, p.s, LogPrefix("gw-b")+peerCosignedDir+"gw-a/00000000000000000050", cosigned)

	_, logs := p.audit(t, p.a.signer, p.b.signer)
	if a := logs["gw-a"]; a.Status != LogOK || slices.ContainsFunc(a.PeerWitnessed, func(w PeerWitnessed) bool { return w.By == "gw-x" }) {
		t.Fatalf("gw-a, untouched, judged by an untrusted log: %+v (keys %v)", a, keys)
	}
	if x := logs["gw-x"]; x.Status != LogInconsistent || x.Signature != SignatureUnknownKey {
		t.Fatalf("gw-x: %+v", x)
	}
	if b := logs["gw-b"]; b.Status != LogInconsistent || !strings.Contains(strings.Join(b.Problems, "\n"), "not a checkpoint of gw-a cosigned by this log's gateway") {
		t.Fatalf("a cosigned checkpoint planted under gw-b: %+v", b)
	}
}

func mustCheckpointSigner(t *testing.T, s *Signer, origin string) interface {
	Name() string
	KeyHash() uint32
	Sign([]byte) ([]byte, error)
} {
	t.Helper()
	cs, err := s.CheckpointSigner(origin)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func mustCosigner(t *testing.T, s *Signer, name string) interface {
	Name() string
	KeyHash() uint32
	Sign([]byte) ([]byte, error)
} {
	t.Helper()
	c, err := tlog.NewCosigner(name, s.key, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// What peer witnessing cannot catch, as the README says: every log rolled
// back together to copies taken at one moment, with no external witness
// and no kept checkpoint. Each log then still extends all the others say
// of it. (The live gateways catch it: each refuses to go on from a log
// behind its state file.)
func TestVerifyAllCannotSeeEveryLogRolledBackTogether(t *testing.T) {
	t.Parallel()
	p := newWitnessedPair(t)
	older := snapshot(t, p.s, "log/")
	p.a.calls(t, "a5")
	p.b.calls(t, "b2")
	p.rounds(t)
	restore(t, p.s, "log/", older)
	p.deleteRequests(t, "a5", "b2")
	verdicts, logs := p.audit(t, p.a.signer, p.b.signer)
	for inst, l := range logs {
		if l.Status != LogOK {
			t.Fatalf("%s: %+v", inst, l)
		}
	}
	if len(verdicts) != 5 {
		t.Fatalf("verdicts %v", verdicts)
	}
}
