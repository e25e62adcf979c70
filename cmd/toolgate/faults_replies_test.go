package main

// Fault tests of the replies that must agree with the store: what a caller
// is told about a request is what the evidence, read by a retry, by
// recovery and by `toolgate evidence verify`, says after any fault, the
// gateway's own death included.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolgate/toolgate/evidence"
)

// TestFaultRetriesRacingCompletions: many callers retry each request, on
// two replicas sharing a MinIO bucket, while it completes, so that retries
// read the request just as its response and then its manifest land. A
// retry may be told the request is in flight; it must never be told the
// request is final and to use a new request_id while its response is
// stored (a caller following that advice runs the tool again), and each
// tool runs once.
func TestFaultRetriesRacingCompletions(t *testing.T) {
	const finding = "class 7a (a retry racing a completion)"
	r := startReplicas(t)
	const ids, callersPerID = 24, 4
	type told struct {
		id string
		a  answer
	}
	var mu sync.Mutex
	var final []told
	var wg sync.WaitGroup
	for i := range ids {
		req := countRequest(t, fmt.Sprintf("race-%02d", i), "sleep 0.05")
		for c := range callersPerID {
			client := r.a
			if c%2 == 1 {
				client = r.b
			}
			wg.Go(func() {
				// Retry while in flight, as a caller does, until the
				// request has its answer or a final refusal.
				for deadline := time.Now().Add(faultSettle); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
					a := callWithin(client, req, faultCallDeadline)
					if retryLater(a.err) {
						continue
					}
					mu.Lock()
					final = append(final, told{req.RequestId, a})
					mu.Unlock()
					return
				}
			})
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if len(final) != ids*callersPerID {
		t.Fatalf("%s: %d of %d callers got an answer within %v", finding, len(final), ids*callersPerID, faultSettle)
	}
	first := map[string]answer{}
	for _, f := range final {
		if f.a.err != nil {
			st := inspect(t, r.bucket, f.id)
			if st.response != nil {
				t.Errorf("%s: %s: a caller was told %v, though its response is stored", finding, f.id, f.a)
			} else {
				t.Errorf("%s: %s: a caller was told %v", finding, f.id, f.a)
			}
			continue
		}
		if prev, ok := first[f.id]; ok {
			sameStory(t, finding+": "+f.id, prev, f.a)
		} else {
			first[f.id] = f.a
		}
	}
	for i := range ids {
		id := fmt.Sprintf("race-%02d", i)
		if n := runsOf(t, r.dir, id); n != 1 {
			t.Errorf("%s: %s: the tool ran %d times, want once", finding, id, n)
		}
	}
	settled(t, finding, r.dir, r.minio.Env(), r.url, r.bucket)
}

// retryLater reports whether err tells a caller to retry the same
// request_id later (in flight, over the concurrency limit, the store slow
// on a loaded machine) rather than that the request is final.
func retryLater(err error) bool {
	switch status.Code(err) {
	case codes.Aborted:
		return !strings.Contains(status.Convert(err).Message(), "new request_id")
	case codes.ResourceExhausted, codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// TestFaultNotDispatchedSurvivesKill: the store takes the dispatch marker
// only after the gateway gave up on it (a write that timed out and landed),
// and refuses the close after it. The caller is told nothing ran and to
// retry with the same request_id; the gateway is SIGKILLed right after that
// reply, before any sweep. Restarted, it must honour what the caller was
// told: the retry runs the tool once, and verify is clean. Without a
// durable close, the marker alone says the tool may have run: recovery
// records the request interrupted and every retry is refused.
func TestFaultNotDispatchedSurvivesKill(t *testing.T) {
	const finding = "class 7b (not dispatched, then killed)"
	m, direct, dir, bucket := faultBucket(t, "audit", "")
	proxy := newFaultProxy(t, m.Endpoint)
	const opTimeout = 2 * time.Second
	cfg := shortLease(t, dir, faultGateway(t, dir, "gw", s3URL("audit", proxy.URL()), "./spool-gw", opTimeout, ""))
	gw := startServerEnv(t, dir, m.Env(), "--config", cfg)
	client := dial(t, gw.addr)

	const id = "lost-marker"
	req := countRequest(t, id, "")
	proxy.setLate(putsOf(evidence.ArtifactDispatch), opTimeout+time.Second)
	proxy.setRefuse(putsOf(evidence.ArtifactNotDispatched))
	first := callWithin(client, req, faultCallDeadline)
	if err := gw.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-gw.done
	if status.Code(first.err) != codes.Unavailable || !strings.Contains(first.String(), "nothing was executed") {
		t.Fatalf("%s: first call = %v, want UNAVAILABLE saying nothing was executed", finding, first)
	}
	eventually(t, faultSettle, finding+": the late dispatch marker never reached the store", func() error {
		if proxy.lateDelivered() == 0 {
			return errors.New("not delivered yet")
		}
		return nil
	})
	proxy.setLate(nil, 0)
	proxy.setRefuse(nil)
	raw, err := bucket.Get(context.Background(), evidence.Key(id, evidence.ArtifactDispatch))
	if err != nil {
		t.Fatalf("%s: the store holds no dispatch record of %s (%v): the test proved nothing", finding, id, err)
	}
	if marker, err := evidence.ParseDispatchRecord(raw, id, 1); err != nil || marker.State != evidence.Dispatched {
		t.Fatalf("%s: the dispatch record of %s is %+v (%v), want the late marker: the test proved nothing", finding, id, marker, err)
	}
	if n := runsOf(t, dir, id); n != 0 {
		t.Fatalf("%s: the tool started %d time(s) although the caller was told it did not run", finding, n)
	}

	gw = startServerEnv(t, dir, m.Env(), "--config", cfg)
	client = dial(t, gw.addr)
	resp := retryUntilAnswered(t, finding+": the caller was told to retry with the same request_id, and the retry after the restart is refused", client, req)
	if !resp.GetOk() || resp.GetToolResult().GetStdout() != "done\n" {
		t.Fatalf("%s: retry answered %v, want the tool's output", finding, resp)
	}
	again := callWithin(client, req, faultCallDeadline)
	if again.err != nil || !proto.Equal(again.resp, resp) {
		t.Fatalf("%s: a further retry = %v, want the stored response", finding, again)
	}
	if n := runsOf(t, dir, id); n != 1 {
		t.Fatalf("%s: the tool ran %d times, want exactly once", finding, n)
	}
	firstAttemptNotDispatched(t, finding, bucket, id)
	settled(t, finding, dir, m.Env(), direct, bucket)
}
