package redact

import (
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// RuleCallerSecret names the marker of a value a caller handed a tool as a secret (an
// environment value): see [Redactor.Standalone].
const RuleCallerSecret = "caller-secret"

// MinCallerSecretLen is the shortest value, in bytes, a caller may hand a tool as a secret.
// Shorter values occur by chance in any output, and redacting them would let a caller erase
// them from its own evidence.
const MinCallerSecretLen = 8

// ErrWeakCallerSecret is returned (wrapped) by [CheckCallerSecret].
var ErrWeakCallerSecret = errors.New("redact: unusable caller secret")

//go:embed commonwords.txt
var commonWordsText string

// commonWords returns the embedded list of words no caller secret may be, lower-cased. It is
// parsed once: the embedded text never changes.
var commonWords = sync.OnceValue(func() map[string]bool {
	words := map[string]bool{}
	for line := range strings.Lines(commonWordsText) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			words[strings.ToLower(line)] = true
		}
	}
	return words
})

// CheckCallerSecret reports whether v may be handed to a tool as a caller's secret: it must be
// at least MinCallerSecretLen bytes, and no common word (the embedded list: decision words, JSON
// literals, protocol and host names, well-known passwords, Toolgate's own names) nor one of also
// may be what Standalone would redact of it — v itself, v reversed, or a run of v long enough to
// be redacted (see partial.go) — compared case-insensitively. The error never quotes v.
func CheckCallerSecret(v string, also ...string) error {
	if len(v) < MinCallerSecretLen {
		return fmt.Errorf("%w: %d bytes, shorter than %d", ErrWeakCallerSecret, len(v), MinCallerSecretLen)
	}
	words := maps.Keys(commonWords())
	for w := range words {
		if erasable(v, w) {
			return fmt.Errorf("%w: a common word or a name the gateway itself writes in evidence, or holds one", ErrWeakCallerSecret)
		}
	}
	if slices.ContainsFunc(also, func(w string) bool { return erasable(v, w) }) {
		return fmt.Errorf("%w: a common word or a name the gateway itself writes in evidence, or holds one", ErrWeakCallerSecret)
	}
	return nil
}

// erasable reports whether Standalone(v) would redact the word w where it stands alone: w is v
// or v reversed, or a run of v at least partialMin(len(v)) long, case aside.
func erasable(v, w string) bool {
	if w == "" {
		return false
	}
	if strings.EqualFold(v, w) || slices.ContainsFunc(reversals(v), func(r string) bool { return strings.EqualFold(r, w) }) {
		return true
	}
	return len(v) > minPartialRun && len(w) >= partialMin(len(v)) && strings.Contains(strings.ToLower(v), strings.ToLower(w))
}

// Standalone returns a Redactor that replaces the given values, and nothing else, where they
// stand alone: no pattern rule, key name, structure or known secret of r applies, only r's
// fingerprint key. It is meant for values a caller chose (environment it hands a tool), applied
// to tool output only, so that a caller can hide its secret from the evidence but cannot erase
// any other text from it.
//
// An occurrence stands alone when neither the byte before it nor the byte after it continues a
// token. A byte continues a token when it is a word byte — an ASCII letter or digit, '_', or any
// byte of a multi-byte UTF-8 character — or a joiner ('-', '.', '+', '/', '~', '%') whose own
// neighbour on the far side is a word byte. So in "TOKEN=v", `"v"`, "v." at the end of a
// sentence and "https://v:443" the value v stands alone; in "xv", "v_1", "api.v" and "path/v" it does
// not. Besides the value itself, its JSON-escaped forms, its percent-encoding, its hex (either
// case) and its whole base64 encodings (standard and URL, with or without padding, also when a
// trailing newline was encoded with it) are replaced, under the same rule.
func (r *Redactor) Standalone(values ...string) *Redactor {
	forms := append(standaloneForms(values), partialForms(values, true)...)
	e := &engine{fpKey: r.fpKey, knownOnly: true}
	texts := make([]string, 0, len(forms)+1)
	for i := range forms {
		texts = append(texts, string(forms[i].text))
		e.patterns = append(e.patterns, pattern{form: &forms[i]})
	}
	texts = append(texts, strings.ToLower(markerPrefix))
	e.patterns = append(e.patterns, pattern{marker: true})
	e.auto = newAutomaton(texts)
	e.scratch.New = func() any { return &scratch{} }
	return &Redactor{engine: e}
}

// Marker returns the text that replaces a secret found by rule: "[REDACTED:<rule>]".
func Marker(rule string) string { return string(appendMarker(nil, rule)) }

// standaloneForms returns the forms of values that Standalone replaces.
func standaloneForms(values []string) []form {
	var out []form
	seen := map[string]bool{}
	add := func(text string, f form) {
		if text == "" || seen[text] {
			return
		}
		seen[text] = true
		f.text, f.standalone = []byte(text), true
		out = append(out, f)
	}
	for _, v := range values {
		if len(v) < minKnownSecretLen {
			continue
		}
		textForms(v, add)
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			if m := base64Middle(enc, v, 0); len(m) >= minBase64Form {
				add(m, form{base64Tail: true})
			}
		}
	}
	return out
}

// isWordByte reports whether c is part of a word: an ASCII letter or digit, '_', or a byte of a
// multi-byte UTF-8 character.
func isWordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c >= 0x80
}

// isJoiner reports whether c joins the words on each side of it into one token.
func isJoiner(c byte) bool {
	switch c {
	case '-', '.', '+', '/', '~', '%':
		return true
	}
	return false
}

// continuesToken reports whether text[i] continues a token that ends (step -1) or starts (step
// +1) next to it; see Standalone.
func continuesToken(text []byte, i, step int) bool {
	if i < 0 || i >= len(text) {
		return false
	}
	if isWordByte(text[i]) {
		return true
	}
	far := i + step
	return isJoiner(text[i]) && far >= 0 && far < len(text) && isWordByte(text[far])
}

// standsAlone reports whether text[start:end] stands alone (see Standalone).
func standsAlone(text []byte, start, end int) bool {
	return !continuesToken(text, start-1, -1) && !continuesToken(text, end, +1)
}
