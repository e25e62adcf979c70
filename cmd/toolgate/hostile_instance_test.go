package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
)

// sameNameHeartbeat is the instance lease's heartbeat in the same-name
// tests: a holder is taken for dead after three of them without one.
const sameNameHeartbeat = 500 * time.Millisecond

// sameNameGateway is signingGateway with the fault suite's recovery
// timings and a short instance lease heartbeat.
func sameNameGateway(t *testing.T, b *loggedBucket) string {
	t.Helper()
	cfg := signingGateway(t, b.dir, b.url)
	text, err := os.ReadFile(filepath.Join(b.dir, cfg))
	if err != nil {
		t.Fatal(err)
	}
	timings := fmt.Sprintf("  signing_key: {file: signing.pem}\n  op_timeout: %s\n  sweep_interval: %s\n  interrupted_after: %s\n  lease_heartbeat: %s\n",
		faultOpTimeout, faultSweepInterval, faultInterruptedAfter, sameNameHeartbeat)
	fast := strings.Replace(string(text), "  signing_key: {file: signing.pem}\n", timings, 1)
	if err := os.WriteFile(filepath.Join(b.dir, cfg), []byte(fast), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// shortLease gives the gateway configured in file a 200ms lease
// heartbeat, for tests that kill a gateway and start it again: the new
// process waits three heartbeats for the killed one's to go stale.
func shortLease(t *testing.T, dir, file string) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	short := strings.Replace(string(text), "\nevidence:\n", "\nevidence:\n  lease_heartbeat: 200ms\n", 1)
	if short == string(text) {
		t.Fatalf("%s has no evidence section to add lease_heartbeat to", file)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(short), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestHostileSameInstanceName: two processes started with one instance
// name on one store (a configuration copied to a second host, a zombie
// after a partition, a paused VM) must never both write. The second
// refuses to start while the first lives, and says why; once the first
// has stopped (SIGSTOP) for longer than its lease's staleness the second
// takes over; and when the first wakes up it fences itself: new calls get
// UNAVAILABLE, and it writes nothing for the requests the second runs,
// so no request of the second gets an interrupted manifest and `verify
// --all --pubkey` stays clean. On the file store and on a real MinIO.
func TestHostileSameInstanceName(t *testing.T) {
	t.Parallel()
	m := evidencetest.StartMinIO(t)
	for _, st := range []struct {
		name string
		open func(t *testing.T) *loggedBucket
	}{
		{"file", fileLoggedBucket},
		{"minio", func(t *testing.T) *loggedBucket { return minioLoggedBucket(t, m, "samename") }},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			sameNameAttack(t, st.open(t))
		})
	}
}

func sameNameAttack(t *testing.T, b *loggedBucket) {
	cfg := sameNameGateway(t, b)
	first := startServerEnv(t, b.dir, b.env, "--config", cfg)
	runCalls(t, first.addr, "first", 2)

	// 1. While the first lives, a second process with its name refuses
	// to start, naming the conflict and the way out.
	second, err := launchServer(t, b.dir, b.env, "--config", cfg)
	if second != nil {
		t.Errorf("a second process with instance name gw-1 started while the first lives")
	} else {
		msg := err.Error()
		t.Logf("the second process refused to start:\n%s", msg)
		for _, want := range []string{`instance name "gw-1"`, "pid " + strconv.Itoa(first.cmd.Process.Pid), "instance:"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the refusal does not say %q:\n%s", want, msg)
			}
		}
	}

	// 2. The first stops answering (SIGSTOP: a paused VM, a long GC, a
	// partition): past its lease's staleness the second takes over.
	if err := first.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			first.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	if second == nil {
		second = startServerEnv(t, b.dir, b.env, "--config", cfg)
		if !strings.Contains(second.log.String(), "took over instance name") {
			t.Errorf("the second process does not say it took the instance over:\n%s", second.log.String())
		}
	}
	c2 := dial(t, second.addr)
	long := make(chan answer, 1)
	go func() {
		long <- callWithin(c2, shellRequest(t, "second-long", "sleep 3; echo done"), faultCallDeadline)
	}()
	waitForKey(t, b.store, evidence.Key("second-long", evidence.ArtifactDispatch))

	// 3. The first wakes up while the second runs a call.
	if err := first.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	time.Sleep(time.Second) // the first's heartbeat, log and sweep have had their turns
	c1 := dial(t, first.addr)
	// Callers of the first fail over to the second with the same request.
	var failedOver []string
	for i := range 3 {
		id := fmt.Sprintf("failover-%d", i)
		req := countRequest(t, id, "sleep 2")
		refused := callWithin(c1, req, faultCallDeadline)
		switch {
		case status.Code(refused.err) != codes.Unavailable:
			t.Errorf("%s: a call to the fenced process answered %v, want UNAVAILABLE", id, refused)
		case !strings.Contains(status.Convert(refused.err).Message(), "gw-1"):
			t.Errorf("%s: the fenced process's refusal does not name the instance: %v", id, refused)
		}
		if refused.err == nil {
			continue
		}
		failedOver = append(failedOver, id)
		if got := callWithin(c2, req, faultCallDeadline); got.err != nil || !got.resp.GetOk() {
			t.Errorf("%s: the failed-over call on the second process: %v", id, got)
		}
		if n := runsOf(t, b.dir, id); n != 1 {
			t.Errorf("%s: the tool ran %d times, want once (by the second process)", id, n)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if got := <-long; got.err != nil || !got.resp.GetOk() {
		t.Errorf("the second process's long call: %v", got)
	}
	time.Sleep(5 * faultSweepInterval) // a misbehaving first would have swept by now

	// 4. The first never wrote for the second's requests, and still
	// refuses calls.
	for _, id := range append([]string{"second-long"}, failedOver...) {
		if outcome := manifestOutcome(t, b.store, id); outcome != evidence.OutcomeCompleted {
			t.Errorf("%s, run by the second process: manifest outcome %q, want completed", id, outcome)
		}
	}
	if got := callWithin(c1, shellRequest(t, "after-fence", "echo ran"), faultCallDeadline); status.Code(got.err) != codes.Unavailable {
		t.Errorf("a later call to the fenced process answered %v, want UNAVAILABLE", got)
	}
	if !strings.Contains(first.log.String(), "fenced") {
		t.Errorf("the first process's log does not say it was fenced:\n%s", first.log.String())
	}
	if code, body := adminDo(t, http.MethodGet, adminURL(t, first)+"/readyz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("the fenced process's /readyz: %d %q, want 503", code, body)
	}
	eventually(t, 20*time.Second, "verify --all --pubkey is clean", func() error {
		out, code := b.audit(t, "kept.txt")
		if code != exitOK || strings.Contains(out, "TAMPERED") || strings.Contains(strings.ToLower(out), "mismatch") {
			return fmt.Errorf("exit %d:\n%s", code, out)
		}
		return nil
	})
}

// manifestOutcome is the outcome of request id's stored manifest, or
// "none".
func manifestOutcome(t *testing.T, s evidence.Store, id string) string {
	t.Helper()
	data, err := s.Get(context.Background(), evidence.Key(id, evidence.ArtifactManifest))
	if err != nil {
		return "none"
	}
	var m struct {
		Outcome string `json:"outcome"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: manifest: %v", id, err)
	}
	return m.Outcome
}
