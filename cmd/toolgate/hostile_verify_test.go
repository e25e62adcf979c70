package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// The attacks below come through the evidence store, not the wire: someone
// with write access to the bucket edits the records that say whether a
// request ran, to make a request that ran look as if it never did (so that
// it may be run again, or its effects denied), or to hide a second run.
// Only a signed manifest proves what ran; without one, verify can still
// refuse every record that contradicts the layout.

// hostileVerify runs verify on one request of dir and returns its output
// and exit code, failing the test on raw control characters in either
// output form.
func hostileVerify(t *testing.T, dir, id string) (string, int) {
	t.Helper()
	out, stderr, code := runTool(t, dir, "evidence", "verify", id)
	jsonOut, _, jsonCode := runTool(t, dir, "evidence", "verify", id, "--json")
	if jsonCode != code {
		t.Errorf("verify --json exit %d, text exit %d", jsonCode, code)
	}
	var rep jsonReport
	if err := json.Unmarshal([]byte(jsonOut), &rep); err != nil {
		t.Errorf("verify --json printed %q: %v", jsonOut, err)
	}
	for _, o := range []string{out, stderr, jsonOut} {
		if strings.ContainsAny(o, "\x1b\x07\r") {
			t.Errorf("verify printed a raw control character:\n%q", o)
		}
	}
	return out, code
}

// retriedRequest writes "r1": attempt 1 closed not_dispatched, attempt 2
// dispatched and completed, with an unsigned manifest.
func retriedRequest(w *layoutWriter) {
	w.claim("r1", 2, "rule_v1", "rule_v2")
	w.dispatch("r1", 1, evidence.ArtifactDispatch, evidence.NotDispatched, "r1")
	w.dispatch("r1", 2, evidence.ArtifactDispatch, evidence.Dispatched, "r1")
	w.finish("r1")
}

// TestHostileAttemptKeys: files planted under "attempts/" in a name the
// gateway never writes must not count as an attempt, nor pass unnoticed.
func TestHostileAttemptKeys(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, key string }{
		{"a zero-padded attempt number", "attempts/02/dispatch.json"},
		{"an attempt numbered 1, which lives in the request's folder", "attempts/1/dispatch.json"},
		{"an attempt numbered 0", "attempts/0/dispatch.json"},
		{"a signed attempt number", "attempts/+3/dispatch.json"},
		{"an attempt number past int64", "attempts/99999999999999999999/dispatch.json"},
		{"a nested folder inside an attempt", "attempts/3/x/dispatch.json"},
		{"a result inside an attempt's folder", "attempts/2/tool_result.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			w := newLayoutWriter(t, dir)
			w.claim("r1", 1, "rule_v1")
			w.dispatch("r1", 1, evidence.ArtifactDispatch, evidence.NotDispatched, "r1")
			w.putRaw("r1", tt.key, []byte(`{"request_id":"r1","attempt":2,"state":"dispatched"}`))
			out, code := hostileVerify(t, dir, "r1")
			if code != exitFailure || !strings.HasPrefix(out, "mismatch r1: TAMPERED\n") ||
				!strings.Contains(out, "requests/r1/"+tt.key+": not an attempt's artifact") {
				t.Fatalf("exit %d, output:\n%s", code, out)
			}
		})
	}
}

