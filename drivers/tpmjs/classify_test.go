package tpmjs

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
)

// personalities are the executors every failure is sent through.
var personalities = []tpmjstest.Personality{tpmjstest.NodeV10, tpmjstest.DenoV11, tpmjstest.DenoVercel}

// TestSameFailureSameExitCodeOnEveryExecutor sends each failure through a
// Node-style executor (1.0 error objects, always 200), the 1.1 Deno executor
// (string errors with codes, load failures as 404/400/500) and the Deno form
// of the Vercel template (plain strings, no codes at all), and requires one
// exit code per failure. Before classification read the body first, the
// Vercel form's unknown export was 5, its failing factory 2 and its import
// failure 5, where the Node executor said 3.
func TestSameFailureSameExitCodeOnEveryExecutor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		call     drivers.Call
		apiKey   string // the executor's; the driver sends none
		wantExit int
	}{
		{"a tool that throws is a tool failure", call(tpmjstest.FailTool, map[string]any{"message": "quota exceeded"}), "", ExitToolFailed},
		{"a tool that catches its own error is a tool failure", call(tpmjstest.CaughtErrorTool, nil), "", ExitToolFailed},
		{"an unknown export is an unusable tool", call("noSuchExport", nil), "", ExitNotFound},
		{"an unknown package is an unusable tool", drivers.Call{RequestID: "r", Target: "run", Package: "@toolgate/not-published", Version: "1.0.0"}, "", ExitNotFound},
		{"a factory that cannot be initialized is an unusable tool", call(tpmjstest.FactoryTool, nil), "", ExitNotFound},
		{"an export without execute is an unusable tool", call(tpmjstest.InvalidTool, nil), "", ExitNotFound},
		{"a refused API key is unauthorized", call(tpmjstest.EchoTool, nil), "the-executors-key", ExitUnauthorized},
		{"a tool that works is a success", call(tpmjstest.EchoTool, nil), "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, p := range personalities {
				var opts []tpmjstest.Option
				if tc.apiKey != "" {
					opts = append(opts, tpmjstest.WithAPIKey(tc.apiKey))
				}
				fake := tpmjstest.New(t, p, opts...)
				d := newDriver(t, fake.URL, nil)
				r, err := d.Run(context.Background(), tc.call)
				if err != nil {
					t.Fatalf("%v: Run: %v", p, err)
				}
				if r.ExitCode != tc.wantExit {
					t.Errorf("%v: exit %d (stderr %q), want %d", p, r.ExitCode, r.Stderr, tc.wantExit)
				}
			}
		})
	}
}

// TestEvidenceRecordsWhatWasSentAndAnswered checks Result.Evidence on every
// executor: the package, version and export actually sent (the default
// version included), the executor's status, executionTimeMs and the
// protocol versions.
func TestEvidenceRecordsWhatWasSentAndAnswered(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p            tpmjstest.Personality
		export       string
		wantStatus   int
		wantFormat   string
		wantProtocol string
	}{
		{tpmjstest.NodeV10, tpmjstest.EchoTool, 200, "", "1.0"},
		{tpmjstest.NodeV10, "noSuchExport", 200, "1.0", "1.0"},
		{tpmjstest.DenoV11, "noSuchExport", 404, "1.1", "1.1"},
		{tpmjstest.DenoVercel, "noSuchExport", 404, "plain", ""},
		{tpmjstest.DenoVercel, tpmjstest.EchoTool, 200, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.p.String()+" "+tc.export, func(t *testing.T) {
			t.Parallel()
			fake := tpmjstest.New(t, tc.p)
			d := newDriver(t, fake.URL, func(c *Config) { c.ProbeInterval = 20 * time.Millisecond })
			if tc.wantProtocol != "" {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				d.Start(ctx)
				waitFor(t, "the executor's protocol", func() bool {
					d.mu.Lock()
					defer d.mu.Unlock()
					return d.executorProtocol != ""
				})
			}
			c := call(tc.export, nil)
			c.Version = "" // sent as "latest"
			r, err := d.Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			ev := r.Evidence
			want := map[string]any{"sent": true, "package": tpmjstest.Package, "version": "latest", "export": tc.export,
				"protocol_version": "1.0", "executor_status": tc.wantStatus}
			if tc.wantFormat != "" {
				want["error_format"] = tc.wantFormat
			}
			if tc.wantProtocol != "" {
				want["executor_protocol_version"] = tc.wantProtocol
			}
			ms, ok := ev["execution_time_ms"].(json.Number)
			if !ok {
				t.Errorf("execution_time_ms = %#v, want the executor's executionTimeMs", ev["execution_time_ms"])
			} else if _, err := ms.Int64(); err != nil {
				t.Errorf("execution_time_ms = %q", ms)
			}
			delete(ev, "execution_time_ms")
			// 120s, or 115s once the probe read the Node executor's limit.
			if limit, _ := ev["time_limit_ms"].(int64); limit != 120000 && limit != 115000 {
				t.Errorf("time_limit_ms = %v", ev["time_limit_ms"])
			}
			delete(ev, "time_limit_ms")
			if !reflect.DeepEqual(ev, want) {
				t.Errorf("Evidence = %v, want %v", ev, want)
			}
		})
	}
	t.Run("a refused call records that nothing was sent", func(t *testing.T) {
		t.Parallel()
		d := newDriver(t, "http://127.0.0.1:1", nil)
		r, err := d.Run(context.Background(), drivers.Call{Target: "run", Package: "x", Version: "1; id"})
		if err != nil || r.ExitCode != ExitInvalidRequest || !reflect.DeepEqual(r.Evidence, map[string]any{"sent": false}) {
			t.Errorf("Run = %+v, %v; want exit 2 with evidence sent: false", r, err)
		}
	})
}
