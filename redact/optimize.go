package redact

import (
	"regexp/syntax"
	"slices"
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
		if re.Flags&syntax.FoldCase != 0 {
			return nil, false
		}
		return []string{string(re.Rune)}, true
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
