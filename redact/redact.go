package redact

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"slices"
	"strings"
	"sync"
)

// minKnownSecretLen is the length, in bytes, below which a known value is ignored. Replacing a
// two- or three-byte value everywhere it occurs would shred unrelated text in the evidence (every
// "ab" in every log line), and a value that short cannot be a meaningful secret anyway.
const minKnownSecretLen = 4

// Rule ids that are not patterns.
const (
	RuleKnownSecret   = "known-secret"
	RuleSecretKeyName = "secret-key-name"
)

// builtinKeyNames are the normalized suffixes of JSON keys whose values are secret.
var builtinKeyNames = []string{
	"password", "passwd", "secret", "token", "apikey", "authorization", "cookie",
	"privatekey", "clientsecret", "accesskey", "secretkey", "sessionid", "credentials",
}

// Config configures a Redactor. The zero Config gives the default rules without fingerprints.
type Config struct {
	// KnownSecrets are exact values (e.g. configured secrets) to replace wherever they appear,
	// also in their base64 and base64url (line-wrapped too), hex, percent-encoded, JSON-escaped
	// and reversed forms (see knownForms and findWrapped), and in part (see partial.go).
	KnownSecrets []string
	// KeyNames are extra JSON key names whose values are secret, added to the built-in list.
	KeyNames []string
	// RulesFile is a gitleaks-format TOML file whose rules are added to the default set; a rule
	// with the id of a default rule replaces it. Its [extend] disabledRules are honoured.
	RulesFile string
	// DisableRules are rule ids to switch off.
	DisableRules []string
	// FingerprintKey keys the HMAC-SHA256 fingerprint in each Finding. Without it findings carry
	// no fingerprint.
	FingerprintKey []byte
}

// Finding records one redaction: where, by which rule, and a keyed fingerprint of the secret so
// that the same secret can be recognised across artifacts and calls. Never the secret itself nor
// any part of it.
type Finding struct {
	Rule     string `json:"rule"`     // rule id, e.g. "github-pat", "secret-key-name", "known-secret"
	Artifact string `json:"artifact"` // artifact name, e.g. "request.json"
	// Path is the JSON path of the value, e.g. `$.args.env.TOKEN`, `$.items[3]`, with keys that
	// are not identifiers quoted: `$["a b"]`. Empty for text.
	Path string `json:"path,omitempty"`
	// Offset is the byte offset of the secret within the string value (JSON) or the text.
	Offset int64 `json:"offset"`
	// Fingerprint is hex HMAC-SHA256 of the secret under the gateway's fingerprint key.
	Fingerprint string `json:"fingerprint,omitempty"`
}

// Redactor replaces secrets in text and JSON documents. It is immutable and safe for concurrent
// use.
type Redactor struct {
	*engine
	// extra are known-value forms added by WithSecrets, found by extraAuto.
	extra     []form
	extraAuto *automaton
}

// engine is the compiled, read-only part of a Redactor that derived redactors share.
type engine struct {
	rules    []*rule
	keyNames []string // normalized; a key is secret when its normalized form ends with one
	auto     *automaton
	// patterns describes each automaton pattern: a keyword (the rules it selects) or a form of a
	// known value.
	patterns []pattern
	fpKey    []byte
	fpHashes sync.Pool // hash.Hash: HMAC-SHA256 under fpKey
	// knownOnly is set for a Standalone redactor: known values only, no key names, no
	// structure.
	knownOnly bool
	// wrapped is set when some pattern is a known value, whose encodings may be line-wrapped.
	wrapped bool
	scratch sync.Pool // *scratch
}

type pattern struct {
	rules  []int // keyword: indexes into engine.rules
	form   *form // known value form
	marker bool  // the start of a marker this redactor writes
}

// markerPrefix starts every marker; see appendMarker.
const markerPrefix = "[REDACTED:"

