package main

// Fault tests of the replies that must agree with the store: what a caller
// is told about a request is what the evidence, read by a retry, by
// recovery and by `toolgate evidence verify`, says after any fault, the
// gateway's own death included.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolgate/toolgate/evidence"
)

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
