package tpmjs

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/driverstest"
	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
)

// TestConformance runs the driver conformance kit against the TPMJS
// driver and each executor the fake imitates, quirks included. The driver
// keeps its own deadline once a call is sent (see "Time limits" in the
// package documentation); a short CallTimeout keeps that bound short.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, p := range []tpmjstest.Personality{tpmjstest.NodeV10, tpmjstest.DenoV11, tpmjstest.DenoVercel} {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			driverstest.Run(t, conformanceSuite(p))
		})
	}
}

func conformanceSuite(p tpmjstest.Personality) driverstest.Suite {
	shortLimit := func(c *Config) { c.CallTimeout = 2 * time.Second }
	start := func(t *testing.T) (*tpmjstest.Executor, driverstest.Subject) {
		fake := tpmjstest.New(t, p)
		begun := func() int {
			n := 0
			for _, r := range fake.Requests() {
				if strings.HasSuffix(r.Path, "/execute-tool") {
					n++
				}
			}
			return n
		}
		return fake, driverstest.Subject{Driver: newDriver(t, fake.URL, shortLimit), Begun: begun}
	}
	newSubject := func(t *testing.T) driverstest.Subject {
		_, s := start(t)
		return s
	}
	// answering is a fake whose every execution is answered with body.
	answering := func(name, body string, status int) driverstest.Hostile {
		return driverstest.Hostile{Name: name, Call: call(tpmjstest.EchoTool, nil), New: func(t *testing.T) driverstest.Subject {
			fake, s := start(t)
			fake.SetBody(body, status)
			return s
		}}
	}
	unknown := call("noSuchTool", nil)
	return driverstest.Suite{
		New:  newSubject,
		Echo: func(v string) drivers.Call { return call(tpmjstest.EchoTool, map[string]any{"value": v}) },
		Echoed: func(res drivers.Result) (string, bool) {
			data, _ := res.Data.(map[string]any)
			params, _ := data["params"].(map[string]any)
			v, ok := params["value"].(string)
			return v, ok
		},
		Slow:        call(tpmjstest.SleepTool, map[string]any{"ms": 600000}),
		Failing:     call(tpmjstest.FailTool, map[string]any{"message": "bad input"}),
		Unknown:     &unknown,
		OwnDeadline: true,
		Unreachable: func(t *testing.T) driverstest.Subject {
			srv := httptest.NewServer(nil)
			srv.Close()
			return driverstest.Subject{Driver: newDriver(t, srv.URL, shortLimit)}
		},
		Hostile: []driverstest.Hostile{
			answering("garbage", "\x00\xff\xfe{not json", 200),
			answering("an HTML error page with terminal escapes", "<html>\x1b]0;pwned\x07\x1b[2J502 Bad Gateway</html>", 502),
			answering("deep nesting", `{"success":true,"output":`+strings.Repeat("[", 100000)+strings.Repeat("]", 100000)+`}`, 200),
			answering("a body past the limit", `{"success":true,"output":"`+strings.Repeat("a", 11<<20)+`"}`, 200),
			answering("invalid UTF-8 in a string", "{\"success\":true,\"output\":\"\xff\xfe\\u0000\"}", 200),
			answering("a huge number", `{"success":true,"output":1`+strings.Repeat("0", 100000)+`}`, 200),
			answering("an error object of the wrong type", `{"success":false,"error":[1,{"code":{}}],"executionTimeMs":"x"}`, 200),
		},
	}
}