// form is one encoding of a known value.
type form struct {
	text []byte
	// base64Middle marks the part of a base64 encoding that does not depend on the bytes around
	// the value; the one to three characters on each side that mix in neighbouring bytes are
	// redacted with it.
	base64Middle bool
	// base64Tail marks the stable start of a whole base64 encoding: up to three characters after
	// it that mix in the following byte, and padding, are redacted with it.
	base64Tail bool
	// fold compares ASCII letters case-insensitively: hex and percent-encoding are written in
	// either case.
	fold bool
	// standalone counts only occurrences that stand alone (see Redactor.Standalone), under
	// RuleCallerSecret.
	standalone bool
	// partial makes text a gram of the values it lists: a hit is a run of one of them (see
	// partial.go).
	partial []partialRef
}

// New compiles the rules: the gitleaks default set, Toolgate's own rules, cfg.RulesFile, minus
// cfg.DisableRules. It fails on an invalid rule, an unknown id to disable, or a key name that is
// empty after normalization (it would mark every key as secret).
func New(cfg Config) (*Redactor, error) {
	rules, err := loadRules(cfg)
	if err != nil {
		return nil, err
	}
	e := &engine{rules: rules, keyNames: slices.Clone(builtinKeyNames), fpKey: slices.Clone(cfg.FingerprintKey)}
	for i, name := range cfg.KeyNames {
		n := normalizeKey(name)
		if n == "" {
			return nil, fmt.Errorf("redact: Config.KeyNames[%d] is empty after removing '_', '-', '.' and spaces; it would match every key", i)
		}
		e.keyNames = append(e.keyNames, n)
	}
	slices.Sort(e.keyNames)
	e.keyNames = slices.Compact(e.keyNames)

	keywordIndex := map[string]int{}
	var texts []string
	for ri, r := range rules {
		for _, k := range r.Keywords {
			pi, ok := keywordIndex[k]
			if !ok {
				pi = len(texts)
				keywordIndex[k] = pi
				texts = append(texts, k)
				e.patterns = append(e.patterns, pattern{})
			}
			e.patterns[pi].rules = append(e.patterns[pi].rules, ri)
		}
	}
	for _, f := range append(knownForms(nil, cfg.KnownSecrets), partialForms(cfg.KnownSecrets, false)...) {
		texts = append(texts, string(f.text))
		e.patterns = append(e.patterns, pattern{form: &f})
		e.wrapped = true
	}
	// Key names are keywords too, so that a document without any keyword is known to need no
	// walk: a key that names a secret holds one of these (see keyNameTriggers).
	for _, t := range keyNameTriggers(e.keyNames) {
		texts = append(texts, t)
		e.patterns = append(e.patterns, pattern{})
	}
	texts = append(texts, strings.ToLower(markerPrefix))
	e.patterns = append(e.patterns, pattern{marker: true})
	e.auto = newAutomaton(texts)
	e.scratch.New = func() any { return &scratch{ruleHits: make([][]int, len(rules))} }
	return &Redactor{engine: e}, nil
}

// WithSecrets returns a Redactor that also replaces the given exact values (e.g. env values the
// gateway passes to one tool call), in every encoding Config.KnownSecrets are. It shares compiled
// rules with r; r is unchanged.
func (r *Redactor) WithSecrets(values ...string) *Redactor {
	extra := append(knownForms(r.extra, values), partialForms(values, false)...)
	texts := make([]string, len(extra))
	for i, f := range extra {
		texts[i] = string(f.text)
	}
	return &Redactor{engine: r.engine, extra: extra, extraAuto: newAutomaton(texts)}
}

// Rules describes the active rules, in order.
func (r *Redactor) Rules() []RuleInfo {
	out := make([]RuleInfo, len(r.rules))
	for i, ru := range r.rules {
		out[i] = ru.RuleInfo
		out[i].Keywords = slices.Clone(ru.Keywords)
	}
	return out
}

// Fingerprint returns the hex HMAC-SHA256 of secret under the fingerprint key, or "" without a
// key. Auditors use it to check whether a value they hold is the one a finding records.
func (r *Redactor) Fingerprint(secret []byte) string {
	if len(r.fpKey) == 0 {
		return ""
	}
	// A report can hold a finding per secret in a megabyte of them: the keyed hash is reused
	// rather than set up anew for each.
	m, _ := r.fpHashes.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, r.fpKey)
	}
	m.Reset()
	m.Write(secret)
	var sum [sha256.Size]byte
	out := hex.EncodeToString(m.Sum(sum[:0]))
	r.fpHashes.Put(m)
	return out
}

