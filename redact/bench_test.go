package redact

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchDocument builds a tool_result.json of about 64 KiB shaped like real tool output: a build
// log on stdout, structured records with ids and digests, token usage counters, a base64 image,
// and a few secrets.
func benchDocument(tb testing.TB) []byte {
	tb.Helper()
	var log strings.Builder
	for i := 0; log.Len() < 29<<10; i++ {
		fmt.Fprintf(&log, "2026-01-02T15:04:%02dZ INFO step=%d fetched https://registry.example.com/v2/app/blobs/sha256:%s in %dms\n", i%60, i, plainSHA256, 10+i%90)
		if i%40 == 7 {
			log.WriteString("+ curl -sS -H 'Authorization: Bearer " + fakeOpaque + "' https://api.example.com/v1/deploy\n")
		}
		if i%40 == 23 {
			log.WriteString("commit " + plainGitSHA + " " + plainLorem[:80] + "\n")
		}
	}
	items := make([]any, 0, 64)
	for i := 0; i < 60; i++ {
		items = append(items, map[string]any{
			"id":          fmt.Sprintf("%s-%d", plainUUID, i),
			"digest":      "sha256:" + plainSHA256,
			"name":        fmt.Sprintf("artifact-%03d.tar.gz", i),
			"description": plainLorem[:120],
			"size_bytes":  json.Number(fmt.Sprint(1048576 + i*4099)),
			"url":         fmt.Sprintf("https://cdn.example.com/artifacts/%d?sig=%s", i, plainGitSHA),
			"tags":        []any{"release", "linux-amd64", fmt.Sprint(i)},
		})
	}
	doc := map[string]any{
		"request_id": "req-0123456789",
		"tool_id":    "build.run",
		"tool_result": map[string]any{
			"exit_code": 0,
			"stdout":    log.String(),
			"stderr":    "warning: GITHUB_TOKEN=" + fakeGitHub + " is deprecated\n",
			"data": map[string]any{
				"items":     items,
				"usage":     map[string]any{"max_tokens": 4096, "tokens_used": 1834, "token_count": 12},
				"env":       map[string]any{"DB_PASSWORD": "hunter2-Kx", "HOME": "/home/app"},
				"thumbnail": "data:image/png;base64," + plainImage[:8<<10],
			},
		},
	}
	out, err := json.Marshal(doc)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

func BenchmarkJSON(b *testing.B) {
	doc := benchDocument(b)
	r := mustNew(b, Config{KnownSecrets: []string{"s3cr3t-known-value", "another-configured-secret"}}).
		WithSecrets("per-call-env-value")
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := r.JSON("tool_result.json", doc); err != nil {
			b.Fatal(err)
		}
	}
}
