package redact

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Fake credentials in the shapes the rules look for. None of them is real.
const (
	fakeAWSKeyID     = "AKIAIOSFODNN7EXAMPLE"
	fakeAWSSecret    = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	fakeGitHub       = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
	fakeGitHubPAT    = "github_pat_" + "11ABCDEFG0123456789abc_" + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456"
	fakeSlack        = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
	fakeSlackHook    = "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
	fakeStripe       = "sk_live_" + "51H8xYzAbCdEfGhIjKlMnOpQr"
	fakeOpenAI       = "sk-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8T3BlbkFJQr9St0Uv1Wx2Yz3Ab4Cd5E"
	fakeOpenAIProj   = "sk-proj-" + "Xy9_Zw8-Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe9Dc8Ba7"
	fakeAnthropic    = "sk-ant-api03-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp-_Oo9Nn8Mm7Ll6AA"
	fakeGoogle       = "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"
	fakeJWT          = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
	fakeOpaque       = "Zm9vYmFyYmF6cXV4MTIzNDU2"
	fakeBasic        = "dXNlcjpwYXNzd29yZA==" // base64("user:password")
	fakeURLPassword  = "hunter2-Pw"
	fakePrivateKey   = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\naFDrBz9vFqU4yQnS0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\n-----END RSA PRIVATE KEY-----"
	fakeOpenSSHKeyTo = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"
)

// Ordinary values that look a little like secrets and must survive.
const (
	plainUUID   = "123e4567-e89b-12d3-a456-426614174000"
	plainSHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	plainGitSHA = "da39a3ee5e6b4b0d3255bfef95601890afd80709"
	plainLorem  = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat."
)

// plainImage is the base64 of 12 KiB of pseudo-random bytes, like an image in a tool result.
var plainImage = func() string {
	rng := rand.New(rand.NewPCG(1, 2))
	raw := make([]byte, 12<<10)
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	return base64.StdEncoding.EncodeToString(raw)
}()

func mustNew(t testing.TB, cfg Config) *Redactor {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return r
}

