package redact

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// TestAutomatonFindsWhatASubstringSearchFinds compares the automaton with a plain case-folded
// search over random patterns and texts, on both sides of the length at which scan splits the
// text in two.
func TestAutomatonFindsWhatASubstringSearchFinds(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := "abAB-_.:"
	randString := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for round := range 200 {
		patterns := make([]string, 1+rng.IntN(12))
		for i := range patterns {
			patterns[i] = strings.ToLower(randString(1 + rng.IntN(6)))
		}
		text := []byte(randString([]int{0, 7, 300, 4096, 9001}[round%5]))
		a := newAutomaton(patterns)
		got := a.scan(text, nil)

		lower := bytes.ToLower(text)
		var want []hit
		for end := 1; end <= len(text); end++ {
			for pi, p := range patterns {
				if end >= len(p) && string(lower[end-len(p):end]) == p {
					want = append(want, hit{pattern: int32(pi), end: end})
				}
			}
		}
		sortHits := func(h []hit) {
			slices.SortFunc(h, func(x, y hit) int {
				if x.end != y.end {
					return x.end - y.end
				}
				return int(x.pattern - y.pattern)
			})
		}
		if !slices.IsSortedFunc(got, func(x, y hit) int { return x.end - y.end }) {
			t.Fatalf("round %d: hits not in order of their end", round)
		}
		sortHits(got)
		sortHits(want)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: patterns %q over %d bytes: %d hits, want %d", round, patterns, len(text), len(got), len(want))
		}
	}
}

// TestRulesFindWhatAFullScanFinds checks the shortcuts of the engine (keyword selection, windows
// and anchored runs, the rewritten patterns) against each rule's pattern as written, run over
// the whole text: every secret the full scan accepts is redacted.
func TestRulesFindWhatAFullScanFinds(t *testing.T) {
	t.Parallel()
	r := newRedactor(t, Config{})
	texts := corpusTexts(t)
	outputs, lower := map[string][]byte{}, map[string][]byte{}
	for name, text := range texts {
		outputs[name], _ = r.Text(name, text)
		lower[name] = bytes.ToLower(text)
	}
	for _, ru := range r.rules {
		full := regexp.MustCompile(ru.expr)
		for name, text := range texts {
			// As gitleaks does: a rule runs on a text that holds one of its keywords.
			if !slices.ContainsFunc(ru.Keywords, func(k string) bool { return bytes.Contains(lower[name], []byte(k)) }) {
				continue
			}
			for _, m := range full.FindAllSubmatchIndex(text, -1) {
				// The contract of a rule: each match holds one of its keywords. gitleaks
				// checks keywords per file instead, so a match without one (its sourcegraph
				// rule's bare 40-hex alternative, which is every git SHA) is not a finding here.
				match := bytes.ToLower(text[m[0]:m[1]])
				if !slices.ContainsFunc(ru.Keywords, func(k string) bool { return bytes.Contains(match, []byte(k)) }) {
					continue
				}
				spans := ru.appendSecret(nil, text, 0, 0, m)
				if len(spans) == 0 {
					continue
				}
				secret := text[spans[0].start:spans[0].end]
				if out := outputs[name]; bytes.Contains(out, secret) && !inMarker(out, secret) {
					t.Errorf("%s: rule %s: full scan finds %q at %d, the redactor leaves it", name, ru.ID, secret, spans[0].start)
				}
			}
		}
	}
}

// inMarker reports whether every occurrence of s in out is inside a marker (a rule id).
func inMarker(out, s []byte) bool {
	for i := 0; ; {
		j := bytes.Index(out[i:], s)
		if j < 0 {
			return true
		}
		at := i + j
		open := bytes.LastIndex(out[:at], []byte("[REDACTED:"))
		if open < 0 || bytes.IndexByte(out[open:at], ']') >= 0 {
			return false
		}
		i = at + 1
	}
}

