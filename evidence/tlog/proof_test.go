package tlog

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// The RFC 6962 tree, written out from §2.1 so the proofs tested here do
// not come from the code under test.

func refNodeHash(l, r [32]byte) [32]byte {
	return sha256.Sum256(append(append([]byte{1}, l[:]...), r[:]...))
}

// split is the largest power of two smaller than n.
func split(n int) int {
	k := 1
	for k*2 < n {
		k *= 2
	}
	return k
}

func mth(leaves [][32]byte) [32]byte {
	if len(leaves) == 1 {
		return leaves[0]
	}
	k := split(len(leaves))
	return refNodeHash(mth(leaves[:k]), mth(leaves[k:]))
}

func path(m int, leaves [][32]byte) [][32]byte {
	if len(leaves) == 1 {
		return nil
	}
	k := split(len(leaves))
	if m < k {
		return append(path(m, leaves[:k]), mth(leaves[k:]))
	}
	return append(path(m-k, leaves[k:]), mth(leaves[:k]))
}

func testEntries(n int) [][]byte {
	var es [][]byte
	for i := range n {
		es = append(es, []byte(fmt.Sprintf(`{"v":1,"i":%d}`, i)))
	}
	return es
}

// testProof proves entry index of entries under a checkpoint signed by
// key 1, carrying extra.
func testProof(t testing.TB, entries [][]byte, index int, extra []byte) Proof {
	t.Helper()
	var leaves [][32]byte
	for _, e := range entries {
		leaves = append(leaves, LeafHash(e))
	}
	return Proof{Extra: extra, Index: uint64(index), Hashes: path(index, leaves),
		Checkpoint: signedCheckpoint(t, 1, uint64(len(entries)), mth(leaves))}
}

func TestEveryEntryOfSmallTreesProvesItsInclusion(t *testing.T) {
	t.Parallel()
	p := logPolicy(1)
	p.Strict = true
	for size := 1; size <= 9; size++ {
		entries := testEntries(size)
		for i := range size {
			for _, extra := range [][]byte{nil, []byte("manifest")} {
				data := testProof(t, entries, i, extra).Marshal()
				proof, err := ParseProof(data)
				if err != nil {
					t.Fatalf("size %d index %d: ParseProof: %v\n%s", size, i, err, data)
				}
				if !bytes.Equal(proof.Marshal(), data) || !bytes.Equal(proof.Extra, extra) || proof.Index != uint64(i) {
					t.Fatalf("size %d index %d: the proof did not round-trip: %+v", size, i, proof)
				}
				cp, err := OpenCheckpoint(proof.Checkpoint, p)
				if err != nil {
					t.Fatal(err)
				}
				if err := VerifyInclusion(proof, cp, entries[i]); err != nil {
					t.Fatalf("size %d index %d: %v", size, i, err)
				}
			}
		}
	}
}

func TestAProofFileLooksAsC2SPSays(t *testing.T) {
	t.Parallel()
	h := sha256.Sum256(nil)
	p := Proof{Extra: []byte{1, 2, 3}, Index: 5, Hashes: [][32]byte{h}, Checkpoint: []byte("cp\n")}
	want := "c2sp.org/tlog-proof@v1\nextra AQID\nindex 5\n" + base64.StdEncoding.EncodeToString(h[:]) + "\n\ncp\n"
	if got := string(p.Marshal()); got != want {
		t.Fatalf("Marshal =\n%s\nwant\n%s", got, want)
	}
}

