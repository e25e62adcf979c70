package storage

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/evidence/evidencetest"
)

func TestEncodeBody(t *testing.T) {
	t.Parallel()
	random := make([]byte, 200<<10)
	rand.Read(random)
	tests := []struct {
		name       string
		data       []byte
		threshold  int
		compressed bool
	}{
		{name: "small JSON stays plain", data: evidencetest.JSONOfSize(1 << 10), threshold: 0, compressed: false},
		{name: "large JSON is compressed at the default threshold", data: evidencetest.JSONOfSize(200 << 10), threshold: 0, compressed: true},
		{name: "data exactly at the threshold stays plain", data: bytes.Repeat([]byte("a"), 100), threshold: 100, compressed: false},
		{name: "data one byte over the threshold is compressed", data: bytes.Repeat([]byte("a"), 101), threshold: 100, compressed: true},
		{name: "negative threshold never compresses", data: evidencetest.JSONOfSize(200 << 10), threshold: -1, compressed: false},
		{name: "incompressible data stays plain", data: random, threshold: 0, compressed: false},
		{name: "empty data stays plain", data: []byte{}, threshold: 1, compressed: false},
		{name: "data that looks like gzip is always wrapped", data: []byte{0x1f, 0x8b, 'x'}, threshold: -1, compressed: true},
		{name: "gzip data above the threshold is wrapped once more", data: evidencetest.Gzipped(t, evidencetest.JSONOfSize(1<<10)), threshold: 1, compressed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := EncodeBody(tt.data, tt.threshold)
			if got := IsGzip(body); got != tt.compressed {
				t.Fatalf("stored body compressed = %v, want %v", got, tt.compressed)
			}
			if !tt.compressed && !bytes.Equal(body, tt.data) {
				t.Fatal("plain body differs from the data")
			}
			if tt.compressed && len(body) >= len(tt.data) && !IsGzip(tt.data) {
				t.Fatalf("compressed body is %d bytes, not smaller than the %d-byte data", len(body), len(tt.data))
			}
			got, err := DecodeBody(body)
			if err != nil {
				t.Fatalf("DecodeBody = %v", err)
			}
			if !bytes.Equal(got, tt.data) {
				t.Fatal("DecodeBody(EncodeBody(data)) differs from data")
			}
		})
	}
}

func TestEncodeBodyIsDeterministic(t *testing.T) {
	t.Parallel()
	// Equal artifacts must store as equal bytes, so that their checksums
	// and any copy an auditor makes match.
	data := evidencetest.JSONOfSize(100 << 10)
	if a, b := EncodeBody(data, 0), EncodeBody(data, 0); !bytes.Equal(a, b) {
		t.Fatal("two encodings of the same data differ")
	}
}

func TestDecodeBody(t *testing.T) {
	t.Parallel()
	doc := evidencetest.JSONOfSize(4 << 10)
	good := evidencetest.Gzipped(t, doc)
	badCRC := bytes.Clone(good)
	badCRC[len(badCRC)-8] ^= 0xff // the trailer's CRC-32
	tests := []struct {
		name    string
		body    []byte
		limit   int
		want    []byte
		wantErr string
	}{
		{name: "plain JSON is returned as is", body: []byte(`{"a":1}`), limit: 10, want: []byte(`{"a":1}`)},
		{name: "plain data is not limited", body: bytes.Repeat([]byte("x"), 100), limit: 10, want: bytes.Repeat([]byte("x"), 100)},
		{name: "gzip is decompressed", body: good, limit: len(doc), want: doc},
		{name: "two gzip members are concatenated", body: append(evidencetest.Gzipped(t, []byte("ab")), evidencetest.Gzipped(t, []byte("cd"))...), limit: 4, want: []byte("abcd")},
		{name: "output over the limit", body: good, limit: len(doc) - 1, wantErr: "larger than the"},
		{name: "bomb", body: evidencetest.Gzipped(t, make([]byte, 1<<20)), limit: 1 << 10, wantErr: "larger than the 1024-byte limit"},
		{name: "truncated stream", body: good[:len(good)/2], limit: len(doc), wantErr: "unexpected EOF"},
		{name: "magic only", body: []byte{0x1f, 0x8b}, limit: 10, wantErr: "decompress artifact"},
		{name: "corrupt checksum", body: badCRC, limit: len(doc), wantErr: "checksum"},
		{name: "trailing garbage", body: append(bytes.Clone(good), "garbage"...), limit: len(doc), wantErr: "decompress artifact"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeBodyLimit(tt.body, tt.limit)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("decodeBodyLimit = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("decodeBodyLimit = %v", err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("decodeBodyLimit = %q, want %q", got, tt.want)
			}
		})
	}
}

func FuzzDecodeBody(f *testing.F) {
	f.Add([]byte(`{"request_id":"r1"}`))
	f.Add([]byte{})
	f.Add([]byte{0x1f, 0x8b})
	f.Add(evidencetest.Gzipped(f, []byte(`{"a":[1,2,3]}`)))
	f.Add(evidencetest.Gzipped(f, make([]byte, 8<<10)))
	f.Fuzz(func(t *testing.T, body []byte) {
		const limit = 1 << 20
		got, err := decodeBodyLimit(body, limit)
		switch {
		case !IsGzip(body):
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("non-gzip body: DecodeBody = (%q, %v), want it unchanged", got, err)
			}
		case err == nil && len(got) > limit:
			t.Fatalf("DecodeBody returned %d bytes, over the %d-byte limit", len(got), limit)
		}
		// Whatever the input, storing it and reading it back is lossless.
		for _, threshold := range []int{-1, 0, 1} {
			back, err := DecodeBody(EncodeBody(body, threshold))
			if err != nil || !bytes.Equal(back, body) {
				t.Fatalf("round trip at threshold %d = (%q, %v), want the input", threshold, back, err)
			}
		}
	})
}
