package redact

import (
	_ "embed"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"

	"github.com/spf13/viper"
	gitleaks "github.com/zricethezav/gitleaks/v8/config"

	"github.com/toolgate/toolgate/internal/regularfile"
)

// MaxRulesFileBytes bounds redact.rules_file: a rules file is a few
// kilobytes of TOML, and is read whole at start.
const MaxRulesFileBytes = 4 << 20

// toolgateRules are the pattern rules Toolgate adds to the gitleaks set, in the same format:
// connection strings and URLs with passwords, Authorization header credentials, and private key
// bodies whose END line is missing (truncated output).
//
//go:embed toolgate.toml
var toolgateRules string

// Rule sources, as reported by [Redactor.Rules].
const (
	SourceGitleaks = "gitleaks"
	SourceToolgate = "toolgate"
	SourceFile     = "rules_file"
)

// RuleInfo describes one active rule.
type RuleInfo struct {
	ID          string
	Description string
	Source      string   // SourceGitleaks, SourceToolgate or SourceFile
	Keywords    []string // lower case; the rule runs only where one occurs
}

// rule is one compiled pattern rule.
type rule struct {
	RuleInfo
	expr        string         // as written in the rules file
	re          *regexp.Regexp // expr rewritten by optimize
	secretGroup int            // 0: the first non-empty group, or the whole match without groups
	entropy     float64        // minimum Shannon entropy of the secret, 0 for none
	// needDigit rejects secrets without a digit: gitleaks asks it of its generic rules that have
	// an entropy threshold, because Go's regexp has no lookahead to say so in the pattern.
	needDigit  bool
	allowlists []allowlist
	// allowlistTargets says which texts other than the secret the allowlists read.
	allowlistTargets map[string]bool
	// leading is the optional run dropped from the start of the pattern (see optimize).
	leading *leadingRun
	// anchored, set when every match starts with a keyword, is the pattern anchored at the
	// start of its input ([0]) or one byte after it ([1]), the byte before a keyword, so that
	// \b and the like see it.
	anchored [2]*regexp.Regexp
	// guard, for an anchored rule, is a quick test before the pattern runs (see guard).
	guard *guard
	// required are case-sensitive literals every match contains (see requiredLiterals): a
	// bounded rule does not run where its window lacks one.
	required [][]byte
	// literals are sets of lower-case literals: each match contains one of each set (see
	// literalGroups). Where the text a rule reads lacks one, the rule does not run there.
	literals [][][]byte
	// order is the rule's position in the active rules (see ranksBefore).
	order int
	// cutSafe: see cutSafe in optimize.go.
	cutSafe bool
	// width bounds a match in bytes; unbounded rules get a search window that grows on demand.
	width int
}

// allowlist is a compiled gitleaks allowlist. Path and commit conditions cannot hold for
// evidence (an artifact is neither a file path nor a commit), so an allowlist that requires them
// (condition AND) is dropped, and under OR they are ignored.
type allowlist struct {
	target    string // "" (the secret), "match" or "line"
	and       bool
	regexes   []allowRegex
	stopwords *automaton // nil without stopwords
}

// minPrefilteredProg is the program size (instructions) from which a rule's literals are
// checked before it runs.
const minPrefilteredProg = 100

// maxBoundedWidth is the largest match width treated as bounded; wider rules search a window
// that grows while matches touch its edge.
const maxBoundedWidth = 1024

// ruleFile is one gitleaks-format rules file, decoded with viper as gitleaks does.
type ruleFile struct {
	source string
	name   string // for errors
	vc     gitleaks.ViperConfig
}

func decodeRuleFile(source, name, text string) (*ruleFile, error) {
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(strings.NewReader(text)); err != nil {
		return nil, fmt.Errorf("redact: rules %s: %w", name, err)
	}
	rf := &ruleFile{source: source, name: name}
	if err := v.Unmarshal(&rf.vc); err != nil {
		return nil, fmt.Errorf("redact: rules %s: %w", name, err)
	}
	return rf, nil
}

