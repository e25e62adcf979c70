package logredact

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/redact"
)

// TestLogsGoThroughTheRedactor logs, the way the gateway and drivers do,
// values a caller controls that hold a configured secret or a token the
// rules detect: in the message, string attributes, attributes bound with
// With, groups, errors and values that print as text. None reaches the
// log, in text or JSON form, and everything else does.
func TestLogsGoThroughTheRedactor(t *testing.T) {
	t.Parallel()
	const configured = "configured-secret-5d1f09"
	const token = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
	r, err := redact.New(redact.Config{KnownSecrets: []string{configured}})
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			var next slog.Handler = slog.NewTextHandler(&buf, nil)
			if format == "json" {
				next = slog.NewJSONHandler(&buf, nil)
			}
			log := Logger(slog.New(next), r).With("tool_id", "tool-"+configured, "caller", "ci")
			log.WithGroup("call").Info("denied "+token, "rule_id", "default_deny",
				"err", errors.New("driver failed: token "+token),
				"args", []string{"--key", configured},
				slog.Group("ctx", "run_id", token),
				"stringer", fmt.Stringer(testStringer(configured)),
				"exit_code", 3)
			out := buf.String()
			for _, secret := range []string{configured, token} {
				if strings.Contains(out, secret) {
					t.Errorf("the log holds %q:\n%s", secret, out)
				}
			}
			for _, kept := range []string{"default_deny", "ci", "[REDACTED:known-secret]", "[REDACTED:github-pat]", "3"} {
				if !strings.Contains(out, kept) {
					t.Errorf("the log lost %q:\n%s", kept, out)
				}
			}
		})
	}
}

type testStringer string

func (s testStringer) String() string { return "value " + string(s) }
