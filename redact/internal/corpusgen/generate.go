package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// corpusSeed is the first PCG seed of every file; the second is a hash of the file's path, so
// editing one file's template leaves every other file byte-for-byte unchanged.
const corpusSeed = 0x5ec2e7c0a9b05eed

// Names of the generated files at the top of the corpus directory.
const (
	labelsFile = "labels.json"
	readmeFile = "README.md"
)

// seeded returns the generator for one corpus file.
func seeded(path string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(path))
	return rand.New(rand.NewPCG(corpusSeed, h.Sum64()))
}

// positiveFiles lists every positive file in corpus order.
func positiveFiles() []positiveFile {
	var all []positiveFile
	for _, group := range [][]positiveFile{
		jsonFiles(), logFiles(), envFiles(), traceFiles(), shellFiles(),
		yamlFiles(), hclFiles(), codeFiles(), configFiles(), cloudStorageFiles(),
	} {
		all = append(all, group...)
	}
	return all
}

// corpus is the rendered corpus: file contents by slash path, and the labels in file order.
type corpus struct {
	files  map[string][]byte
	labels []label
}

// buildCorpus renders every file and checks the invariants the corpus promises: each label's
// secret occurs in its file exactly as often as it is labelled there (so every occurrence has a
// label), and no secret leaks into a negative file.
func buildCorpus() (*corpus, error) {
	c := &corpus{files: map[string][]byte{}}
	gens := secretGenerators()
	for _, pf := range positiveFiles() {
		if _, dup := c.files[pf.path]; dup {
			return nil, fmt.Errorf("duplicate corpus file %s", pf.path)
		}
		x := newExpander(pf.path, seeded(pf.path), gens)
		content := pf.build(x)
		if x.err != nil {
			return nil, x.err
		}
		want := map[string]int{}
		for _, l := range x.labels {
			want[l.Secret]++
		}
		for s, n := range want {
			if got := strings.Count(content, s); got != n {
				return nil, fmt.Errorf("%s: secret labelled %d times occurs %d times", pf.path, n, got)
			}
		}
		c.files[pf.path] = []byte(content)
		c.labels = append(c.labels, x.labels...)
	}
	for _, nf := range negativeFiles() {
		if _, dup := c.files[nf.path]; dup {
			return nil, fmt.Errorf("duplicate corpus file %s", nf.path)
		}
		c.files[nf.path] = []byte(nf.build(seeded(nf.path)))
	}
	for path, content := range c.files {
		if !strings.HasPrefix(path, "negative/") {
			continue
		}
		for _, l := range c.labels {
			if bytes.Contains(content, []byte(l.Secret)) {
				return nil, fmt.Errorf("%s contains the secret labelled in %s", path, l.File)
			}
		}
	}
	return c, nil
}

// labelsJSON encodes the labels as an indented JSON array without HTML escaping, so each
// secret reads in labels.json exactly as it appears in its file.
func labelsJSON(labels []label) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(labels); err != nil {
		return nil, fmt.Errorf("encode labels: %w", err)
	}
	return b.Bytes(), nil
}

// generate (re)writes the corpus under dir: positive/, negative/ and labels.json. Only those
// three names are replaced, so stale files from an earlier layout cannot linger.
func generate(dir string) error {
	c, err := buildCorpus()
	if err != nil {
		return err
	}
	for _, sub := range []string{"positive", "negative", labelsFile, readmeFile} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return fmt.Errorf("clear %s: %w", sub, err)
		}
	}
	paths := make([]string, 0, len(c.files))
	for p := range c.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("create directory for %s: %w", p, err)
		}
		if err := os.WriteFile(full, c.files[p], 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	data, err := labelsJSON(c.labels)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, labelsFile), data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", labelsFile, err)
	}
	if err := os.WriteFile(filepath.Join(dir, readmeFile), []byte(readme(c)), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", readmeFile, err)
	}
	return nil
}

// readme describes the corpus for its users: layout, label format and the kinds it covers.
func readme(c *corpus) string {
	var pos, neg, negBytes int
	for p, data := range c.files {
		if strings.HasPrefix(p, "positive/") {
			pos++
		} else {
			neg++
			negBytes += len(data)
		}
	}
	count := map[string]int{}
	exts := map[string]map[string]bool{}
	for _, l := range c.labels {
		count[l.Kind]++
		if exts[l.Kind] == nil {
			exts[l.Kind] = map[string]bool{}
		}
		exts[l.Kind][path.Ext(l.File)] = true
	}
	kinds := make([]string, 0, len(count))
	for k := range count {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)

	var b strings.Builder
	b.WriteString("# Secret redaction corpus\n\n")
	b.WriteString("Generated by `redact/internal/corpusgen`; do not edit by hand. Regenerate with\n\n")
	b.WriteString("    go run ./redact/internal/corpusgen -out redact/testdata/corpus\n\n")
	b.WriteString("Every value is synthetic, drawn from fixed-seed PCG generators, but shaped like the real\n")
	b.WriteString("credential of its vendor (prefix, length, alphabet, checksum or encoded structure).\n\n")
	fmt.Fprintf(&b, "- `positive/`: %d files of tool output (API responses, logs, .env dumps, stack traces, shell,\n", pos)
	b.WriteString("  YAML, Terraform, source code, credential files) with secrets embedded where they really leak.\n")
	fmt.Fprintf(&b, "- `negative/`: %d files, %d bytes, with no secret: digests, UUIDs, git logs, base64 images,\n", neg, negBytes)
	b.WriteString("  minified JavaScript, lock files, placeholders and prose that uses words like token and password.\n")
	fmt.Fprintf(&b, "- `labels.json`: %d entries, one per secret occurrence:\n\n", len(c.labels))
	b.WriteString("      {\"file\": \"positive/…\", \"kind\": \"…\", \"secret\": \"…\"}\n\n")
	b.WriteString("  `secret` is the exact byte sequence that must be absent from `file` after redaction: only the\n")
	b.WriteString("  credential (the password of a URL, the token after \"Bearer \"), a whole PEM block for private keys,\n")
	b.WriteString("  and the bytes as stored (JSON-escaped `\\n` in JSON strings, indented in YAML block scalars,\n")
	b.WriteString("  base64 in Kubernetes Secret data). A secret labelled n times in a file occurs there n times.\n\n")
	b.WriteString("Recall is the share of labels whose secret no longer occurs in the redacted file; false\n")
	b.WriteString("positives are redactions made in `negative/`.\n\n")
	b.WriteString("| kind | occurrences | file types |\n|---|---|---|\n")
	for _, k := range kinds {
		var e []string
		for x := range exts[k] {
			e = append(e, x)
		}
		sort.Strings(e)
		fmt.Fprintf(&b, "| %s | %d | %s |\n", k, count[k], strings.Join(e, " "))
	}
	return b.String()
}
