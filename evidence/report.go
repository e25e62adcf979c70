package evidence

import "unicode/utf8"

// Bounds of the redaction report in a manifest. Whatever an artifact holds,
// the report lists at most MaxListedRedactions findings in full, at most
// MaxListedPerRule of them per rule and artifact, and then one count per
// rule and artifact, at most MaxOmittedEntries of those; a path is cut to
// MaxRedactionPathLen bytes. With them a manifest stays well under
// MaxManifestSize: a tool output dense with secrets costs a few hundred
// bytes of manifest per rule, not per secret, and can never make the
// manifest too large to store.
const (
	MaxListedRedactions = 128
	MaxListedPerRule    = 8
	MaxOmittedEntries   = 512
	MaxRedactionPathLen = 256
	// MaxManifestSize is the size a manifest never reaches.
	MaxManifestSize = 256 << 10
)

// OtherRules names the count, in a report, of findings whose rule and
// artifact did not fit among MaxOmittedEntries counts of their own.
const OtherRules = "*"

type reportKey struct{ rule, artifact string }

// RedactionReport collects the redactions of one request for its
// manifest, within the bounds above, in memory that does not grow with the
// number of findings beyond the number of rules. The zero value is ready
// to use; it is not safe for concurrent use.
type RedactionReport struct {
	listed  []Redaction
	perKey  map[reportKey]int
	omitted map[reportKey]int64
	keys    []reportKey // omitted's keys, in order of first omission
	other   int64
}

// Add records one redaction: in full while its rule and artifact, and the
// report, have room, else as a count.
func (p *RedactionReport) Add(r Redaction) {
	if p.perKey == nil {
		p.perKey, p.omitted = map[reportKey]int{}, map[reportKey]int64{}
	}
	k := reportKey{r.Rule, r.Artifact}
	if len(p.listed) < MaxListedRedactions && p.perKey[k] < MaxListedPerRule {
		p.perKey[k]++
		r.Path = truncatePath(r.Path)
		p.listed = append(p.listed, r)
		return
	}
	if _, ok := p.omitted[k]; !ok {
		if len(p.keys) >= MaxOmittedEntries {
			p.other++
			return
		}
		p.keys = append(p.keys, k)
	}
	p.omitted[k]++
}

// Redactions returns the report: the findings listed in full, in the order
// they were added, then the counts of those left out.
func (p *RedactionReport) Redactions() []Redaction {
	out := make([]Redaction, 0, len(p.listed)+len(p.keys)+1)
	out = append(out, p.listed...)
	for _, k := range p.keys {
		out = append(out, Redaction{Rule: k.rule, Artifact: k.artifact, Omitted: p.omitted[k]})
	}
	if p.other > 0 {
		out = append(out, Redaction{Rule: OtherRules, Artifact: OtherRules, Omitted: p.other})
	}
	return out
}

// truncatePath cuts a path longer than MaxRedactionPathLen at a character
// boundary and marks the cut with "…". Paths are built from redacted key
// names, so a cut never reveals more than the whole would.
func truncatePath(path string) string {
	if len(path) <= MaxRedactionPathLen {
		return path
	}
	cut := MaxRedactionPathLen
	for cut > 0 && !utf8.RuneStart(path[cut]) {
		cut--
	}
	return path[:cut] + "…"
}