// FingerprintKeyID identifies the fingerprint key without revealing it (the first 16 hex digits
// of an HMAC under the key), or "" without a key. Fingerprints compare only under the same id.
func (r *Redactor) FingerprintKeyID() string {
	if len(r.fpKey) == 0 {
		return ""
	}
	m := hmac.New(sha256.New, r.fpKey)
	m.Write([]byte("toolgate fingerprint key id"))
	return hex.EncodeToString(m.Sum(nil))[:16]
}

// String redacts one plain string; findings have no artifact and no path.
func (r *Redactor) String(s string) (string, []Finding) {
	out, findings := r.Text("", []byte(s))
	return string(out), findings
}

// Text redacts plain text (a log, a stdout capture). The result is text itself when nothing was
// found. For inputs too large to hold in memory, use [Redactor.Copy].
func (r *Redactor) Text(artifact string, text []byte) ([]byte, []Finding) {
	sc := r.getScratch()
	defer r.scratch.Put(sc)
	out, spans := r.redact(text, sc)
	if len(spans) == 0 {
		return text, nil
	}
	findings := make([]Finding, len(spans))
	for i, sp := range spans {
		findings[i] = Finding{Rule: sp.rule, Artifact: artifact, Offset: int64(sp.start), Fingerprint: r.Fingerprint(text[sp.start:sp.end])}
	}
	return out, findings
}

// maxPasses bounds the passes of redact. Real text settles after one or two; each further pass
// needs text crafted so that replacing a secret forms a new one.
const maxPasses = 16

// redact replaces the secrets of text and returns the result and the spans replaced, in text's
// offsets. It rescans its own output until nothing more is found: replacing a secret changes
// the context rules see (a pattern may match differently next to a marker), and redacted text
// must be a fixed point of the redactor, or evidence would change each time it passes through.
func (r *Redactor) redact(text []byte, sc *scratch) ([]byte, []span) {
	spans := r.findAll(text, sc, 0)
	if len(spans) == 0 {
		return text, nil
	}
	out := replaceSpans(nil, text, spans)
	for pass := 1; pass < maxPasses; pass++ {
		more := r.findNearMarkers(out, sc)
		if len(more) == 0 {
			break
		}
		// New spans avoid marker text, so each lies in text copied unchanged from the input.
		toInput := inputOffsets(spans)
		for _, sp := range more {
			start := toInput(sp.start)
			spans = append(spans, span{start: start, end: start + sp.end - sp.start, rule: sp.rule})
		}
		slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.start, b.start) })
		out = replaceSpans(out[:0], text, spans)
	}
	return out, spans
}

// rescanReach is how far from a marker a rescan looks: a match that a replacement can change
// overlaps the marker, and matches are far shorter.
const rescanReach = 2048

// findNearMarkers finds secrets in redacted text near its markers only: elsewhere the text is
// what the previous pass already searched. Short texts are searched whole.
func (r *Redactor) findNearMarkers(text []byte, sc *scratch) []span {
	markers := markersIn(text)
	if len(text) <= 4*rescanReach || len(markers) == 0 {
		return slices.Clone(r.find(text, sc, true))
	}
	var spans []span
	for i := 0; i < len(markers); {
		lo, hi := max(0, markers[i].start-rescanReach), min(len(text), markers[i].end+rescanReach)
		for i++; i < len(markers) && markers[i].start-rescanReach <= hi; i++ {
			hi = min(len(text), markers[i].end+rescanReach)
		}
		for _, sp := range r.find(text[lo:hi], sc, true) {
			sp.start, sp.end = sp.start+lo, sp.end+lo
			spans = append(spans, sp)
		}
	}
	return mergeSpans(spans)
}

