package tpmjs

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzParseResponse(f *testing.F) {
	for _, seed := range []struct {
		status int
		body   string
	}{
		{200, `{"success":true,"output":{"message":"hi"},"executionTimeMs":12}`},
		{200, `{"success":true,"output":{"error":true,"message":"caught"}}`},
		{200, `{"success":false,"error":{"code":"TOOL_EXECUTION_ERROR","message":"Script exited with code null"},"executionTimeMs":1}`},
		{401, `{"success":false,"error":{"code":"UNAUTHORIZED","message":"Invalid or missing API key"}}`},
		{500, `{"success":false,"error":"x","errorStage":"load","errorCode":"PACKAGE_IMPORT_FAILED","retryable":true,"executionTimeMs":0}`},
		{404, `{"error":"Not found"}`},
		{502, "<html><body>Bad Gateway</body></html>"},
		{200, `{"success":true,"output":{"a":`},
		{200, "{\"success\":false,\"error\":\"\xff\x00\",\"errorCode\":\"\u2028\"}"},
		{200, `{"success":true,"output":1e999999}`},
		{200, ""},
		{404, `{"success":false,"error":"Export \"x\" not found in module","availableExports":[],"executionTimeMs":3}`},
		{400, `{"success":false,"error":"Tool \"x\" is a factory function but couldn't be initialized"}`},
		{500, `{"success":false,"error":"Import 'https://esm.sh/a@1' failed: 404 Not Found","executionTimeMs":1e400}`},
		{504, "An error occurred with your deployment\n\nFUNCTION_INVOCATION_TIMEOUT\n"},
		{200, `{"success":false,"error":{"code":"PACKAGE_NOT_FOUND","message":"npm install failed: ETIMEDOUT"}}`},
	} {
		f.Add(seed.status, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		status = 100 + (status%500+500)%500
		r, facts := parseAnswer(status, body)
		if len(facts.executionTimeMs) > maxNumberLen {
			t.Fatalf("executionTimeMs of %d characters kept", len(facts.executionTimeMs))
		}
		switch r.ExitCode {
		case 0:
			if r.Stderr != "" {
				t.Fatalf("success with stderr %q", r.Stderr)
			}
		case ExitToolFailed, ExitInvalidRequest, ExitNotFound, ExitUnauthorized, ExitExecutorError, ExitTimeout:
			code, _, ok := strings.Cut(r.Stderr, ": ")
			if !ok || code == "" || cleanCode(code) != code {
				t.Fatalf("failure stderr %q does not start with a clean CODE: ", r.Stderr)
			}
		default:
			t.Fatalf("exit code %d is not one of the documented classes", r.ExitCode)
		}
		if !utf8.ValidString(r.Stdout) || !utf8.ValidString(r.Stderr) {
			t.Fatalf("invalid UTF-8 in stdout %q or stderr %q", r.Stdout, r.Stderr)
		}
		if r.Stdout != "" && !json.Valid([]byte(r.Stdout)) {
			t.Fatalf("stdout %q is not JSON text", r.Stdout)
		}
		if r.Data != nil {
			if _, err := json.Marshal(r.Data); err != nil {
				t.Fatalf("data %#v cannot be encoded: %v", r.Data, err)
			}
			if r.Stdout == "" {
				t.Fatalf("data %#v without stdout", r.Data)
			}
		}
		if len(r.Stderr) > maxStderrMessage+1024 {
			t.Fatalf("stderr of %d bytes", len(r.Stderr))
		}
	})
}

func FuzzValidateVersion(f *testing.F) {
	for _, seed := range []string{
		"1.2.3", "^1.2.0", "~1.2", ">=1.0.0 <2.0.0", "1.x || 2.x", "*", "latest", "next", "beta.1",
		"1.2.3-rc.1+b.2", "v1.2.3", "1.0.0; rm -rf /", "$(id)", "`id`", "latest && curl x",
		"1.0.0 2.0.0", "1.2.3 - 2.3.4", "1.x |||2", "<1 >", "1.0.0\n", " 1", "x || *",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidateVersion(s) != nil {
			return
		}
		if s == "" || len(s) > maxVersionLen {
			t.Fatalf("accepted %q of length %d", s, len(s))
		}
		// Everything a shell treats as other than a literal character of
		// the word: metacharacters, quotes, expansions, globs, spaces.
		if strings.ContainsAny(s, "$`;&()'\"\\\n\r\t\x00{}[]#!?/:@,<>| *") {
			t.Fatalf("accepted %q, which holds a shell metacharacter", s)
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(".-+_=~^", c) >= 0) {
				t.Fatalf("accepted %q with byte %q outside the safe set", s, c)
			}
		}
		if strings.HasPrefix(s, "-") {
			t.Fatalf("accepted %q, which reads as an option", s)
		}
	})
}

