package redact

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxJSONDepth bounds nesting, as encoding/json does, so that hostile input cannot exhaust the
// stack.
const maxJSONDepth = 10000

// JSON redacts a JSON document structurally: only string values, object keys and numbers that
// hold a secret change, and everything else — keys, order, spacing, number spelling — stays byte
// for byte, so the result is valid JSON with the input's structure. When nothing is found the
// result is doc itself. An input that is not exactly one valid JSON value is an error (no partial
// output).
//
// Rules run twice: over the document text as written, which gives gitleaks-style rules the
// key/value context they expect ("api_key": "…"), and over each decoded string that holds a
// keyword or known value, which sees text the way a reader of the string does (a log line with
// real newlines). The value under a key that names a secret is replaced whole. Findings are in
// document order.
func (r *Redactor) JSON(artifact string, doc []byte) ([]byte, []Finding, error) {
	return r.json(artifact, doc, 0, false)
}

// EncodedJSON is JSON for a document the caller encoded itself with encoding/json, which is one
// valid JSON value by construction: a document with nothing to redact is returned without the
// validity check JSON makes of it (a fifth of the cost of redacting a typical artifact). The
// result is JSON's for every valid document; for anything else it is unspecified.
func (r *Redactor) EncodedJSON(artifact string, doc []byte) ([]byte, []Finding, error) {
	return r.json(artifact, doc, 0, true)
}

// maxNesting bounds how deep JSON inside JSON strings is walked as JSON.
const maxNesting = 2

// json redacts doc, which is nesting levels down in strings of an outer document. valid says
// the caller vouches that doc is one valid JSON value.
func (r *Redactor) json(artifact string, doc []byte, nesting int, valid bool) ([]byte, []Finding, error) {
	sc := r.getScratch()
	defer r.scratch.Put(sc)
	// Most artifacts hold no keyword, known value or key name at all: one pass of the automaton
	// and a validity check settle them. Escapes (\u0070assword) could hide a keyword from the
	// automaton, so a document with \u escapes is always walked.
	hits := slices.Clone(r.hits(doc, sc))
	encoded := r.encodedHits(doc, true, sc, 0)
	if len(hits) == 0 && len(encoded) == 0 && !bytes.Contains(doc, []byte(`\u`)) && !(r.canWrap() && hasWrappedRun(doc, true)) && (valid || json.Valid(doc)) {
		return doc, nil, nil
	}
	docSpans, structural, err := r.scanDocument(doc, hits, sc)
	if err != nil {
		return nil, nil, fmt.Errorf("redact: artifact %q: %w", artifact, err)
	}
	var findings []Finding
	// As in Text, the output must be a fixed point. Each string value already is one (see
	// redact); what a pass can change beyond that is the document text around the values, so
	// the next pass runs only if the scan of the document text finds something new.
	for pass := 0; pass < maxPasses; pass++ {
		w := jsonWalker{r: r, sc: sc, artifact: artifact, doc: doc, hits: hits, docSpans: docSpans, structural: structural, encoded: encoded, nesting: nesting}
		if err := (&jsonParser{doc: doc, w: &w}).parse(); err != nil {
			return nil, nil, fmt.Errorf("redact: artifact %q: %w", artifact, err)
		}
		if len(w.edits) == 0 {
			break
		}
		doc, findings = w.apply(), append(findings, w.findings...)
		hits = slices.Clone(r.hits(doc, sc))
		encoded = r.encodedHits(doc, true, sc, 0)
		if docSpans, structural, err = r.scanDocument(doc, hits, sc); err != nil || len(docSpans) == 0 {
			break
		}
	}
	return doc, findings, err
}

// scanDocument validates doc and scans its text, given every hit in it: it returns the secrets
// the rules find in the document text outside long string values, and the values secret by
// structure.
func (r *Redactor) scanDocument(doc []byte, hits []hit, sc *scratch) ([]span, []span, error) {
	// The scan of the document text is there for context across the structure (a key and its
	// value). Inside a long string value, a log or a file, the scan of the decoded value sees
	// the same text with real newlines; scanning it twice would only double the cost, so hits
	// there are left to that scan.
	pre := jsonWalker{r: r, doc: doc, collectLong: true}
	if err := (&jsonParser{doc: doc, w: &pre}).parse(); err != nil {
		return nil, nil, err
	}
	sc.hits = sc.hits[:0]
	for _, h := range hits {
		if !insideAny(pre.long, h.end-r.keywordLength(h.pattern), h.end) {
			sc.hits = append(sc.hits, h)
		}
	}
	return slices.Clone(r.find(doc, sc, false)), pre.structuralSecrets(), nil
}

