package redact

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestJSONFormat(t *testing.T) {
	r := mustNew(t, Config{})
	in := `{"z":1,"a":{"y":[true,null,"<b>&amp;</b>"],"b":{}},"m":[],"n":"caf\u00e9 \u2603"}`
	want := `{
  "a": {
    "b": {},
    "y": [
      true,
      null,
      "<b>&amp;</b>"
    ]
  },
  "m": [],
  "n": "café ☃",
  "z": 1
}
`
	got, findings, err := r.JSON("request.json", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
	if len(findings) != 0 {
		t.Errorf("findings = %+v, want none", findings)
	}
}

func TestJSONNumbersPreserved(t *testing.T) {
	r := mustNew(t, Config{})
	tests := []struct {
		name, in, want string
	}{
		{"beyond uint64", `12345678901234567890`, "12345678901234567890\n"},
		{"huge exponent", `1.5e300`, "1.5e300\n"},
		{"negative zero", `-0.0`, "-0.0\n"},
		{"upper-case exponent", `[1E-7, 0.10, -3]`, "[\n  1E-7,\n  0.10,\n  -3\n]\n"},
		{"in an object", `{"n": 100000000000000000000000000001}`, "{\n  \"n\": 100000000000000000000000000001\n}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := r.JSON("x.json", []byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestJSONSecretKeyNames(t *testing.T) {
	r := mustNew(t, Config{KeyNames: []string{"X-Vault-Ref"}})
	tests := []struct {
		key    string
		secret bool
	}{
		{"password", true},
		{"DB_PASSWORD", true},
		{"passwd", true},
		{"githubToken", true},
		{"access_token", true},
		{"set-cookie", true},
		{"x-api-key", true},
		{"Authorization", true},
		{"client.secret", true},
		{"Private Key", true},
		{"sessionId", true},
		{"aws_secret_access_key", true},
		{"credentials", true},
		{"vault_x_vault_ref", true},
		{"PASSWÖRD_password", true},
		{"max_tokens", false},
		{"tokens_used", false},
		{"token_count", false},
		{"secret_name", false},
		{"password_policy", false},
		{"author", false},
		{"key", false},
		{"username", false},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			doc, _ := json.Marshal(map[string]any{tt.key: "v4lue"})
			got, findings, err := r.JSON("request.json", doc)
			if err != nil {
				t.Fatal(err)
			}
			var out map[string]string
			if err := json.Unmarshal(got, &out); err != nil {
				t.Fatal(err)
			}
			redacted := out[tt.key] == "[REDACTED:secret-key-name]"
			if redacted != tt.secret {
				t.Errorf("key %q: value became %q, want redacted=%v", tt.key, out[tt.key], tt.secret)
			}
			if tt.secret && (len(findings) != 1 || findings[0].Rule != "secret-key-name" || findings[0].Offset != 0) {
				t.Errorf("findings = %+v, want one secret-key-name at offset 0", findings)
			}
		})
	}
}

func TestJSONSecretKeyValues(t *testing.T) {
	r := mustNew(t, Config{})
	in := `{
		"password": "hunter2",
		"api_key": 123456789,
		"token": true,
		"secret": null,
		"cookie": "",
		"credentials": {"user": "bob", "pin": 1234, "ok": false, "list": ["a", "", 7]},
		"tokens": ["kept", 1],
		"max_tokens": 4096
	}`
	want := `{
  "api_key": "[REDACTED:secret-key-name]",
  "cookie": "",
  "credentials": {
    "list": [
      "[REDACTED:secret-key-name]",
      "",
      "[REDACTED:secret-key-name]"
    ],
    "ok": false,
    "pin": "[REDACTED:secret-key-name]",
    "user": "[REDACTED:secret-key-name]"
  },
  "max_tokens": 4096,
  "password": "[REDACTED:secret-key-name]",
  "secret": null,
  "token": true,
  "tokens": [
    "kept",
    1
  ]
}
`
	got, findings, err := r.JSON("request.json", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
	var paths []string
	for _, f := range findings {
		paths = append(paths, f.Path)
	}
	wantPaths := []string{"$.api_key", "$.credentials.list[0]", "$.credentials.list[2]", "$.credentials.pin", "$.credentials.user", "$.password"}
	if !slices.Equal(paths, wantPaths) {
		t.Errorf("finding paths = %q, want %q", paths, wantPaths)
	}
}

func TestJSONPathsAndFindings(t *testing.T) {
	r := mustNew(t, Config{KnownSecrets: []string{"s3cr3t-known-value"}})
	in := `{
		"args": {"env": {"TOKEN": "x", "HOME": "/root"}, "cmd": "curl -H 'Authorization: Bearer ` + fakeOpaque + `' https://u:` + fakeURLPassword + `@h"},
		"items": ["a", "b", "c", "key=s3cr3t-known-value"],
		"a b": "` + fakeGitHub + `",
		"top": {"key.with.dots": ["` + fakeJWT + `"]}
	}`
	_, findings, err := r.JSON("tool_result.json", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	cmd := "curl -H 'Authorization: Bearer " + fakeOpaque + "' https://u:" + fakeURLPassword + "@h"
	want := []Finding{
		{Rule: "bearer-credential", Artifact: "tool_result.json", Path: `$.args.cmd`, Offset: strings.Index(cmd, fakeOpaque)},
		{Rule: "url-password", Artifact: "tool_result.json", Path: `$.args.cmd`, Offset: strings.Index(cmd, fakeURLPassword)},
		{Rule: "secret-key-name", Artifact: "tool_result.json", Path: `$.args.env.TOKEN`, Offset: 0},
		{Rule: "known-secret", Artifact: "tool_result.json", Path: `$.items[3]`, Offset: 4},
		{Rule: "jwt", Artifact: "tool_result.json", Path: `$.top["key.with.dots"][0]`, Offset: 0},
		// "$[" sorts after "$.": paths compare as plain strings.
		{Rule: "github-token", Artifact: "tool_result.json", Path: `$["a b"]`, Offset: 0},
	}
	if !slices.Equal(findings, want) {
		t.Errorf("findings:\n got %+v\nwant %+v", findings, want)
	}
}

func TestJSONKeys(t *testing.T) {
	r := mustNew(t, Config{KnownSecrets: []string{"alpha-secret-1", "beta-secret-2"}})
	tests := []struct {
		name     string
		in       string
		want     map[string]any
		findings []Finding
	}{
		{
			name: "known secret in a key",
			in:   `{"user alpha-secret-1": {"beta-secret-2": "v"}}`,
			want: map[string]any{"user [REDACTED:known-secret]": map[string]any{"[REDACTED:known-secret]": "v"}},
			findings: []Finding{
				{Rule: "known-secret", Artifact: "a.json", Path: `$["user [REDACTED:known-secret]"]`, Offset: 5},
				{Rule: "known-secret", Artifact: "a.json", Path: `$["user [REDACTED:known-secret]"]["[REDACTED:known-secret]"]`, Offset: 0},
			},
		},
		{
			name: "pattern in a key",
			in:   `{"id ` + fakeAWSKeyID + `": 1}`,
			want: map[string]any{"id [REDACTED:aws-access-key-id]": json.Number("1")},
			findings: []Finding{
				{Rule: "aws-access-key-id", Artifact: "a.json", Path: `$["id [REDACTED:aws-access-key-id]"]`, Offset: 3},
			},
		},
		{
			name: "colliding keys get suffixes in sorted order",
			in:   `{"beta-secret-2": 2, "alpha-secret-1": 1, "z": 3}`,
			want: map[string]any{"[REDACTED:known-secret]": json.Number("1"), "[REDACTED:known-secret]#2": json.Number("2"), "z": json.Number("3")},
			findings: []Finding{
				{Rule: "known-secret", Artifact: "a.json", Path: `$["[REDACTED:known-secret]"]`, Offset: 0},
				{Rule: "known-secret", Artifact: "a.json", Path: `$["[REDACTED:known-secret]#2"]`, Offset: 0},
			},
		},
		{
			name: "redacted key collides with a literal key",
			in:   `{"alpha-secret-1": 1, "[REDACTED:known-secret]": 0, "[REDACTED:known-secret]#2": 5}`,
			want: map[string]any{"[REDACTED:known-secret]": json.Number("0"), "[REDACTED:known-secret]#2": json.Number("5"), "[REDACTED:known-secret]#3": json.Number("1")},
			findings: []Finding{
				{Rule: "known-secret", Artifact: "a.json", Path: `$["[REDACTED:known-secret]#3"]`, Offset: 0},
			},
		},
		{
			name: "a secret-named key that is itself a secret",
			in:   `{"alpha-secret-1_token": "v"}`,
			want: map[string]any{"[REDACTED:known-secret]_token": "[REDACTED:secret-key-name]"},
			findings: []Finding{
				{Rule: "known-secret", Artifact: "a.json", Path: `$["[REDACTED:known-secret]_token"]`, Offset: 0},
				{Rule: "secret-key-name", Artifact: "a.json", Path: `$["[REDACTED:known-secret]_token"]`, Offset: 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, findings, err := r.JSON("a.json", []byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			var out any
			dec := json.NewDecoder(bytes.NewReader(got))
			dec.UseNumber()
			if err := dec.Decode(&out); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, got)
			}
			gotJSON, _ := json.Marshal(out)
			wantJSON, _ := json.Marshal(tt.want)
			if !bytes.Equal(gotJSON, wantJSON) {
				t.Errorf("output = %s, want %s", gotJSON, wantJSON)
			}
			if !slices.Equal(findings, tt.findings) {
				t.Errorf("findings:\n got %+v\nwant %+v", findings, tt.findings)
			}
		})
	}
}

func TestJSONKnownSecretInNumber(t *testing.T) {
	r := mustNew(t, Config{KnownSecrets: []string{"424242"}})
	got, findings, err := r.JSON("a.json", []byte(`{"pin": [1424242, 4242, 42.4242]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"pin\": [\n    \"[REDACTED:known-secret]\",\n    4242,\n    42.4242\n  ]\n}\n"
	if string(got) != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if len(findings) != 1 || findings[0].Path != "$.pin[0]" {
		t.Errorf("findings = %+v, want one at $.pin[0]", findings)
	}
}

func TestJSONTopLevelScalar(t *testing.T) {
	r := mustNew(t, Config{})
	got, findings, err := r.JSON("a.json", []byte(` "`+fakeSlack+`" `))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "\"[REDACTED:slack-token]\"\n" {
		t.Errorf("got %q", got)
	}
	if want := []Finding{{Rule: "slack-token", Artifact: "a.json", Path: "$"}}; !slices.Equal(findings, want) {
		t.Errorf("findings = %+v, want %+v", findings, want)
	}
}

func TestJSONDuplicateKeysLastWins(t *testing.T) {
	r := mustNew(t, Config{})
	got, _, err := r.JSON("a.json", []byte(`{"a": 1, "a": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "{\n  \"a\": 2\n}\n" {
		t.Errorf("got %q", got)
	}
}

func TestJSONInvalid(t *testing.T) {
	r := mustNew(t, Config{KnownSecrets: []string{"s3cr3t-known-value"}})
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"whitespace", " \n\t "},
		{"unterminated object", `{"a": 1`},
		{"two values", `{} {}`},
		{"two numbers", `1 2`},
		{"trailing garbage", `{"a":1}x`},
		{"trailing comma", `[1,]`},
		{"single quotes", `{'a': 1}`},
		{"bare word", `nul`},
		{"unterminated string", `"abc`},
		{"leading zero", `01`},
		{"secret at the error", `{"k": s3cr3t-known-value}`},
		{"truncated secret", `{"password": "s3cr3t-known-value`},
		{"secret after the value", `{} s3cr3t-known-value`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, findings, err := r.JSON("request.json", []byte(tt.in))
			if err == nil {
				t.Fatalf("JSON(%q) accepted invalid input, output %q", tt.in, out)
			}
			if out != nil || findings != nil {
				t.Errorf("JSON(%q) returned partial output %q, findings %+v", tt.in, out, findings)
			}
			if msg := err.Error(); strings.Contains(msg, "s3cr3t") || !strings.Contains(msg, "request.json") {
				t.Errorf("error %q: must name the artifact and quote no input", msg)
			}
		})
	}
}

// TestJSONNoSecretLeaks redacts a document carrying one secret of every kind and checks that no
// part of any of them is left in the output or in the findings, and that the output is canonical.
func TestJSONNoSecretLeaks(t *testing.T) {
	secrets := map[string]string{
		"aws-access-key-id":     fakeAWSKeyID,
		"aws-secret-access-key": fakeAWSSecret,
		"github-token":          fakeGitHub,
		"slack-token":           fakeSlack,
		"stripe-key":            fakeStripe,
		"openai-api-key":        fakeOpenAI,
		"anthropic-api-key":     fakeAnthropic,
		"google-api-key":        fakeGoogle,
		"private-key":           fakePrivateKey,
		"jwt":                   fakeJWT,
		"bearer-credential":     fakeOpaque,
		"basic-credential":      fakeBasic,
		"url-password":          fakeURLPassword,
		"known-secret":          "s3cr3t-known-value",
		"secret-key-name":       "hunter2-Kx",
	}
	doc := map[string]any{
		"request_id": "req-1",
		"tool_result": map[string]any{
			"exit_code": 0,
			"stdout": strings.Join([]string{
				"AWS_ACCESS_KEY_ID=" + fakeAWSKeyID,
				"AWS_SECRET_ACCESS_KEY=" + fakeAWSSecret,
				"cloned with " + fakeGitHub,
				"slack " + fakeSlack,
				"stripe " + fakeStripe,
				"openai " + fakeOpenAI,
				"anthropic " + fakeAnthropic,
				"maps " + fakeGoogle,
				fakePrivateKey,
				"Authorization: Bearer " + fakeOpaque,
				"Authorization: Basic " + fakeBasic,
				"db postgres://app:" + fakeURLPassword + "@db/app",
				"id_token " + fakeJWT,
			}, "\n"),
			"data": map[string]any{
				"s3cr3t-known-value": []any{"s3cr3t-known-value", 1.5},
				"db_password":        "hunter2-Kx",
				"max_tokens":         4096,
				"checksum":           plainSHA256,
				"uuid":               plainUUID,
			},
		},
	}
	in, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	r := mustNew(t, Config{KnownSecrets: []string{"s3cr3t-known-value"}})
	out, findings, err := r.JSON("tool_result.json", in)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(out) {
		t.Fatalf("output is not valid JSON:\n%s", out)
	}
	assertCanonical(t, out)

	seen := map[string]bool{}
	for _, f := range findings {
		seen[f.Rule] = true
	}
	for rule, secret := range secrets {
		if !seen[rule] {
			t.Errorf("no %s finding", rule)
		}
		if !bytes.Contains(out, []byte("[REDACTED:"+rule+"]")) {
			t.Errorf("no %s marker in output", rule)
		}
		// Any eight-byte piece of a secret in the output or a finding is a leak.
		for i := 0; i+8 <= len(secret); i++ {
			piece := secret[i : i+8]
			if bytes.Contains(out, []byte(piece)) {
				t.Errorf("output contains %q from the %s secret", piece, rule)
				break
			}
			for _, f := range findings {
				if strings.Contains(f.Path, piece) || strings.Contains(f.Rule, piece) || strings.Contains(f.Artifact, piece) {
					t.Errorf("finding %+v contains part of the %s secret", f, rule)
				}
			}
		}
	}
	for _, plain := range []string{plainSHA256, plainUUID, `"max_tokens": 4096`, "req-1"} {
		if !bytes.Contains(out, []byte(plain)) {
			t.Errorf("output lost %q", plain)
		}
	}
	if !slices.IsSortedFunc(findings, func(a, b Finding) int {
		return cmp.Or(strings.Compare(a.Path, b.Path), cmp.Compare(a.Offset, b.Offset))
	}) {
		t.Errorf("findings not sorted by path and offset: %+v", findings)
	}

	// Map iteration order must not leak into the result.
	for range 5 {
		again, againFindings, err := r.JSON("tool_result.json", in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, out) || !slices.Equal(againFindings, findings) {
			t.Fatal("redacting the same document twice gave different results")
		}
	}
}

// assertCanonical checks that out is exactly what the documented output format produces for its
// own content: sorted keys, two-space indentation, no HTML escaping, numbers as written.
func assertCanonical(t *testing.T, out []byte) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("output does not decode: %v", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), out) {
		t.Errorf("output is not in canonical form:\n%s\nwant:\n%s", out, buf.Bytes())
	}
}
