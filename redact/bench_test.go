package redact

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// Benchmark inputs, built from the corpus so that the figures describe realistic text:
//   - clean: 1 MiB of the negative corpus (logs, JSON, YAML, minified JS, digests, base64, prose),
//     which holds keywords such as "key" and "token" in ordinary use but no secret;
//   - dense: 16 KiB of the positive corpus, secrets and keywords on most lines.
//
// redact/gitleaksbench runs gitleaks' own detector on the same inputs in the same run.

// BenchInput returns one of the benchmark inputs by name ("clean" or "dense").
func benchInput(tb testing.TB, name string) []byte {
	var files map[string][]byte
	size := 16 << 10
	if name == "clean" {
		files, size = corpusFiles(tb, "negative"), 1<<20
	} else {
		files = corpusFiles(tb, "positive")
	}
	var buf bytes.Buffer
	for buf.Len() < size {
		for _, name := range slices.Sorted(mapKeys(files)) {
			buf.Write(files[name])
			buf.WriteByte('\n')
		}
	}
	return buf.Bytes()[:size]
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func BenchmarkText(b *testing.B) {
	r := newRedactor(b, Config{FingerprintKey: []byte("bench")})
	for _, name := range []string{"clean", "dense"} {
		in := benchInput(b, name)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				r.Text("bench", in)
			}
		})
	}
}

// BenchmarkJSON redacts a 64 KiB tool_result.json shaped like real tool output: a build log with
// two credentials, records with ids and digests, token counters, an env map with a password, a
// base64 thumbnail.
func BenchmarkJSON(b *testing.B) {
	doc := benchDocument(b)
	r := newRedactor(b, Config{KnownSecrets: []string{"s3cr3t-known-value", "another-configured-secret"}, FingerprintKey: []byte("bench")}).
		WithSecrets("per-call-env-value")
	if _, findings, err := r.JSON("tool_result.json", doc); err != nil || len(findings) < 3 {
		b.Fatalf("benchmark document: %d findings, %v", len(findings), err)
	}
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := r.JSON("tool_result.json", doc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopy streams 16 MiB of the clean corpus through Copy.
func BenchmarkCopy(b *testing.B) {
	r := newRedactor(b, Config{})
	clean := benchInput(b, "clean")
	in := bytes.Repeat(clean, 16)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := r.Copy(context.Background(), "stdout", io.Discard, bytes.NewReader(in)); err != nil {
			b.Fatal(err)
		}
	}
}

func benchDocument(tb testing.TB) []byte {
	tb.Helper()
	const (
		sha   = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
		gitID = "3f786850e387550fdab836ed7e6dc881de23001b"
		uuid  = "0d5c7a3e-8b1f-4c2a-9e6d-5f4b3a2c1d0e"
		prose = "The deployment finished after the health checks passed on every replica in the pool."
	)
	var log strings.Builder
	for i := 0; log.Len() < 29<<10; i++ {
		fmt.Fprintf(&log, "2026-01-02T15:04:%02dZ INFO step=%d fetched https://registry.example.com/v2/app/blobs/sha256:%s in %dms\n", i%60, i, sha, 10+i%90)
		if i%40 == 7 {
			log.WriteString("+ curl -sS -H 'Authorization: Bearer " + "eyJ" + "hbGciOiJIUzI1NiJ9.eyJzdWIiOiJkZXBsb3kifQ.c2lnbmF0dXJlLXBsYWNlaG9sZGVy" + "' https://api.example.com/v1/deploy\n")
		}
		if i%40 == 23 {
			log.WriteString("commit " + gitID + " " + prose + "\n")
		}
	}
	items := make([]any, 0, 64)
	for i := range 60 {
		items = append(items, map[string]any{
			"id":          fmt.Sprintf("%s-%d", uuid, i),
			"digest":      "sha256:" + sha,
			"name":        fmt.Sprintf("artifact-%03d.tar.gz", i),
			"description": prose,
			"size_bytes":  1048576 + i*4099,
			"url":         fmt.Sprintf("https://cdn.example.com/artifacts/%d?sig=%s", i, gitID),
			"tags":        []any{"release", "linux-amd64", fmt.Sprint(i)},
		})
	}
	image := bytes.Repeat([]byte("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg"), 90)
	doc := map[string]any{
		"exit_code": 0,
		"stdout":    log.String(),
		"stderr":    "warning: GITHUB_TOKEN=" + fakeGitHubPAT + " is deprecated\n",
		"data": map[string]any{
			"items":     items,
			"usage":     map[string]any{"max_tokens": 4096, "tokens_used": 1834, "token_count": 12},
			"env":       map[string]any{"DB_PASSWORD": "hunter2-Kx", "HOME": "/home/app"},
			"thumbnail": "data:image/png;base64," + string(image),
		},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// hostileDense returns a tool_result.json whose stdout is n bytes of lines each holding a
// configured secret, a GitHub token and a password assignment: the most findings per byte a
// tool can produce.
func hostileDense(n int) []byte {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString("GITHUB_TOKEN=" + fakeGitHubPAT + " known-secret-value-1 password=Zq7vR2mK9xLp\n")
	}
	doc, _ := json.Marshal(map[string]any{"stdout": b.String()})
	return doc
}

// hostileKeywords returns a request.json whose args are n bytes of words that are keywords of
// many rules, with no secret: the most rule work per byte.
func hostileKeywords(n int) []byte {
	doc, _ := json.Marshal(map[string]any{"args": map[string]any{"q": strings.Repeat("password token secret api_key bearer ", n/37)}})
	return doc
}

// BenchmarkHostile redacts inputs built to be as costly as possible per byte, at two sizes: the
// time and memory per op of the larger must be about four times the smaller's (linear cost).
func BenchmarkHostile(b *testing.B) {
	r := newRedactor(b, Config{KnownSecrets: []string{"known-secret-value-1"}, FingerprintKey: []byte("bench")})
	for _, shape := range []struct {
		name string
		gen  func(int) []byte
	}{{"dense", hostileDense}, {"keywords", hostileKeywords}} {
		for _, size := range []int{256 << 10, 1 << 20} {
			doc := shape.gen(size)
			b.Run(fmt.Sprintf("%s/%dKiB", shape.name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(len(doc)))
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := r.JSON("tool_result.json", doc); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
