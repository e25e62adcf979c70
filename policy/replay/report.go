package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/internal/termsafe"
)

// Bounds on what a report keeps, so that its memory stays flat however
// many calls it counts: every call is counted, only so many are listed.
const (
	// MaxListed bounds the flips and the not-replayable calls listed.
	MaxListed = 1000
	// MaxSamples bounds the sample calls kept per flip kind and rule.
	MaxSamples = 3
)

// Report is the outcome of replaying a store's calls (or of the shadow
// decisions on record), in the shape `toolgate policy replay --json`
// prints.
type Report struct {
	// Replayed counts the calls decided again: Unchanged plus the flips.
	Replayed  int `json:"replayed"`
	Unchanged int `json:"unchanged"`
	Flipped   int `json:"flipped"`
	// Flips lists the first MaxListed flips, in the order replayed.
	Flips        []Flip `json:"flips"`
	FlipsOmitted int    `json:"flips_omitted"`
	// Kinds counts the flips by kind ("deny-to-allow", …), then by the
	// rule that decides under the candidate, with samples.
	Kinds map[string]*KindCount `json:"kinds"`
	// NotReplayable lists the first MaxListed calls that could not be
	// decided again faithfully, and those whose evidence failed
	// verification; NotReplayableCount counts them all, Unverified the
	// latter.
	NotReplayable        []Skipped `json:"not_replayable"`
	NotReplayableCount   int       `json:"not_replayable_count"`
	NotReplayableOmitted int       `json:"not_replayable_omitted"`
	Unverified           int       `json:"unverified"`
	// NoShadow, in a shadow report, counts the calls no shadow set
	// decided.
	NoShadow int `json:"no_shadow,omitempty"`
}

// Flip is one call the candidate decides otherwise.
type Flip struct {
	RequestID string `json:"request_id"`
	From      string `json:"from"`
	To        string `json:"to"`
	RuleID    string `json:"rule_id"`
	Caller    string `json:"caller"`
	ToolID    string `json:"tool_id"`
	Reason    string `json:"reason"`
}

// Skipped is a call that was not decided again, and why.
type Skipped struct {
	RequestID string `json:"request_id"`
	Why       string `json:"why"`
}

// KindCount counts one kind of flip.
type KindCount struct {
	Count int                   `json:"count"`
	Rules map[string]*RuleCount `json:"rules"`
}

// RuleCount counts the flips of one kind one rule decides.
type RuleCount struct {
	Count   int    `json:"count"`
	Reason  string `json:"reason"`
	Samples []Flip `json:"samples"`
}

// NewReport returns an empty report.
func NewReport() *Report {
	return &Report{Flips: []Flip{}, NotReplayable: []Skipped{}, Kinds: map[string]*KindCount{}}
}

// Kind names the flip from one word to another: "deny-to-allow",
// "allow-to-approval-required", …
func Kind(from, to string) string {
	return strings.ReplaceAll(from, "_", "-") + "-to-" + strings.ReplaceAll(to, "_", "-")
}

// Kinds lists every kind of flip, for --fail-on.
func Kinds() []string {
	words := []string{"allow", "deny", "approval_required"}
	var out []string
	for _, f := range words {
		for _, t := range words {
			if f != t {
				out = append(out, Kind(f, t))
			}
		}
	}
	return out
}

// Add counts the outcome of replaying c.
func (r *Report) Add(c Call, o Outcome) {
	switch {
	case o.Why != "":
		r.Skip(c.RequestID, o.Why)
	case !o.Flipped():
		r.Replayed++
		r.Unchanged++
	default:
		r.Replayed++
		r.Flipped++
		f := Flip{RequestID: c.RequestID, From: o.From, To: o.To, RuleID: o.RuleID, Caller: c.Caller, ToolID: c.ToolID, Reason: o.Reason}
		r.flip(f)
	}
}

func (r *Report) flip(f Flip) {
	if len(r.Flips) < MaxListed {
		r.Flips = append(r.Flips, f)
	} else {
		r.FlipsOmitted++
	}
	k := Kind(f.From, f.To)
	kc := r.Kinds[k]
	if kc == nil {
		kc = &KindCount{Rules: map[string]*RuleCount{}}
		r.Kinds[k] = kc
	}
	kc.Count++
	rc := kc.Rules[f.RuleID]
	if rc == nil {
		rc = &RuleCount{Reason: f.Reason, Samples: []Flip{}}
		kc.Rules[f.RuleID] = rc
	}
	rc.Count++
	if len(rc.Samples) < MaxSamples {
		rc.Samples = append(rc.Samples, f)
	}
}

// Skip counts a call that was not decided again.
func (r *Report) Skip(requestID, why string) {
	r.NotReplayableCount++
	if len(r.NotReplayable) < MaxListed {
		r.NotReplayable = append(r.NotReplayable, Skipped{RequestID: requestID, Why: why})
	} else {
		r.NotReplayableOmitted++
	}
}

// SkipUnverified counts a call whose evidence failed verification.
func (r *Report) SkipUnverified(requestID, verdict string, problems []string) {
	r.Unverified++
	why := "evidence fails verification (" + verdict + ")"
	if len(problems) > 0 {
		why += ": " + problems[0]
	}
	r.Skip(requestID, why)
}

// Count returns how many flips of kind the report counted; the kinds
// "not-replayable" and "unverified" count the calls not decided again.
func (r *Report) Count(kind string) int {
	switch kind {
	case "not-replayable":
		return r.NotReplayableCount
	case "unverified":
		return r.Unverified
	}
	if kc := r.Kinds[kind]; kc != nil {
		return kc.Count
	}
	return 0
}

// WriteJSON writes the report as one JSON document, with every rune a
// terminal would act on escaped: request ids, callers and reasons are the
// callers' text.
func (r *Report) WriteJSON(w io.Writer) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return err
	}
	out, err := termsafe.JSON(buf.Bytes())
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

// WriteText writes the report for a person: the counts, then each kind of
// flip by rule with its samples, then the calls not replayed. Every text
// that came from the evidence or the policies is quoted when it holds
// anything a terminal would act on.
func (r *Report) WriteText(w io.Writer) error {
	q := termsafe.Quote
	var b strings.Builder
	fmt.Fprintf(&b, "replayed %d: %d unchanged, %d flipped; %d not replayable (%d failed verification)\n",
		r.Replayed, r.Unchanged, r.Flipped, r.NotReplayableCount, r.Unverified)
	for _, k := range slices.Sorted(maps.Keys(r.Kinds)) {
		kc := r.Kinds[k]
		fmt.Fprintf(&b, "%s: %d\n", k, kc.Count)
		for _, rule := range slices.Sorted(maps.Keys(kc.Rules)) {
			rc := kc.Rules[rule]
			fmt.Fprintf(&b, "  rule %s: %d  (%s)\n", q(rule), rc.Count, q(rc.Reason))
			for _, s := range rc.Samples {
				fmt.Fprintf(&b, "    %s  caller %s  tool %s\n", q(s.RequestID), q(s.Caller), q(s.ToolID))
			}
		}
	}
	if r.NotReplayableCount > 0 {
		fmt.Fprintf(&b, "not replayable: %d\n", r.NotReplayableCount)
		for _, s := range r.NotReplayable {
			fmt.Fprintf(&b, "  %s: %s\n", q(s.RequestID), q(s.Why))
		}
		if r.NotReplayableOmitted > 0 {
			fmt.Fprintf(&b, "  … and %d more\n", r.NotReplayableOmitted)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
