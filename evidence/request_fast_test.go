package evidence

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence/trust"
)

// fastRequestSeeds are request records as a gateway writes them (compact,
// indented, sealed), and the ways a hostile store could bend them.
func fastRequestSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	r := RequestRecord{RequestID: "r1", Caller: "agent-é", ToolID: "workspace.readFile",
		Args:       json.RawMessage(`{"path":"notes.txt","n":-1.5e3,"deep":[{"a":[true,false,null]},{}],"tag":"café"}`),
		Ctx:        RequestContext{RunID: "run", StepID: "s1", PolicyRef: "main"},
		ReceivedAt: time.Date(2026, 11, 1, 12, 0, 0, 123456789, time.UTC), CanonicalRequestHash: "sha256:" + strings.Repeat("ab", 32),
		Gateway: "toolgate/0.1.0@a", ParentRequestID: "p0", TraceID: strings.Repeat("0f", 16)}
	compact, indented, sealed := gatewayForms(tb, Key("r1", ArtifactRequest), r)
	c := string(compact)
	seeds := [][]byte{compact, indented, sealed, []byte(`{}`), []byte(`{"args":{}}`), []byte(`null`), []byte(``)}
	for _, edit := range [][2]string{
		{`"path":"notes.txt"`, `"path":"notes.txt","PATH":"x"`},
		{`"path":"notes.txt"`, `"path":"notes.txt","path":"x"`},
		{`"path":"notes.txt"`, `"path":"n\u006ftes"`},
		{`"path":"notes.txt"`, `"path":"notes\xff"`},
		{`"path":"notes.txt"`, `"K":"x","k":"y"`},
		{`-1.5e3`, `-01`},
		{`-1.5e3`, `1.`},
		{`-1.5e3`, `.5`},
		{`-1.5e3`, `1e`},
		{`-1.5e3`, `1e+`},
		{`-1.5e3`, `+1`},
		{`-1.5e3`, `0x10`},
		{`-1.5e3`, `1E-0`},
		{`-1.5e3`, `NaN`},
		{`true`, `tru`},
		{`true`, `truex`},
		{`null]`, `nul]`},
		{`[true`, `[ true`},
		{`{}]`, `{},]`},
		{`"args":{`, `"args":null,"a":{`},
		{`"ctx":{`, `"auth":{"method":"oauth"},"ctx":{`},
		{`"run_id":"run"`, `"Run_ID":"run"`},
		{`"run_id":"run"`, `"run_id":"run","extra":1`},
		{`"received_at":"2026`, `"received_at":"x2026`},
		{`}`, `} `},
		{`}`, `}}`},
	} {
		if strings.Contains(c, edit[0]) {
			seeds = append(seeds, []byte(strings.Replace(c, edit[0], edit[1], 1)))
		}
	}
	deep := `{"args":` + strings.Repeat(`[`, 40) + strings.Repeat(`]`, 40) + `}`
	return append(seeds, []byte(c+"x"), []byte(c[:len(c)-1]), []byte(" \n"+c+"\t\r\n"), []byte(deep))
}

// FuzzRequestFastDecode checks DecodeRequestRecord against the strict
// decode on whatever a store holds: the same refusals, the same record,
// and whatever the fast path accepts, the strict decode reads the same
// way, arguments byte for byte.
func FuzzRequestFastDecode(f *testing.F) {
	for _, seed := range fastRequestSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want RequestRecord
		wantErr := decodeStrict(data, &want)
		got, gotErr := DecodeRequestRecord(data)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("DecodeRequestRecord(%q): error %v, the strict decode's %v", data, gotErr, wantErr)
		}
		if gotErr == nil && !sameRequest(got, want) {
			t.Fatalf("DecodeRequestRecord(%q) = %+v, the strict decode reads %+v", data, got, want)
		}
		body, _, _ := trust.Split(data)
		fast, ok := decodeRequestFast(body)
		if !ok {
			return
		}
		if wantErr != nil {
			t.Fatalf("the fast path accepts %q, which the strict decode refuses: %v", data, wantErr)
		}
		if !sameRequest(fast, want) {
			t.Fatalf("the fast path reads %q as %+v, the strict decode as %+v", data, fast, want)
		}
	})
}

func sameRequest(a, b RequestRecord) bool {
	return sameRecord(a, b, func(r *RequestRecord) *time.Time { return &r.ReceivedAt })
}