func TestStringRules(t *testing.T) {
	r := mustNew(t, Config{})
	tests := []struct {
		name string
		in   string
		want string
		// rules are the rule ids of the findings, in order.
		rules []string
	}{
		// aws-access-key-id
		{"aws key id", "id=" + fakeAWSKeyID + ";", "id=[REDACTED:aws-access-key-id];", []string{"aws-access-key-id"}},
		{"aws temporary key id", "ASIAY34FZKBOKMUTVV7A in use", "[REDACTED:aws-access-key-id] in use", []string{"aws-access-key-id"}},
		{"aws key id too short", "AKIAIOSFODNN7EXAMP", "AKIAIOSFODNN7EXAMP", nil},
		{"aws key id inside a word", "X" + fakeAWSKeyID, "X" + fakeAWSKeyID, nil},
		{"aws key id lower case", "akiaiosfodnn7example", "akiaiosfodnn7example", nil},

		// aws-secret-access-key
		{"aws secret env", "aws_secret_access_key = " + fakeAWSSecret, "aws_secret_access_key = [REDACTED:aws-secret-access-key]", []string{"aws-secret-access-key"}},
		{"aws secret shell export", "export AWS_SECRET_ACCESS_KEY=" + fakeAWSSecret + "\n", "export AWS_SECRET_ACCESS_KEY=[REDACTED:aws-secret-access-key]\n", []string{"aws-secret-access-key"}},
		{"aws secret JSON text", `{"AccessKeyId": "` + fakeAWSKeyID + `", "SecretAccessKey": "` + fakeAWSSecret + `"}`, `{"AccessKeyId": "[REDACTED:aws-access-key-id]", "SecretAccessKey": "[REDACTED:aws-secret-access-key]"}`, []string{"aws-access-key-id", "aws-secret-access-key"}},
		{"aws secret without keyword", "value " + fakeAWSSecret, "value " + fakeAWSSecret, nil},
		{"git sha after secret keyword", "secret_ref=" + plainGitSHA, "secret_ref=" + plainGitSHA, nil},
		{"aws secret too long", "aws_secret_access_key=" + fakeAWSSecret + "XYZ", "aws_secret_access_key=" + fakeAWSSecret + "XYZ", nil},

		// github-token
		{"github classic token", "git clone https://x:" + fakeGitHub + "@github.com/o/r", "git clone https://x:[REDACTED:github-token]@github.com/o/r", []string{"github-token"}},
		{"github token in text", "GITHUB_TOKEN=" + fakeGitHub, "GITHUB_TOKEN=[REDACTED:github-token]", []string{"github-token"}},
		{"github app token", "ghs_" + strings.Repeat("a1B2", 9), "[REDACTED:github-token]", []string{"github-token"}},
		{"github fine-grained token", "pat " + fakeGitHubPAT, "pat [REDACTED:github-token]", []string{"github-token"}},
		{"github prefix too short", "ghp_abc123 is not a token", "ghp_abc123 is not a token", nil},

		// slack-token
		{"slack bot token", "SLACK=" + fakeSlack, "SLACK=[REDACTED:slack-token]", []string{"slack-token"}},
		{"slack webhook", "POST https://hooks.slack.com/services/" + fakeSlackHook + " ok", "POST https://hooks.slack.com/services/[REDACTED:slack-token] ok", []string{"slack-token"}},
		{"slack word", "xoxo-hugs", "xoxo-hugs", nil},

		// stripe-key
		{"stripe live key", "key: " + fakeStripe, "key: [REDACTED:stripe-key]", []string{"stripe-key"}},
		{"stripe restricted test key", "rk_test_" + "4eC39HqLyjWDarjtT1zdp7dc", "[REDACTED:stripe-key]", []string{"stripe-key"}},
		{"stripe publishable key", "pk_live_" + "51H8xYzAbCdEfGhIjKlMnOpQr", "pk_live_51H8xYzAbCdEfGhIjKlMnOpQr", nil},
		{"stripe-like identifier", "run_test_suite", "run_test_suite", nil},

		// openai-api-key and anthropic-api-key
		{"openai key", "OPENAI_API_KEY=" + fakeOpenAI, "OPENAI_API_KEY=[REDACTED:openai-api-key]", []string{"openai-api-key"}},
		{"openai project key", "key " + fakeOpenAIProj + " end", "key [REDACTED:openai-api-key] end", []string{"openai-api-key"}},
		{"anthropic key wins over openai", "x-api-key: " + fakeAnthropic, "x-api-key: [REDACTED:anthropic-api-key]", []string{"anthropic-api-key"}},
		{"hyphenated words after sk-", "see sk-learn-compatible-estimators docs", "see sk-learn-compatible-estimators docs", nil},
		{"sk- inside a word", "task-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8", "task-Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8", nil},

		// google-api-key
		{"google key", "https://maps.example/api?key=" + fakeGoogle + "&q=x", "https://maps.example/api?key=[REDACTED:google-api-key]&q=x", []string{"google-api-key"}},
		{"google prefix too short", "AIzaShort", "AIzaShort", nil},

		// private-key
		{"pem block", "before\n" + fakePrivateKey + "\nafter", "before\n[REDACTED:private-key]\nafter", []string{"private-key"}},
		{"pem block without END", "key: " + fakeOpenSSHKeyTo, "key: [REDACTED:private-key]", []string{"private-key"}},
		{"pem public key", "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----", "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----", nil},
		{"pem certificate", "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+g\n-----END CERTIFICATE-----", "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+g\n-----END CERTIFICATE-----", nil},

		// jwt
		{"jwt", "token=" + fakeJWT + "&next=1", "token=[REDACTED:jwt]&next=1", []string{"jwt"}},
		{"base64 json is not a jwt", "eyJhIjoxfQ== eyJiIjoyfQ==", "eyJhIjoxfQ== eyJiIjoyfQ==", nil},

		// bearer-credential
		{"curl bearer header", "curl -H 'Authorization: Bearer " + fakeOpaque + "' https://api.example", "curl -H 'Authorization: Bearer [REDACTED:bearer-credential]' https://api.example", []string{"bearer-credential"}},
		{"short bearer in header", "Authorization: bearer abc", "Authorization: bearer [REDACTED:bearer-credential]", []string{"bearer-credential"}},
		{"bearer jwt is a jwt", `"authorization": "Bearer ` + fakeJWT + `"`, `"authorization": "Bearer [REDACTED:jwt]"`, []string{"jwt"}},
		{"bearer token outside a header", "curl --oauth2-bearer " + fakeOpaque, "curl --oauth2-bearer [REDACTED:bearer-credential]", []string{"bearer-credential"}},
		{"bearer word before a header", "set bearer Bearer " + fakeOpaque, "set bearer Bearer [REDACTED:bearer-credential]", []string{"bearer-credential"}},
		{"bearer prose", "The bearer of this letter carries bearer responsibilities and Bearer authentication.", "The bearer of this letter carries bearer responsibilities and Bearer authentication.", nil},

		// basic-credential
		{"basic header", "Authorization: Basic " + fakeBasic, "Authorization: Basic [REDACTED:basic-credential]", []string{"basic-credential"}},
		{"basic user:password outside a header", "sent basic " + fakeBasic + " upstream", "sent basic [REDACTED:basic-credential] upstream", []string{"basic-credential"}},
		{"basic word before a header", "basic Basic " + fakeBasic, "basic Basic [REDACTED:basic-credential]", []string{"basic-credential"}},
		{"basic prose", "A basic understanding of basic arithmetic", "A basic understanding of basic arithmetic", nil},
		{"basic base64 without colon", "Basic YWJjZGVm", "Basic YWJjZGVm", nil},

		// url-password
		{"postgres url", "postgres://admin:" + fakeURLPassword + "@db.internal:5432/app", "postgres://admin:[REDACTED:url-password]@db.internal:5432/app", []string{"url-password"}},
		{"url password without user", "redis://:" + fakeURLPassword + "@cache:6379/0", "redis://:[REDACTED:url-password]@cache:6379/0", []string{"url-password"}},
		{"url password with at sign", "https://u:p@ss-" + fakeURLPassword + "@host/x?y=a@b", "https://u:[REDACTED:url-password]@host/x?y=a@b", []string{"url-password"}},
		{"url with port", "https://example.com:8443/path?mail=a@b.c", "https://example.com:8443/path?mail=a@b.c", nil},
		{"url with user only", "ssh://git@github.com/org/repo.git", "ssh://git@github.com/org/repo.git", nil},
		{"scp-like git remote", "git@github.com:org/repo.git", "git@github.com:org/repo.git", nil},

		// hard negatives
		{"uuid", plainUUID, plainUUID, nil},
		{"sha256 hex", "sha256:" + plainSHA256, "sha256:" + plainSHA256, nil},
		{"git sha", "commit " + plainGitSHA, "commit " + plainGitSHA, nil},
		{"lorem ipsum", plainLorem, plainLorem, nil},
		{"base64 image", "data:image/png;base64," + plainImage, "data:image/png;base64," + plainImage, nil},
		{"empty", "", "", nil},

		// several secrets in one string keep their surroundings
		{"mixed", "a " + fakeGitHub + " b " + fakeSlack + " c", "a [REDACTED:github-token] b [REDACTED:slack-token] c", []string{"github-token", "slack-token"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, findings := r.String(tt.in)
			if got != tt.want {
				t.Errorf("String(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
			var rules []string
			for _, f := range findings {
				rules = append(rules, f.Rule)
				if f.Path != "" || f.Artifact != "" {
					t.Errorf("finding %+v: want empty Path and Artifact", f)
				}
			}
			if !slices.Equal(rules, tt.rules) {
				t.Errorf("finding rules = %q, want %q", rules, tt.rules)
			}
		})
	}
}

func TestStringOffsets(t *testing.T) {
	r := mustNew(t, Config{})
	in := "a=" + fakeGitHub + " b=https://u:" + fakeURLPassword + "@h"
	got, findings := r.String(in)
	want := []Finding{
		{Rule: "github-token", Offset: strings.Index(in, fakeGitHub)},
		{Rule: "url-password", Offset: strings.Index(in, fakeURLPassword)},
	}
	if !slices.Equal(findings, want) {
		t.Errorf("findings = %+v, want %+v", findings, want)
	}
	if want := "a=[REDACTED:github-token] b=https://u:[REDACTED:url-password]@h"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

func TestKnownSecrets(t *testing.T) {
	tests := []struct {
		name  string
		known []string
		in    string
		want  string
		count int
	}{
		{"every occurrence", []string{"p4ss-w0rd"}, "p4ss-w0rd and p4ss-w0rd", "[REDACTED:known-secret] and [REDACTED:known-secret]", 2},
		{"inside a word", []string{"p4ss-w0rd"}, "xp4ss-w0rdy", "x[REDACTED:known-secret]y", 1},
		{"shorter than four bytes ignored", []string{"ab", "xyz", ""}, "abc xyz ab", "abc xyz ab", 0},
		{"four bytes redacted", []string{"abcd"}, "abcde", "[REDACTED:known-secret]e", 1},
		{"longest first", []string{"secret", "secretvalue"}, "secretvalue secret", "[REDACTED:known-secret] [REDACTED:known-secret]", 2},
		{"overlapping values merge", []string{"abcdef", "defghi"}, "xabcdefghiy", "x[REDACTED:known-secret]y", 1},
		{"known value beats a pattern", []string{fakeGitHub}, "t=" + fakeGitHub, "t=[REDACTED:known-secret]", 1},
		{"duplicates once", []string{"dup-value", "dup-value"}, "dup-value", "[REDACTED:known-secret]", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNew(t, Config{KnownSecrets: tt.known})
			got, findings := r.String(tt.in)
			if got != tt.want {
				t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if len(findings) != tt.count {
				t.Errorf("got %d findings %+v, want %d", len(findings), findings, tt.count)
			}
			for _, f := range findings {
				if f.Rule != "known-secret" {
					t.Errorf("finding rule = %q, want known-secret", f.Rule)
				}
			}
		})
	}
}

func TestWithSecrets(t *testing.T) {
	base := mustNew(t, Config{KnownSecrets: []string{"base-secret"}})
	derived := base.WithSecrets("call-secret", "no")
	const in = "base-secret call-secret no"

	if got, _ := base.String(in); got != "[REDACTED:known-secret] call-secret no" {
		t.Errorf("base redactor changed by WithSecrets: %q", got)
	}
	if got, _ := derived.String(in); got != "[REDACTED:known-secret] [REDACTED:known-secret] no" {
		t.Errorf("derived redactor: %q", got)
	}

	// Redactors derived concurrently from one base share its rules; run with -race.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			value := fmt.Sprintf("per-call-%d", i)
			r := base.WithSecrets(value)
			out, _, err := r.JSON("tool_result.json", []byte(`{"stdout":"`+value+` base-secret `+fakeGitHub+`"}`))
			if err != nil {
				t.Errorf("JSON: %v", err)
				return
			}
			if strings.Contains(string(out), value) || strings.Contains(string(out), "base-secret") || strings.Contains(string(out), fakeGitHub) {
				t.Errorf("secret left in %s", out)
			}
		})
	}
	wg.Wait()
}

