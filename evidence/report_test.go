package evidence

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestRedactionReportStaysBoundedWhateverTheFindings adds far more findings
// than any bound, over many rules and artifacts, with paths as long as a
// key can make them, and checks what an auditor reads: the first findings
// of each rule in full, a count for the rest that adds up, and a manifest
// under MaxManifestSize that parses back.
func TestRedactionReportStaysBoundedWhateverTheFindings(t *testing.T) {
	t.Parallel()
	var p RedactionReport
	const rules, artifacts, each = 2000, 4, 50
	longPath := "$." + strings.Repeat("é", 10000)
	for i := range rules * artifacts * each {
		p.Add(Redaction{
			Rule:        fmt.Sprintf("rule-with-a-long-enough-id-%04d", i%rules),
			Artifact:    []string{ArtifactRequest, ArtifactPolicyDecision, ArtifactToolResult, ArtifactResponse}[i/rules%artifacts],
			Path:        longPath,
			Offset:      int64(i),
			Fingerprint: strings.Repeat("ab", 32),
		})
	}
	got := p.Redactions()
	var listed, total int64
	for _, r := range got {
		if r.Omitted > 0 {
			total += r.Omitted
			continue
		}
		listed++
		total++
		if len(r.Path) > MaxRedactionPathLen+len("…") || !strings.HasSuffix(r.Path, "…") {
			t.Fatalf("path of %d bytes not cut at %d", len(r.Path), MaxRedactionPathLen)
		}
	}
	if listed != MaxListedRedactions || total != rules*artifacts*each {
		t.Errorf("listed %d (want %d), accounted for %d of %d", listed, MaxListedRedactions, total, rules*artifacts*each)
	}
	if last := got[len(got)-1]; last.Rule != OtherRules || last.Omitted == 0 {
		t.Errorf("counts beyond MaxOmittedEntries are not folded into one: %+v", last)
	}
	m := Manifest{
		Version: ManifestVersion, RequestID: "r", CanonicalRequestHash: strings.Repeat("0", 64),
		Outcome: OutcomeCompleted, Redactions: got, CreatedAt: time.Unix(0, 0).UTC(),
	}
	data, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) >= MaxManifestSize {
		t.Errorf("manifest is %d bytes, the bound is %d", len(data), MaxManifestSize)
	}
	back, err := ParseManifest(data)
	if err != nil || len(back.Redactions) != len(got) {
		t.Fatalf("the bounded manifest does not parse back: %v", err)
	}
}

// TestRedactionReportListsEveryFindingWhenFew: below the bounds nothing is
// counted instead of listed, and the encoding has no "omitted" field, so a
// manifest reads as it did before counts existed.
func TestRedactionReportListsEveryFindingWhenFew(t *testing.T) {
	t.Parallel()
	var p RedactionReport
	for i := range MaxListedPerRule {
		p.Add(Redaction{Rule: "github-pat", Artifact: ArtifactToolResult, Path: "$.stdout", Offset: int64(i)})
	}
	got := p.Redactions()
	if len(got) != MaxListedPerRule {
		t.Fatalf("%d entries, want %d", len(got), MaxListedPerRule)
	}
	data, err := EncodeManifest(Manifest{Version: ManifestVersion, RequestID: "r", CanonicalRequestHash: strings.Repeat("0", 64), Outcome: OutcomeCompleted, Redactions: got, CreatedAt: time.Unix(0, 0).UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "omitted") {
		t.Errorf("a manifest without counts mentions omitted:\n%s", data)
	}
}
