package redact

import (
	"cmp"
	"fmt"
	"math/bits"
	"regexp"
	"slices"
	"strings"
)

// minKnownSecretLen is the length, in bytes, below which a known value is ignored. Replacing a
// two- or three-byte value everywhere it occurs would shred unrelated text in the evidence (every
// "ab" in every log line), and a value that short cannot be a meaningful secret anyway.
const minKnownSecretLen = 4

// Rule ids that are not patterns.
const (
	ruleKnownSecret   = "known-secret"
	ruleSecretKeyName = "secret-key-name"
)

// builtinKeyNames are the normalized suffixes of JSON keys whose values are secret.
var builtinKeyNames = []string{
	"password", "passwd", "secret", "token", "apikey", "authorization", "cookie",
	"privatekey", "clientsecret", "accesskey", "secretkey", "sessionid", "credentials",
}

// Config configures a Redactor.
type Config struct {
	// KnownSecrets are exact values (e.g. configured secrets) to replace wherever they appear.
	KnownSecrets []string
	// KeyNames are extra JSON key names whose values are secret, added to the built-in list.
	KeyNames []string
}

// Redactor replaces secrets in strings and JSON documents. It is immutable and safe for
// concurrent use.
type Redactor struct {
	rules *ruleSet
	// known holds the known values, deduplicated, each at least minKnownSecretLen bytes long,
	// longest first.
	known []string
}

// ruleSet is the compiled, read-only part of a Redactor that derived redactors share.
type ruleSet struct {
	patterns []rule
	keyNames []string // normalized; a key is secret when its normalized form ends with one
	// firstByte[c] has bit p set when pattern p has a literal that can start with byte c. Most
	// strings in evidence (ids, timestamps, paths) contain no literal at all; one pass over the
	// string with this table rules them out instead of one substring search per literal.
	firstByte [256]uint64
}

// Finding records one redaction, never the secret itself nor any part of it.
type Finding struct {
	Rule     string `json:"rule"`     // rule id, e.g. "github-token", "secret-key-name", "known-secret"
	Artifact string `json:"artifact"` // artifact name given to JSON, e.g. "request.json"
	Path     string `json:"path"`     // JSON path of the value, e.g. `$.args.env.TOKEN`, `$.items[3]`; keys that are not simple identifiers quoted like `$["a b"]`
	Offset   int    `json:"offset"`   // byte offset of the secret inside the original string value (0 for whole-value redactions)
}

// New compiles the redaction rules. It fails when a key name in cfg is empty after
// normalization, because such a name would mark every key as secret.
func New(cfg Config) (*Redactor, error) {
	rs := &ruleSet{keyNames: slices.Clone(builtinKeyNames)}
	for i, name := range cfg.KeyNames {
		n := normalizeKey(name)
		if n == "" {
			return nil, fmt.Errorf("redact: Config.KeyNames[%d] is empty after removing '_', '-', '.' and spaces; it would match every key", i)
		}
		rs.keyNames = append(rs.keyNames, n)
	}
	slices.Sort(rs.keyNames)
	rs.keyNames = slices.Compact(rs.keyNames)

	rs.patterns = make([]rule, 0, len(patternSpecs))
	for _, spec := range patternSpecs {
		re, err := regexp.Compile(`^(?:` + spec.expr + `)`)
		if err != nil {
			return nil, fmt.Errorf("redact: compiling rule %s: %w", spec.id, err)
		}
		rs.patterns = append(rs.patterns, rule{patternSpec: spec, re: re})
	}
	if len(rs.patterns) > 64 {
		return nil, fmt.Errorf("redact: %d pattern rules, the prefilter holds 64", len(rs.patterns))
	}
	for p, ru := range rs.patterns {
		for _, lit := range ru.literals {
			c := lit[0]
			rs.firstByte[c] |= 1 << p
			if ru.fold && 'a' <= c && c <= 'z' {
				rs.firstByte[c-'a'+'A'] |= 1 << p
			}
		}
	}
	return &Redactor{rules: rs, known: mergeKnown(nil, cfg.KnownSecrets)}, nil
}

