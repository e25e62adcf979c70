// Command corpusgen writes the labelled secret corpus in redact/testdata/corpus.
//
// The corpus measures a redactor's recall and its false positives: positive/ holds tool output
// (API responses, logs, .env dumps, stack traces, shell, YAML, Terraform, source code) with
// secrets embedded the way they leak in practice, labels.json lists every embedded secret, and
// negative/ holds secret-free text that looks like secrets to a naive detector (digests, UUIDs,
// base64 images, minified JavaScript, placeholders).
//
// Every value comes from PCG generators with fixed seeds, so the corpus is reproducible and holds
// no real credential, yet each secret follows its vendor's published shape: prefix, length,
// alphabet, and the checksum or encoded structure where the format has one.
//
// Usage:
//
//	go run ./redact/internal/corpusgen -out redact/testdata/corpus
package main

import (
	"flag"
	"log/slog"
	"os"
)

func main() {
	out := flag.String("out", "redact/testdata/corpus", "corpus directory to (re)write")
	flag.Parse()
	if err := generate(*out); err != nil {
		slog.Error("corpus generation failed", "err", err)
		os.Exit(1)
	}
	slog.Info("corpus written", "dir", *out)
}