// loadRules returns the active rules: the gitleaks default set, Toolgate's own, then the rules
// of cfg.RulesFile (a rule with an existing id replaces it), minus the disabled ids. Global
// allowlists of every file apply to all rules (or to their targetRules).
func loadRules(cfg Config) ([]*rule, error) {
	files := make([]*ruleFile, 0, 3)
	for _, f := range []struct{ source, name, text string }{
		{SourceGitleaks, "gitleaks default", gitleaks.DefaultConfig},
		{SourceToolgate, "toolgate default", toolgateRules},
	} {
		rf, err := decodeRuleFile(f.source, f.name, f.text)
		if err != nil {
			return nil, err
		}
		files = append(files, rf)
	}
	disabled := slices.Clone(cfg.DisableRules)
	if cfg.RulesFile != "" {
		text, err := regularfile.Read(cfg.RulesFile, MaxRulesFileBytes)
		if err != nil {
			return nil, fmt.Errorf("redact: rules file: %w", err)
		}
		rf, err := decodeRuleFile(SourceFile, cfg.RulesFile, string(text))
		if err != nil {
			return nil, err
		}
		if rf.vc.Extend.Path != "" || rf.vc.Extend.URL != "" {
			return nil, fmt.Errorf("redact: rules %s: [extend] path and url are not supported; the gitleaks default rules are always included", cfg.RulesFile)
		}
		disabled = append(disabled, rf.vc.Extend.DisabledRules...)
		files = append(files, rf)
	}

	var (
		order []string
		byID  = map[string]*rule{}
	)
	for _, rf := range files {
		for i, vr := range rf.vc.Rules {
			if vr.ID == "" {
				return nil, fmt.Errorf("redact: rules %s: rule %d has no id", rf.name, i+1)
			}
			if vr.Regex == "" {
				continue // a path-only rule finds files, not text
			}
			r, err := compileRule(rf, vr.ID, vr.Description, vr.Regex, vr.SecretGroup, vr.Entropy, vr.Keywords)
			if err != nil {
				return nil, err
			}
			if vr.AllowList != nil {
				vr.Allowlists = append(vr.Allowlists, vr.AllowList)
			}
			for _, a := range vr.Allowlists {
				al, ok, err := compileAllowlist(a.Condition, a.RegexTarget, a.Regexes, a.StopWords, len(a.Paths)+len(a.Commits) > 0)
				if err != nil {
					return nil, fmt.Errorf("redact: rules %s: rule %s: allowlist: %w", rf.name, vr.ID, err)
				}
				if ok {
					r.allowlists = append(r.allowlists, al)
				}
			}
			if _, exists := byID[r.ID]; !exists {
				order = append(order, r.ID)
			}
			byID[r.ID] = r
		}
	}
	// Global allowlists, applied after all rules are known so that targetRules can name any.
	for _, rf := range files {
		globals := rf.vc.Allowlists
		if rf.vc.AllowList != nil {
			globals = append(globals, rf.vc.AllowList)
		}
		for _, g := range globals {
			al, ok, err := compileAllowlist(g.Condition, g.RegexTarget, g.Regexes, g.StopWords, len(g.Paths)+len(g.Commits) > 0)
			if err != nil {
				return nil, fmt.Errorf("redact: rules %s: global allowlist: %w", rf.name, err)
			}
			if !ok {
				continue
			}
			targets := g.TargetRules
			if len(targets) == 0 {
				targets = order
			}
			for _, id := range targets {
				r, found := byID[id]
				if !found {
					return nil, fmt.Errorf("redact: rules %s: allowlist target rule %q does not exist", rf.name, id)
				}
				r.allowlists = append(r.allowlists, al)
			}
		}
	}
	for _, r := range byID {
		r.allowlistTargets = map[string]bool{}
		for _, al := range r.allowlists {
			r.allowlistTargets[al.target] = true
		}
	}
	// A rule may be disabled twice (redact.disable_rules and the rules
	// file's [extend]); only an id no source defines is an error.
	for _, id := range disabled {
		if !slices.Contains(order, id) {
			return nil, fmt.Errorf("redact: cannot disable rule %q: no such rule", id)
		}
		delete(byID, id)
	}
	rules := make([]*rule, 0, len(byID))
	for _, id := range order {
		if r, ok := byID[id]; ok {
			r.order = len(rules)
			rules = append(rules, r)
		}
	}
	return rules, nil
}

