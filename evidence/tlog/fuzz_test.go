package tlog

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

// FuzzParseEntry checks ParseEntry on bytes an attacker with bucket access
// may have written into an entry bundle: it never panics, every refusal
// is ErrMalformed, and whatever it accepts Marshal writes back byte for
// byte, so one entry has exactly one encoding and one leaf hash.
func FuzzParseEntry(f *testing.F) {
	for _, e := range []Entry{testClaim(), testCompletion(), testApproval(), testWitnessEntry()} {
		b, err := e.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(bytes.Replace(b, []byte(`"v":1`), []byte(`"v":1,"v":1`), 1))
		f.Add(bytes.Replace(b, []byte(`"v":2`), []byte(`"v":1`), 1))
		f.Add(bytes.Replace(b, []byte(`"v":3`), []byte(`"v":1`), 1))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ParseEntry(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseEntry(%q) failed with %v, which is not ErrMalformed", data, err)
			}
			return
		}
		again, err := e.Marshal()
		if err != nil || !bytes.Equal(again, data) {
			t.Fatalf("ParseEntry(%q) = %+v, which marshals as %q, %v", data, e, again, err)
		}
	})
}

// FuzzParseProof checks ParseProof on a proof file from anyone: it never
// panics, every refusal is ErrMalformed, and whatever it accepts Marshal
// writes back byte for byte, so no bit of an accepted file goes unread.
func FuzzParseProof(f *testing.F) {
	entries := testEntries(5)
	f.Add(testProof(f, entries, 2, nil).Marshal())
	f.Add(testProof(f, entries, 4, []byte("extra")).Marshal())
	f.Add([]byte("c2sp.org/tlog-proof@v1\nindex 05\n\ncp\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProof(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseProof(%q) failed with %v, which is not ErrMalformed", data, err)
			}
			return
		}
		if again := p.Marshal(); !bytes.Equal(again, data) {
			t.Fatalf("ParseProof(%q) = %+v, which marshals as %q", data, p, again)
		}
	})
}

// FuzzOpenCheckpoint checks OpenCheckpoint on a checkpoint from anyone,
// under a policy trusting log key 1 and two witnesses: it never panics;
// an accepted checkpoint's text is exactly the canonical body of what it
// returns; and in strict mode the note holds, besides that body, exactly
// the signature line SignCheckpoint writes and one line per witness it
// names, so it re-marshals byte for byte from what was verified.
func FuzzOpenCheckpoint(f *testing.F) {
	w1, w2 := newWitness(f, 11), newWitness(f, 12)
	good := signedCheckpoint(f, 1, 42, testRoot(1))
	f.Add(good, false)
	f.Add(good, true)
	f.Add(cosign(f, good, w1, w2), true)
	f.Add(cosign(f, good, newWitness(f, 13)), false)
	f.Add(flipLastBase64Bit(good, 4), true)
	f.Fuzz(func(t *testing.T, data []byte, strict bool) {
		p := logPolicy(1)
		p.Witnesses, p.Strict = []note.Verifier{w1.verifier, w2.verifier}, strict
		cp, err := OpenCheckpoint(data, p)
		if err != nil {
			return
		}
		split := bytes.LastIndex(data, []byte("\n\n")) + 1
		body, sigs := string(data[:split]), string(data[split+1:])
		if body != checkpointBody(cp.Origin, cp.Size, cp.Root) || !bytes.Equal(cp.Note, data) {
			t.Fatalf("OpenCheckpoint(%q) = %+v, whose body is not canonical", data, cp)
		}
		if !strict {
			return
		}
		logLine := string(signedCheckpointOf(t, cp)[split+1:])
		lines := strings.SplitAfter(strings.TrimSuffix(sigs, "\n"), "\n")
		if len(lines) != 1+len(cp.Witnesses) || strings.Count(sigs, logLine) != 1 {
			t.Fatalf("strict OpenCheckpoint(%q) = %+v, yet the note has lines nobody accounted for", data, cp)
		}
	})
}

// signedCheckpointOf signs cp's origin, size and root again with log key 1.
func signedCheckpointOf(t *testing.T, cp Checkpoint) []byte {
	s, err := NewSigner(cp.Origin, testKey(1))
	if err != nil {
		t.Fatal(err)
	}
	b, err := SignCheckpoint(s, cp.Size, cp.Root)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