// inputOffsets returns a function that maps an offset in the output of replaceSpans(text, spans)
// (spans sorted), outside markers, to the offset in text. Each call is a binary search, so that
// mapping many offsets stays O(n log n).
func inputOffsets(spans []span) func(outOffset int) int {
	// markerStart[i] is where span i's marker starts in the output; delta[i] how much longer the
	// output is than the input after it.
	markerStart := make([]int, len(spans))
	delta := make([]int, len(spans))
	d := 0
	for i, sp := range spans {
		markerStart[i] = sp.start + d
		d += len(markerPrefix) + len(sp.rule) + 1 - (sp.end - sp.start)
		delta[i] = d
	}
	return func(outOffset int) int {
		i, found := slices.BinarySearch(markerStart, outOffset)
		if found {
			i++
		}
		if i == 0 {
			return outOffset
		}
		return outOffset - delta[i-1]
	}
}

// span is one secret: text[start:end], found by rule.
type span struct {
	start, end int
	rule       string
	order      int // rank among rules that find the same secret: lower names it
}

// scratch holds per-scan buffers, reused through engine.scratch.
type scratch struct {
	hits     []hit
	ruleHits [][]int // per rule: where its keyword occurrences start
	touched  []int   // rules with hits
	spans    []span
	markers  []span // markers already in the text
	// runs remembers, per alignment of a value, how far its run was followed (see appendRuns).
	runs map[runKey]int
	// decoding holds the buffers of each level of base64 decoding (see encoded.go).
	decoding [maxDecodeDepth]decoding
}

func (e *engine) getScratch() *scratch { return e.scratch.Get().(*scratch) }

// hits returns every keyword and known-value occurrence in text, in order of their end.
func (r *Redactor) hits(text []byte, sc *scratch) []hit {
	sc.hits = r.auto.scan(text, sc.hits[:0])
	if len(r.extra) == 0 {
		return sc.hits
	}
	n := len(sc.hits)
	sc.hits = r.extraAuto.scan(text, sc.hits)
	for i := n; i < len(sc.hits); i++ {
		sc.hits[i].pattern += int32(len(r.patterns))
	}
	slices.SortStableFunc(sc.hits, func(a, b hit) int { return cmp.Compare(a.end, b.end) })
	return sc.hits
}

// keywordLength returns the length of a hit's pattern.
func (r *Redactor) keywordLength(id int32) int {
	if int(id) < len(r.patterns) {
		return r.auto.lengths[id]
	}
	return len(r.extra[int(id)-len(r.patterns)].text)
}

// patternAt returns the pattern of a hit: the engine's, or one of r.extra.
func (r *Redactor) patternAt(id int32) pattern {
	if int(id) < len(r.patterns) {
		return r.patterns[id]
	}
	return pattern{form: &r.extra[int(id)-len(r.patterns)]}
}

// find returns the secrets in text, merged and ordered. With scan false the caller has already
// put the hits to use in sc.hits.
func (r *Redactor) find(text []byte, sc *scratch, scan bool) []span {
	hits := sc.hits
	if scan {
		hits = r.hits(text, sc)
	}
	sc.spans = sc.spans[:0]
	sc.markers = sc.markers[:0]
	if len(hits) == 0 {
		return nil
	}
	for _, h := range hits {
		p := r.patternAt(h.pattern)
		if p.marker {
			if end, ok := markerEnd(text, h.end-len(markerPrefix)); ok {
				sc.markers = append(sc.markers, span{start: h.end - len(markerPrefix), end: end})
			}
			continue
		}
		// A keyword inside a marker ("secret" in "[REDACTED:known-secret]") is the
		// redactor's own text, not a clue: rules never see it, which keeps rescans of
		// text dense with markers from running every rule at every marker.
		if n := len(sc.markers); n > 0 && h.end <= sc.markers[n-1].end && h.end-r.keywordLength(h.pattern) >= sc.markers[n-1].start {
			continue
		}
		if p.form != nil && p.form.partial != nil {
			if sc.runs == nil {
				sc.runs = map[runKey]int{}
			}
			sc.spans = p.form.appendRuns(sc.spans, text, h.end, sc.runs)
			continue
		}
		if p.form != nil {
			if sp, ok := p.form.at(text, h.end); ok {
				sc.spans = append(sc.spans, sp)
			}
			continue
		}
		start := h.end - r.keywordLength(h.pattern)
		for _, ri := range p.rules {
			if len(sc.ruleHits[ri]) == 0 {
				sc.touched = append(sc.touched, ri)
			}
			sc.ruleHits[ri] = append(sc.ruleHits[ri], start)
		}
	}
	for _, ri := range sc.touched {
		sc.spans = r.rules[ri].appendMatches(sc.spans, text, sc.ruleHits[ri])
		sc.ruleHits[ri] = sc.ruleHits[ri][:0]
	}
	sc.touched = sc.touched[:0]
	clear(sc.runs)
	spans := mergeSpans(sc.spans)
	if len(sc.markers) > 0 {
		spans = withoutMarkerText(spans, sc.markers)
	}
	return spans
}

