package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/servelimits"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/gateway/telemetry/telemetrytest"
)

// newTelemetry is a Telemetry with a registry of its own.
func newTelemetry(t *testing.T) *telemetry.Telemetry {
	t.Helper()
	tel, err := telemetry.New(telemetry.Options{Version: Version})
	if err != nil {
		t.Fatal(err)
	}
	return tel
}

// metricValue is telemetrytest.Value of tel's registry.
func metricValue(t *testing.T, tel *telemetry.Telemetry, name string, labels ...string) float64 {
	t.Helper()
	return telemetrytest.Value(t, tel.Registry(), name, labels...)
}

// TestMetricsOfCallsReadAsAUserExpects: an allowed call, a denied one and
// one for a tool the catalog does not know each land in their series.
func TestMetricsOfCallsReadAsAUserExpects(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t)
	e := newEnv(t, envOptions{telemetry: tel, policies: map[string]string{"policy.default.cedar": `
@id("read_ok") permit (principal, action, resource == Tool::"workspace.readFile");
@id("no_deletes") forbid (principal, action, resource == Tool::"workspace.deleteFile");
`}})
	if err := os.WriteFile(filepath.Join(e.workspace, "a.txt"), []byte("hi"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.mustCall("m-1", "workspace.readFile", map[string]any{"path": "a.txt"})
	e.mustCall("m-2", "workspace.deleteFile", map[string]any{"path": "a.txt"})
	if resp, err := e.call(context.Background(), "m-3", "no.such.tool", nil); resp.GetOk() {
		t.Fatalf("a call of an unknown tool ran: %v, %v", resp, err)
	}
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"decision=allow", "rule_id=read_ok", "tool=workspace.readFile", "outcome=ran"}, 1},
		{[]string{"decision=deny", "rule_id=no_deletes", "tool=workspace.deleteFile", "outcome=denied"}, 1},
		{[]string{"tool=other"}, 1},
		{[]string{"tool=no.such.tool"}, 0},
	} {
		if got := metricValue(t, tel, telemetry.MetricCalls, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", telemetry.MetricCalls, c.labels, got, c.want)
		}
	}
	if got := metricValue(t, tel, telemetry.MetricFrontDoorRequests, "door=grpc"); got != 3 {
		t.Errorf("front-door requests of grpc = %v, want 3", got)
	}
	for _, stage := range []string{"claim", "decide", "driver", "redact", "evidence_write"} {
		if got := metricValue(t, tel, telemetry.MetricStageDuration, "stage="+stage); got == 0 {
			t.Errorf("stage %s was never timed", stage)
		}
	}
}

// TestMetricsOfAStoreThatGoesDown: the store fails after the tool ran;
// the failures are counted, the spool gauges show what waits, and the
// flusher's writes count as retries.
func TestMetricsOfAStoreThatGoesDown(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t)
	store := &flakyStore{Store: evidence.NewMemoryStore()}
	tool := &hookDriver{run: func() { store.down.Store(true) }, out: drivers.Result{Stdout: "did it\n"}}
	e := newEnv(t, envOptions{
		telemetry: tel,
		store:     store,
		spoolDir:  filepath.Join(t.TempDir(), "spool"),
		extra:     map[string]drivers.Driver{"hook": tool},
		policies:  map[string]string{"policy.default.cedar": `@id("all") permit (principal, action, resource);`},
	})
	e.mustCall("down-1", "hook.run", nil)
	if got := metricValue(t, tel, telemetry.MetricStoreErrors, "op=put"); got == 0 {
		t.Error("the store refused writes, and no put error was counted")
	}
	if got := metricValue(t, tel, telemetry.MetricSpoolArtifacts); got != 3 {
		t.Errorf("spool artifacts = %v, want 3 (tool_result, response, manifest)", got)
	}
	if got := metricValue(t, tel, telemetry.MetricStoreRetries); got != 0 {
		t.Errorf("retries = %v before the flusher ran", got)
	}
	store.down.Store(false)
	if n, err := e.gw.FlushSpool(context.Background()); err != nil || n != 3 {
		t.Fatalf("FlushSpool = %d, %v", n, err)
	}
	if got := metricValue(t, tel, telemetry.MetricStoreRetries); got != 3 {
		t.Errorf("retries = %v, want one per flushed artifact (3)", got)
	}
	if got := metricValue(t, tel, telemetry.MetricSpoolArtifacts); got != 0 {
		t.Errorf("spool artifacts = %v after the flush, want 0", got)
	}
}