func compileRule(rf *ruleFile, id, description, expr string, secretGroup int, entropy float64, keywords []string) (*rule, error) {
	errorf := func(format string, args ...any) error {
		return fmt.Errorf("redact: rules %s: rule %s: "+format, append([]any{rf.name, id}, args...)...)
	}
	if _, err := regexp.Compile(expr); err != nil {
		return nil, errorf("%w", err)
	}
	parsed, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, errorf("%w", err)
	}
	parsed, run := optimize(parsed)
	re, err := regexp.Compile(printRegexp(parsed))
	if err != nil {
		return nil, errorf("rewriting the pattern: %w", err)
	}
	if secretGroup < 0 || secretGroup > re.NumSubexp() {
		return nil, errorf("secretGroup %d, but the regex has %d groups", secretGroup, re.NumSubexp())
	}
	if entropy < 0 || math.IsNaN(entropy) {
		return nil, errorf("entropy must not be negative")
	}
	kws := make([]string, 0, len(keywords))
	for _, k := range keywords {
		if k == "" {
			return nil, errorf("empty keyword")
		}
		kws = append(kws, strings.ToLower(k))
	}
	if len(kws) == 0 {
		// A rule without keywords would run over every byte of every artifact. gitleaks accepts
		// it; inline on every call we do not.
		return nil, errorf("no keywords: every rule needs at least one keyword that occurs in each match")
	}
	width, bounded := maxWidth(parsed.Simplify())
	if !bounded || width > maxBoundedWidth {
		width = -1
	}
	var required [][]byte
	for _, lit := range requiredLiterals(parsed) {
		required = append(required, []byte(lit))
	}
	// Only patterns that are costly to run get a literal check first: for a small one the
	// check costs more than the run.
	var groups [][][]byte
	if prog, err := syntax.Compile(parsed.Simplify()); err == nil && len(prog.Inst) >= minPrefilteredProg {
		original, _ := syntax.Parse(expr, syntax.Perl) // optimize rewrote parsed; literals are gone from it
		for _, g := range literalGroups(original) {
			if slices.ContainsFunc(g, func(lit string) bool {
				return slices.ContainsFunc(kws, func(k string) bool { return strings.Contains(k, lit) || strings.Contains(lit, k) })
			}) {
				continue // a keyword satisfies it wherever the rule runs
			}
			lits := make([][]byte, len(g))
			for i, lit := range g {
				lits[i] = []byte(lit)
			}
			groups = append(groups, lits)
		}
	}
	var anchored [2]*regexp.Regexp
	var g *guard
	if startsWithKeyword(parsed, kws) {
		g = newGuard(parsed)
		for i, prefix := range []string{`^(?:`, `^(?s:.)(?:`} {
			if anchored[i], err = regexp.Compile(prefix + printRegexp(parsed) + `)`); err != nil {
				return nil, errorf("anchoring the pattern: %w", err)
			}
		}
	}
	return &rule{
		RuleInfo:    RuleInfo{ID: id, Description: description, Source: rf.source, Keywords: slices.Compact(slices.Sorted(slices.Values(kws)))},
		expr:        expr,
		re:          re,
		secretGroup: secretGroup,
		entropy:     entropy,
		needDigit:   entropy > 0 && strings.HasPrefix(id, "generic"),
		leading:     run,
		anchored:    anchored,
		guard:       g,
		cutSafe:     cutSafe(parsed, true),
		literals:    groups,
		required:    required,
		width:       width,
	}, nil
}