// markerEnd returns the end of the marker starting at start: "[REDACTED:", a rule id, "]".
func markerEnd(text []byte, start int) (int, bool) {
	if start < 0 || !bytes.HasPrefix(text[start:], []byte(markerPrefix)) {
		return 0, false
	}
	const maxID = 128
	rest := text[start+len(markerPrefix) : min(len(text), start+len(markerPrefix)+maxID+1)]
	i := bytes.IndexByte(rest, ']')
	if i <= 0 || bytes.ContainsAny(rest[:i], " \t\r\n[") {
		return 0, false
	}
	return start + len(markerPrefix) + i + 1, true
}

// markersIn returns the markers in text.
func markersIn(text []byte) []span {
	var markers []span
	for from := 0; ; {
		i := bytes.Index(text[from:], []byte(markerPrefix))
		if i < 0 {
			return markers
		}
		if end, ok := markerEnd(text, from+i); ok {
			markers = append(markers, span{start: from + i, end: end})
		}
		from += i + 1
	}
}

// withoutMarkerText removes marker text from spans (both sorted), splitting spans around it.
// Markers are never redacted again: the redactor's output must be a fixed point of the
// redactor, or evidence would change each time it passes through (and markers would nest).
func withoutMarkerText(spans, markers []span) []span {
	out := make([]span, 0, len(spans))
	first := 0 // markers before it end before every span still to come
	for _, sp := range spans {
		for first < len(markers) && markers[first].end <= sp.start {
			first++
		}
		for _, m := range markers[first:] {
			if m.start >= sp.end {
				break
			}
			if m.end <= sp.start {
				continue
			}
			if m.start > sp.start {
				out = append(out, span{start: sp.start, end: m.start, rule: sp.rule})
			}
			sp.start = max(sp.start, m.end)
			if sp.start >= sp.end {
				break
			}
		}
		if sp.start < sp.end {
			out = append(out, sp)
		}
	}
	return out
}

// at checks a hit of f ending at end against the exact bytes (ASCII case-insensitively for a
// fold form) and returns the span to redact.
func (f *form) at(text []byte, end int) (span, bool) {
	start := end - len(f.text)
	if start < 0 || f.fold && !bytes.EqualFold(text[start:end], f.text) || !f.fold && !bytes.Equal(text[start:end], f.text) {
		return span{}, false
	}
	if f.base64Middle {
		for n := 0; n < 2 && start > 0 && isBase64Byte(text[start-1]); n++ {
			start--
		}
		for n := 0; n < 3 && end < len(text) && (isBase64Byte(text[end]) || text[end] == '='); n++ {
			end++
		}
	}
	if f.base64Tail {
		for n := 0; n < 3 && end < len(text) && isBase64Byte(text[end]); n++ {
			end++
		}
		for n := 0; n < 2 && end < len(text) && text[end] == '='; n++ {
			end++
		}
	}
	if f.standalone {
		if !standsAlone(text, start, end) {
			return span{}, false
		}
		return span{start: start, end: end, rule: RuleCallerSecret, order: -1}, true
	}
	return span{start: start, end: end, rule: RuleKnownSecret, order: -1}, true
}

func isBase64Byte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '-' || c == '_'
}

// initialWindow is how far around a keyword an unbounded windowed rule first looks.
const initialWindow = 384

