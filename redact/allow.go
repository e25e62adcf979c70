package redact

import (
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
)

// allowRegex is a compiled allowlist pattern.
//
// gitleaks' generic rule checks each candidate against an unanchored alternation of some eighty
// phrases ("access_id", "public_key", "keystore_file", …) with (?i): for Go's matcher, tens of
// microseconds per candidate, more than finding the candidate cost. Such a pattern is split into
// its alternatives, each with the literals a match of it must contain (all of "key" and one of
// "alias", "board", … for key[_.-]?(?:alias|board|…)); one automaton pass over the candidate
// finds which literals occur, and only the alternatives whose literals all do are run.
type allowRegex struct {
	whole *regexp.Regexp // set when the pattern is not split
	alts  []allowAlt
	lits  *automaton // every literal of every alternative, numbered as in allowAlt.groups
	nlits int
}

// allowAlt is one alternative of a split pattern.
type allowAlt struct {
	re *regexp.Regexp
	// groups are sets of literal numbers: a match contains a literal of each group.
	groups [][]int
}

// minPrefilterLiteral is the shortest literal a prefilter relies on.
const minPrefilterLiteral = 2

// minSplitAlternatives is the fewest alternatives worth splitting a pattern for.
const minSplitAlternatives = 8

func compileAllowRegex(expr string) (allowRegex, error) {
	whole, err := compileUnfolded(expr)
	if err != nil {
		return allowRegex{}, err
	}
	parsed, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return allowRegex{}, err
	}
	top := parsed
	for top.Op == syntax.OpCapture {
		top = top.Sub[0]
	}
	if top.Op != syntax.OpAlternate || len(top.Sub) < minSplitAlternatives {
		return allowRegex{whole: whole}, nil
	}
	var a allowRegex
	var texts []string
	for _, sub := range top.Sub {
		groups := literalGroups(sub) // before unfold, which turns literals into classes
		re, err := regexp.Compile(printRegexp(unfold(sub)))
		if err != nil {
			return allowRegex{whole: whole}, nil
		}
		alt := allowAlt{re: re}
		for _, group := range groups {
			ids := make([]int, len(group))
			for i, lit := range group {
				ids[i] = len(texts)
				texts = append(texts, lit)
			}
			alt.groups = append(alt.groups, ids)
		}
		a.alts = append(a.alts, alt)
	}
	a.lits, a.nlits = newAutomaton(texts), len(texts)
	return a, nil
}

// matches reports whether the pattern matches s.
func (a allowRegex) matches(s string) bool {
	if a.whole != nil {
		return a.whole.MatchString(s)
	}
	present := make([]bool, a.nlits)
	for _, h := range a.lits.scan([]byte(s), nil) {
		present[h.pattern] = true
	}
next:
	for _, alt := range a.alts {
		for _, group := range alt.groups {
			found := false
			for _, id := range group {
				if present[id] {
					found = true
					break
				}
			}
			if !found {
				continue next
			}
		}
		if alt.re.MatchString(s) {
			return true
		}
	}
	return false
}

// literalGroups returns sets of lower-cased literals such that every match of re contains one
// literal of each set. None means no prefilter.
func literalGroups(re *syntax.Regexp) [][]string {
	switch re.Op {
	case syntax.OpLiteral:
		if len(re.Rune) < minPrefilterLiteral {
			return nil
		}
		return [][]string{{strings.ToLower(string(re.Rune))}}
	case syntax.OpCapture, syntax.OpPlus:
		return literalGroups(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min == 0 {
			return nil
		}
		return literalGroups(re.Sub[0])
	case syntax.OpConcat:
		var groups [][]string
		for _, sub := range re.Sub {
			groups = append(groups, literalGroups(sub)...)
		}
		// A run of fixed elements spells one of a few strings, which make a group too: this
		// catches alternations the parser split into a short literal and branches (-u|--user
		// into - followed by u|-user).
		run := []string{""}
		flush := func() {
			if len(run) > 1 || run[0] != "" {
				if !slices.ContainsFunc(run, func(s string) bool { return len(s) < minPrefilterLiteral }) {
					groups = append(groups, run)
				}
			}
			run = []string{""}
		}
		for _, sub := range re.Sub {
			if strs, ok := leadingStrings(sub); ok && isFixed(sub) && len(run)*len(strs) <= maxLeadingStrings {
				product := make([]string, 0, len(run)*len(strs))
				for _, a := range run {
					for _, b := range strs {
						product = append(product, a+b)
					}
				}
				run = product
				continue
			}
			flush()
		}
		flush()
		return groups
	case syntax.OpAlternate:
		// One group: for each alternative, the literals of its first group.
		var group []string
		for _, sub := range re.Sub {
			g := literalGroups(sub)
			if len(g) == 0 {
				return nil
			}
			group = append(group, g[0]...)
		}
		return [][]string{group}
	}
	return nil
}