func TestCopyMatchesTextAcrossChunkBoundaries(t *testing.T) {
	t.Parallel()
	r := newRedactor(t, Config{KnownSecrets: []string{"known-value-1234567"}})
	// Secrets placed on and around every read and overlap boundary.
	var in bytes.Buffer
	filler := []byte("2026-11-22T01:02:03Z info request served path=/v1/items status=200 bytes=512\n")
	secrets := []string{fakeGitHubPAT, "postgres://app:" + fakePGPassword + "@db/x", fakeSlackBot, "known-value-1234567", `api_key = "a8f9d7e6c5b4a3928176"`}
	boundaries := []int{copyChunk, copyChunk + copyOverlap, 2*copyChunk + copyOverlap, 3*copyChunk + copyOverlap}
	k := 0
	for _, b := range boundaries {
		for _, delta := range []int{-40, -7, -1, 0, 3} {
			for in.Len() < b+delta-40 {
				in.Write(filler)
			}
			in.Write(bytes.Repeat([]byte{' '}, max(0, b+delta-20-in.Len())))
			in.WriteString(" " + secrets[k%len(secrets)] + " ")
			k++
		}
	}
	for in.Len() < 4*copyChunk+copyOverlap {
		in.Write(filler)
	}
	data := in.Bytes()
	want, wantFindings := r.Text("stdout", data)

	for _, reader := range []struct {
		name string
		r    io.Reader
	}{
		{"whole reads", bytes.NewReader(data)},
		{"one byte reads", iotest.OneByteReader(bytes.NewReader(data[:copyChunk+copyOverlap+4096]))},
		{"half reads", iotest.HalfReader(bytes.NewReader(data))},
	} {
		t.Run(reader.name, func(t *testing.T) {
			var out bytes.Buffer
			findings, n, err := r.Copy(context.Background(), "stdout", &out, reader.r)
			if err != nil {
				t.Fatal(err)
			}
			expect, expectFindings := want, wantFindings
			if reader.name == "one byte reads" {
				expect, expectFindings = r.Text("stdout", data[:copyChunk+copyOverlap+4096])
			}
			if n != int64(out.Len()) || !bytes.Equal(out.Bytes(), expect) {
				t.Fatalf("Copy output differs from Text (%d vs %d bytes)", out.Len(), len(expect))
			}
			if fmt.Sprint(findings) != fmt.Sprint(expectFindings) {
				t.Errorf("findings differ:\n got %v\nwant %v", findings, expectFindings)
			}
		})
	}
}

func TestCopyUsesBoundedMemory(t *testing.T) {
	r := newRedactor(t, Config{})
	const size = 50 << 20
	// A block of log lines, one of which leaks a token.
	line := []byte("ts=2026-11-22T01:02:03Z level=info msg=\"token refreshed\" user=42 took=3ms " + fakeGitHubPAT + "\n")
	block := append(bytes.Repeat([]byte("ts=2026-11-22T01:02:03Z level=info msg=\"request served\" path=/v1/items status=200\n"), 99), line...)
	src := io.LimitReader(&repeatReader{line: block}, size)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	dst := &heapSampler{}
	findings, n, err := r.Copy(context.Background(), "stdout", dst, src)
	if err != nil {
		t.Fatal(err)
	}
	shrink := len(fakeGitHubPAT) - len("[REDACTED:github-pat]")
	if want := size / len(block); len(findings) != want || n != int64(size-want*shrink) {
		t.Fatalf("%d findings, %d bytes written; want %d and %d", len(findings), n, want, size-want*shrink)
	}
	// Findings are kept (a few hundred bytes each with their slice's spare room); beyond them
	// the copy must not hold the input.
	budget := before.HeapInuse + uint64(len(findings))*400 + 32<<20
	if dst.peak > budget {
		t.Errorf("heap in use peaked at %d MiB redacting %d MiB (budget %d MiB)", dst.peak>>20, size>>20, budget>>20)
	}
	t.Logf("heap in use: %d MiB before, peak %d MiB, %d findings", before.HeapInuse>>20, dst.peak>>20, len(findings))
}

// heapSampler discards what is written and records the heap in use at each write, the points
// where Copy holds the most.
type heapSampler struct{ peak uint64 }

func (h *heapSampler) Write(p []byte) (int, error) {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	h.peak = max(h.peak, m.HeapInuse)
	return len(p), nil
}

// repeatReader repeats one line forever.
type repeatReader struct {
	line []byte
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.line[r.off:])
		n += c
		r.off = (r.off + c) % len(r.line)
	}
	return n, nil
}

func TestCopyStopsOnCancelAndErrors(t *testing.T) {
	t.Parallel()
	r := newRedactor(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := r.Copy(ctx, "x", io.Discard, strings.NewReader("abc")); err == nil {
		t.Error("cancelled copy succeeded")
	}
	if _, _, err := r.Copy(context.Background(), "x", io.Discard, iotest.ErrReader(io.ErrUnexpectedEOF)); err == nil {
		t.Error("read error not reported")
	}
}