func TestNewRejectsEmptyKeyName(t *testing.T) {
	_, err := New(Config{KeyNames: []string{"pin", " _-. "}})
	if err == nil {
		t.Fatal("New accepted a key name that normalizes to nothing")
	}
	if !strings.Contains(err.Error(), "KeyNames[1]") {
		t.Errorf("error %q does not name the offending field", err)
	}
}

// TestLookAlikeRuns puts a long run of near-misses before a real secret. The redactor skips ahead
// after a failed or rejected attempt to stay linear; the secret at the end must still be found.
func TestLookAlikeRuns(t *testing.T) {
	r := mustNew(t, Config{})
	tests := []struct {
		name, unit, secret, rule string
	}{
		{"jwt headers", "-eyJ", fakeJWT, "jwt"},
		{"jwt header and payload", "-eyJa.eyJb", fakeJWT, "jwt"},
		{"openai prefixes", "-sk-", fakeOpenAI, "openai-api-key"},
		{"anthropic prefixes", "-sk-ant-", fakeAnthropic, "anthropic-api-key"},
		{"github prefixes", "-ghp_", fakeGitHub, "github-token"},
		{"slack prefixes", "xoxb- ", fakeSlack, "slack-token"},
		{"pem headers", "-----BEGIN RSA PRIVATE KEY-----\n", fakePrivateKey, "private-key"},
		{"bearer words", "bearer ", "Authorization: Bearer " + fakeOpaque, "bearer-credential"},
		{"basic words", "basic ", "Authorization: Basic " + fakeBasic, "basic-credential"},
		{"url schemes", "://a:", "postgres://u:" + fakeURLPassword + "@db", "url-password"},
		{"secret keywords", "secret=", "aws_secret_access_key=" + fakeAWSSecret, "aws-secret-access-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := strings.Repeat(tt.unit, (16<<10)/len(tt.unit)) + " " + tt.secret + " end"
			got, findings := r.String(in)
			for _, piece := range []string{fakeJWT[40:60], fakeOpenAI[20:40], fakeAnthropic[20:40], fakeGitHub[10:30], fakeSlack[10:30], fakePrivateKey[40:60], fakeOpaque[8:], fakeBasic[4:12], fakeURLPassword, fakeAWSSecret[10:30]} {
				if strings.Contains(got, piece) {
					t.Fatalf("secret piece %q survived", piece)
				}
			}
			if !strings.HasSuffix(got, " end") || !strings.Contains(got, "[REDACTED:"+tt.rule+"]") {
				t.Errorf("no %s marker before the end: ...%q", tt.rule, got[max(0, len(got)-120):])
			}
			if len(findings) == 0 {
				t.Error("no findings")
			}
		})
	}
}
