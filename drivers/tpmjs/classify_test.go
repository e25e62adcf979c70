package tpmjs

import (
	"context"
	"testing"

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
