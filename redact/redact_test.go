package redact

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Fake credentials in real formats, assembled at run time so that no scanner mistakes this file
// for a leak.
var (
	fakeGitHubPAT  = "ghp_" + "R7kQ2mX9vL4pT8wZ1nB6cY3dF5gH0jK2sA4e"
	fakeAWSKeyID   = "AKIA" + "QX4TZ7NB2LW5RM3K"
	fakeSlackBot   = "xoxb-" + "2417639805-4829103746152-Kq8vN3mZ7xR2pL5tW9bY1cD4"
	fakeOpenAI     = "sk-proj-" + "Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5mN7pQ9rS1tU3vW5xY7zA9bC1dE3fG5hJ7kL9mN1pQ3r" + "T3BlbkFJ" + "Xy7wV5uT3sR1qP9oN7mL5kJ3hG1fE9dC7bA5zY3xW1vU9tS7rQ5pO3nM1lK9jH7gF5eD3cB1a"
	fakePGPassword = "Zq7!vR2#mK9x"
	fakeAzureKey   = "Kq8vN3mZ7xR2pL5tW9bY1cD4" + "Zq7vR2mK9xLpq8Zr27vkP0xKq8vN3mZ7xR2pL5tW9bY1cD4Zq7vR2mK9xLpq8Zr27vkP0x/+=="
)