// appendMatches runs the rule at the keyword occurrences starting at starts (ascending) and
// appends the secrets it finds.
func (ru *rule) appendMatches(spans []span, text []byte, starts []int) []span {
	if ru.anchored[0] != nil {
		return ru.appendAnchored(spans, text, starts)
	}
	return ru.appendWindowed(spans, text, starts)
}

// anchoredWindow is how far an unbounded anchored rule first reads from a keyword: longer than
// any credential; a longer private key is caught by private-key-body, which matches up to the
// end of the window. A match that reaches the end of the window may go on,
// so the rule then runs on the rest of the text.
const anchoredWindow = 1024

// cutSafeWindow is the first input of an unbounded rule that is safe to cut (see cutSafe): short
// enough for Go's backtracking matcher.
const cutSafeWindow = 256

// appendAnchored runs an anchored rule at each keyword occurrence, on the text from there to
// width bytes on, or anchoredWindow bytes for an unbounded rule.
func (ru *rule) appendAnchored(spans []span, text []byte, starts []int) []span {
	covered := 0 // a match ended here; starts before it belong to that match
	for i, s := range starts {
		if i > 0 && s == starts[i-1] || s < covered {
			continue
		}
		re, base, skip := ru.anchored[0], s, 0
		if s > 0 {
			re, base, skip = ru.anchored[1], s-1, 1
		}
		limit := ru.width
		switch {
		case limit >= 0:
		case ru.cutSafe:
			limit = cutSafeWindow
		default:
			limit = anchoredWindow
		}
		hi := min(len(text), s+limit)
		if ru.guard != nil && !ru.guard.ok(text[s:]) ||
			ru.width >= 0 && !containsAll(text[s:hi], ru.required) ||
			ru.readsWhole() && !containsGroups(text[s:hi], ru.literals) {
			continue
		}
		m := re.FindSubmatchIndex(text[base:hi])
		// A match that reaches the end of its input may go on: double the input until it
		// stops short of the end.
		for grow := limit; m != nil && m[1] == hi-base && hi < len(text) && ru.width < 0; grow *= 2 {
			hi = min(len(text), hi+grow)
			m = re.FindSubmatchIndex(text[base:hi])
		}
		if m == nil {
			continue
		}
		spans = ru.appendSecret(spans, text, base, skip, m)
		covered = base + m[1]
	}
	return spans
}

// containsAll reports whether text contains each of lits.
func containsAll(text []byte, lits [][]byte) bool {
	for _, lit := range lits {
		if !bytes.Contains(text, lit) {
			return false
		}
	}
	return true
}

// readsWhole reports whether a match lies wholly in the text the rule first reads: true for a
// bounded rule; an unbounded one that is not cut-safe is not read further unless a match ends
// right at the end of its input, which a missing literal rules out too.
func (ru *rule) readsWhole() bool { return ru.width >= 0 || !ru.cutSafe }

// containsGroups reports whether text holds, for each group, one of its literals (lower case,
// compared ASCII case-insensitively).
func containsGroups(text []byte, groups [][][]byte) bool {
	for _, g := range groups {
		if !slices.ContainsFunc(g, func(lit []byte) bool { return containsFold(text, lit) }) {
			return false
		}
	}
	return true
}

// containsFold reports whether text contains lit (lower case), ASCII case-insensitively.
//
// The next occurrence of each case of lit's first byte is remembered until the search passes
// it: searching for both afresh at each candidate would read to the end of text for a case that
// does not occur, once per candidate, which is quadratic in a text dense with the other case.
func containsFold(text, lit []byte) bool {
	first, upper := lit[0], lit[0]
	if 'a' <= first && first <= 'z' {
		upper -= 'a' - 'A'
	}
	nextAt := func(c byte, from int) int {
		if k := bytes.IndexByte(text[from:], c); k >= 0 {
			return from + k
		}
		return len(text)
	}
	lower, up := nextAt(first, 0), len(text)
	if upper != first {
		up = nextAt(upper, 0)
	}
	for {
		i := min(lower, up)
		if i+len(lit) > len(text) {
			return false
		}
		if bytes.EqualFold(text[i:i+len(lit)], lit) {
			return true
		}
		if i == lower {
			lower = nextAt(first, i+1)
		}
		if i == up {
			up = nextAt(upper, i+1)
		}
	}
}

