package evidence

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/tlog"
)

func mustCosign(t *testing.T, s Store, urls ...string) CosignReport {
	t.Helper()
	rep, err := Cosign(context.Background(), s, "gw-1", CosignOptions{WitnessURLs: urls})
	if err != nil {
		t.Fatalf("Cosign: %v", err)
	}
	return rep
}

func witnessOpts(t *testing.T, signer *Signer, ws ...*evidencetest.Witness) ProofOptions {
	t.Helper()
	o := trustLogs(signer)
	for _, w := range ws {
		v, err := tlog.ParseWitnessKey(w.VKey)
		if err != nil {
			t.Fatal(err)
		}
		o.Witnesses = append(o.Witnesses, v)
	}
	o.WitnessThreshold = len(ws)
	return o
}

// A witness cosigns each newer checkpoint after checking it extends the
// last one it cosigned; the cosigned checkpoint is stored and a cosigned
// proof carries the cosignature to a third party.
func TestCosignGetsCheckpointsWitnessed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	signer := testSigner(t, 1)
	s := NewMemoryStore()
	l, ls := signedLog(t, s, signer)
	origin := l.Origin()
	w1 := evidencetest.StartWitness(t, "witness.example/w1")
	w2 := evidencetest.StartWitness(t, "witness.example/w2")
	w1.AddLog(t, origin, signer.PublicKey())
	w2.AddLog(t, origin, signer.PublicKey())

	storeSignedCalls(t, ls, signer, "r1", "r2")
	mustFlush(t, l)
	rep := mustCosign(t, s, w1.URL)
	if rep.Size != 4 || rep.Cosignatures != 1 || rep.Key != LogPrefix("gw-1")+"cosigned/00000000000000000004" || w1.Latest(origin) != 4 {
		t.Fatalf("first cosign: %+v, witness at %d", rep, w1.Latest(origin))
	}
	if again := mustCosign(t, s, w1.URL); !again.AlreadyCosigned {
		t.Fatalf("a checkpoint cosigned before was sent again: %+v", again)
	}

	// Grown past a tile's edge: w1 gets old 4 and a consistency proof.
	for i := range 200 {
		storeSignedCalls(t, ls, signer, fmt.Sprintf("more%03d", i))
	}
	mustFlush(t, l)
	if rep := mustCosign(t, s, w1.URL); rep.Size != 404 || w1.Latest(origin) != 404 {
		t.Fatalf("second cosign: %+v, witness at %d", rep, w1.Latest(origin))
	}
	// w2 has never seen the log: it answers 409 "0" to old 404, and
	// cosigns on the retry. Both cosignatures end up in one note.
	storeSignedCalls(t, ls, signer, "r3")
	mustFlush(t, l)
	if rep := mustCosign(t, s, w1.URL, w2.URL); rep.Size != 406 || rep.Cosignatures != 2 || w2.Latest(origin) != 406 {
		t.Fatalf("third cosign: %+v, w2 at %d", rep, w2.Latest(origin))
	}
	data := mustProve(t, s, "r3", ProveOptions{Cosigned: true})
	pr, err := VerifyProof(data, witnessOpts(t, signer, w1, w2))
	if err != nil || len(pr.Witnesses) != 2 || pr.CheckpointSize != 406 {
		t.Fatalf("cosigned proof: %+v, %v", pr, err)
	}
	if _, err := Prove(ctx, s, "r1", ProveOptions{Cosigned: true}); err != nil {
		t.Fatalf("an older entry under the newest cosigned checkpoint: %v", err)
	}
}

// forkOf returns a store holding a log with the same origin and key as
// the log in s, but other entries: a bucket owner rewriting history.
func forkOf(t *testing.T, s Store, signer *Signer, ids ...string) (*MemoryStore, *LogWriter) {
	t.Helper()
	fork := NewMemoryStore()
	mustPut(t, fork, bucketIDKey, mustGet(t, s, bucketIDKey))
	l, ls := signedLog(t, fork, signer)
	storeSignedCalls(t, ls, signer, ids...)
	mustFlush(t, l)
	return fork, l
}

// A witness that cosigned size N of the honest log refuses every fork of
// it: longer, as long, or shorter. Nothing is stored for the fork.
func TestAWitnessRefusesAForkedLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	signer := testSigner(t, 1)
	s := NewMemoryStore()
	l, ls := signedLog(t, s, signer)
	w := evidencetest.StartWitness(t, "witness.example/w1")
	w.AddLog(t, l.Origin(), signer.PublicKey())
	storeSignedCalls(t, ls, signer, "r1", "r2", "r3")
	mustFlush(t, l)
	mustCosign(t, s, w.URL) // size 6

	tests := []struct {
		name string
		ids  []string
		say  string
	}{
		{"a longer log with other entries fails the consistency proof", []string{"x1", "x2", "x3", "x4"}, "not consistent"},
		{"a log of the same size with other entries fails the root check", []string{"x1", "x2", "x3"}, "not consistent"},
		{"a shorter log is a rollback", []string{"r1", "r2"}, "rolled back or forked"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fork, fl := forkOf(t, s, signer, tc.ids...)
			if fl.Origin() != l.Origin() {
				t.Fatalf("the fork has origin %s, not %s", fl.Origin(), l.Origin())
			}
			_, err := Cosign(ctx, fork, "gw-1", CosignOptions{WitnessURLs: []string{w.URL}})
			if !errors.Is(err, ErrWitnessRefused) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("err = %v, want ErrWitnessRefused saying %q", err, tc.say)
			}
			if keys := mustList(t, fork, LogPrefix("gw-1")+cosignedDir); len(keys) != 0 {
				t.Fatalf("a refused checkpoint was stored as cosigned: %v", keys)
			}
			if w.Latest(l.Origin()) != 6 {
				t.Fatalf("the witness moved to %d", w.Latest(l.Origin()))
			}
		})
	}
	// A log re-signed with another key is refused too.
	other := testSigner(t, 2)
	resigned := NewMemoryStore()
	mustPut(t, resigned, bucketIDKey, mustGet(t, s, bucketIDKey))
	rl, rls := signedLog(t, resigned, other)
	storeSignedCalls(t, rls, other, "r1", "r2", "r3", "r4")
	mustFlush(t, rl)
	if _, err := Cosign(ctx, resigned, "gw-1", CosignOptions{WitnessURLs: []string{w.URL}}); !errors.Is(err, ErrWitnessRefused) {
		t.Fatalf("a log signed by another key: err = %v, want ErrWitnessRefused", err)
	}
}

