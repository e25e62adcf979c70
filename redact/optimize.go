package redact

import (
	"fmt"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Two rewrites make gitleaks' patterns cheaper for Go's regexp without changing which secrets
// they find.
//
// A leading optional run such as gitleaks' `[\w.-]{0,50}?` only moves where a match starts: the
// rest of the pattern matches at the same places with or without it, and it captures nothing. It
// is dropped from the compiled pattern and kept as a byte class, so that allowlists that look at
// the whole match (regexTarget "match") still see it: the match start is moved back over up to
// max bytes of the class, as leftmost matching would have placed it. Dropping it lets the
// pattern fit Go's backtracking matcher and stops the matcher from tracking fifty candidate
// starts at every byte.
//
// Case-insensitive literals become character classes ([aA][pP][iI]): Go matches a folded literal
// by walking the Unicode fold orbit of every input rune, a class by a range check.

// leadingRun is a dropped leading optional run.
type leadingRun struct {
	class [256]bool // ASCII bytes of the class; any other byte ends the run
	max   int
}

// extendStart moves a match start back over the run, not past floor.
func (lr *leadingRun) extendStart(text []byte, start, floor int) int {
	for n := 0; n < lr.max && start > floor && lr.class[text[start-1]]; n++ {
		start--
	}
	return start
}

// optimize rewrites a parsed pattern; run is nil when nothing was dropped.
func optimize(re *syntax.Regexp) (*syntax.Regexp, *leadingRun) {
	var run *leadingRun
	if re.Op == syntax.OpConcat && len(re.Sub) > 1 {
		if lr := optionalRun(re.Sub[0]); lr != nil {
			run = lr
			re.Sub = re.Sub[1:]
		}
	}
	return unfold(re), run
}

// optionalRun returns the leading run if first is X*, X?, or X{0,n} of a class or any byte.
func optionalRun(first *syntax.Regexp) *leadingRun {
	maxCount := 0
	switch first.Op {
	case syntax.OpStar:
		maxCount = 256
	case syntax.OpQuest:
		maxCount = 1
	case syntax.OpRepeat:
		if first.Min != 0 {
			return nil
		}
		maxCount = first.Max
		if maxCount < 0 {
			maxCount = 256
		}
	default:
		return nil
	}
	sub := first.Sub[0]
	lr := &leadingRun{max: maxCount}
	switch sub.Op {
	case syntax.OpCharClass:
		for i := 0; i+1 < len(sub.Rune); i += 2 {
			for c := sub.Rune[i]; c <= sub.Rune[i+1] && c < 0x80; c++ {
				lr.class[c] = true
			}
		}
	default:
		return nil
	}
	return lr
}

// unfold replaces case-folded literals by classes, recursively.
func unfold(re *syntax.Regexp) *syntax.Regexp {
	for i, sub := range re.Sub {
		re.Sub[i] = unfold(sub)
	}
	if re.Op != syntax.OpLiteral || re.Flags&syntax.FoldCase == 0 {
		return re
	}
	flags := re.Flags &^ syntax.FoldCase
	parts := make([]*syntax.Regexp, 0, len(re.Rune))
	for _, r := range re.Rune {
		orbit := []rune{r}
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			orbit = append(orbit, f)
		}
		if len(orbit) == 1 {
			parts = append(parts, &syntax.Regexp{Op: syntax.OpLiteral, Flags: flags, Rune: []rune{r}})
			continue
		}
		slices.Sort(orbit)
		class := make([]rune, 0, 2*len(orbit))
		for _, f := range orbit {
			class = append(class, f, f)
		}
		parts = append(parts, &syntax.Regexp{Op: syntax.OpCharClass, Flags: flags, Rune: class})
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return &syntax.Regexp{Op: syntax.OpConcat, Flags: flags, Sub: parts}
}

// maxLeadingStrings bounds the expansion of a pattern's leading literal strings.
const maxLeadingStrings = 4096

// startsWithKeyword reports whether every match of re begins with one of keywords (lower case,
// compared case-insensitively), after any leading empty-width assertions. Such a rule is run
// anchored at each keyword occurrence instead of searched for in a window around it.
func startsWithKeyword(re *syntax.Regexp, keywords []string) bool {
	prefixes, ok := leadingStrings(re)
	if !ok || len(prefixes) == 0 {
		return false
	}
	for _, p := range prefixes {
		if !slices.ContainsFunc(keywords, func(k string) bool { return len(p) >= len(k) && foldEqual(p[:len(k)], k) }) {
			return false
		}
	}
	return true
}

// leadingStrings returns strings one of which begins every match of re, or false when re can
// begin with something that is not a fixed string (a class of more than a few runes, an
// optional part, an empty match).
func leadingStrings(re *syntax.Regexp) ([]string, bool) {
	switch re.Op {
	case syntax.OpLiteral:
		// Lower-cased: callers compare case-insensitively.
		return []string{strings.ToLower(string(re.Rune))}, true
	case syntax.OpCharClass:
		// Strings are compared case-insensitively, so case variants count once: [aA] is "a",
		// and the non-ASCII fold variants of s and k (ſ, K) are left out with them.
		var out []string
		for i := 0; i+1 < len(re.Rune); i += 2 {
			if re.Rune[i+1]-re.Rune[i] > 3 || len(out) > 8 {
				return nil, false
			}
			for c := re.Rune[i]; c <= re.Rune[i+1]; c++ {
				if c >= 0x80 && foldsToASCII(c) {
					continue
				}
				if s := string(unicode.ToLower(c)); !slices.Contains(out, s) {
					out = append(out, s)
				}
			}
		}
		return out, len(out) > 0
	case syntax.OpCapture:
		return leadingStrings(re.Sub[0])
	case syntax.OpQuest:
		if !isFixed(re.Sub[0]) {
			return nil, false
		}
		s, ok := leadingStrings(re.Sub[0])
		return append(s, ""), ok
	case syntax.OpAlternate:
		var out []string
		for _, sub := range re.Sub {
			s, ok := leadingStrings(sub)
			if !ok {
				return nil, false
			}
			out = append(out, s...)
		}
		return out, len(out) <= maxLeadingStrings
	case syntax.OpConcat:
		acc := []string{""}
		for _, sub := range re.Sub {
			if isEmptyWidth(sub) && len(acc) == 1 && acc[0] == "" {
				continue
			}
			next, ok := leadingStrings(sub)
			if !ok {
				break
			}
			if len(acc)*len(next) > maxLeadingStrings {
				break
			}
			product := make([]string, 0, len(acc)*len(next))
			for _, a := range acc {
				for _, n := range next {
					product = append(product, a+n)
				}
			}
			acc = product
			if !isFixed(sub) {
				break
			}
		}
		if len(acc) == 1 && acc[0] == "" {
			return nil, false
		}
		return acc, true
	}
	return nil, false
}

// isFixed reports whether leadingStrings(re) lists whole matches of re, not just their starts.
func isFixed(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpLiteral, syntax.OpCharClass:
		return true
	case syntax.OpCapture, syntax.OpQuest:
		return isFixed(re.Sub[0])
	case syntax.OpAlternate, syntax.OpConcat:
		for _, sub := range re.Sub {
			if !isFixed(sub) {
				return false
			}
		}
		return true
	}
	return false
}