// structuralSecrets returns the secret values the first pass found, sorted, nested ones merged
// into the outermost.
func (w *jsonWalker) structuralSecrets() []span {
	if len(w.secretValues) == 0 {
		return nil
	}
	slices.SortFunc(w.secretValues, func(a, b span) int { return a.start - b.start })
	out := w.secretValues[:1]
	for _, s := range w.secretValues[1:] {
		if last := &out[len(out)-1]; s.start < last.end {
			last.end = max(last.end, s.end)
			continue
		}
		out = append(out, s)
	}
	return out
}

// apply returns the document with the walker's edits made.
func (w *jsonWalker) apply() []byte {
	out := make([]byte, 0, len(w.doc)+len(w.edits)*16)
	last := 0
	for _, e := range w.edits {
		out = append(out, w.doc[last:e.start]...)
		out = append(out, e.text...)
		last = e.end
	}
	return append(out, w.doc[last:]...)
}

// packageMapKeys name objects whose keys are package names (npm, Composer, Cargo lockfiles).
var packageMapKeys = []string{"dependencies", "devDependencies", "peerDependencies", "optionalDependencies", "requires", "packages", "require", "require-dev"}

// longValue is the length above which a string value is scanned only decoded (see jsonPass).
const longValue = 256

// insideAny reports whether [start, end) lies inside one of spans (sorted, disjoint).
func insideAny(spans []span, start, end int) bool {
	i, _ := slices.BinarySearchFunc(spans, start, func(s span, t int) int { return s.end - t - 1 })
	return i < len(spans) && spans[i].start <= start && end <= spans[i].end
}

// jsonWalker decides, token by token, what to redact.
type jsonWalker struct {
	// collectLong makes the walker only note the string values longer than longValue in long.
	collectLong bool
	long        []span
	// frames, pendingKey and secretValues serve the structural rules (see structure.go):
	// secretValues are the values found secret by structure, sorted and merged for the
	// second pass.
	frames       []objectFrame
	pendingKey   string
	secretValues []span
	r            *Redactor
	sc           *scratch
	artifact     string
	doc          []byte
	hits         []hit  // in doc, by end
	docSpans     []span // secrets found in the document text
	// structural are values secret by structure (see structure.go), sorted and disjoint.
	structural []span
	// encoded are the base64 blobs in doc whose decoding needs a search (see encodedHits).
	encoded  []span
	nesting  int // how deep in strings of an outer document doc is
	path     []pathElem
	edits    []edit
	findings []Finding
}

type edit struct {
	start, end int
	text       []byte
}

// pathElem is one step of a JSON path: an object key, or an array index when index >= 0.
type pathElem struct {
	key   string
	index int
}

// needsLook reports whether doc[start:end] holds a hit or overlaps a secret found in the text.
func (w *jsonWalker) needsLook(start, end int) bool {
	i, _ := slices.BinarySearchFunc(w.hits, start+1, func(h hit, t int) int { return h.end - t })
	if i < len(w.hits) && w.hits[i].end <= end {
		return true
	}
	j, _ := slices.BinarySearchFunc(w.docSpans, start, func(s span, t int) int { return s.end - t - 1 })
	return j < len(w.docSpans) && w.docSpans[j].start < end
}