// appendWindowed searches for the rule around each keyword occurrence. Every keyword occurs
// inside each match, so a match lies within width bytes of an occurrence; windows around
// occurrences are merged and the regex runs on each. A match touching a window edge (other than
// the text's) may continue beyond it: the window then grows and the regex runs again.
func (ru *rule) appendWindowed(spans []span, text []byte, starts []int) []span {
	const keywordSlack = 64 // longer than any keyword of the default rules
	radius := ru.width
	if radius < 0 {
		radius = initialWindow
	}
	radius += keywordSlack
	n := len(text)
	for i := 0; i < len(starts); {
		lo, hi := max(0, starts[i]-radius), min(n, starts[i]+radius)
		j := i + 1
		for j < len(starts) && starts[j]-radius <= hi {
			hi = min(n, starts[j]+radius)
			j++
		}
		i = j
		if !ru.cutSafe && !containsGroups(text[lo:hi], ru.literals) {
			continue
		}
		grow := radius
		for {
			ms := ru.re.FindAllSubmatchIndex(text[lo:hi], -1)
			if len(ms) == 0 {
				break
			}
			expanded := false
			if ms[0][0] == 0 && lo > 0 {
				lo, expanded = max(0, lo-grow), true
			}
			if ms[len(ms)-1][1] == hi-lo && hi < n {
				hi, expanded = min(n, hi+grow), true
			}
			if expanded {
				grow *= 2
				continue
			}
			for _, m := range ms {
				spans = ru.appendSecret(spans, text, lo, 0, m)
			}
			break
		}
		// Occurrences whose whole window lies inside one that grew are covered by it.
		for i < len(starts) && starts[i]+radius <= hi {
			i++
		}
	}
	return spans
}

// appendSecret applies the rule's secret group, entropy and allowlists to one match (offsets
// relative to base; the match proper starts skip bytes after m[0]) and appends the secret's span.
func (ru *rule) appendSecret(spans []span, text []byte, base, skip int, m []int) []span {
	start, end := m[0]+skip, m[1]
	if len(m) > 2 {
		if ru.secretGroup > 0 {
			start, end = m[2*ru.secretGroup], m[2*ru.secretGroup+1]
		} else {
			start, end = -1, -1
			for g := 1; g < len(m)/2; g++ {
				if m[2*g] >= 0 && m[2*g+1] > m[2*g] {
					start, end = m[2*g], m[2*g+1]
					break
				}
			}
		}
	}
	if start < 0 || end <= start {
		return spans
	}
	secret := text[base+start : base+end]
	if ru.entropy > 0 {
		if shannonEntropy(string(secret)) <= ru.entropy {
			return spans
		}
		if ru.needDigit && !bytes.ContainsAny(secret, "0123456789") {
			return spans
		}
	}
	if len(ru.allowlists) > 0 {
		// The match and the line are built only for allowlists that look at them: a line of
		// minified JSON can be the whole document.
		var match, line string
		if ru.allowlistTargets["match"] {
			matchStart := base + m[0] + skip
			if ru.leading != nil {
				matchStart = ru.leading.extendStart(text, matchStart, 0)
			}
			match = string(text[matchStart : base+m[1]])
		}
		if ru.allowlistTargets["line"] {
			line = lineAround(text, base+m[0], base+m[1])
		}
		for i := range ru.allowlists {
			if ru.allowlists[i].allows(string(secret), match, line) {
				return spans
			}
		}
	}
	return append(spans, span{start: base + start, end: base + end, rule: ru.ID, order: ru.order})
}

// maxLineContext bounds the line an allowlist sees on each side of a match: a line of minified
// JSON can be the whole document, and no allowlist needs more.
const maxLineContext = 1024

// lineAround returns the line(s) holding text[start:end], at most maxLineContext bytes on each
// side.
func lineAround(text []byte, start, end int) string {
	from := max(0, start-maxLineContext)
	lo := from + bytes.LastIndexByte(text[from:start], '\n') + 1
	to := min(len(text), end+maxLineContext)
	hi := bytes.IndexByte(text[end:to], '\n')
	if hi < 0 {
		hi = to
	} else {
		hi += end
	}
	return string(text[lo:hi])
}