// TestSpoolOldestAgeReadsTheOldestSpooledArtifact: the age gauge follows
// the gateway's clock from the oldest file's time.
func TestSpoolOldestAgeReadsTheOldestSpooledArtifact(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "spool")
	spool, err := evidence.OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer spool.Close()
	ctx := context.Background()
	for _, id := range []string{"old", "new"} {
		if err := spool.Put(ctx, evidence.Key(id, evidence.ArtifactResponse), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	old := start.Add(-90 * time.Second)
	if err := os.Chtimes(filepath.Join(dir, evidence.Key("old", evidence.ArtifactResponse)), old, old); err != nil {
		t.Fatal(err)
	}
	g := &Gateway{spool: spool, now: func() time.Time { return start }}
	n, age := g.spoolState()
	if n != 2 || age < 90*time.Second || age > 91*time.Second {
		t.Fatalf("spoolState = %d, %v; want 2 artifacts, the oldest 90s old", n, age)
	}
}

// TestLimitHitsAreCounted: a call beyond max_concurrent_calls and a
// connection beyond max_connections each count a hit of their limit, and
// the calls in flight gauge shows the call holding the slot.
func TestLimitHitsAreCounted(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t)
	release := make(chan struct{})
	running := make(chan struct{})
	tool := &hookDriver{run: func() { close(running); <-release }}
	e := newEnv(t, envOptions{
		telemetry: tel,
		limits:    config.LimitsConfig{MaxConcurrentCalls: 1},
		extra:     map[string]drivers.Driver{"hook": tool},
		policies:  map[string]string{"policy.default.cedar": `@id("all") permit (principal, action, resource);`},
	})
	done := make(chan error, 1)
	go func() {
		_, err := e.call(context.Background(), "slow", "hook.run", nil)
		done <- err
	}()
	<-running
	if got := metricValue(t, tel, telemetry.MetricCallsInFlight); got != 1 {
		t.Errorf("calls in flight = %v while one runs", got)
	}
	_, err := e.call(context.Background(), "refused", "hook.run", nil)
	wantCode(t, err, codes.ResourceExhausted, "max_concurrent_calls")
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := metricValue(t, tel, telemetry.MetricLimitHits, "limit=max_concurrent_calls"); got != 1 {
		t.Errorf("max_concurrent_calls hits = %v, want 1", got)
	}
	if got := metricValue(t, tel, telemetry.MetricCallsInFlight); got != 0 {
		t.Errorf("calls in flight = %v once every call ended", got)
	}

	g := &Gateway{telemetry: tel, limits: config.LimitsConfig{MaxConnections: 1}}
	g.conns = servelimits.Connections(g.limits, tel)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limited := g.LimitListener(lis)
	defer limited.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := limited.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	dial()
	first := <-accepted
	// A busy connection is never shed for a new one, which then waits.
	g.Connections().HTTPConnState(first, http.StateActive)
	dial()
	eventuallyTrue(t, "a max_connections hit", func() bool {
		return metricValue(t, tel, telemetry.MetricLimitHits, "limit=max_connections") >= 1
	})
	select {
	case <-accepted:
		t.Fatal("a second connection was accepted beyond max_connections: 1")
	case <-time.After(50 * time.Millisecond):
	}
	first.Close()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting connection was not accepted once the first closed")
	}
}

// eventuallyTrue polls cond for up to 10 s.
func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

// TestRedactionFindingsAreCountedByRule: a known secret in a call's
// arguments is counted under its rule, and the metrics hold no trace of
// the secret itself.
func TestRedactionFindingsAreCountedByRule(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-value-for-metrics-0123456789"
	tel := newTelemetry(t)
	tool := &hookDriver{run: func() {}}
	e := newEnv(t, envOptions{
		telemetry: tel,
		secrets:   []string{secret},
		extra:     map[string]drivers.Driver{"hook": tool},
		policies:  map[string]string{"policy.default.cedar": `@id("all") permit (principal, action, resource);`},
	})
	e.mustCall("red-1", "hook.run", map[string]any{"note": "the value is " + secret})
	mfs, err := tel.Registry().Gather()
	if got := metricValue(t, tel, telemetry.MetricRedactionFindings, "rule=known-secret"); got < 1 {
		t.Errorf("known-secret findings = %v, want at least 1; metrics: %v", got, mfs)
	}
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(fmt.Sprint(mfs), secret) {
		t.Fatal("the metrics hold the secret")
	}
}

// TestPolicyReloadsAreCountedOKOrRejected: a forced reload of a valid
// folder counts ok, of a broken one rejected, and the watcher's reports
// count the same way.
func TestPolicyReloadsAreCountedOKOrRejected(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t, approvalEnvOptions{})
	tel := newTelemetry(t)
	g := e.gws[0]
	g.telemetry = tel
	lastOK := func(want float64, after string) {
		t.Helper()
		if got := metricValue(t, tel, telemetry.MetricPolicyLastReloadOK); got != want {
			t.Errorf("%s = %v after %s, want %v", telemetry.MetricPolicyLastReloadOK, got, after, want)
		}
	}
	lastOK(1, "start")
	if _, err := g.ReloadPolicies(); err != nil {
		t.Fatal(err)
	}
	e.writePolicy("permit (principal, action, resource) when { nonsense };")
	if _, err := g.ReloadPolicies(); err == nil {
		t.Fatal("a broken policy folder was accepted")
	}
	lastOK(0, "a rejected reload")
	g.logReload(false, fmt.Errorf("policy: broken"))
	lastOK(0, "a second rejected reload")
	g.logReload(true, nil)
	lastOK(1, "the folder was fixed")
	if ok, rejected := metricValue(t, tel, telemetry.MetricPolicyReloads, "result=ok"),
		metricValue(t, tel, telemetry.MetricPolicyReloads, "result=rejected"); ok != 2 || rejected != 2 {
		t.Errorf("reloads ok %v, rejected %v; want 2 and 2", ok, rejected)
	}
}