// str handles a string token doc[start:end] (quotes included). secret is set below a key that
// names a secret. A redacted key also replaces the key in the current path, so that no path
// names a secret.
func (w *jsonWalker) str(start, end int, secret, isKey bool) {
	if !isKey && insideAny(w.structural, start, end) {
		secret = true
	}
	if w.collectLong {
		if !isKey && end-start > longValue {
			w.long = append(w.long, span{start: start, end: end})
		}
		return
	}
	if secret {
		content := w.doc[start+1 : end-1]
		if e, ok := markerEnd(content, 0); len(content) > 0 && !(ok && e == len(content)) {
			w.replaceWhole(start, end, RuleSecretKeyName, content)
		}
		return
	}
	raw := w.doc[start+1 : end-1]
	if !w.needsLook(start, end) && !overlapsAny(w.encoded, start, end) && !(w.r.canWrap() && hasWrappedRun(raw, true)) {
		return
	}
	value := unquote(raw)
	if !isKey && w.nested(start, end, value) {
		return
	}
	sc := w.sc
	_, spans := w.r.redact(value, sc)
	// Secrets the document-level scan found inside this token, located in the decoded value.
	// docSpans are sorted and disjoint: start at the first that ends inside the token.
	first, _ := slices.BinarySearchFunc(w.docSpans, start+2, func(s span, t int) int { return s.end - t })
	for _, ds := range w.docSpans[first:] {
		if ds.start >= end-1 {
			break
		}
		if ds.end <= start+1 {
			continue
		}
		lit := unquote(widenToEscapes(raw, max(ds.start, start+1)-(start+1), min(ds.end, end-1)-(start+1)))
		if len(lit) == 0 {
			continue
		}
		for from := 0; from < len(value); {
			i := bytes.Index(value[from:], lit)
			if i < 0 {
				break
			}
			spans = append(spans, span{start: from + i, end: from + i + len(lit), rule: ds.rule})
			from += i + len(lit)
		}
	}
	if len(spans) == 0 {
		return
	}
	spans = mergeSpans(spans)
	if markers := markersIn(value); len(markers) > 0 {
		spans = withoutMarkerText(spans, markers)
	}
	redacted := replaceSpans(nil, value, spans)
	if isKey {
		w.path[len(w.path)-1].key = string(redacted)
	}
	path := w.renderPath()
	for _, sp := range spans {
		w.findings = append(w.findings, Finding{Rule: sp.rule, Artifact: w.artifact, Path: path, Offset: int64(sp.start), Fingerprint: w.r.Fingerprint(value[sp.start:sp.end])})
	}
	w.edits = append(w.edits, edit{start: start, end: end, text: appendQuoted(nil, redacted)})
}

// nested redacts a string value that is itself a JSON document (a secret manager's
// SecretString, a tool's JSON stdout) as JSON, so that key names and structure count inside it
// too. It reports false when value is not a JSON object or array.
func (w *jsonWalker) nested(start, end int, value []byte) bool {
	trimmed := bytes.TrimLeft(value, " \t\r\n")
	if w.nesting >= maxNesting || len(trimmed) == 0 || trimmed[0] != '{' && trimmed[0] != '[' {
		return false
	}
	// The scratch buffers belong to this walk; the inner one gets its own.
	out, findings, err := w.r.json(w.artifact, value, w.nesting+1, false)
	if err != nil {
		return false
	}
	if len(findings) == 0 {
		return true
	}
	prefix := w.renderPath() + "<json>"
	for _, f := range findings {
		f.Path = prefix + strings.TrimPrefix(f.Path, "$")
		w.findings = append(w.findings, f)
	}
	w.edits = append(w.edits, edit{start: start, end: end, text: appendQuoted(nil, out)})
	return true
}

// number handles a number token. A number cannot be partly replaced and stay a number, so one
// that holds a known value, or sits below a secret key, becomes the marker string.
func (w *jsonWalker) number(start, end int, secret bool) {
	if w.collectLong {
		return
	}
	if insideAny(w.structural, start, end) {
		secret = true
	}
	if secret {
		w.replaceWhole(start, end, RuleSecretKeyName, w.doc[start:end])
		return
	}
	if !w.needsLook(start, end) {
		return
	}
	for _, sp := range w.r.find(w.doc[start:end], w.sc, true) {
		if sp.rule == RuleKnownSecret {
			w.replaceWhole(start, end, RuleKnownSecret, w.doc[start:end])
			return
		}
	}
}

func (w *jsonWalker) replaceWhole(start, end int, rule string, secret []byte) {
	w.findings = append(w.findings, Finding{Rule: rule, Artifact: w.artifact, Path: w.renderPath(), Fingerprint: w.r.Fingerprint(secret)})
	text := append([]byte{'"'}, appendMarker(nil, rule)...)
	w.edits = append(w.edits, edit{start: start, end: end, text: append(text, '"')})
}

// renderPath renders the current path, e.g. `$.args.env["API TOKEN"]` or `$.items[3]`.
func (w *jsonWalker) renderPath() string {
	var b strings.Builder
	b.WriteByte('$')
	for _, e := range w.path {
		switch {
		case e.index >= 0:
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(e.index))
			b.WriteByte(']')
		case isIdentifier(e.key):
			b.WriteByte('.')
			b.WriteString(e.key)
		default:
			b.WriteByte('[')
			b.Write(appendQuoted(nil, []byte(e.key)))
			b.WriteByte(']')
		}
	}
	return b.String()
}

