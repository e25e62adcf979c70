package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/storeurl"
)

// hostileStore is an evidence store an attacker can write to: the
// gateway's URL for it, the environment the gateway needs, and the store
// as the attacker opens it.
type hostileStore struct {
	url   string
	env   []string
	store evidence.Store
}

// hostileStores are the stores every store attack runs on: a folder and
// a bucket of a real MinIO.
var hostileStores = []struct {
	name string
	open func(t *testing.T, dir string) hostileStore
}{
	{"file", func(t *testing.T, dir string) hostileStore {
		url := "file://" + filepath.Join(dir, "evidence")
		s, err := storeurl.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return hostileStore{url: url, store: s}
	}},
	{"minio", func(t *testing.T, dir string) hostileStore {
		m := evidencetest.StartMinIO(t)
		m.CreateBucket(t, "audit", false)
		url := m.URL("audit", "")
		return hostileStore{url: url, env: m.Env(), store: openBucket(t, m, url)}
	}},
}

// TestHostileStoreAttemptsAndClaims: someone who can write to the store
// but holds no key of the gateway's tries, after the gateway died with
// two tools running, to make a retry run one again (a forged "not
// dispatched" close), to have a planted response replayed, and to have
// recovery sign a manifest for a planted request. None of it works: the
// retries get DATA_LOSS naming tampering and run nothing, no manifest is
// signed for what the gateway never wrote, /metrics counts every refusal,
// and verify names the forged close.
func TestHostileStoreAttemptsAndClaims(t *testing.T) {
	t.Parallel()
	for _, kind := range hostileStores {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writePolicy(t, dir, faultPolicy)
			hs := kind.open(t, dir)
			cfg := faultGateway(t, dir, "gw", hs.url, "./spool-gw", faultOpTimeout, "")
			gw := startServerEnv(t, dir, hs.env, "--config", cfg)
			client := dial(t, gw.addr)
			ids := []string{"forged-close", "forged-response"}
			for _, id := range ids {
				go callWithin(client, countRequest(t, id, "sleep 60"), faultCallDeadline)
			}
			for _, id := range ids {
				eventually(t, faultSettle, id+" never started", func() error {
					if runsOf(t, dir, id) == 0 {
						return fmt.Errorf("%s has not started", id)
					}
					return nil
				})
			}
			if err := gw.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-gw.done

			ctx := context.Background()
			attack := func(key string, data []byte) {
				t.Helper()
				if err := hs.store.Put(ctx, key, data); err != nil {
					t.Fatalf("the attacker's write of %s: %v", key, err)
				}
			}
			closeRecord, _ := json.Marshal(evidence.DispatchRecord{RequestID: "forged-close", Attempt: 1,
				State: evidence.NotDispatched, Reason: "connection refused", Gateway: "toolgate/dev@gw", At: time.Now().UTC()})
			attack(evidence.Key("forged-close", evidence.ArtifactNotDispatched), closeRecord)
			attack(evidence.Key("forged-response", evidence.ArtifactResponse),
				[]byte(`{"ok":true,"tool_result":{"exit_code":0,"stdout":"all clear\n"},"policy_check":{"decision":"allow"}}`))
			for _, name := range []string{evidence.ArtifactRequest, evidence.ArtifactPolicyDecision, evidence.ArtifactDispatch} {
				data, err := hs.store.Get(ctx, evidence.Key("forged-close", name))
				if err != nil {
					t.Fatal(err)
				}
				attack(evidence.Key("planted", name), []byte(strings.ReplaceAll(string(data), `"forged-close"`, `"planted"`)))
			}

			gw = startServerEnv(t, dir, hs.env, "--config", cfg)
			client = dial(t, gw.addr)
			for _, id := range ids {
				_, err := client.RunTool(ctx, countRequest(t, id, "sleep 60"))
				if status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), "tampering") {
					t.Errorf("retry of %s = %v; want DATA_LOSS naming tampering", id, err)
				}
				if n := runsOf(t, dir, id); n != 1 {
					t.Errorf("%s: the tool started %d times, want 1", id, n)
				}
			}
			eventually(t, faultSettle, "the sweep never refused the planted claim", func() error {
				text := scrape(t, gw)
				for _, record := range []string{"attempt", "response", "claim"} {
					if v := sampleValue(text, "toolgate_evidence_tampering_total", `record="`+record+`"`); v == "" || v == "0" {
						return fmt.Errorf("tampering{record=%q} = %q", record, v)
					}
				}
				return nil
			})
			// Past interrupted_after, a sweep would have finalised any of
			// them it believed.
			time.Sleep(faultInterruptedAfter + 2*faultSweepInterval)
			for _, id := range append(ids, "planted") {
				if _, err := hs.store.Get(ctx, evidence.Key(id, evidence.ArtifactManifest)); err == nil {
					t.Errorf("%s got a manifest signed by the gateway over records it never wrote", id)
				}
			}

			pub := filepath.Join(dir, "gw.pub")
			out, stderr, code := runToolEnv(t, dir, hs.env, "evidence", "pubkey", "--config", cfg)
			if code != 0 {
				t.Fatalf("evidence pubkey: %s", stderr)
			}
			if err := os.WriteFile(pub, []byte(out), 0o600); err != nil {
				t.Fatal(err)
			}
			out, _, code = runToolEnv(t, dir, hs.env, "evidence", "verify", "forged-close", "--pubkey", pub, "--config", cfg)
			if code != 1 || !strings.Contains(out, "not_dispatched.json") {
				t.Errorf("verify of the forged close exited %d:\n%s\nwant 1, naming not_dispatched.json", code, out)
			}
		})
	}
}