func FuzzValidatePackageName(f *testing.F) {
	for _, seed := range []string{
		"lodash", "@tpmjs/web-search", "@a/b", "../x", "-rf", "Lodash", "a;b", "@scope", "@/x", "a/b",
		"node_modules", ".x", "_x", "a b", strings.Repeat("a", 215),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidatePackageName(s) != nil {
			return
		}
		if s == "" || len(s) > maxPackageNameLen {
			t.Fatalf("accepted %q of length %d", s, len(s))
		}
		name := s
		if strings.HasPrefix(s, "@") {
			scope, rest, ok := strings.Cut(s[1:], "/")
			if !ok || scope == "" {
				t.Fatalf("accepted scoped %q without a scope", s)
			}
			checkAcceptedPart(t, s, scope)
			name = rest
		}
		checkAcceptedPart(t, s, name)
	})
}

// checkAcceptedPart asserts the invariants of one accepted part of a
// package name.
func checkAcceptedPart(t *testing.T, full, part string) {
	t.Helper()
	if part == "" || strings.ContainsAny(part[:1], "._-") {
		t.Fatalf("accepted %q with part %q empty or starting with a separator", full, part)
	}
	for i := 0; i < len(part); i++ {
		c := part[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			t.Fatalf("accepted %q with byte %q", full, c)
		}
	}
}

func FuzzValidateExportName(f *testing.F) {
	for _, seed := range []string{"helloWorldTool", "$x", "_", "1a", "class", "a-b", "${x}", "__proto__", "ünïcode"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidateExportName(s) != nil {
			return
		}
		if s == "" || len(s) > maxExportNameLen || reservedWord(s) || ('0' <= s[0] && s[0] <= '9') {
			t.Fatalf("accepted %q", s)
		}
		for i := 0; i < len(s); i++ {
			c := s[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '$') {
				t.Fatalf("accepted %q with byte %q", s, c)
			}
		}
	})
}

func FuzzProbeBody(f *testing.F) {
	for _, seed := range []string{
		`{"status":"ok","protocolVersion":"1.0","implementationVersion":"1.0.0","runtime":"node"}`,
		`{"status":"ok","protocolVersion":"1.1","implementationVersion":"development","denoVersion":"2.1.4"}`,
		`{"name":"Railway Executor","version":"1.0.0","capabilities":{"maxExecutionTimeMs":120000}}`,
		`{"name":"\u0000 a\tb/../","version":"1 2","capabilities":{"maxExecutionTimeMs":-5}}`,
		`{"capabilities":{"maxExecutionTimeMs":1e300}}`,
		`<html>`, `{"name":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if engine, protocol, ok := engineFromHealth(body); ok {
			checkEngine(t, engine)
			if len(protocol) > 16 || strings.ContainsAny(protocol, " \t\r\n\"/\\") {
				t.Errorf("protocol version %q is not a short version", protocol)
			}
		}
		engine, maxExec, ok := parseInfo(body)
		if !ok {
			return
		}
		if engine != "" {
			checkEngine(t, engine)
		}
		if maxExec < 0 || maxExec > maxAdvertised {
			t.Fatalf("advertised maximum %v out of range", maxExec)
		}
	})
}

// checkEngine asserts that an engine name is short and plain.
func checkEngine(t *testing.T, engine string) {
	t.Helper()
	if !strings.HasPrefix(engine, enginePrefix) || len(engine) > len(enginePrefix)+maxEngineName+1+maxEngineVer {
		t.Fatalf("engine %q has the wrong form or length", engine)
	}
	for _, c := range engine {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.ContainsRune(".+-:/", c)) {
			t.Fatalf("engine %q holds %q", engine, c)
		}
	}
}
