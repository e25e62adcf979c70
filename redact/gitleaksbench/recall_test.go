package gitleaksbench

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/redact"
	"github.com/zricethezav/gitleaks/v8/detect"
	"github.com/zricethezav/gitleaks/v8/report"
)

// TestGitleaksSecretsRedacted checks, file by file over the positive corpus, that toolgate
// leaves nothing behind that gitleaks would rightly report: every secret gitleaks finds in a
// file must be absent from toolgate's redacted copy of that file.
//
// Two kinds of gitleaks finding are listed in the log instead of checked:
//   - secrets found only after decoding (base64, hex, percent-encoding), which do not occur
//     verbatim in the file, so their absence proves nothing;
//   - gitleaks' false positives: text that overlaps no secret labelled in labels.json (the
//     labels list every secret the generator planted), such as an idempotency key that the
//     generic-api-key rule takes for a credential. Requiring those redacted would contradict
//     TestNegativesFalsePositives, where the same kind of text must be left alone.
func TestGitleaksSecretsRedacted(t *testing.T) {
	r := newToolgate(t)
	d := newGitleaks(t)
	labels := readLabels(t)
	var checked, decoded, falsePositives int
	for _, f := range readCorpus(t, "positive") {
		t.Run(f.name, func(t *testing.T) {
			out, _ := r.Text(f.name, f.data)
			planted := occurrences(f.data, labels["positive/"+f.name]...)
			for _, g := range d.Detect(detect.Fragment{Raw: string(f.data)}) {
				// Fragment lines count from 0.
				line := g.StartLine + 1
				found := occurrences(f.data, g.Secret)
				switch {
				case len(found) == 0:
					decoded++
					t.Logf("gitleaks %s at line %d found %s only after decoding (%s); not checked",
						g.RuleID, line, mask(g.Secret), strings.Join(g.Tags, ","))
					continue
				case !overlapsAny(found, planted):
					falsePositives++
					t.Logf("gitleaks %s at line %d found %s, which is not a labelled secret; not checked",
						g.RuleID, line, mask(g.Secret))
					continue
				}
				checked++
				if bytes.Contains(out, []byte(g.Secret)) {
					t.Errorf("gitleaks %s at line %d found %s; toolgate's output still contains it",
						g.RuleID, line, mask(g.Secret))
				}
			}
		})
	}
	t.Logf("gitleaks secrets checked against toolgate's output: %d; not checked: %d found only after decoding, %d gitleaks false positives",
		checked, decoded, falsePositives)
	if checked == 0 {
		t.Fatal("gitleaks found no labelled secret in the positive corpus; the comparison covered nothing")
	}
}

// TestNegativesFalsePositives runs both scanners over the negative corpus, which holds no
// secrets. Toolgate may redact at most one span per MiB of such text: every finding there is
// tool output the user no longer gets to see. gitleaks' count on the same files is logged
// alongside for comparison. Each file must also come back byte for byte when toolgate reports
// nothing in it.
func TestNegativesFalsePositives(t *testing.T) {
	r := newToolgate(t)
	d := newGitleaks(t)
	var size, toolgateN, gitleaksN int
	for _, f := range readCorpus(t, "negative") {
		t.Run(f.name, func(t *testing.T) {
			out, found := r.Text(f.name, f.data)
			gl := d.Detect(detect.Fragment{Raw: string(f.data)})
			size += len(f.data)
			toolgateN += len(found)
			gitleaksN += len(gl)
			if len(found) > 0 || len(gl) > 0 {
				t.Logf("toolgate: %d findings %v; gitleaks: %d findings %v",
					len(found), toolgateRules(found), len(gl), gitleaksRules(gl))
			}
			if len(found) == 0 && !bytes.Equal(out, f.data) {
				t.Errorf("toolgate reported no finding but changed the text:\n%s", firstDiff(f.data, out))
			}
		})
	}
	perMiB := func(n int) float64 { return float64(n) * mib / float64(size) }
	t.Logf("negative corpus: %d bytes; toolgate %d findings (%.2f/MiB), gitleaks %d findings (%.2f/MiB)",
		size, toolgateN, perMiB(toolgateN), gitleaksN, perMiB(gitleaksN))
	if toolgateN*mib > size {
		t.Errorf("toolgate: %d findings in %d bytes of secret-free text (%.2f/MiB), want at most 1/MiB",
			toolgateN, size, perMiB(toolgateN))
	}
}

// span is a byte range [start, end) of a corpus file.
type span struct{ start, end int }

// occurrences returns every place where one of the values occurs in data, overlapping
// occurrences included. An empty value occurs nowhere.
func occurrences(data []byte, values ...string) []span {
	var spans []span
	for _, v := range values {
		if v == "" {
			continue
		}
		for from := 0; ; {
			i := bytes.Index(data[from:], []byte(v))
			if i < 0 {
				break
			}
			spans = append(spans, span{from + i, from + i + len(v)})
			from += i + 1
		}
	}
	return spans
}

// overlapsAny reports whether a span of a shares at least one byte with a span of b.
func overlapsAny(a, b []span) bool {
	for _, x := range a {
		for _, y := range b {
			if x.start < y.end && y.start < x.end {
				return true
			}
		}
	}
	return false
}

// mask shows enough of a secret to recognise it in the corpus without printing it whole.
func mask(s string) string {
	const keep = 4
	if len(s) <= 2*keep {
		return fmt.Sprintf("a %d-byte secret", len(s))
	}
	return fmt.Sprintf("%q (%d bytes)", s[:keep]+"…", len(s))
}

// toolgateRules lists the distinct rule ids of toolgate findings.
func toolgateRules(fs []redact.Finding) []string {
	return distinctRules(fs, func(f redact.Finding) string { return f.Rule })
}

// gitleaksRules lists the distinct rule ids of gitleaks findings.
func gitleaksRules(fs []report.Finding) []string {
	return distinctRules(fs, func(f report.Finding) string { return f.RuleID })
}

// distinctRules lists the distinct rule ids of findings, sorted.
func distinctRules[F any](fs []F, id func(F) string) []string {
	ids := make([]string, 0, len(fs))
	for _, f := range fs {
		ids = append(ids, id(f))
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// firstDiff describes where two texts first differ, with a little context from each.
func firstDiff(want, got []byte) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	from := max(0, i-20)
	return fmt.Sprintf("at byte %d: input %q, output %q",
		i, want[from:min(len(want), i+40)], got[from:min(len(got), i+40)])
}