// compileAllowlist compiles an allowlist. ok is false when it can never apply to evidence.
func compileAllowlist(condition, target string, regexes, stopwords []string, hasPathOrCommit bool) (allowlist, bool, error) {
	var al allowlist
	switch strings.ToUpper(condition) {
	case "", "OR", "||":
	case "AND", "&&":
		al.and = true
	default:
		return al, false, fmt.Errorf("condition %q: want AND or OR", condition)
	}
	switch target {
	case "", "secret":
	case "match", "line":
		al.target = target
	default:
		return al, false, fmt.Errorf("regexTarget %q: want secret, match or line", target)
	}
	for _, expr := range regexes {
		re, err := compileAllowRegex(expr)
		if err != nil {
			return al, false, err
		}
		al.regexes = append(al.regexes, re)
	}
	var words []string
	for _, w := range stopwords {
		if w != "" {
			words = append(words, strings.ToLower(w))
		}
	}
	if len(words) > 0 {
		// gitleaks' generic rule has over a thousand stopwords: one pass over the secret
		// instead of one substring search each.
		al.stopwords = newAutomaton(words)
	}
	if al.and && hasPathOrCommit {
		return al, false, nil
	}
	return al, len(al.regexes) > 0 || al.stopwords != nil, nil
}

// compileUnfolded compiles an allowlist pattern with case-folded literals as classes (see
// unfold): the same language, matched faster.
func compileUnfolded(expr string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(expr); err != nil {
		return nil, err
	}
	parsed, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, err
	}
	return regexp.Compile(printRegexp(unfold(parsed)))
}

// allows reports whether the allowlist exempts a finding.
func (al *allowlist) allows(secret, match, line string) bool {
	subject := secret
	switch al.target {
	case "match":
		subject = match
	case "line":
		subject = line
	}
	stopHit := al.stopwords != nil && al.stopwords.any([]byte(secret))
	if !al.and && stopHit {
		return true
	}
	regexHit := slices.ContainsFunc(al.regexes, func(a allowRegex) bool { return a.matches(subject) })
	if al.and {
		return (len(al.regexes) == 0 || regexHit) && (al.stopwords == nil || stopHit)
	}
	return regexHit
}

// maxWidth returns the most bytes a match of re can span, and false when that is unbounded.
func maxWidth(re *syntax.Regexp) (int, bool) {
	const utfMax = 4
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary, syntax.OpNoMatch:
		return 0, true
	case syntax.OpLiteral:
		n := 0
		for _, r := range re.Rune {
			n += runeWidth(r)
		}
		return n, true
	case syntax.OpCharClass:
		// (?i) adds the long s and the Kelvin sign to every class with s or k; counting them as
		// the letters they fold to keeps windows as short as the ASCII text they are for.
		w := 1
		for i := 0; i+1 < len(re.Rune); i += 2 {
			lo, hi := re.Rune[i], re.Rune[i+1]
			if lo == hi && (lo == 0x17F || lo == 0x212A) {
				continue
			}
			w = max(w, runeWidth(hi))
		}
		return w, true
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return utfMax, true
	case syntax.OpCapture:
		return maxWidth(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus:
		return 0, false
	case syntax.OpQuest:
		return maxWidth(re.Sub[0])
	case syntax.OpRepeat:
		if re.Max < 0 {
			return 0, false
		}
		w, ok := maxWidth(re.Sub[0])
		return w * re.Max, ok
	case syntax.OpConcat:
		total := 0
		for _, sub := range re.Sub {
			w, ok := maxWidth(sub)
			if !ok {
				return 0, false
			}
			total += w
		}
		return total, true
	case syntax.OpAlternate:
		widest := 0
		for _, sub := range re.Sub {
			w, ok := maxWidth(sub)
			if !ok {
				return 0, false
			}
			widest = max(widest, w)
		}
		return widest, true
	}
	return 0, false
}

func runeWidth(r rune) int {
	switch {
	case r < 0x80:
		return 1
	case r < 0x800:
		return 2
	case r < 0x10000:
		return 3
	}
	return 4
}

// shannonEntropy returns the entropy of s in bits per byte, as gitleaks computes it.
func shannonEntropy(s string) float64 {
	if s == "" {
		return 0
	}
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	n := float64(len(s))
	var h float64
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}
