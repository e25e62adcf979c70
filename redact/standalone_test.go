package redact

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestStandaloneReplacesTheValueOnlyWhereItStandsAlone(t *testing.T) {
	t.Parallel()
	const v = "s3cr3tV4lue"
	r := newRedactor(t, Config{FingerprintKey: []byte("k")}).Standalone(v)
	const m = "[REDACTED:caller-secret]"
	cases := []struct{ name, in, want string }{
		{"an env dump line", "TOKEN=" + v + "\n", "TOKEN=" + m + "\n"},
		{"in quotes", `got "` + v + `"`, `got "` + m + `"`},
		{"at the end of a sentence", "the value is " + v + ".", "the value is " + m + "."},
		{"the whole text", v, m},
		{"as a URL host", "https://" + v + ":8443/x", "https://" + m + ":8443/x"},
		{"after a dash that follows a space", "flag -" + v, "flag -" + m},
		{"hex of the value", "hex " + hex.EncodeToString([]byte(v)), "hex " + m},
		{"upper-case hex of the value", strings.ToUpper(hex.EncodeToString([]byte(v))), m},
		{"base64 of the value", "b64 " + base64.StdEncoding.EncodeToString([]byte(v)), "b64 " + m},
		{"base64 of the value and a newline (echo | base64)", base64.StdEncoding.EncodeToString([]byte(v + "\n")), m},
		{"percent-encoded with every byte", "q=%73%33%63%72%33%74%56%34%6c%75%65", "q=" + m},
		{"kept inside a longer word", "x" + v + "y", "x" + v + "y"},
		{"kept before an underscore", v + "_1", v + "_1"},
		{"kept as the end of a host name", "api." + v, "api." + v},
		{"kept as the last segment of a path", "path/" + v, "path/" + v},
		{"kept before a dash and more", v + "-2", v + "-2"},
		{"kept next to a non-ASCII letter", "é" + v, "é" + v},
		{"kept inside longer base64", "QUFB" + base64.StdEncoding.EncodeToString([]byte(v)), "QUFB" + base64.StdEncoding.EncodeToString([]byte(v))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, findings := r.String(tc.in)
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if (got != tc.in) != (len(findings) > 0) {
				t.Fatalf("findings %v do not match the change", findings)
			}
			for _, f := range findings {
				if f.Rule != RuleCallerSecret || f.Fingerprint == "" {
					t.Errorf("finding %+v: want rule %s with a fingerprint", f, RuleCallerSecret)
				}
			}
		})
	}
}

func TestStandaloneAppliesNoRuleKeyNameOrStructure(t *testing.T) {
	t.Parallel()
	base := newRedactor(t, Config{KnownSecrets: []string{"configured-secret-1"}})
	r := base.Standalone("callers-own-value")
	text := "clone with " + fakeGitHubPAT + " and configured-secret-1"
	if got, findings := r.String(text); got != text || len(findings) != 0 {
		t.Errorf("a standalone redactor changed text without its value: %q", got)
	}
	doc := `{"password": "hunter2-hunter2", "kind": "Secret", "data": {"a": "b"}, "stdout": "callers-own-value\n"}`
	out, findings, err := r.JSON("tool_result.json", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"password": "hunter2-hunter2", "kind": "Secret", "data": {"a": "b"}, "stdout": "[REDACTED:caller-secret]\n"}`
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	if len(findings) != 1 || findings[0].Path != "$.stdout" {
		t.Errorf("findings %+v, want one at $.stdout", findings)
	}
}

func TestCheckCallerSecret(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, value string
		also        []string
		ok          bool
	}{
		{"a long random value", "q8Zr-27vkP0x", nil, true},
		{"seven bytes", "abcdefg", nil, false},
		{"allow", "allow", nil, false},
		{"a common word in capitals", "LOCALHOST", nil, false},
		{"a well-known password", "Password123", nil, false},
		{"a driver operation", "workspace.readFile", nil, false},
		{"a name the gateway adds", "fake.echo-tool", []string{"fake.echo-tool"}, false},
		{"a name the gateway adds, other case", "FAKE.ECHO-TOOL", []string{"fake.echo-tool"}, false},
		{"a name the gateway adds, reversed", "loot-ohce.ekaf", []string{"fake.echo-tool"}, false},
		// Runs of 12 bytes of a 20-byte value are redacted: a value holding the request id
		// would erase it from the output.
		{"a name the gateway adds, inside", "xx" + "req-0123456789" + "yyyy", []string{"req-0123456789"}, false},
		{"a common word, inside", "Zq" + "application/json" + "Zq", nil, false},
		{"a name shorter than a redacted run, inside", "q8Zr27vkP0x" + "tool-a" + "q8Zr27vkP0", []string{"tool-a"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckCallerSecret(tc.value, tc.also...)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckCallerSecret(%q) = %v, want ok=%v", tc.value, err, tc.ok)
			}
			if err != nil && (!errors.Is(err, ErrWeakCallerSecret) || strings.Contains(err.Error(), tc.value)) {
				t.Errorf("error %q: want ErrWeakCallerSecret, never the value", err)
			}
		})
	}
}
