package evidence

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// An auditor keeps the newest checkpoint of each log it verified, so that
// the next verification can tell a log that grew from one that was rolled
// back or forked. The kept file is the checkpoints' signed notes one after
// another, each exactly as the log signed it; a checkpoint's body is three
// lines and a blank line, then its signature lines, so the notes need no
// separator beyond the blank line that ends each.

// FormatCheckpoints returns the kept-checkpoints file holding the given
// signed checkpoints, separated by blank lines.
func FormatCheckpoints(notes [][]byte) []byte {
	var b bytes.Buffer
	for i, n := range notes {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.Write(n)
	}
	return b.Bytes()
}

// ParseCheckpoints splits a kept-checkpoints file into its signed
// checkpoints. It checks only the shape; VerifyAll checks the signatures.
func ParseCheckpoints(data []byte) ([][]byte, error) {
	var notes [][]byte
	lines := strings.SplitAfter(string(data), "\n")
	for i := 0; i < len(lines) && lines[i] != ""; {
		if len(notes) > 0 {
			if lines[i] != "\n" {
				return nil, fmt.Errorf("evidence: kept checkpoints: line %d: want a blank line between checkpoints", i+1)
			}
			i++
		}
		start := i
		if i+4 > len(lines) || lines[i+3] != "\n" {
			return nil, fmt.Errorf("evidence: kept checkpoints: line %d: not a checkpoint (three lines, a blank line, signatures)", start+1)
		}
		i += 4
		for i < len(lines) && strings.HasPrefix(lines[i], "\u2014 ") {
			i++
		}
		if i == start+4 {
			return nil, fmt.Errorf("evidence: kept checkpoints: line %d: a checkpoint without signatures", start+1)
		}
		notes = append(notes, []byte(strings.Join(lines[start:i], "")))
	}
	if len(notes) == 0 {
		return nil, errors.New("evidence: kept checkpoints: the file holds none")
	}
	return notes, nil
}