// TestHostileDispatchRecords: dispatch records rewritten, copied from
// elsewhere or added to make a request's runs look other than they were.
func TestHostileDispatchRecords(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	record := func(id string, attempt int, state string) []byte {
		data, err := json.Marshal(evidence.DispatchRecord{RequestID: id, Attempt: attempt, State: state, Gateway: "g", At: at})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	tests := []struct {
		name        string
		setup       func(w *layoutWriter)
		wantProblem string
	}{
		{"a not_dispatched record copied from another request", func(w *layoutWriter) {
			w.claim("r1", 1, "rule_v1")
			w.putRaw("r1", evidence.ArtifactDispatch, record("r2", 1, evidence.NotDispatched))
		}, `requests/r1/dispatch.json: evidence: dispatch record: request_id is "r2", want "r1"`},
		{"a not_dispatched record copied from another attempt", func(w *layoutWriter) {
			w.claim("r1", 2, "rule_v1", "rule_v2")
			w.dispatch("r1", 1, evidence.ArtifactDispatch, evidence.NotDispatched, "r1")
			w.putRaw("r1", "attempts/2/dispatch.json", record("r1", 1, evidence.NotDispatched))
		}, "requests/r1/attempts/2/dispatch.json: evidence: dispatch record: attempt is 1, want 2"},
		{"a dispatch record in a state of its own", func(w *layoutWriter) {
			w.claim("r1", 1, "rule_v1")
			w.putRaw("r1", evidence.ArtifactDispatch, record("r1", 1, "skipped"))
		}, `requests/r1/dispatch.json: evidence: dispatch record: state "skipped"`},
		{"a dispatch record that is not JSON", func(w *layoutWriter) {
			w.claim("r1", 1, "rule_v1")
			w.putRaw("r1", evidence.ArtifactDispatch, []byte("\x1b[2Jnot_dispatched"))
		}, "requests/r1/dispatch.json: evidence: dispatch record: invalid character"},
		{"a closing record that says dispatched", func(w *layoutWriter) {
			w.claim("r1", 1, "rule_v1")
			w.dispatch("r1", 1, evidence.ArtifactDispatch, evidence.Dispatched, "r1")
			w.putRaw("r1", evidence.ArtifactNotDispatched, record("r1", 1, evidence.Dispatched))
		}, `requests/r1/not_dispatched.json: state is "dispatched"`},
		{"a closing record added to a request that ran and completed", func(w *layoutWriter) {
			retriedRequest(w)
			w.putRaw("r1", "attempts/2/not_dispatched.json", record("r1", 2, evidence.NotDispatched))
		}, "requests/r1/attempts/2/not_dispatched.json: present but not listed in the manifest"},
		{"a second attempt opened after the first was dispatched", func(w *layoutWriter) {
			w.claim("r1", 2, "rule_v1", "rule_v2")
			w.dispatch("r1", 1, evidence.ArtifactDispatch, evidence.Dispatched, "r1")
			w.dispatch("r1", 2, evidence.ArtifactDispatch, evidence.Dispatched, "r1")
		}, "requests/r1/attempts/2/: attempt 2 opened while attempt 1 is dispatched, not not_dispatched"},
		{"an attempt whose predecessor was removed", func(w *layoutWriter) {
			w.claim("r1", 1, "rule_v1")
			w.dispatch("r1", 1, evidence.ArtifactDispatch, evidence.NotDispatched, "r1")
			w.dispatch("r1", 3, evidence.ArtifactDispatch, evidence.NotDispatched, "r1")
		}, "requests/r1/attempts/3/: attempt 3 without attempt 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(newLayoutWriter(t, dir))
			out, code := hostileVerify(t, dir, "r1")
			if code != exitFailure || !strings.HasPrefix(out, "mismatch r1: TAMPERED\n") || !strings.Contains(out, tt.wantProblem) {
				t.Fatalf("exit %d, output:\n%s\nwant a mismatch naming %q", code, out, tt.wantProblem)
			}
		})
	}
}

// TestHostileAttemptReason: the free-text reason of a not_dispatched
// record is printed by verify; escape sequences in it must not reach the
// terminal.
func TestHostileAttemptReason(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := newLayoutWriter(t, dir)
	w.claim("r1", 1, "rule_v1")
	w.put("r1", evidence.ArtifactDispatch, evidence.DispatchRecord{RequestID: "r1", Attempt: 1, State: evidence.NotDispatched,
		Reason: "\x1b]0;owned\x07\x1b[2J\rrefused\nok r1: artifacts match", Gateway: "g"})
	out, code := hostileVerify(t, dir, "r1")
	want := "not-dispatched r1: nothing ran, every attempt was closed not_dispatched; a retry with the same request id may still run it\n" +
		`  attempts: 1 not_dispatched ("\x1b]0;owned\a\x1b[2J\rrefused\nok r1: artifacts match")` + "\n"
	if code != exitOK || out != want {
		t.Fatalf("exit %d, output:\n%q\nwant\n%q", code, out, want)
	}
}
