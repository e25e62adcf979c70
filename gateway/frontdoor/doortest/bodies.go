package doortest

import (
	"bytes"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// BodyCase is one body a door's body benchmark sends.
type BodyCase struct {
	Name string
	Body []byte
	// Chunked sends the body without a Content-Length, so that the door
	// cannot refuse it before reading.
	Chunked bool
	// Status is what the door must answer.
	Status int
}

// BenchBodies runs one sub-benchmark per case, each POSTing its body to
// url with header, and reports what one request allocated in the whole
// process (client, door and gateway) as B/op and as a multiple of limit
// (x-limit/op): the figure that must stay a small constant however large
// the body a caller sends.
func BenchBodies(b *testing.B, url string, header http.Header, limit int64, cases []BodyCase) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.Cleanup(client.CloseIdleConnections)
	for _, tc := range cases {
		b.Run(tc.Name, func(b *testing.B) {
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for b.Loop() {
				postBody(b, client, url, header, tc)
			}
			runtime.ReadMemStats(&after)
			perOp := float64(after.TotalAlloc-before.TotalAlloc) / float64(b.N)
			b.ReportMetric(perOp/float64(limit), "x-limit/op")
			b.ReportMetric(float64(len(tc.Body))/float64(limit), "body-x-limit")
		})
	}
}

func postBody(b *testing.B, client *http.Client, url string, header http.Header, tc BodyCase) {
	var body io.Reader = bytes.NewReader(tc.Body)
	if tc.Chunked {
		body = struct{ io.Reader }{body}
	}
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		b.Fatalf("%s: %v", tc.Name, err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != tc.Status {
		b.Fatalf("%s: %d %.300s, want %d", tc.Name, resp.StatusCode, out, tc.Status)
	}
}

// Pad is a JSON string of n bytes' worth of x, quotes included.
func Pad(n int) string { return `"` + strings.Repeat("x", max(n-2, 0)) + `"` }

// Zeros is a JSON list of n zeros: n+1 values in about 2n bytes.
func Zeros(n int) string { return "[" + strings.Repeat("0,", max(n-1, 0)) + "0]" }