func newRedactor(t testing.TB, cfg Config) *Redactor {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestTextRedactsOnlyTheSecret(t *testing.T) {
	t.Parallel()
	r := newRedactor(t, Config{})
	cases := []struct {
		name, in, want string
	}{
		{"github token in a log line", "cloning with " + fakeGitHubPAT + " done", "cloning with [REDACTED:github-pat] done"},
		{"aws key id in an export", "export AWS_ACCESS_KEY_ID=" + fakeAWSKeyID + "\n", "export AWS_ACCESS_KEY_ID=[REDACTED:aws-access-token]\n"},
		{"slack bot token", "SLACK=" + fakeSlackBot, "SLACK=[REDACTED:slack-bot-token]"},
		{"postgres password only", "postgres://app:" + fakePGPassword + "@db.internal:5432/orders", "postgres://app:[REDACTED:connection-string-password]@db.internal:5432/orders"},
		{"mongodb+srv password", "mongodb+srv://svc:" + fakePGPassword + "@cluster0.ab1cd.mongodb.net/app", "mongodb+srv://svc:[REDACTED:connection-string-password]@cluster0.ab1cd.mongodb.net/app"},
		{"redis password without user", "REDIS_URL=redis://:" + fakePGPassword + "@cache:6379/0", "REDIS_URL=redis://:[REDACTED:connection-string-password]@cache:6379/0"},
		{"amqp password", "amqp://worker:" + fakePGPassword + "@mq:5672/%2f", "amqp://worker:[REDACTED:connection-string-password]@mq:5672/%2f"},
		{"basic-auth URL", "GET https://deploy:" + fakePGPassword + "@registry.example.com/v2/", "GET https://deploy:[REDACTED:url-password]@registry.example.com/v2/"},
		{"URL with a placeholder password stays", "https://user:password@example.com/", "https://user:password@example.com/"},
		{"generic assignment", `api_key = "a8f9d7e6c5b4a3928176"`, `api_key = "[REDACTED:generic-api-key]"`},
		{"storage account key in a connection string", "AzureWebJobsStorage=DefaultEndpointsProtocol=https;AccountName=nw;AccountKey=" + fakeAzureKey + ";EndpointSuffix=core.windows.net",
			"AzureWebJobsStorage=DefaultEndpointsProtocol=https;AccountName=nw;AccountKey=[REDACTED:storage-account-key];EndpointSuffix=core.windows.net"},
		{"shared access signature in a connection string", "BlobEndpoint=https://nw.blob.core.windows.net/;SharedAccessSignature=sv=2022-11-02&ss=b&srt=co&sp=rl&sig=Zq7vR2mK9xLp%2Bq8Zr27vkP0x%3D",
			"BlobEndpoint=https://nw.blob.core.windows.net/;SharedAccessSignature=[REDACTED:shared-access-signature]"},
		{"service bus shared access key, not its name", "Endpoint=sb://nw.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=Zq7vR2mK9xLpq8Zr27vkP0xKq8vN3mZ7xR2pL5tW9bY=",
			"Endpoint=sb://nw.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=[REDACTED:shared-access-key]"},
		{"no keyword, no change", "the quick brown fox jumps over the lazy dog", "the quick brown fox jumps over the lazy dog"},
		{"keyword without a secret", "the api returned 404 for key lookups", "the api returned 404 for key lookups"},
		{"truncated private key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7v2mQz1k9Xw3bR5tY8uI0oP2aS4dF6gH8jK0lZ2xC4vB6nM8qW0eR2tY4uI6oP8aS0dF2gH4jK6l\n[output truncated]",
			"-----BEGIN RSA PRIVATE KEY-----\n[REDACTED:private-key-body][output truncated]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, findings := r.String(tc.in)
			if got != tc.want {
				t.Fatalf("String(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
			if (len(findings) > 0) != (got != tc.in) {
				t.Errorf("%d findings for a change of %q", len(findings), got)
			}
			again, _ := r.String(got)
			if again != got {
				t.Errorf("redacting twice changed %q to %q", got, again)
			}
		})
	}
}

func TestKnownSecretInEveryEncoding(t *testing.T) {
	t.Parallel()
	const secret = `p@ss"w0rd/with+odd&chars<>`
	r := newRedactor(t, Config{KnownSecrets: []string{secret}})
	jsonEscaped, _ := json.Marshal(secret)
	cases := map[string]string{
		"raw":                    "value " + secret + " end",
		"json-escaped":           `{"x": ` + string(jsonEscaped) + `}`,
		"query-escaped":          "https://h/?p=" + url.QueryEscape(secret) + "&q=1",
		"path-escaped":           "https://h/" + url.PathEscape(secret) + "/x",
		"base64":                 "data " + base64.StdEncoding.EncodeToString([]byte(secret)) + " end",
		"base64url":              "data " + base64.RawURLEncoding.EncodeToString([]byte(secret)) + " end",
		"base64 at offset 1":     "Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+secret)),
		"base64 at offset 2":     "Basic " + base64.StdEncoding.EncodeToString([]byte("us:"+secret)),
		"base64url inside token": "t=" + base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"x","pw":"`+secret+`"}`)),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			out, findings := r.String(in)
			if len(findings) == 0 || !strings.Contains(out, "[REDACTED:known-secret]") {
				t.Fatalf("not redacted: %q", out)
			}
			for _, enc := range knownForms(nil, []string{secret}) {
				if strings.Contains(out, string(enc.text)) {
					t.Errorf("output %q still holds the form %q", out, enc.text)
				}
			}
		})
	}
	// WithSecrets values behave the same, and do not leak into the parent.
	call := newRedactor(t, Config{}).WithSecrets(secret)
	if out, _ := call.String(cases["base64 at offset 2"]); strings.Contains(out, base64Middle(base64.RawStdEncoding, secret, 0)[2:10]) {
		t.Errorf("WithSecrets: %q", out)
	}
	if out, _ := newRedactor(t, Config{}).String(cases["raw"]); out != cases["raw"] {
		t.Errorf("a redactor without the value changed %q", out)
	}
}

func TestShortKnownValuesAreIgnored(t *testing.T) {
	t.Parallel()
	r := newRedactor(t, Config{KnownSecrets: []string{"abc", ""}})
	if out, _ := r.String("abcabc"); out != "abcabc" {
		t.Errorf("got %q", out)
	}
}

func TestFindingsCarryAKeyedFingerprintAndNoSecret(t *testing.T) {
	t.Parallel()
	key := []byte("fingerprint key")
	r := newRedactor(t, Config{FingerprintKey: key})
	in := "a " + fakeGitHubPAT + " b " + fakeGitHubPAT
	out, findings := r.Text("stdout.txt", []byte(in))
	if len(findings) != 2 {
		t.Fatalf("findings = %+v, want 2", findings)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(fakeGitHubPAT))
	want := hex.EncodeToString(mac.Sum(nil))
	for i, f := range findings {
		if f.Fingerprint != want || f.Rule != "github-pat" || f.Artifact != "stdout.txt" {
			t.Errorf("finding %d = %+v, want fingerprint %s", i, f, want)
		}
		if !bytes.HasPrefix([]byte(in[f.Offset:]), []byte("ghp_")) {
			t.Errorf("finding %d offset %d does not point at the secret", i, f.Offset)
		}
		encoded, _ := json.Marshal(f)
		for n := 6; n <= len(fakeGitHubPAT); n++ {
			if bytes.Contains(encoded, []byte(fakeGitHubPAT[:n])) {
				t.Fatalf("finding %s holds a %d-byte prefix of the secret", encoded, n)
			}
		}
	}
	if bytes.Contains(out, []byte(fakeGitHubPAT)) {
		t.Errorf("output still holds the secret: %q", out)
	}
	if f := newRedactor(t, Config{}).Fingerprint([]byte("x")); f != "" {
		t.Errorf("fingerprint without a key = %q, want none", f)
	}
}

func TestJSONKeepsStructure(t *testing.T) {
	t.Parallel()
	r := newRedactor(t, Config{KnownSecrets: []string{"4242424242"}})
	cases := []struct {
		name, in, want string
		paths          []string
	}{
		{"untouched document is returned as is",
			`{"b": 1, "a": [true, null, 1.50e3], "s": "plain text"}`,
			`{"b": 1, "a": [true, null, 1.50e3], "s": "plain text"}`, nil},
		{"value under a secret key name",
			`{"db": {"password": "hunter22", "port": 5432}, "githubToken": "x", "max_tokens": 512}`,
			`{"db": {"password": "[REDACTED:secret-key-name]", "port": 5432}, "githubToken": "[REDACTED:secret-key-name]", "max_tokens": 512}`,
			[]string{"$.db.password", "$.githubToken"}},
		{"everything below a secret key, shape kept",
			`{"credentials": {"user": "svc", "pin": 1234, "on": true, "none": null, "list": ["a", ""]}}`,
			`{"credentials": {"user": "[REDACTED:secret-key-name]", "pin": "[REDACTED:secret-key-name]", "on": true, "none": null, "list": ["[REDACTED:secret-key-name]", ""]}}`,
			[]string{"$.credentials.user", "$.credentials.pin", "$.credentials.list[0]"}},
		{"token inside a log string with escapes",
			`{"stdout": "line one\n` + fakeGitHubPAT + `\tdone"}`,
			`{"stdout": "line one\n[REDACTED:github-pat]\tdone"}`,
			[]string{"$.stdout"}},
		{"generic rule with the key as context",
			`{"config": {"api_key": "a8f9d7e6c5b4a3928176", "note": "ok"}}`,
			`{"config": {"api_key": "[REDACTED:secret-key-name]", "note": "ok"}}`,
			[]string{"$.config.api_key"}},
		{"secret in a key, path names the redacted key",
			`{"` + fakeGitHubPAT + `": {"x": "` + fakeGitHubPAT + `"}}`,
			`{"[REDACTED:github-pat]": {"x": "[REDACTED:github-pat]"}}`,
			[]string{"$[\"[REDACTED:github-pat]\"]", "$[\"[REDACTED:github-pat]\"].x"}},
		{"known value as a number",
			`{"card": 4242424242, "n": 42}`,
			`{"card": "[REDACTED:known-secret]", "n": 42}`,
			[]string{"$.card"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, findings, err := r.JSON("tool_result.json", []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tc.want {
				t.Fatalf("got  %s\nwant %s", out, tc.want)
			}
			if enc, encFindings, err := r.EncodedJSON("tool_result.json", []byte(tc.in)); err != nil || string(enc) != tc.want || len(encFindings) != len(findings) {
				t.Fatalf("EncodedJSON gave %s, %d findings (%v); JSON %d", enc, len(encFindings), err, len(findings))
			}
			if !json.Valid(out) {
				t.Fatalf("invalid JSON out: %s", out)
			}
			var paths []string
			for _, f := range findings {
				paths = append(paths, f.Path)
				if f.Artifact != "tool_result.json" {
					t.Errorf("artifact %q", f.Artifact)
				}
			}
			if strings.Join(paths, " ") != strings.Join(tc.paths, " ") {
				t.Errorf("paths %q, want %q", paths, tc.paths)
			}
		})
	}
}

func TestJSONRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	r := newRedactor(t, Config{})
	for _, in := range []string{``, `{`, `{"a":}`, `[1,]`, `{"a":1} x`, `"\x"`, "\"a\x01\"", `01`, `{"a" 1}`, `tru`, strings.Repeat("[", maxJSONDepth+1)} {
		out, _, err := r.JSON("x", []byte(in))
		if err == nil {
			t.Errorf("JSON(%q) = %q, want an error", in, out)
		}
		if json.Valid([]byte(in)) {
			t.Errorf("test input %q is valid JSON", in)
		}
	}
}

func TestRulesFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	custom := write("custom.toml", `
[extend]
disabledRules = ["slack-bot-token"]

[[rules]]
id = "acme-internal-token"
description = "ACME service token"
regex = '''\b(acme_[a-z0-9]{24})\b'''
keywords = ["acme_"]

[[rules]]
id = "github-pat"
description = "replaced: only tokens after 'gh:'"
regex = '''gh:(ghp_[0-9a-zA-Z]{36})'''
keywords = ["gh:"]
`)
	r := newRedactor(t, Config{RulesFile: custom, DisableRules: []string{"aws-access-token"}})
	cases := []struct{ name, in, want string }{
		{"own rule", "tok acme_0123456789abcdefghijklmn end", "tok [REDACTED:acme-internal-token] end"},
		{"override by id", "gh:" + fakeGitHubPAT + " and " + fakeGitHubPAT, "gh:[REDACTED:github-pat] and " + fakeGitHubPAT},
		{"disabled in the file", "x " + fakeSlackBot, "x " + fakeSlackBot},
		{"disabled in the config", "x " + fakeAWSKeyID, "x " + fakeAWSKeyID},
		{"default rules still on", "postgres://a:" + fakePGPassword + "@h/db", "postgres://a:[REDACTED:connection-string-password]@h/db"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := r.String(tc.in); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	var sources = map[string]string{}
	for _, info := range r.Rules() {
		sources[info.ID] = info.Source
	}
	if sources["acme-internal-token"] != SourceFile || sources["github-pat"] != SourceFile || sources["url-password"] != SourceToolgate || sources["stripe-access-token"] != SourceGitleaks {
		t.Errorf("sources: %v", sources)
	}
	if _, ok := sources["slack-bot-token"]; ok {
		t.Error("disabled rule listed")
	}

	bad := []struct{ name, text, disable, wantErr string }{
		{"invalid regex", "[[rules]]\nid = \"x\"\nregex = '''(unclosed'''\nkeywords = [\"a\"]\n", "", "rule x"},
		{"no keywords", "[[rules]]\nid = \"x\"\nregex = '''abc'''\n", "", "no keywords"},
		{"secret group out of range", "[[rules]]\nid = \"x\"\nregex = '''a(b)'''\nsecretGroup = 2\nkeywords = [\"a\"]\n", "", "secretGroup"},
		{"unknown rule to disable", "", "no-such-rule", "no-such-rule"},
		{"not TOML", "[[rules]\n", "", "rules"},
		{"bad allowlist condition", "[[rules]]\nid = \"x\"\nregex = '''a'''\nkeywords = [\"a\"]\n[[rules.allowlists]]\ncondition = \"XOR\"\nregexes = ['''a''']\n", "", "condition"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{RulesFile: write("bad.toml", tc.text)}
			if tc.disable != "" {
				cfg.DisableRules = []string{tc.disable}
			}
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("New: %v, want an error about %q", err, tc.wantErr)
			}
		})
	}
	t.Run("a rule disabled in the configuration and in the file's [extend] is disabled once", func(t *testing.T) {
		file := write("twice.toml", "[extend]\ndisabledRules = [\"generic-api-key\"]\n")
		r, err := New(Config{RulesFile: file, DisableRules: []string{"generic-api-key"}})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		for _, info := range r.Rules() {
			if info.ID == "generic-api-key" {
				t.Fatal("generic-api-key is still enabled")
			}
		}
	})
	if _, err := New(Config{RulesFile: filepath.Join(dir, "missing.toml")}); err == nil {
		t.Error("missing rules file accepted")
	}
	if _, err := New(Config{KeyNames: []string{"_-"}}); err == nil {
		t.Error("empty key name accepted")
	}
}
