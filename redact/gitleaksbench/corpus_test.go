package gitleaksbench

import (
	"encoding/json"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/toolgate/toolgate/redact"
	"github.com/zricethezav/gitleaks/v8/detect"
	glregexp "github.com/zricethezav/gitleaks/v8/regexp"
)

// corpusDir holds the labelled corpus: positive/* files contain secrets, negative/* files are
// realistic tool output without any.
const corpusDir = "../testdata/corpus"

// cliMaxDecodeDepth is the default of gitleaks' --max-decode-depth flag. The library leaves
// Detector.MaxDecodeDepth at 0 (no base64/hex/percent decoding passes), but every `gitleaks
// dir` or `gitleaks git` run decodes up to this depth, so that is the detector measured here.
const cliMaxDecodeDepth = 5

// mib is one mebibyte, the unit of the false-positive budget.
const mib = 1 << 20

func TestMain(m *testing.M) {
	// gitleaks logs through a zerolog logger of its own, at info level, to stderr. Only its
	// findings matter here, and log output inside a timed loop would be measured too.
	zerolog.SetGlobalLevel(zerolog.Disabled)
	os.Exit(m.Run())
}

// corpusFile is one file of the corpus.
type corpusFile struct {
	name string // path below the positive or negative folder, e.g. "api/sts-assume-role.json"
	data []byte
}

// readCorpus returns the regular files below corpusDir/kind ("positive" or "negative"), in
// lexical order of their paths so that inputs built from them are the same on every run.
func readCorpus(tb testing.TB, kind string) []corpusFile {
	tb.Helper()
	root := filepath.Join(corpusDir, kind)
	var files []corpusFile
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		files = append(files, corpusFile{name: filepath.ToSlash(rel), data: data})
		return nil
	})
	if err != nil {
		tb.Fatalf("reading the %s corpus: %v", kind, err)
	}
	if len(files) == 0 {
		tb.Fatalf("%s holds no files", root)
	}
	return files
}

// label is one entry of labels.json: a secret planted in a positive file.
type label struct {
	File   string `json:"file"`   // path below corpusDir, e.g. "positive/api/sts-assume-role.json"
	Secret string `json:"secret"` // the bytes as they occur in the file
}

// readLabels returns the planted secrets of each positive file, keyed by the file's path below
// corpusDir.
func readLabels(tb testing.TB) map[string][]string {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(corpusDir, "labels.json"))
	if err != nil {
		tb.Fatalf("reading the corpus labels: %v", err)
	}
	var labels []label
	if err := json.Unmarshal(data, &labels); err != nil {
		tb.Fatalf("decoding the corpus labels: %v", err)
	}
	secrets := make(map[string][]string)
	for _, l := range labels {
		secrets[l.File] = append(secrets[l.File], l.Secret)
	}
	return secrets
}

// fill concatenates files, each ending in a newline, repeating the sequence as often as needed
// and cutting the result to exactly size bytes.
func fill(tb testing.TB, files []corpusFile, size int) []byte {
	tb.Helper()
	out := make([]byte, 0, size+64<<10)
	for len(out) < size {
		before := len(out)
		for _, f := range files {
			out = append(out, f.data...)
			if n := len(f.data); n > 0 && f.data[n-1] != '\n' {
				out = append(out, '\n')
			}
		}
		if len(out) == before {
			tb.Fatalf("the corpus files are all empty; cannot build a %d-byte input", size)
		}
	}
	return out[:size]
}

// newToolgate returns toolgate's redactor with its default rule set.
func newToolgate(tb testing.TB) *redact.Redactor {
	tb.Helper()
	r, err := redact.New(redact.Config{})
	if err != nil {
		tb.Fatalf("redact.New: %v", err)
	}
	return r
}

// newGitleaks returns gitleaks' detector with its default rules, configured like the gitleaks
// command line configures it when no flags are given.
func newGitleaks(tb testing.TB) *detect.Detector {
	tb.Helper()
	d, err := detect.NewDetectorDefaultConfig()
	if err != nil {
		tb.Fatalf("gitleaks default config: %v", err)
	}
	d.MaxDecodeDepth = cliMaxDecodeDepth
	return d
}

// gitleaksEngine names the regular-expression engine gitleaks was compiled with: "stdlib"
// (Go's regexp) or "go-re2" (RE2 in WebAssembly, selected by the gore2regex build tag).
func gitleaksEngine() string {
	return path.Base(glregexp.Version)
}