// WithSecrets returns a Redactor that also replaces the given exact values (e.g. env values the
// gateway passes to one tool call). It shares compiled rules with r; r is unchanged. Safe for
// concurrent use.
func (r *Redactor) WithSecrets(values ...string) *Redactor {
	return &Redactor{rules: r.rules, known: mergeKnown(r.known, values)}
}

// String redacts one plain string (Path "" and Artifact "" in findings).
func (r *Redactor) String(s string) (string, []Finding) {
	spans := r.find(s)
	if len(spans) == 0 {
		return s, nil
	}
	findings := make([]Finding, len(spans))
	for i, sp := range spans {
		findings[i] = Finding{Rule: sp.rule, Offset: sp.start}
	}
	return replace(s, spans), findings
}

// mergeKnown returns base plus the usable values of add, deduplicated and sorted longest first.
// The order only makes the redactor deterministic: overlapping occurrences are merged by
// mergeSpans, so a value inside a longer one never leaves part of the longer one behind.
func mergeKnown(base, add []string) []string {
	out := make([]string, 0, len(base)+len(add))
	out = append(out, base...)
	for _, v := range add {
		if len(v) >= minKnownSecretLen {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b))
	})
	return slices.Compact(out)
}

// span is a byte range of a string to replace by the marker of rule.
type span struct {
	start, end int
	rule       string
	// prio breaks ties between matches of equal length: lower wins. Known secrets come first,
	// then patterns in table order, specific token formats before generic ones.
	prio int
	// width is the length of the match that gave the span its rule; a merged span is labelled
	// by its longest match.
	width int
}

// find returns the ranges of s to redact, sorted and non-overlapping.
func (r *Redactor) find(s string) []span {
	var spans []span
	for _, k := range r.known {
		for i := 0; i+len(k) <= len(s); {
			j := strings.Index(s[i:], k)
			if j < 0 {
				break
			}
			start := i + j
			spans = append(spans, span{start: start, end: start + len(k), rule: ruleKnownSecret, width: len(k)})
			i = start + len(k)
		}
	}
	present := r.rules.literalsPresent(s)
	for p := range r.rules.patterns {
		if present&(1<<p) != 0 {
			spans = r.rules.patterns[p].appendMatches(spans, s, p+1)
		}
	}
	return mergeSpans(spans)
}

// literalsPresent returns the set of patterns (bit p for pattern p) one of whose literals occurs
// in s. A pattern outside the set cannot match s.
func (rs *ruleSet) literalsPresent(s string) uint64 {
	var present uint64
	for i := 0; i < len(s); i++ {
		candidates := rs.firstByte[s[i]] &^ present
		for candidates != 0 {
			p := bits.TrailingZeros64(candidates)
			candidates &= candidates - 1
			if rs.patterns[p].hasLiteralAt(s[i:]) {
				present |= 1 << p
			}
		}
	}
	return present
}

// mergeSpans sorts spans and merges overlapping ones, so that no part of any match survives
// even when two rules (or two known values) disagree about where a secret starts or ends.
func mergeSpans(spans []span) []span {
	if len(spans) < 2 {
		return spans
	}
	slices.SortFunc(spans, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(b.end, a.end), cmp.Compare(a.prio, b.prio))
	})
	out := spans[:1]
	for _, sp := range spans[1:] {
		cur := &out[len(out)-1]
		if sp.start >= cur.end {
			out = append(out, sp)
			continue
		}
		cur.end = max(cur.end, sp.end)
		if sp.width > cur.width || (sp.width == cur.width && sp.prio < cur.prio) {
			cur.rule, cur.prio, cur.width = sp.rule, sp.prio, sp.width
		}
	}
	return out
}

// replace returns s with every span replaced by its marker.
func replace(s string, spans []span) string {
	var b strings.Builder
	b.Grow(len(s) + 32*len(spans))
	prev := 0
	for _, sp := range spans {
		b.WriteString(s[prev:sp.start])
		b.WriteString(marker(sp.rule))
		prev = sp.end
	}
	b.WriteString(s[prev:])
	return b.String()
}

// marker is the text that replaces a secret found by rule.
func marker(rule string) string {
	return "[REDACTED:" + rule + "]"
}