func isEmptyWidth(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary, syntax.OpBeginLine, syntax.OpBeginText, syntax.OpEmptyMatch:
		return true
	}
	return false
}

// foldsToASCII reports whether c is a case variant of an ASCII letter.
func foldsToASCII(c rune) bool {
	for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
		if f < 0x80 {
			return true
		}
	}
	return false
}

// foldEqual compares ASCII case-insensitively; b is lower case.
func foldEqual(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if foldByte(a[i]) != b[i] {
			return false
		}
	}
	return true
}

// requiredLiterals returns literal strings every match of re contains: the case-sensitive
// literals of its top-level sequence. A rule whose window lacks one of them cannot match there,
// and a substring search is far cheaper than starting the matcher.
func requiredLiterals(re *syntax.Regexp) []string {
	for re.Op == syntax.OpCapture {
		re = re.Sub[0]
	}
	var out []string
	add := func(sub *syntax.Regexp) {
		if sub.Op == syntax.OpLiteral && sub.Flags&syntax.FoldCase == 0 {
			out = append(out, string(sub.Rune))
		}
	}
	if re.Op == syntax.OpConcat {
		for _, sub := range re.Sub {
			for sub.Op == syntax.OpCapture {
				sub = sub.Sub[0]
			}
			add(sub)
		}
	} else {
		add(re)
	}
	return out
}

