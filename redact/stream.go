package redact

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Streaming bounds. A secret is caught whole when it and the text a rule reads before it fit in
// copyOverlap; a longer one (a private key block with a megabyte of base64) is still redacted
// whole, as consecutive markers, once it exceeds copyMaxCarry.
const (
	copyChunk    = 1 << 20
	copyOverlap  = 64 << 10
	copyMaxCarry = 1 << 20
)

// Copy redacts text read from src and writes it to dst, holding at most a few MiB whatever the
// input size (a 50 MiB stdout). It reads ahead of what it writes, so that a secret straddling
// two reads is seen whole, and rescans a margin before the last write, so that the keyword and
// context a rule needs before a secret are there too. Offsets in findings are from the start of
// src. It returns the findings and the number of bytes written.
func (r *Redactor) Copy(ctx context.Context, artifact string, dst io.Writer, src io.Reader) ([]Finding, int64, error) {
	var (
		findings []Finding
		written  int64
		buf      = make([]byte, 0, copyChunk+2*copyOverlap)
		// base is the input offset of buf[0]; done is the input offset up to which output is
		// written: buf[:done-base] is context already handled.
		base, done int64
		eof        bool
		out        []byte
	)
	sc := r.getScratch()
	defer r.scratch.Put(sc)
	for !eof {
		if err := ctx.Err(); err != nil {
			return findings, written, err
		}
		// Fill up to a chunk of new input beyond the overlap.
		want := int(done-base) + copyChunk + copyOverlap
		if cap(buf) < want {
			grown := make([]byte, len(buf), want)
			copy(grown, buf)
			buf = grown
		}
		for len(buf) < want && !eof {
			n, err := src.Read(buf[len(buf):want])
			buf = buf[:len(buf)+n]
			if errors.Is(err, io.EOF) {
				eof = true
			} else if err != nil {
				return findings, written, fmt.Errorf("redact: reading %s: %w", artifact, err)
			}
		}

		// Decide how far to write: all of it at the end, else up to the overlap before the
		// end, moved back to the start of a secret that crosses it (unless that secret is
		// longer than copyMaxCarry: then it is cut there and its rest redacted next time).
		spans := r.findAll(buf, sc, 0)
		start := int(done - base)
		end := len(buf)
		if !eof {
			end = len(buf) - copyOverlap
			for _, sp := range spans {
				if sp.start < end && sp.end > end && end-sp.start < copyMaxCarry && sp.start >= start {
					end = sp.start
				}
			}
		}
		out = out[:0]
		last := start
		for _, sp := range spans {
			s, e := max(sp.start, start), min(sp.end, end)
			if e <= s {
				continue
			}
			out = append(out, buf[last:s]...)
			out = appendMarker(out, sp.rule)
			findings = append(findings, Finding{Rule: sp.rule, Artifact: artifact, Offset: base + int64(s), Fingerprint: r.Fingerprint(buf[s:e])})
			last = e
		}
		out = append(out, buf[last:end]...)
		n, err := dst.Write(out)
		written += int64(n)
		if err != nil {
			return findings, written, fmt.Errorf("redact: writing %s: %w", artifact, err)
		}
		done = base + int64(end)

		// Keep copyOverlap bytes of context before done, and everything after it.
		keep := alignedKeep(buf, max(0, end-copyOverlap))
		buf = buf[:copy(buf, buf[keep:])]
		base += int64(keep)
	}
	return findings, written, nil
}

// alignedKeep moves keep, where the context kept for the next read starts, back to a multiple of
// 4 characters from the start of the base64 run it may cut, so that a blob cut there still
// decodes at its own offsets (see encoded.go). The run's start lies at or after buf[0], which
// was itself aligned this way.
func alignedKeep(buf []byte, keep int) int {
	start := keep
	for start > 0 && isBase64Byte(buf[start-1]) {
		start--
	}
	return keep - (keep-start)%4
}