func TestVerifyInclusionRefusesAProofThatDoesNotHold(t *testing.T) {
	t.Parallel()
	entries := testEntries(7)
	good := testProof(t, entries, 3, nil)
	cp, err := OpenCheckpoint(good.Checkpoint, logPolicy(1))
	if err != nil {
		t.Fatal(err)
	}
	other := testProof(t, testEntries(8), 3, nil)
	otherCP, err := OpenCheckpoint(other.Checkpoint, logPolicy(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		proof Proof
		cp    Checkpoint
		entry []byte
		want  error
	}{
		{"another entry", good, cp, entries[4], ErrNotIncluded},
		{"the entry with one byte changed", good, cp, append(bytes.Clone(entries[3][:len(entries[3])-1]), ' '), ErrNotIncluded},
		{"the next index", func() Proof { p := good; p.Index++; return p }(), cp, entries[3], ErrNotIncluded},
		{"an index beyond the checkpoint", func() Proof { p := good; p.Index = 7; return p }(), cp, entries[3], ErrNotIncluded},
		{"a hash changed", func() Proof {
			p := good
			p.Hashes = append([][32]byte(nil), good.Hashes...)
			p.Hashes[1][0] ^= 1
			return p
		}(), cp, entries[3], ErrNotIncluded},
		{"a hash missing", func() Proof { p := good; p.Hashes = good.Hashes[1:]; return p }(), cp, entries[3], ErrNotIncluded},
		{"a hash too many", func() Proof {
			p := good
			p.Hashes = append(good.Hashes[:len(good.Hashes):len(good.Hashes)], good.Hashes[0])
			return p
		}(), cp, entries[3], ErrNotIncluded},
		{"a checkpoint other than the proof's", good, otherCP, entries[3], ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := VerifyInclusion(tc.proof, tc.cp, tc.entry); !errors.Is(err, tc.want) {
				t.Fatalf("VerifyInclusion = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestParseProofRefusesFilesThatAreNotCanonical(t *testing.T) {
	t.Parallel()
	good := string(testProof(t, testEntries(5), 2, []byte("extra data!")).Marshal())
	lines := strings.SplitAfter(good, "\n")
	hash := strings.TrimSuffix(lines[3], "\n")
	for _, tc := range []struct{ name, data string }{
		{"an index with a leading zero", strings.Replace(good, "index 2\n", "index 02\n", 1)},
		{"an index with a plus sign", strings.Replace(good, "index 2\n", "index +2\n", 1)},
		{"an index with two spaces", strings.Replace(good, "index 2\n", "index  2\n", 1)},
		{"an index past 2^64", strings.Replace(good, "index 2\n", "index 18446744073709551616\n", 1)},
		{"no index", strings.Replace(good, "index 2\n", "", 1)},
		{"the index before extra", strings.Replace(good, lines[1]+lines[2], lines[2]+lines[1], 1)},
		{"another header", strings.Replace(good, "tlog-proof@v1", "tlog-proof@v2", 1)},
		{"a header with a trailing space", strings.Replace(good, "tlog-proof@v1\n", "tlog-proof@v1 \n", 1)},
		{"an empty extra", strings.Replace(good, lines[1], "extra \n", 1)},
		{"extra with a flipped unused bit", string(flipLastBase64Bit([]byte(good), 1))},
		{"extra without padding", strings.Replace(good, lines[1], strings.TrimRight(lines[1], "=\n")+"\n", 1)},
		{"a hash with a flipped unused bit", string(flipLastBase64Bit([]byte(good), 3))},
		{"a hash of 31 bytes", strings.Replace(good, lines[3], base64.StdEncoding.EncodeToString(make([]byte, 31))+"\n", 1)},
		{"a hash with a carriage return", strings.Replace(good, hash+"\n", hash+"\r\n", 1)},
		{"a hash split in two lines", strings.Replace(good, hash+"\n", hash[:20]+"\n"+hash[20:]+"\n", 1)},
		{"CRLF line ends", strings.ReplaceAll(good, "\n", "\r\n")},
		{"no blank line", strings.Replace(good, "\n\n", "\n", 1)},
		{"no checkpoint", good[:strings.Index(good, "\n\n")+2]},
		{"nothing", ""},
		{"65 hashes", strings.Replace(good, lines[3], strings.Repeat(lines[3], 65), 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.data == good {
				t.Fatal("the case did not change the proof")
			}
			if p, err := ParseProof([]byte(tc.data)); !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseProof(%q) = %+v, %v; want ErrMalformed", tc.data, p, err)
			}
		})
	}
}

// checkProofFile runs every check a verifier of a proof file runs; the
// entry travels in extra, as Toolgate's proofs carry it.
func checkProofFile(data []byte, p CheckpointPolicy) error {
	proof, err := ParseProof(data)
	if err != nil {
		return err
	}
	cp, err := OpenCheckpoint(proof.Checkpoint, p)
	if err != nil {
		return err
	}
	return VerifyInclusion(proof, cp, proof.Extra)
}

func TestAFlippedBitAnywhereInAProofFails(t *testing.T) {
	t.Parallel()
	entries := testEntries(13)
	entries[6] = []byte(`{"v":1,"kind":"completion","request_id":"req-6"}`)
	data := testProof(t, entries, 6, entries[6]).Marshal()
	p := logPolicy(1)
	p.Strict = true
	if err := checkProofFile(data, p); err != nil {
		t.Fatal(err)
	}
	// Every bit of the proof lines; in the checkpoint, which
	// TestEveryFlippedBitOfACosignedCheckpointIsRefusedWhenStrict flips
	// bit by bit, the low two bits of each byte, those a lax base64
	// decoder ignores.
	head := bytes.Index(data, []byte("\n\n")) + 2
	for i := range len(data) * 8 {
		if i/8 >= head && i%8 > 1 {
			continue
		}
		flipped := bytes.Clone(data)
		flipped[i/8] ^= 1 << (i % 8)
		if err := checkProofFile(flipped, p); err == nil {
			t.Fatalf("bit %d flipped: %q verified", i, flipped)
		}
	}
}