// guard is a cheap test an anchored rule must pass before its pattern runs: some byte of set
// occurs within the first within bytes from the keyword. It comes from the first element after
// the keyword that cannot be empty, e.g. the assignment operator of gitleaks' generic rule,
// which must follow its keyword within 33 bytes; most keywords in ordinary text ("key" in
// "keyboard", "token" in prose) have none nearby, and the test is far cheaper than starting the
// matcher.
type guard struct {
	set    [256]bool
	within int
	// run, when runMin > 0, must follow a byte of set: runMin bytes of run starting at most gap
	// bytes after it (the secret of gitleaks' generic rule: ten or more characters of
	// [\w.=-] at most eight bytes after the operator).
	run    [256]bool
	runMin int
	gap    int
}

// ok reports whether text (from the keyword on) passes the guard.
func (g *guard) ok(text []byte) bool {
	for q, c := range text[:min(len(text), g.within)] {
		if g.set[c] && (g.runMin == 0 || g.runAfter(text, q+1)) {
			return true
		}
	}
	return false
}

// runAfter reports whether a run of g.runMin bytes of g.run starts in text[from:from+g.gap+1].
func (g *guard) runAfter(text []byte, from int) bool {
	n, end := 0, min(len(text), from+g.gap+g.runMin)
	for i := from; i < end; i++ {
		if !g.run[text[i]] {
			if i-from >= g.gap {
				return false
			}
			n = 0
			continue
		}
		if n++; n >= g.runMin {
			return true
		}
	}
	return false
}

// maxGuardSet is the most bytes a guard's set may hold: a larger set rejects too little.
const maxGuardSet = 24

// newGuard derives a guard from a rewritten pattern, or returns nil.
func newGuard(re *syntax.Regexp) *guard {
	for re.Op == syntax.OpCapture {
		re = re.Sub[0]
	}
	if re.Op != syntax.OpConcat {
		return nil
	}
	offset := 0
	for i, sub := range re.Sub {
		w, bounded := maxWidth(sub)
		if !bounded {
			return nil
		}
		if i > 0 && minWidth(sub) > 0 {
			var g guard
			if !firstBytes(sub, &g.set) {
				offset += w
				continue
			}
			n := 0
			for _, in := range g.set {
				if in {
					n++
				}
			}
			if n > maxGuardSet {
				offset += w
				continue
			}
			g.within = offset + 1
			g.addRun(re.Sub[i+1:], w-1)
			return &g
		}
		offset += w
	}
	return nil
}

// minGuardRun is the shortest run a guard checks for.
const minGuardRun = 8

// addRun looks in rest, the elements after the guard's byte set (whose element may reach
// extra bytes further), for a long run every match needs, and adds it to the guard.
func (g *guard) addRun(rest []*syntax.Regexp, extra int) {
	gap := extra
	for _, sub := range rest {
		if class, n, lead, ok := minRun(sub); ok && n >= minGuardRun {
			g.run, g.runMin, g.gap = class, n, gap+lead
			return
		}
		w, bounded := maxWidth(sub)
		if !bounded || minWidth(sub) > 0 {
			return
		}
		gap += w
	}
}