// isIdentifier reports whether key can follow a '.' in a path: [A-Za-z_][A-Za-z0-9_]*.
func isIdentifier(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// jsonParser validates one JSON value and reports its strings and numbers to the walker. Errors
// give the byte offset but never quote the input: the offending byte may be part of a secret.
type jsonParser struct {
	doc   []byte
	pos   int
	depth int
	w     *jsonWalker
}

var errTruncated = errors.New("invalid JSON: value truncated")

func (p *jsonParser) parse() error {
	p.space()
	if p.pos == len(p.doc) {
		return errors.New("invalid JSON: no value")
	}
	if err := p.value(false); err != nil {
		return err
	}
	p.space()
	if p.pos != len(p.doc) {
		return fmt.Errorf("invalid JSON: unexpected data after the value at byte offset %d", p.pos)
	}
	return nil
}

func (p *jsonParser) syntaxError() error {
	if p.pos >= len(p.doc) {
		return errTruncated
	}
	return fmt.Errorf("invalid JSON: syntax error at byte offset %d", p.pos)
}

func (p *jsonParser) space() {
	for p.pos < len(p.doc) {
		switch p.doc[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jsonParser) value(secret bool) error {
	if p.pos >= len(p.doc) {
		return errTruncated
	}
	switch c := p.doc[p.pos]; {
	case c == '{':
		return p.object(secret)
	case c == '[':
		return p.array(secret)
	case c == '"':
		start := p.pos
		if err := p.string(); err != nil {
			return err
		}
		p.w.str(start, p.pos, secret, false)
		return nil
	case c == '-' || '0' <= c && c <= '9':
		start := p.pos
		if err := p.number(); err != nil {
			return err
		}
		p.w.number(start, p.pos, secret)
		return nil
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if strings.HasPrefix(string(p.doc[p.pos:min(len(p.doc), p.pos+5)]), lit) {
				p.pos += len(lit)
				return nil
			}
		}
		return p.syntaxError()
	}
}

func (p *jsonParser) enter() error {
	p.depth++
	if p.depth > maxJSONDepth {
		return fmt.Errorf("invalid JSON: nested deeper than %d at byte offset %d", maxJSONDepth, p.pos)
	}
	return nil
}

func (p *jsonParser) object(secret bool) error {
	if err := p.enter(); err != nil {
		return err
	}
	p.pos++ // {
	p.w.enterObject()
	defer p.w.leaveObject()
	// In a map from package names to versions ("dependencies": {"js-cookie": "^3.0.5"}) keys
	// are data, not field names.
	keysAreData := len(p.w.path) > 0 && slices.Contains(packageMapKeys, p.w.path[len(p.w.path)-1].key)
	p.space()
	if p.pos < len(p.doc) && p.doc[p.pos] == '}' {
		p.pos++
		p.depth--
		return nil
	}
	for {
		p.space()
		if p.pos >= len(p.doc) || p.doc[p.pos] != '"' {
			return p.syntaxError()
		}
		keyStart := p.pos
		if err := p.string(); err != nil {
			return err
		}
		key := unquote(p.doc[keyStart+1 : p.pos-1])
		p.w.path = append(p.w.path, pathElem{key: string(key), index: -1})
		p.w.str(keyStart, p.pos, false, true)
		p.space()
		if p.pos >= len(p.doc) || p.doc[p.pos] != ':' {
			return p.syntaxError()
		}
		p.pos++
		p.space()
		valueStart := p.pos
		p.w.pendingKey = string(key)
		if err := p.value(secret || !keysAreData && p.w.r.isSecretKey(key)); err != nil {
			return err
		}
		p.w.member(key, valueStart, p.pos)
		p.w.path = p.w.path[:len(p.w.path)-1]
		if done, err := p.endOfMember('}'); done || err != nil {
			return err
		}
	}
}

// endOfMember reads what follows a member or element: a comma (more follow) or the closing
// bracket, which ends the container.
func (p *jsonParser) endOfMember(closing byte) (done bool, err error) {
	p.space()
	if p.pos >= len(p.doc) {
		return true, errTruncated
	}
	switch p.doc[p.pos] {
	case ',':
		p.pos++
		return false, nil
	case closing:
		p.pos++
		p.depth--
		return true, nil
	}
	return true, p.syntaxError()
}

func (p *jsonParser) array(secret bool) error {
	if err := p.enter(); err != nil {
		return err
	}
	p.pos++ // [
	p.space()
	if p.pos < len(p.doc) && p.doc[p.pos] == ']' {
		p.pos++
		p.depth--
		return nil
	}
	for i := 0; ; i++ {
		p.space()
		p.w.path = append(p.w.path, pathElem{index: i})
		if err := p.value(secret); err != nil {
			return err
		}
		p.w.path = p.w.path[:len(p.w.path)-1]
		if done, err := p.endOfMember(']'); done || err != nil {
			return err
		}
	}
}

// string advances over a string token, validating its escapes.
func (p *jsonParser) string() error {
	p.pos++ // opening quote
	for p.pos < len(p.doc) {
		switch c := p.doc[p.pos]; {
		case c == '"':
			p.pos++
			return nil
		case c == '\\':
			if p.pos+1 >= len(p.doc) {
				return errTruncated
			}
			switch p.doc[p.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.pos += 2
			case 'u':
				if p.pos+6 > len(p.doc) {
					return errTruncated
				}
				for _, h := range p.doc[p.pos+2 : p.pos+6] {
					if unhex(h) < 0 {
						p.pos++
						return p.syntaxError()
					}
				}
				p.pos += 6
			default:
				p.pos++
				return p.syntaxError()
			}
		case c < 0x20:
			return p.syntaxError()
		default:
			p.pos++
		}
	}
	return errTruncated
}

func (p *jsonParser) number() error {
	digits := func() int {
		n := 0
		for p.pos < len(p.doc) && '0' <= p.doc[p.pos] && p.doc[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.doc[p.pos] == '-' {
		p.pos++
	}
	if p.pos < len(p.doc) && p.doc[p.pos] == '0' {
		p.pos++
	} else if digits() == 0 {
		return p.syntaxError()
	}
	if p.pos < len(p.doc) && p.doc[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return p.syntaxError()
		}
	}
	if p.pos < len(p.doc) && (p.doc[p.pos] == 'e' || p.doc[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.doc) && (p.doc[p.pos] == '+' || p.doc[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return p.syntaxError()
		}
	}
	return nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}

// unquote decodes the content of a validated JSON string. Invalid UTF-8 and lone surrogates
// become U+FFFD, as encoding/json decodes them. Content without escapes is returned as is.
func unquote(raw []byte) []byte {
	if !slices.Contains(raw, '\\') && utf8.Valid(raw) {
		return raw
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, raw[i:i+size]...)
			}
			i += size
			continue
		}
		if i+1 >= len(raw) {
			break
		}
		switch raw[i+1] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, n := decodeU(raw[i:])
			out = utf8.AppendRune(out, r)
			i += n
			continue
		default: // '"', '\\', '/'
			out = append(out, raw[i+1])
		}
		i += 2
	}
	return out
}