func TestCosignSaysWhatIsWrongWithTheSetup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	signer := testSigner(t, 1)
	s := NewMemoryStore()
	l, ls := signedLog(t, s, signer)
	storeSignedCalls(t, ls, signer, "r1")
	mustFlush(t, l)
	stranger := evidencetest.StartWitness(t, "witness.example/stranger")
	tests := []struct {
		name     string
		instance string
		urls     []string
		say      string
	}{
		{"a witness that does not know the log", "gw-1", []string{stranger.URL}, "does not know the log"},
		{"an instance without a log", "gw-9", []string{stranger.URL}, "has no checkpoint"},
		{"no witness", "gw-1", nil, "no witness URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Cosign(ctx, s, tc.instance, CosignOptions{WitnessURLs: tc.urls})
			if err == nil || errors.Is(err, ErrWitnessRefused) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("err = %v, want a setup error saying %q", err, tc.say)
			}
		})
	}
}

// A witness's answer is appended to a checkpoint others will verify, so
// an answer that is not cosignature lines is refused and nothing stored.
func TestCosignRefusesAHostileWitnessAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	signer := testSigner(t, 1)
	s := NewMemoryStore()
	l, ls := signedLog(t, s, signer)
	storeSignedCalls(t, ls, signer, "r1")
	mustFlush(t, l)
	sig := "\u2014 witness.example/w1 " + base64.StdEncoding.EncodeToString(make([]byte, 76)) + "\n"
	tests := []struct {
		name   string
		status int
		ctype  string
		body   string
		say    string
	}{
		{"an answer that is not signature lines", 200, "", "hello\n", "not a cosignature line"},
		{"a line without its final newline", 200, "", strings.TrimSuffix(sig, "\n"), "not cosignature lines"},
		{"a signature in the log's own name", 200, "", "\u2014 " + l.Origin() + " " + base64.StdEncoding.EncodeToString(make([]byte, 68)) + "\n", "not a cosignature line"},
		{"an extra note smuggled after a signature", 200, "", sig + "\nsecond note\n", "not a cosignature line"},
		{"no answer at all", 200, "", "", "not cosignature lines"},
		{"a size that is not a decimal", 409, "text/x.tlog.size", "07\n", "not a tree size"},
		{"a size that keeps changing", 409, "text/x.tlog.size", "", "kept changing"},
		{"a server error", 500, "", "boom", "HTTP 500"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n++
				body := tc.body
				if tc.name == "a size that keeps changing" {
					body = fmt.Sprintf("%d\n", n%2)
				}
				if tc.ctype != "" {
					w.Header().Set("Content-Type", tc.ctype)
				}
				w.WriteHeader(tc.status)
				fmt.Fprint(w, body)
			}))
			defer srv.Close()
			_, err := Cosign(ctx, s, "gw-1", CosignOptions{WitnessURLs: []string{srv.URL}})
			if err == nil || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("err = %v, want one saying %q", err, tc.say)
			}
			if keys := mustList(t, s, LogPrefix("gw-1")+cosignedDir); len(keys) != 0 {
				t.Fatalf("a hostile answer was stored: %v", keys)
			}
		})
	}
}

// A log put back to an older copy whose newest checkpoint was cosigned
// once shows nothing wrong in the store; the witness, which remembers the
// larger checkpoint it cosigned since, is asked all the same and refuses.
func TestCosignAsksTheWitnessEvenWhenTheCheckpointWasCosignedBefore(t *testing.T) {
	t.Parallel()
	signer := testSigner(t, 1)
	s := NewMemoryStore()
	l, ls := signedLog(t, s, signer)
	w := evidencetest.StartWitness(t, "witness.example/w1")
	w.AddLog(t, l.Origin(), signer.PublicKey())
	storeSignedCalls(t, ls, signer, "r1", "r2")
	mustFlush(t, l)
	mustCosign(t, s, w.URL) // size 4
	older := snapshot(t, s, LogPrefix("gw-1"))
	if again := mustCosign(t, s, w.URL); !again.AlreadyCosigned || again.Cosignatures != 0 {
		t.Fatalf("the same checkpoint again: %+v", again)
	}
	storeSignedCalls(t, ls, signer, "r3", "r4")
	mustFlush(t, l)
	mustCosign(t, s, w.URL) // size 8
	restore(t, s, LogPrefix("gw-1"), older)
	_, err := Cosign(context.Background(), s, "gw-1", CosignOptions{WitnessURLs: []string{w.URL}})
	if !errors.Is(err, ErrWitnessRefused) || !strings.Contains(err.Error(), "has cosigned size 8") {
		t.Fatalf("cosign of the rolled-back log: %v, want ErrWitnessRefused naming size 8", err)
	}
}
