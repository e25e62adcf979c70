package execbox

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/driverstest"
	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
)

// TestConformance runs the driver conformance kit against the execbox
// driver and the scripted fake runner, over WebSocket. The fake plays a
// script chosen by the guest code it receives: "echo:" hands the rest
// back as the result, "sleep" runs until cancelled, "fail" throws, and
// "hostile:<name>" sends that hostile output.
func TestConformance(t *testing.T) {
	t.Parallel()
	hostile := map[string]execboxtest.Script{
		"garbage":         {execboxtest.Started(), execboxtest.Raw("\x00\xff\xfe{not json")},
		"oversized":       {execboxtest.Started(), execboxtest.Oversized(20 << 20)},
		"deep nesting":    {execboxtest.Started(), execboxtest.Raw(`{"type":"done","ok":true,"result":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`)},
		"log flood":       {execboxtest.Started(), execboxtest.Repeat(5000, execboxtest.Log("\x1b]0;pwned\x07\x1b[2J\xff line"))},
		"crash":           {execboxtest.Started(), execboxtest.Crash()},
		"undefined":       {execboxtest.Started(), execboxtest.DoneUndefined()},
		"unknown code":    {execboxtest.Started(), execboxtest.Fail("\x1b[31mnot_a_code", strings.Repeat("m", 1<<20))},
		"hang past grace": {execboxtest.Started(), execboxtest.Hang()},
	}
	newSubject := func(t *testing.T) driverstest.Subject {
		var begun atomic.Int64
		url := execboxtest.ServeWS(t, func(s *execboxtest.Session) {
			code, _ := s.Execute()["code"].(string)
			switch {
			case strings.HasPrefix(code, "echo:"):
				execboxtest.Script{execboxtest.Started(), execboxtest.Done(strings.TrimPrefix(code, "echo:"))}.Play(s)
			case code == "sleep":
				begun.Add(1)
				execboxtest.Script{execboxtest.Started(), execboxtest.Sleep(time.Hour)}.Play(s)
			case code == "fail":
				execboxtest.Script{execboxtest.Started(), execboxtest.Fail("runtime_error", "guest code threw")}.Play(s)
			default:
				hostile[strings.TrimPrefix(code, "hostile:")].Play(s)
			}
		})
		return driverstest.Subject{Driver: newDriver(t, Config{URL: url, CancelGrace: time.Second}), Begun: func() int { return int(begun.Load()) }}
	}
	run := func(code string) drivers.Call { return newCall(nil, map[string]any{"code": code}) }
	var cases []driverstest.Hostile
	for name := range hostile {
		cases = append(cases, driverstest.Hostile{Name: name, New: newSubject, Call: run("hostile:" + name)})
	}
	driverstest.Run(t, driverstest.Suite{
		New:  newSubject,
		Echo: func(v string) drivers.Call { return run("echo:" + v) },
		Echoed: func(res drivers.Result) (string, bool) {
			v, ok := res.Data.(string)
			return v, ok
		},
		Slow:    run("sleep"),
		Failing: run("fail"),
		Unreachable: func(t *testing.T) driverstest.Subject {
			// A port that was just free: nothing listens on it.
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close()
			return driverstest.Subject{Driver: newDriver(t, Config{URL: "ws://" + addr})}
		},
		Hostile: cases,
	})
}