// mergeSpans sorts spans and merges overlapping ones into one, named after the longest of them
// (see ranksBefore among equals).
func mergeSpans(spans []span) []span {
	if len(spans) == 0 {
		return nil
	}
	slices.SortStableFunc(spans, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	out := spans[:1]
	for _, sp := range spans[1:] {
		last := &out[len(out)-1]
		if sp.start < last.end {
			spLen, lastLen := sp.end-sp.start, last.end-last.start
			if spLen > lastLen || spLen == lastLen && ranksBefore(sp, *last) {
				last.rule, last.order = sp.rule, sp.order
			}
			last.end = max(last.end, sp.end)
			continue
		}
		out = append(out, sp)
	}
	return slices.Clone(out)
}

// ranksBefore reports whether a names a secret that b also found: a specific rule before a
// generic one ("github-pat", not "generic-api-key"), then known values, gitleaks' rules, ours and
// a rules file's, in that order.
func ranksBefore(a, b span) bool {
	if ga, gb := isGeneric(a.rule), isGeneric(b.rule); ga != gb {
		return gb
	}
	return a.order < b.order
}

func isGeneric(rule string) bool {
	return strings.HasPrefix(rule, "generic") || rule == "secret-assignment"
}

// replaceSpans appends text with each span replaced by its marker to dst.
func replaceSpans(dst, text []byte, spans []span) []byte {
	last := 0
	for _, sp := range spans {
		dst = append(dst, text[last:sp.start]...)
		dst = appendMarker(dst, sp.rule)
		last = sp.end
	}
	return append(dst, text[last:]...)
}

// appendMarker appends the text that replaces a secret.
func appendMarker(dst []byte, rule string) []byte {
	dst = append(dst, "[REDACTED:"...)
	dst = append(dst, rule...)
	return append(dst, ']')
}

// maxKeyNameLen is the length beyond which a key is data rather than a field name.
const maxKeyNameLen = 128

// isSecretKey reports whether the value under key is secret: key is a field name (letters,
// digits, '_', '-', '.', spaces) whose normalized form ends with one of the key names. Keys with
// other characters are data, not names: "node_modules/js-cookie" in a lockfile, a URL.
func (e *engine) isSecretKey(key []byte) bool {
	if len(key) > maxKeyNameLen {
		return false
	}
	var arr [maxKeyNameLen]byte
	buf := arr[:0]
	for _, c := range key {
		switch {
		case c == '_' || c == '-' || c == '.' || c == ' ':
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case 'a' <= c && c <= 'z' || '0' <= c && c <= '9':
		default:
			return false
		}
		buf = append(buf, c)
	}
	for _, name := range e.keyNames {
		if bytes.HasSuffix(buf, []byte(name)) {
			return true
		}
	}
	return false
}

// builtinTriggers are substrings every spelling of a built-in key name holds (api_key, apiKey
// and x-api-key all hold "key"), and the words the structural rules look for.
var builtinTriggers = []string{"pass", "secret", "token", "key", "authoriz", "cookie", "session", "credential", "sensitive"}

// keyNameTriggers returns the keywords that make a JSON document worth walking: the built-in
// triggers and, for each configured key name, its last three characters (which a spelling with
// separators keeps together unless it splits the last word).
func keyNameTriggers(keyNames []string) []string {
	out := slices.Clone(builtinTriggers)
	for _, n := range keyNames {
		if slices.Contains(builtinKeyNames, n) {
			continue
		}
		out = append(out, n[max(0, len(n)-3):])
	}
	return out
}

// normalizeKey lower-cases key and removes '_', '-', '.' and spaces, so that DB_PASSWORD,
// db-password and dbPassword compare equal.
func normalizeKey(key string) string {
	return strings.ToLower(strings.Map(func(r rune) rune {
		switch r {
		case '_', '-', '.', ' ':
			return -1
		}
		return r
	}, key))
}
