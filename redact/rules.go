package redact

import (
	"encoding/base64"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// patternSpec describes one pattern rule. The table below is immutable; New compiles it.
//
// Every match starts with one of the rule's literals. Instead of letting a regexp search the whole
// string (Go's regexp cannot skip ahead to a literal behind \b or (?i), and its NFA is slow on long
// tool output), the redactor finds the literals itself and runs the regexp anchored at each one.
// A string without any literal costs a few substring searches. The expressions are written so that
// a failed attempt stops within a bounded distance or at a byte that cannot start another attempt,
// or the rule says how far a failure reaches (skipAfterMiss), which keeps the work linear in the
// input.
type patternSpec struct {
	id string
	// literals are the prefixes a match starts with.
	literals []string
	// fold makes the literals match ASCII case-insensitively; they must then be lower case and
	// expr should carry (?i).
	fold bool
	// wordStart requires the byte before a match to be no letter, digit or '_', so that a token
	// prefix inside a longer word ("task-…" for "sk-") is not taken for a token.
	wordStart bool
	// expr is matched at the position of a literal.
	expr string
	// group is the submatch that holds the secret; 0 is the whole match. Rules that need context
	// (a keyword, a scheme, "Bearer") capture only the secret so the context stays readable.
	group int
	// valid, when set, rejects matches the expression alone cannot tell from ordinary text.
	// m holds submatch offsets into s.
	valid func(s string, m []int) bool
	// skipAfterMiss, when set, returns the offset before which no attempt can succeed once the
	// expression failed at p. Rules whose failed attempt may scan far need it so that a long run
	// of look-alikes is not rescanned once per occurrence.
	skipAfterMiss func(s string, p int) int
}

// rule is a compiled patternSpec.
type rule struct {
	patternSpec
	re *regexp.Regexp // expr anchored at the start of its input
}

// patternSpecs lists the pattern rules. Order matters only between matches of the same length:
// the earlier rule names the marker, so specific token formats come before generic ones (an
// "sk-ant-" key is an anthropic-api-key, a JWT after "Bearer" is a jwt).
var patternSpecs = []patternSpec{
	{
		// The whole block, or everything from the BEGIN line on when the END line is missing:
		// truncated output must not leak the key body.
		id:       "private-key",
		literals: []string{"-----BEGIN"},
		expr:     `-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|[\s\S]*)`,
	},
	{
		id:        "anthropic-api-key",
		literals:  []string{"sk-ant-"},
		wordStart: true,
		expr:      `sk-ant-[A-Za-z0-9_-]{20,}`,
	},
	{
		id:        "openai-api-key",
		literals:  []string{"sk-"},
		wordStart: true,
		expr:      `sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}`,
		valid:     validOpenAIKey,
	},
	{
		id:        "github-token",
		literals:  []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"},
		wordStart: true,
		expr:      `gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}`,
	},
	{
		id:        "slack-token",
		literals:  []string{"xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-"},
		wordStart: true,
		expr:      `xox[abprs]-[A-Za-z0-9-]{10,}`,
	},
	{
		// The workspace and channel ids of a webhook are not secret on their own, but the path as a
		// whole is the credential, so everything after the kind of hook goes.
		id:       "slack-token",
		literals: []string{"hooks.slack.com/"},
		expr:     `hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/+-]+)`,
		group:    1,
	},
	{
		id:        "stripe-key",
		literals:  []string{"sk_live_", "sk_test_", "rk_live_", "rk_test_"},
		wordStart: true,
		expr:      `[rs]k_(?:live|test)_[A-Za-z0-9]{16,}`,
	},
	{
		id:        "google-api-key",
		literals:  []string{"AIza"},
		wordStart: true,
		expr:      `AIza[A-Za-z0-9_-]{35}`,
	},
	{
		id:        "aws-access-key-id",
		literals:  []string{"AKIA", "ASIA", "ABIA", "ACCA"},
		wordStart: true,
		expr:      `[A-Z]{4}[A-Z2-7]{16}\b`,
	},
	{
		// Forty base64 characters are everywhere (git SHAs, digests), so the key counts only
		// right after a keyword naming a secret: aws_secret_access_key=…, "SecretAccessKey": "…",
		// AWS_SECRET_ACCESS_KEY: …. The last group only ends the key; RE2 has no lookahead.
		id:       "aws-secret-access-key",
		literals: []string{"secret"},
		fold:     true,
		expr:     `(?i)secret[A-Za-z0-9_.\- ]{0,24}?[\\"']{0,3}\s{0,4}(?:[:=]|=>)\s{0,4}[\\"']{0,3}([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)`,
		group:    1,
		valid:    validAWSSecret,
	},
	{
		id:        "jwt",
		literals:  []string{"eyJ"},
		wordStart: true,
		expr:      `eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*`,
		// The header runs to the end of its base64url run, so every "eyJ" inside that run reaches
		// the same '.' (or lack of one) and fails the same way.
		skipAfterMiss: func(s string, p int) int {
			end := p + len("eyJ")
			for end < len(s) && (isWordByte(s[end]) || s[end] == '-') {
				end++
			}
			return end
		},
	},
	{
		// The user part stops at the first ':'; the password runs to the last '@' before the host,
		// so an unencoded '@' inside a password does not leave its tail behind.
		id:       "url-password",
		literals: []string{"://"},
		expr:     `://[^\s:/?#@\[\]"'<>]*:([^\s/?#"'<>` + "`" + `]+)@`,
		group:    1,
	},
	{
		id:        "bearer-credential",
		literals:  []string{"bearer"},
		fold:      true,
		wordStart: true,
		expr:      `(?i)bearer\s{1,8}([A-Za-z0-9._~+/-]+={0,3})`,
		group:     1,
		valid:     validBearer,
	},
	{
		id:        "basic-credential",
		literals:  []string{"basic"},
		fold:      true,
		wordStart: true,
		expr:      `(?i)basic\s{1,8}([A-Za-z0-9+/]+={0,2})`,
		group:     1,
		valid:     validBasic,
	},
}

// appendMatches appends the spans of s this rule redacts.
func (ru *rule) appendMatches(spans []span, s string, prio int) []span {
	for _, lit := range ru.literals {
		// As with regexp's FindAll, matches do not overlap: an occurrence inside the previous match
		// is part of it. This keeps a run of look-alikes ("-sk-sk-sk-…") from being rescanned once
		// per occurrence.
		covered := 0
		for from := 0; from < len(s); {
			i := ru.index(s[from:], lit)
			if i < 0 {
				break
			}
			p := from + i
			from = p + 1
			if p < covered {
				from = covered
				continue
			}
			if ru.wordStart && p > 0 && isWordByte(s[p-1]) {
				continue
			}
			m := ru.re.FindStringSubmatchIndex(s[p:])
			if m == nil {
				if ru.skipAfterMiss != nil {
					covered = ru.skipAfterMiss(s, p)
				}
				continue
			}
			for k := range m {
				if m[k] >= 0 {
					m[k] += p
				}
			}
			start, end := m[2*ru.group], m[2*ru.group+1]
			if start < 0 || start == end || ru.valid != nil && !ru.valid(s, m) {
				// A rejected secret may itself begin the real one ("bearer Bearer <token>"), so
				// context rules look again from the secret on. A rejected whole-match token is a run
				// of token bytes with no token inside it (validOpenAIKey), so it is skipped.
				covered = m[1]
				if ru.group > 0 && start >= 0 {
					covered = start
				}
				continue
			}
			spans = append(spans, span{start: start, end: end, rule: ru.id, prio: prio, width: end - start})
			covered = m[1]
		}
	}
	return spans
}

// hasLiteralAt reports whether s starts with one of the rule's literals.
func (ru *rule) hasLiteralAt(s string) bool {
	for _, lit := range ru.literals {
		if ru.fold && hasPrefixFoldASCII(s, lit) || !ru.fold && strings.HasPrefix(s, lit) {
			return true
		}
	}
	return false
}

// index returns the index of the first occurrence of lit in s, or -1.
func (ru *rule) index(s, lit string) int {
	if ru.fold {
		return indexFoldASCII(s, lit)
	}
	return strings.Index(s, lit)
}

// isWordByte reports whether c is an ASCII letter, digit or '_'.
func isWordByte(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// indexFoldASCII returns the index of the first occurrence of lower, a lower-case ASCII string,
// in s ignoring ASCII case, or -1.
func indexFoldASCII(s, lower string) int {
	n := len(lower)
	if n == 0 {
		return 0
	}
	for i := 0; i+n <= len(s); i++ {
		if s[i]|0x20 == lower[0] && hasPrefixFoldASCII(s[i:], lower) {
			return i
		}
	}
	return -1
}

// hasPrefixFoldASCII reports whether s starts with lower, ignoring ASCII case.
func hasPrefixFoldASCII(s, lower string) bool {
	if len(s) < len(lower) {
		return false
	}
	for i := 0; i < len(lower); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// validOpenAIKey rejects Anthropic keys (they have their own rule) and hyphenated words such as
// "sk-learn-compatible-estimators": a real key body has a digit or an upper-case letter.
func validOpenAIKey(s string, m []int) bool {
	key := s[m[0]:m[1]]
	if strings.HasPrefix(key, "sk-ant-") {
		return false
	}
	return looksRandom(key[len("sk-"):])
}

// validAWSSecret rejects hex strings such as git SHAs and SHA-1 digests: a real secret access
// key is base64 and has both upper- and lower-case letters.
func validAWSSecret(s string, m []int) bool {
	var upper, lower bool
	for _, c := range []byte(s[m[2]:m[3]]) {
		upper = upper || 'A' <= c && c <= 'Z'
		lower = lower || 'a' <= c && c <= 'z'
	}
	return upper && lower
}

// validBearer accepts any credential in an Authorization header and otherwise only one that
// looks like a token, so that prose ("the bearer responsibility") is left alone.
func validBearer(s string, m []int) bool {
	if afterAuthorization(s, m[0]) {
		return true
	}
	cred := s[m[2]:m[3]]
	return len(cred) >= 16 && (looksRandom(cred) || strings.ContainsAny(cred, "_~+/="))
}

// validBasic accepts any credential in an Authorization header and otherwise only base64 that
// decodes to printable "user:password" text, which prose ("basic understanding") never does.
func validBasic(s string, m []int) bool {
	if afterAuthorization(s, m[0]) {
		return true
	}
	raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(s[m[2]:m[3]], "="))
	if err != nil || !utf8.Valid(raw) || !strings.ContainsRune(string(raw), ':') {
		return false
	}
	for _, r := range string(raw) {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// afterAuthorization reports whether an "Authorization" header name closely precedes offset at,
// as in `Authorization: Bearer …`, `-H "Proxy-Authorization: Basic …"` or `"authorization":"Bearer …"`.
func afterAuthorization(s string, at int) bool {
	return indexFoldASCII(s[max(0, at-32):at], "authoriz") >= 0
}

// looksRandom reports whether s has a digit or an upper-case letter after its first byte, which
// generated credentials almost always have and ordinary words almost never do.
func looksRandom(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if '0' <= c && c <= '9' || i > 0 && 'A' <= c && c <= 'Z' {
			return true
		}
	}
	return false
}
