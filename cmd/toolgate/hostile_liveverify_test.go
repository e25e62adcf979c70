package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// An auditor verifies a bucket while its gateway serves calls. Each run
// must judge the bucket as one listing found it and tell a request on its
// way (in flight, or logged within the next checkpoint interval) from one
// no log records: a live bucket verifies clean, with every requirement
// on, every time.

// liveCalls and liveWorkers shape the load: liveCalls shell calls,
// liveWorkers at a time, one started every liveEvery, which spreads them
// over a few seconds.
const (
	liveCalls   = 200
	liveWorkers = 8
	liveEvery   = 20 * time.Millisecond
)

// TestVerifyALiveBucket runs `toolgate evidence verify --all
// --require-log --require-signature` again and again while a signing
// gateway serves 200 calls, on the file store and on a real MinIO: every
// run exits 0 and reports requests on their way as pending, never
// unlogged; once the load stops and the log catches up, a last run finds
// every request ok and logged.
func TestVerifyALiveBucket(t *testing.T) {
	t.Parallel()
	m := evidencetest.StartMinIO(t)
	for _, st := range []struct {
		name string
		open func(t *testing.T) *loggedBucket
	}{
		{"file", fileLoggedBucket},
		{"minio", func(t *testing.T) *loggedBucket { return minioLoggedBucket(t, m, "live") }},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			b := st.open(t)
			cfg := signingGateway(t, b.dir, b.url)
			useDefaultCheckpointInterval(t, filepath.Join(b.dir, cfg))
			s := startServerEnv(t, b.dir, b.env, "--config", cfg)

			c := dial(t, s.addr)
			start := time.Now()
			done := make(chan struct{})
			go func() {
				defer close(done)
				serveLoad(t, c)
			}()
			runs, pending := 0, 0
			for loaded := true; loaded; {
				select {
				case <-done:
					loaded = false
				default:
				}
				out, code := b.liveAudit(t)
				runs++
				if code != exitOK || strings.Contains(out, "unlogged") {
					<-done
					t.Fatalf("verify run %d of a live bucket: exit %d:\n%s", runs, code, out)
				}
				if strings.Contains(out, "\npending ") || strings.HasPrefix(out, "pending ") {
					pending++
				}
			}
			if runs < 3 || pending == 0 {
				t.Fatalf("%d verify runs during the load, %d of them reporting requests pending: want at least 3 runs, and some pending", runs, pending)
			}
			want := fmt.Sprintf("verified %d requests: %d ok\n", liveCalls, liveCalls)
			logged := fmt.Sprintf("logs: 1 checked, %d entries in all\n", 2*liveCalls)
			eventually(t, 20*time.Second, "every call ok and logged once the load stopped", func() error {
				out, code := b.liveAudit(t)
				if code != exitOK || !strings.Contains(out, want) || !strings.Contains(out, logged) || strings.Contains(out, "pending") {
					return fmt.Errorf("exit %d:\n%s", code, out)
				}
				return nil
			})
			t.Logf("%d verify runs during the load (%v), %d with requests pending", runs, time.Since(start), pending)
		})
	}
}

// liveAudit runs verify --all with every requirement as an auditor does
// while the gateway writes.
func (b *loggedBucket) liveAudit(t *testing.T) (string, int) {
	t.Helper()
	out, stderr, code := runToolEnv(t, b.dir, b.env, "evidence", "verify", "--all", "--evidence", b.url,
		"--pubkey", "signing.pub", "--require-signature", "--require-log")
	if stderr != "" {
		t.Errorf("verify wrote to stderr:\n%s", stderr)
	}
	return out, code
}

// useDefaultCheckpointInterval gives the gateway of the configuration the
// default checkpoint interval (1s), so that its log trails its calls as in
// production.
func useDefaultCheckpointInterval(t *testing.T, file string) {
	t.Helper()
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	const fast = "checkpoint_interval: 100ms"
	if !strings.Contains(string(text), fast) {
		t.Fatalf("%s does not set %q", file, fast)
	}
	if err := os.WriteFile(file, []byte(strings.Replace(string(text), fast, "checkpoint_interval: 1s", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serveLoad runs liveCalls shell calls through the gateway c,
// liveWorkers at a time, starting one every liveEvery.
func serveLoad(t *testing.T, c toolgatev1.ToolGatewayClient) {
	tick := time.NewTicker(liveEvery)
	defer tick.Stop()
	slots := make(chan struct{}, liveWorkers)
	var wg sync.WaitGroup
	for i := 1; i <= liveCalls; i++ {
		<-tick.C
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := c.RunTool(ctx, shellRequest(t, fmt.Sprintf("live-%03d", i), "echo hi"))
			if err != nil || !resp.GetOk() {
				t.Errorf("call live-%03d: %v, %v", i, resp, err)
			}
		})
	}
	wg.Wait()
}

// TestEvidenceVerifyLogGrace: --require-log fails a request no log
// records once it is older than the log grace, which --log-grace sets and
// otherwise the configuration's gateway implies.
func TestEvidenceVerifyLogGrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := newLayoutWriter(t, dir)
	for _, id := range []string{"old-call", "fresh-call"} {
		w.claim(id, 1, "rule_v1")
		w.dispatch(id, 1, evidence.ArtifactDispatch, evidence.Dispatched, id)
		w.finish(id)
	}
	// Stored 90s before the listing, and not by a gateway that logs.
	ageRequest(t, dir, "old-call", 90*time.Second)
	// A gateway whose store operations may take two minutes needs longer
	// than the default minute to sequence an entry.
	slowStore := "evidence:\n  op_timeout: 2m\n"
	if err := os.WriteFile(filepath.Join(dir, "slow.yaml"), []byte(slowStore), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"default grace", nil, exitFailure, []string{
			"pending fresh-call: artifacts match; stored within the log grace of the listing, its log entries are not sequenced yet",
			"unlogged old-call: artifacts match, but no transparency log records the request",
			"verified 2 requests: 1 pending, 1 unlogged",
		}},
		{"a longer --log-grace", []string{"--log-grace", "5m"}, exitOK, []string{"verified 2 requests: 2 pending"}},
		{"the grace of a gateway with a slow store", []string{"--config", "slow.yaml"}, exitOK, []string{"verified 2 requests: 2 pending"}},
		{"--log-grace over the configuration", []string{"--config", "slow.yaml", "--log-grace", "1m"}, exitFailure, []string{"1 pending, 1 unlogged"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runTool(t, dir, append([]string{"evidence", "verify", "--all", "--require-log"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d:\n%s%s", code, tc.code, out, stderr)
			}
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}