// minRun finds a run every match of re starts with, after at most lead bytes: at least n bytes
// of class in a row.
func minRun(re *syntax.Regexp) (class [256]bool, n, lead int, ok bool) {
	switch re.Op {
	case syntax.OpCapture:
		return minRun(re.Sub[0])
	case syntax.OpRepeat, syntax.OpPlus:
		sub := re.Sub[0]
		m := 1
		if re.Op == syntax.OpRepeat {
			m = re.Min
		}
		if sub.Op != syntax.OpCharClass || m < 1 || !firstBytes(sub, &class) {
			return class, 0, 0, false
		}
		return class, m, 0, true
	case syntax.OpConcat:
		for i, sub := range re.Sub {
			if c, m, l, ok := minRun(sub); ok && m >= minGuardRun {
				for _, before := range re.Sub[:i] {
					w, bounded := maxWidth(before)
					if !bounded {
						return class, 0, 0, false
					}
					l += w
				}
				return c, m, l, true
			}
		}
	case syntax.OpAlternate:
		n = -1
		for _, sub := range re.Sub {
			c, m, l, ok := minRun(sub)
			if !ok || m < minGuardRun {
				return class, 0, 0, false
			}
			for b := range c {
				class[b] = class[b] || c[b]
			}
			if n < 0 || m < n {
				n = m
			}
			lead = max(lead, l)
		}
		return class, n, lead, true
	}
	return class, 0, 0, false
}

// firstBytes adds to set every byte a match of re can start with. It returns false when that
// is not a small ASCII set (or re can match empty).
func firstBytes(re *syntax.Regexp, set *[256]bool) bool {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 || len(re.Rune) == 0 || re.Rune[0] >= 0x80 {
			return false
		}
		set[re.Rune[0]] = true
		return true
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			lo, hi := re.Rune[i], re.Rune[i+1]
			if lo == hi && (lo == 0x17F || lo == 0x212A) {
				continue // the long s and Kelvin sign (?i) adds; see maxWidth
			}
			if hi >= 0x80 {
				return false
			}
			for c := lo; c <= hi; c++ {
				set[c] = true
			}
		}
		return true
	case syntax.OpCapture, syntax.OpPlus:
		return firstBytes(re.Sub[0], set)
	case syntax.OpRepeat:
		return re.Min > 0 && firstBytes(re.Sub[0], set)
	case syntax.OpAlternate:
		for _, sub := range re.Sub {
			if !firstBytes(sub, set) {
				return false
			}
		}
		return true
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if minWidth(sub) > 0 {
				return firstBytes(sub, set)
			}
			if !isEmptyWidth(sub) {
				return false
			}
		}
	}
	return false
}

// minWidth returns the fewest bytes a match of re spans.
func minWidth(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpLiteral:
		return len(string(re.Rune))
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return 1
	case syntax.OpCapture, syntax.OpPlus:
		return minWidth(re.Sub[0])
	case syntax.OpRepeat:
		return re.Min * minWidth(re.Sub[0])
	case syntax.OpConcat:
		n := 0
		for _, sub := range re.Sub {
			n += minWidth(sub)
		}
		return n
	case syntax.OpAlternate:
		n := -1
		for _, sub := range re.Sub {
			if w := minWidth(sub); n < 0 || w < n {
				n = w
			}
		}
		return max(n, 0)
	}
	return 0
}

// printRegexp writes a parsed pattern back as a pattern, every construct spelled out. Unlike
// syntax.Regexp.String it never writes a class like [Aa] as (?i:A), which would bring back the
// case folding unfold removed.
func printRegexp(re *syntax.Regexp) string {
	var b strings.Builder
	writeRegexp(&b, re)
	return b.String()
}