// decodeU decodes a \uXXXX escape (and a following low surrogate) at the start of s and returns
// the rune and the bytes consumed.
func decodeU(s []byte) (rune, int) {
	hex4 := func(b []byte) rune {
		if len(b) < 4 {
			return -1
		}
		v := 0
		for _, c := range b[:4] {
			h := unhex(c)
			if h < 0 {
				return -1
			}
			v = v<<4 | h
		}
		return rune(v)
	}
	r := hex4(s[2:])
	if r < 0 {
		return utf8.RuneError, min(len(s), 6)
	}
	if utf16.IsSurrogate(r) {
		if len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
			if r2 := hex4(s[8:]); r2 >= 0 {
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					return dec, 12
				}
			}
		}
		return utf8.RuneError, 6
	}
	return r, 6
}

// widenToEscapes returns raw[start:end] widened so that it neither starts nor ends inside an
// escape sequence.
func widenToEscapes(raw []byte, start, end int) []byte {
	for i := 0; i < len(raw); {
		n := 1
		if raw[i] == '\\' && i+1 < len(raw) {
			n = 2
			if raw[i+1] == 'u' {
				n = min(6, len(raw)-i)
			}
		}
		if i < start && start < i+n {
			start = i
		}
		if i < end && end < i+n {
			end = i + n
		}
		i += n
	}
	return raw[start:end]
}

// appendQuoted appends s as a JSON string literal, escaping only what JSON requires.
func appendQuoted(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