// TestApprovalsPendingCountsOnlyThoseWaitingForAPerson: an approval asked
// for is pending until a person decides it or it expires, and the age
// reported is that of the one waiting longest.
func TestApprovalsPendingCountsOnlyThoseWaitingForAPerson(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t, approvalEnvOptions{})
	g := e.gws[0]
	check := func(when string, wantN int, wantAge time.Duration) {
		t.Helper()
		if n, age := g.recovery.PendingApprovals(e.clock.Now()); n != wantN || age != wantAge {
			t.Fatalf("%s: %d pending, oldest %v; want %d, %v", when, n, age, wantN, wantAge)
		}
	}
	check("before any approval", 0, 0)
	first := e.pendingID("alice", "ap-1", nil)
	e.clock.advance(10 * time.Minute)
	e.pendingID("alice", "ap-2", otherCall)
	e.clock.advance(5 * time.Minute)
	check("two asked for", 2, 15*time.Minute)
	e.mustDecide("bob", first, "approve", "fine")
	check("the first approved", 1, 5*time.Minute)
	e.clock.advance(2 * time.Hour)
	check("the rest expired", 0, 0)
}

// TestApprovalAgeSurvivesARestart: a gateway that finds a held request at
// start-up reports how long it has waited since it was asked for, not
// since the gateway started.
func TestApprovalAgeSurvivesARestart(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t, approvalEnvOptions{replicas: 2})
	e.pendingID("alice", "ap-old", nil)
	e.clock.advance(40 * time.Minute)
	if _, err := e.gws[1].Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, age := e.gws[1].recovery.PendingApprovals(e.clock.Now()); n != 1 || age != 40*time.Minute {
		t.Fatalf("the replica that found it reports %d pending, oldest %v; want 1, 40m0s", n, age)
	}
}

// TestShadowFlipsAreCounted: a shadow set that decides otherwise counts a
// flip.
func TestShadowFlipsAreCounted(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t)
	e := newEnv(t, envOptions{
		telemetry: tel,
		policies: map[string]string{
			"policy.default.cedar": `@id("all") permit (principal, action, resource);`,
			"policy.next.cedar":    `@id("none") forbid (principal, action, resource);`,
		},
		shadows: map[string]string{"policy.default": "policy.next"},
	})
	if err := os.WriteFile(filepath.Join(e.workspace, "a.txt"), []byte("hi"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.mustCall("sh-1", "workspace.readFile", map[string]any{"path": "a.txt"})
	if got := metricValue(t, tel, telemetry.MetricShadowFlips); got != 1 {
		t.Errorf("shadow flips = %v, want 1", got)
	}
}

// TestAdminListenIsValidated: the admin listener serves without
// authentication, so only loopback unless allowed, and never on the gRPC
// listener's port.
func TestAdminListenIsValidated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, want string
		addr             string
	}{
		{"unset is the default, on loopback", "", "", config.DefaultAdminListen},
		{"off turns it off", "admin: {listen: off}", "", ""},
		{"another loopback port is served", "admin: {listen: \"[::1]:9999\"}", "", "[::1]:9999"},
		{"every interface is refused", "admin: {listen: \"0.0.0.0:9464\"}", `admin.listen "0.0.0.0:9464" is not a loopback address`, ""},
		{"an empty host is every interface, refused", "admin: {listen: \":9464\"}", `admin.listen ":9464" is not a loopback address`, ""},
		{"a host name is refused", "admin: {listen: \"metrics.example:9464\"}", "is not a loopback address", ""},
		{"every interface is served when allowed", "admin: {listen: \"0.0.0.0:9464\", allow_non_loopback: true}", "", "0.0.0.0:9464"},
		{"the gRPC listener's port is refused", "listen: 127.0.0.1:9464", `admin.listen "127.0.0.1:9464": the gRPC listener's address`, ""},
		{"the gRPC port on every interface is refused", "listen: 127.0.0.1:7000\nadmin: {listen: \"0.0.0.0:7000\", allow_non_loopback: true}", "the gRPC listener's address", ""},
		{"no port is refused", "admin: {listen: localhost}", `config: admin.listen "localhost"`, ""},
		{"a misspelt key is refused", "admin: {lisen: off}", "lisen", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.ParseConfig([]byte(tc.yaml))
			if err == nil {
				cfg, err = cfg.WithDefaults()
			}
			if err == nil {
				err = cfg.Validate()
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			case tc.want == "" && cfg.Admin.Addr() != tc.addr:
				t.Fatalf("Addr = %q, want %q", cfg.Admin.Addr(), tc.addr)
			}
		})
	}
}