func writeRegexp(b *strings.Builder, re *syntax.Regexp) {
	switch re.Op {
	case syntax.OpNoMatch:
		b.WriteString(`[^\x00-\x{10FFFF}]`)
	case syntax.OpEmptyMatch:
		b.WriteString(`(?:)`)
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			writeRune(b, r)
		}
	case syntax.OpCharClass:
		b.WriteByte('[')
		for i := 0; i+1 < len(re.Rune); i += 2 {
			writeRune(b, re.Rune[i])
			if re.Rune[i+1] != re.Rune[i] {
				b.WriteByte('-')
				writeRune(b, re.Rune[i+1])
			}
		}
		if len(re.Rune) == 0 {
			b.WriteString(`^\x00-\x{10FFFF}`)
		}
		b.WriteByte(']')
	case syntax.OpAnyCharNotNL:
		b.WriteString(`[^\n]`)
	case syntax.OpAnyChar:
		b.WriteString(`(?s:.)`)
	case syntax.OpBeginLine:
		b.WriteString(`(?m:^)`)
	case syntax.OpEndLine:
		b.WriteString(`(?m:$)`)
	case syntax.OpBeginText:
		b.WriteString(`\A`)
	case syntax.OpEndText:
		b.WriteString(`\z`)
	case syntax.OpWordBoundary:
		b.WriteString(`\b`)
	case syntax.OpNoWordBoundary:
		b.WriteString(`\B`)
	case syntax.OpCapture:
		if re.Name != "" {
			b.WriteString(`(?P<` + re.Name + `>`)
		} else {
			b.WriteByte('(')
		}
		writeRegexp(b, re.Sub[0])
		b.WriteByte(')')
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		b.WriteString(`(?:`)
		writeRegexp(b, re.Sub[0])
		b.WriteByte(')')
		switch re.Op {
		case syntax.OpStar:
			b.WriteByte('*')
		case syntax.OpPlus:
			b.WriteByte('+')
		case syntax.OpQuest:
			b.WriteByte('?')
		default:
			b.WriteString(`{` + strconv.Itoa(re.Min))
			if re.Max != re.Min {
				b.WriteByte(',')
				if re.Max >= 0 {
					b.WriteString(strconv.Itoa(re.Max))
				}
			}
			b.WriteByte('}')
		}
		if re.Flags&syntax.NonGreedy != 0 {
			b.WriteByte('?')
		}
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if sub.Op == syntax.OpAlternate {
				b.WriteString(`(?:`)
				writeRegexp(b, sub)
				b.WriteByte(')')
				continue
			}
			writeRegexp(b, sub)
		}
	case syntax.OpAlternate:
		for i, sub := range re.Sub {
			if i > 0 {
				b.WriteByte('|')
			}
			writeRegexp(b, sub)
		}
	}
}

func writeRune(b *strings.Builder, r rune) {
	if r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_') {
		b.WriteRune(r)
		return
	}
	fmt.Fprintf(b, `\x{%x}`, r)
}

// cutSafe reports whether cutting the text anywhere inside a match still leaves a match that
// ends exactly at the cut: every unbounded repetition repeats a single character and everything
// after it can match empty or at the end of the text, as gitleaks' usual ending
// (?:[\x60'"\s;]|\\[nr]|$) can. An anchored rule with this property can be tried on a short
// input first (where Go's fast backtracking matcher runs) and on the rest of the text only when
// its match reaches the end of that input.
func cutSafe(re *syntax.Regexp, restCanEnd bool) bool {
	switch re.Op {
	case syntax.OpCapture:
		return cutSafe(re.Sub[0], restCanEnd)
	case syntax.OpAlternate:
		for _, sub := range re.Sub {
			if !cutSafe(sub, restCanEnd) {
				return false
			}
		}
		return true
	case syntax.OpConcat:
		canEnd := restCanEnd
		for i := len(re.Sub) - 1; i >= 0; i-- {
			if !cutSafe(re.Sub[i], canEnd) {
				return false
			}
			canEnd = canEnd && canEndText(re.Sub[i])
		}
		return true
	case syntax.OpStar, syntax.OpPlus, syntax.OpRepeat:
		if re.Op == syntax.OpRepeat && re.Max >= 0 {
			return cutSafe(re.Sub[0], false)
		}
		w, ok := maxWidth(re.Sub[0])
		return restCanEnd && ok && w <= 4 && minWidth(re.Sub[0]) > 0 && (re.Sub[0].Op == syntax.OpCharClass || re.Sub[0].Op == syntax.OpLiteral || re.Sub[0].Op == syntax.OpAnyChar || re.Sub[0].Op == syntax.OpAnyCharNotNL)
	case syntax.OpQuest:
		return cutSafe(re.Sub[0], false)
	}
	return true
}

// canEndText reports whether re can match empty or at the end of the text.
func canEndText(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpEndText:
		return true
	case syntax.OpCapture:
		return canEndText(re.Sub[0])
	case syntax.OpAlternate:
		return slices.ContainsFunc(re.Sub, canEndText)
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if !canEndText(sub) {
				return false
			}
		}
		return true
	}
	return minWidth(re) == 0 && !isEmptyWidth(re)
}
