package gitleaksbench

import (
	"bytes"
	"testing"

	"github.com/zricethezav/gitleaks/v8/detect"
)

// BenchmarkRedact runs toolgate's redactor and gitleaks' detector over the same two inputs in
// the same process:
//
//   - clean: 1 MiB of secret-free tool output (the negative corpus, repeated and cut), the
//     common case, where speed is decided by how cheaply text without secrets is ruled out;
//   - dense: 16 KiB of the positive corpus, where nearly every line holds a keyword or a
//     secret and the rules' regular expressions actually run.
//
// The gitleaks sub-benchmark's name carries regexp=stdlib or regexp=go-re2: the engine gitleaks
// was built with, which the gore2regex build tag selects.
//
// Inside the timed loop: toolgate's Text call, which finds the secrets and builds the redacted
// copy; gitleaks' Detect call, which finds the secrets (rule prefilter, regular expressions,
// entropy and allowlist checks, up to cliMaxDecodeDepth decoding passes) and builds its
// findings. gitleaks only reports; it produces no redacted text, so its figures are a lower
// bound for a redactor built on it.
//
// Outside the timed loop: reading the corpus and building the inputs, compiling both rule sets
// (redact.New, detect.NewDetectorDefaultConfig), and the string copy of the input that gitleaks
// scans (its Fragment holds a string, toolgate takes the bytes as they are). The whole input is
// one fragment, the way a tool result would be handed to a scanner; the gitleaks command line
// instead reads files in chunks of about 100 kB.
//
// Neither side carries state from one iteration to the next that changes the work: Redactor is
// immutable, and Detector.Detect keeps nothing but a byte counter (findings are kept only by
// AddFinding, which DetectSource calls and Detect does not), so every iteration scans the same
// input from scratch without any reset.
func BenchmarkRedact(b *testing.B) {
	inputs := []struct {
		name string
		data []byte
	}{
		{name: "clean", data: fill(b, readCorpus(b, "negative"), mib)},
		{name: "dense", data: fill(b, readCorpus(b, "positive"), 16<<10)},
	}
	r := newToolgate(b)
	d := newGitleaks(b)
	gitleaksName := "gitleaks/regexp=" + gitleaksEngine()
	// The same detector without decoding passes, for the regular expressions alone.
	plain := newGitleaks(b)
	plain.MaxDecodeDepth = 0

	for _, in := range inputs {
		b.Run(in.name, func(b *testing.B) {
			b.Run("toolgate", func(b *testing.B) {
				orig := bytes.Clone(in.data)
				b.SetBytes(int64(len(in.data)))
				b.ReportAllocs()
				var n int
				for b.Loop() {
					_, findings := r.Text("bench", in.data)
					n = len(findings)
				}
				// Redacting the input in place would leave later iterations less to do.
				if !bytes.Equal(in.data, orig) {
					b.Fatal("Text modified its input")
				}
				b.ReportMetric(float64(n), "findings/op")
			})
			for name, det := range map[string]*detect.Detector{gitleaksName: d, gitleaksName + "/decode=0": plain} {
				b.Run(name, func(b *testing.B) {
					raw := string(in.data)
					b.SetBytes(int64(len(raw)))
					b.ReportAllocs()
					var n int
					for b.Loop() {
						n = len(det.Detect(detect.Fragment{Raw: raw}))
					}
					b.ReportMetric(float64(n), "findings/op")
				})
			}
		})
	}
}
