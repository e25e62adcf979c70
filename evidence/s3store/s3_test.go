package s3store

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/storage"
)

// newTestStore returns a store on m with the given options, the
// connection settings filled in, and fast retries unless opts sets them.
// The server's credentials go to the client itself rather than through
// the process's environment, so tests using it may run in parallel.
func newTestStore(t testing.TB, m *evidencetest.MinIO, opts Options, clientOpts ...func(*s3.Options)) *Store {
	t.Helper()
	clientOpts = append([]func(*s3.Options){func(o *s3.Options) {
		o.Credentials = credentials.NewStaticCredentialsProvider(m.AccessKey, m.SecretKey, "")
	}}, clientOpts...)
	opts.Endpoint = m.Endpoint
	opts.Region = evidencetest.Region
	opts.PathStyle = true
	opts.RetryBaseDelay = cmp.Or(opts.RetryBaseDelay, 5*time.Millisecond)
	opts.RetryMaxDelay = cmp.Or(opts.RetryMaxDelay, 50*time.Millisecond)
	s, err := New(context.Background(), opts, clientOpts...)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// opCounter counts the operations a store's client starts, by input type
// ("PutObject", ...). With the SDK's own retries off, that is one per
// attempt.
type opCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *opCounter) option(o *s3.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("countOps",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				name := strings.TrimSuffix(fmt.Sprintf("%T", in.Parameters), "Input")
				name = name[strings.LastIndexByte(name, '.')+1:]
				c.mu.Lock()
				if c.n == nil {
					c.n = make(map[string]int)
				}
				c.n[name]++
				c.mu.Unlock()
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	})
}

func (c *opCounter) get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[op]
}

// loseResponse passes requests on but, for the first n PUTs, throws the
// response away and reports a dropped connection: the write reached the
// server, and the client cannot know whether it succeeded.
type loseResponse struct {
	next aws.HTTPClient
	n    atomic.Int32
}

var errConnectionLost = errors.New("connection reset after the request was sent")

func (l *loseResponse) Do(req *http.Request) (*http.Response, error) {
	resp, err := l.next.Do(req)
	if err != nil || req.Method != http.MethodPut || l.n.Add(-1) < 0 {
		return resp, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, errConnectionLost
}

func (l *loseResponse) option(o *s3.Options) {
	l.next = o.HTTPClient
	o.HTTPClient = l
}

// rawObject returns an object's stored bytes and its Content-Encoding,
// read past the store.
func rawObject(t *testing.T, m *evidencetest.MinIO, bucket, object string) ([]byte, string) {
	t.Helper()
	out, err := m.Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: &object})
	if err != nil {
		t.Fatalf("GetObject(%q) = %v", object, err)
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return body, aws.ToString(out.ContentEncoding)
}

// TestS3Store checks what only an S3 backend can get right or wrong. The
// subtests share one server, each with a bucket of its own.
func TestS3Store(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := evidencetest.StartMinIO(t)
	bucketN := 0
	newBucket := func(t *testing.T, objectLock bool) string {
		bucketN++
		name := fmt.Sprintf("bucket-%d", bucketN)
		m.CreateBucket(t, name, objectLock)
		return name
	}

	t.Run("concurrent large puts of one key have exactly one winner", func(t *testing.T) {
		bucket := newBucket(t, false)
		s := newTestStore(t, m, Options{Bucket: bucket})
		doc := evidencetest.JSONOfSize(200 << 10)
		raceOneKey(t, s, "requests/race/tool_result.json", 32, func(i int) []byte { return fmt.Appendf(slices.Clone(doc), "%d", i) })
	})

	t.Run("objects carry content type, encoding and a checksum of the stored bytes", func(t *testing.T) {
		bucket := newBucket(t, false)
		s := newTestStore(t, m, Options{Bucket: bucket, Prefix: "ev"})
		for _, tc := range []struct {
			key      string
			data     []byte
			encoding string
		}{
			{"small.json", evidencetest.JSONOfSize(1 << 10), ""},
			{"large.json", evidencetest.JSONOfSize(200 << 10), "gzip"},
		} {
			mustPut(t, s, tc.key, tc.data)
			head, err := m.Client().HeadObject(ctx, &s3.HeadObjectInput{
				Bucket: &bucket, Key: aws.String("ev/" + tc.key), ChecksumMode: types.ChecksumModeEnabled,
			})
			if err != nil {
				t.Fatalf("HeadObject(%q) = %v", tc.key, err)
			}
			raw, _ := rawObject(t, m, bucket, "ev/"+tc.key)
			sum := sha256.Sum256(raw)
			if got, want := aws.ToString(head.ChecksumSHA256), base64.StdEncoding.EncodeToString(sum[:]); got != want {
				t.Errorf("%s: checksum %q, want %q, the SHA-256 of the stored bytes", tc.key, got, want)
			}
			if got := aws.ToString(head.ContentType); got != "application/json" {
				t.Errorf("%s: Content-Type %q, want application/json", tc.key, got)
			}
			if got := aws.ToString(head.ContentEncoding); got != tc.encoding {
				t.Errorf("%s: Content-Encoding %q, want %q", tc.key, got, tc.encoding)
			}
		}
	})

	t.Run("the service rejects a body that does not match its checksum", func(t *testing.T) {
		bucket := newBucket(t, false)
		var ops opCounter
		wrong := sha256.Sum256([]byte("other bytes"))
		corrupt := func(o *s3.Options) {
			o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
				return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("corruptChecksum",
					func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
						if p, ok := in.Parameters.(*s3.PutObjectInput); ok {
							p.ChecksumSHA256 = aws.String(base64.StdEncoding.EncodeToString(wrong[:]))
						}
						return next.HandleInitialize(ctx, in)
					}), middleware.Before)
			})
		}
		s := newTestStore(t, m, Options{Bucket: bucket}, corrupt, ops.option)
		err := s.Put(ctx, "k.json", []byte(`{"a":1}`))
		if err == nil || errors.Is(err, storage.ErrExist) {
			t.Fatalf("Put with a wrong checksum = %v, want a failure that is not storage.ErrExist", err)
		}
		if n := ops.get("PutObject"); n != 1 {
			t.Errorf("rejected Put made %d attempts, want 1: a checksum mismatch is not transient", n)
		}
		if _, err := s.Get(ctx, "k.json"); !errors.Is(err, storage.ErrNotExist) {
			t.Fatalf("Get after rejected Put = %v, want storage.ErrNotExist", err)
		}
	})

	t.Run("object lock retention is applied", func(t *testing.T) {
		bucket := newBucket(t, true)
		s := newTestStore(t, m, Options{Bucket: bucket, ObjectLockMode: "GOVERNANCE", ObjectLockDays: 3})
		before := time.Now()
		mustPut(t, s, "requests/r1/request.json", []byte(`{}`))
		ret, err := m.Client().GetObjectRetention(ctx, &s3.GetObjectRetentionInput{
			Bucket: &bucket, Key: aws.String("requests/r1/request.json"),
		})
		if err != nil {
			t.Fatalf("GetObjectRetention = %v", err)
		}
		if ret.Retention.Mode != types.ObjectLockRetentionModeGovernance {
			t.Errorf("retention mode %q, want GOVERNANCE", ret.Retention.Mode)
		}
		until := aws.ToTime(ret.Retention.RetainUntilDate)
		if want := before.AddDate(0, 0, 3); until.Before(want.Add(-time.Minute)) || until.After(want.Add(time.Minute)) {
			t.Errorf("retained until %v, want about %v", until, want)
		}
		head, err := m.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String("requests/r1/request.json")})
		if err != nil {
			t.Fatalf("HeadObject = %v", err)
		}
		if _, err := m.Client().DeleteObject(ctx, &s3.DeleteObjectInput{
			Bucket: &bucket, Key: aws.String("requests/r1/request.json"), VersionId: head.VersionId,
		}); err == nil {
			t.Error("the locked object version was deleted")
		}
	})

	t.Run("object lock on a bucket without it fails the put", func(t *testing.T) {
		bucket := newBucket(t, false)
		s := newTestStore(t, m, Options{Bucket: bucket, ObjectLockMode: "COMPLIANCE", ObjectLockDays: 1})
		err := s.Put(ctx, "k", []byte("x"))
		if err == nil || errors.Is(err, storage.ErrExist) {
			t.Fatalf("Put = %v, want a failure that is not storage.ErrExist", err)
		}
	})

	t.Run("large artifacts are stored gzip-compressed under the same key", func(t *testing.T) {
		bucket := newBucket(t, false)
		for _, tc := range []struct {
			name      string
			threshold int
			size      int
			gzip      bool
		}{
			{"200 KiB at the default threshold", 0, 200 << 10, true},
			{"1 KiB at the default threshold", 0, 1 << 10, false},
			{"200 KiB with compression off", -1, 200 << 10, false},
			{"2 KiB over a 1 KiB threshold", 1 << 10, 2 << 10, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := newTestStore(t, m, Options{Bucket: bucket, Prefix: fmt.Sprintf("t%d-%d", tc.threshold, tc.size), CompressThreshold: tc.threshold})
				data := evidencetest.JSONOfSize(tc.size)
				mustPut(t, s, "a.json", data)
				raw, encoding := rawObject(t, m, bucket, s.prefix+"a.json")
				if got := storage.IsGzip(raw); got != tc.gzip {
					t.Errorf("stored body starts with the gzip magic = %v, want %v", got, tc.gzip)
				}
				if got := encoding == "gzip"; got != tc.gzip {
					t.Errorf("Content-Encoding %q, want gzip = %v", encoding, tc.gzip)
				}
				if got := mustGet(t, s, "a.json"); !bytes.Equal(got, data) {
					t.Error("Get did not return the original bytes")
				}
			})
		}
	})

	t.Run("a gzip bomb fails get", func(t *testing.T) {
		bucket := newBucket(t, false)
		s := newTestStore(t, m, Options{Bucket: bucket})
		// 257 members of 1 MiB of zeros each: 300 KB that would inflate
		// past storage.MaxArtifactSize.
		bomb := bytes.Repeat(evidencetest.Gzipped(t, make([]byte, 1<<20)), storage.MaxArtifactSize>>20+1)
		if _, err := m.Client().PutObject(ctx, &s3.PutObjectInput{
			Bucket: &bucket, Key: aws.String("bomb.json"), Body: bytes.NewReader(bomb),
		}); err != nil {
			t.Fatal(err)
		}
		_, err := s.Get(ctx, "bomb.json")
		if err == nil || errors.Is(err, storage.ErrNotExist) || !strings.Contains(err.Error(), "larger than the") {
			t.Fatalf("Get(bomb) = %v, want a size-limit error", err)
		}
	})

	t.Run("walk streams thousands of keys in order, page by page", func(t *testing.T) {
		bucket := newBucket(t, false)
		var ops opCounter
		s := newTestStore(t, m, Options{Bucket: bucket, Prefix: "ev"}, ops.option)
		const n = 2500 // two and a half listing pages
		want := make([]string, n)
		for i := range want {
			want[i] = fmt.Sprintf("requests/r%05d/request.json", i)
		}
		// Putting the keys one by one takes most of a minute under the race
		// detector, so they arrive as one tar archive that MinIO unpacks
		// into objects (its "snowball" extension), in shuffled order. Among
		// them: objects that Put cannot have written, and one outside the
		// store's prefix.
		var archive bytes.Buffer
		tw := tar.NewWriter(&archive)
		names := []string{"ev/requests/r1/.tmp-abc", "ev/requests/r1\\x", "other/requests/r1/x"}
		for _, i := range rand.Perm(n) {
			names = append(names, "ev/"+want[i])
		}
		for _, name := range names {
			if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Typeflag: tar.TypeReg}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Client().PutObject(ctx, &s3.PutObjectInput{
			Bucket: &bucket, Key: aws.String("keys.tar"), Body: bytes.NewReader(archive.Bytes()),
			Metadata: map[string]string{"snowball-auto-extract": "true"},
		}); err != nil {
			t.Fatalf("upload keys: %v", err)
		}
		for _, name := range names[:3] {
			if _, err := m.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &name}); err != nil {
				t.Fatalf("foreign object %q was not stored: %v", name, err)
			}
		}

		var got []string
		if err := s.Walk(ctx, "", func(k string) error { got = append(got, k); return nil }); err != nil {
			t.Fatalf("Walk = %v", err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Walk visited %d keys, want the %d stored ones in ascending order", len(got), n)
		}
		if pages := ops.get("ListObjectsV2"); pages != 3 {
			t.Errorf("Walk listed %d pages, want 3", pages)
		}

		got = got[:0]
		if err := s.Walk(ctx, "requests/r010", func(k string) error { got = append(got, k); return nil }); err != nil {
			t.Fatalf("Walk = %v", err)
		}
		if !slices.Equal(got, want[1000:1100]) {
			t.Errorf("Walk(requests/r010) visited %d keys from %q, want %q onwards", len(got), got[:min(1, len(got))], want[1000])
		}

		stop := errors.New("stop")
		visited := 0
		before := ops.get("ListObjectsV2")
		err := s.Walk(ctx, "", func(string) error {
			visited++
			if visited == 1500 {
				return stop
			}
			return nil
		})
		if err != stop || visited != 1500 {
			t.Errorf("Walk with fn failing at key 1500 = %v after %d keys, want fn's error after 1500", err, visited)
		}
		if pages := ops.get("ListObjectsV2") - before; pages != 2 {
			t.Errorf("Walk that stopped on the second page listed %d pages, want 2", pages)
		}
	})

	t.Run("prefixes ending in dot segments are listed", func(t *testing.T) {
		bucket := newBucket(t, false)
		s := newTestStore(t, m, Options{Bucket: bucket, Prefix: "ev"})
		for _, k := range []string{"requests/..x/a", "requests/.y", "requests/z"} {
			mustPut(t, s, k, []byte("x"))
		}
		for _, tc := range []struct {
			prefix string
			want   []string
		}{
			{"requests/..", []string{"requests/..x/a"}},
			{"requests/.", []string{"requests/..x/a", "requests/.y"}},
			{"requests/../", nil},
			{"../", nil},
			{"./", nil},
		} {
			if got := mustList(t, s, tc.prefix); !slices.Equal(got, tc.want) {
				t.Errorf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
			}
		}
	})

	t.Run("a missing bucket is an error, not a missing artifact", func(t *testing.T) {
		s := newTestStore(t, m, Options{Bucket: "no-such-bucket", MaxAttempts: 1})
		if _, err := s.Get(ctx, "k"); err == nil || errors.Is(err, storage.ErrNotExist) {
			t.Errorf("Get = %v, want a failure that is not storage.ErrNotExist", err)
		}
		if err := s.Put(ctx, "k", []byte("x")); err == nil || errors.Is(err, storage.ErrExist) {
			t.Errorf("Put = %v, want a failure that is not storage.ErrExist", err)
		}
		if _, err := s.List(ctx, ""); err == nil {
			t.Error("List = nil error, want a failure")
		}
	})
}

// TestOpenS3URL opens a store from an s3:// URL, whose credentials come
// from the standard AWS chain: the process's environment, which makes the
// test serial.
// TestS3StoreUnknownOutcome checks the retry of a Put whose first attempt
// reached the server but whose answer was lost.
func TestS3StoreUnknownOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := evidencetest.StartMinIO(t)
	m.CreateBucket(t, "evidence", false)
	data := []byte(`{"tool":"echo"}`)
	tests := []struct {
		name      string
		existing  []byte // stored by another writer first, if not nil
		lost      int32  // how many PUT responses to lose
		wantErr   error
		wantPuts  int
		wantHeads int
		wantData  []byte
	}{
		{name: "own write acknowledged late is a success", lost: 1, wantPuts: 2, wantHeads: 1, wantData: data},
		{name: "own write lost twice is a success", lost: 2, wantPuts: 3, wantHeads: 1, wantData: data},
		{name: "another writer's different data is storage.ErrExist", existing: []byte(`{"other":1}`), lost: 1, wantErr: storage.ErrExist, wantPuts: 2, wantHeads: 1, wantData: []byte(`{"other":1}`)},
		{name: "another writer's identical data is storage.ErrExist", existing: data, lost: 1, wantErr: storage.ErrExist, wantPuts: 2, wantHeads: 1, wantData: data},
		{name: "a taken key on the first attempt is storage.ErrExist without a check", existing: []byte(`{"other":1}`), wantErr: storage.ErrExist, wantPuts: 1, wantHeads: 0, wantData: []byte(`{"other":1}`)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := fmt.Sprintf("case%d", i)
			if tt.existing != nil {
				mustPut(t, newTestStore(t, m, Options{Bucket: "evidence", Prefix: prefix}), "k.json", tt.existing)
			}
			var ops opCounter
			lose := &loseResponse{}
			lose.n.Store(tt.lost)
			s := newTestStore(t, m, Options{Bucket: "evidence", Prefix: prefix}, lose.option, ops.option)
			err := s.Put(ctx, "k.json", data)
			if (tt.wantErr == nil && err != nil) || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Put = %v, want %v", err, tt.wantErr)
			}
			if got := ops.get("PutObject"); got != tt.wantPuts {
				t.Errorf("PutObject attempts = %d, want %d", got, tt.wantPuts)
			}
			if got := ops.get("HeadObject"); got != tt.wantHeads {
				t.Errorf("HeadObject calls = %d, want %d", got, tt.wantHeads)
			}
			if got := mustGet(t, s, "k.json"); !bytes.Equal(got, tt.wantData) {
				t.Errorf("stored %q, want %q", got, tt.wantData)
			}
		})
	}
}

// TestS3StoreServerDown checks that retries are bounded while the server
// is down and that the store recovers when it is back.
func TestS3StoreServerDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := evidencetest.StartMinIO(t)
	m.CreateBucket(t, "evidence", false)
	var ops opCounter
	s := newTestStore(t, m, Options{
		Bucket: "evidence", MaxAttempts: 4, RetryBaseDelay: 20 * time.Millisecond, RetryMaxDelay: 50 * time.Millisecond,
	}, ops.option)
	patient := newTestStore(t, m, Options{
		Bucket: "evidence", MaxAttempts: 1000, RetryBaseDelay: time.Second, RetryMaxDelay: 10 * time.Second,
	})
	m.Stop(t)

	start := time.Now()
	err := s.Put(ctx, "k.json", []byte(`{}`))
	elapsed := time.Since(start)
	if err == nil || errors.Is(err, storage.ErrExist) || !strings.Contains(err.Error(), "gave up after 4 attempts") {
		t.Fatalf("Put with the server down = %v, want a failure after 4 attempts", err)
	}
	if n := ops.get("PutObject"); n != 4 {
		t.Errorf("PutObject attempts = %d, want 4", n)
	}
	// Three waits of at most 20, 40 and 50 ms, plus refused connections;
	// the SDK's own backoff would wait seconds a time.
	if elapsed > 5*time.Second {
		t.Errorf("Put took %v to give up, want well under 5s", elapsed)
	}

	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	err = patient.Put(dctx, "k.json", []byte(`{}`))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Put with a deadline and the server down = %v, want context.DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("Put returned %v after its deadline of 200ms, want it to stop waiting", elapsed)
	}
	if _, err := s.Get(ctx, "k.json"); err == nil || errors.Is(err, storage.ErrNotExist) {
		t.Errorf("Get with the server down = %v, want a failure that is not storage.ErrNotExist", err)
	}

	m.Start(t)
	mustPut(t, s, "k.json", []byte(`{"after":"restart"}`))
	if got := mustGet(t, s, "k.json"); string(got) != `{"after":"restart"}` {
		t.Fatalf("Get after restart = %q", got)
	}
}

func TestParseS3URL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		url     string
		want    Options
		wantErr string
	}{
		{name: "bucket only", url: "s3://evidence", want: Options{Bucket: "evidence"}},
		{name: "bucket and slash", url: "s3://evidence/", want: Options{Bucket: "evidence"}},
		{name: "prefix", url: "s3://evidence/tenant/a", want: Options{Bucket: "evidence", Prefix: "tenant/a"}},
		{name: "prefix with outer slashes", url: "s3://evidence//tenant/a/", want: Options{Bucket: "evidence", Prefix: "tenant/a"}},
		{name: "scheme is case-insensitive", url: "S3://evidence/p", want: Options{Bucket: "evidence", Prefix: "p"}},
		{
			name: "every parameter",
			url:  "s3://evidence/p?endpoint=https://acct.r2.cloudflarestorage.com&region=auto&path_style=true&object_lock_mode=governance&object_lock_days=30&compress_threshold=-1",
			want: Options{
				Bucket: "evidence", Prefix: "p", Endpoint: "https://acct.r2.cloudflarestorage.com", Region: "auto",
				PathStyle: true, ObjectLockMode: "GOVERNANCE", ObjectLockDays: 30, CompressThreshold: -1,
			},
		},
		{name: "escaped endpoint", url: "s3://evidence?endpoint=http%3A%2F%2F127.0.0.1%3A9000&path_style=false", want: Options{Bucket: "evidence", Endpoint: "http://127.0.0.1:9000"}},
		{name: "missing bucket", url: "s3:///prefix", wantErr: `bucket "" is not a valid bucket name`},
		{name: "bucket with uppercase", url: "s3://Evidence", wantErr: `bucket "Evidence" is not a valid bucket name`},
		{name: "bucket with port", url: "s3://evidence:9000/p", wantErr: "is not a valid bucket name"},
		{name: "credentials in the URL", url: "s3://AKIDEXAMPLE:s3cr3t@evidence/p", wantErr: "must not carry credentials"},
		{name: "fragment", url: "s3://evidence/p#x", wantErr: "is not of the form"},
		{name: "dot-dot in prefix", url: "s3://evidence/a/../b", wantErr: `has a ".." segment`},
		{name: "empty segment in prefix", url: "s3://evidence/a//b", wantErr: "has an empty segment"},
		{name: "unknown parameter", url: "s3://evidence?regoin=us-east-1", wantErr: `unknown parameter "regoin"`},
		{name: "repeated parameter", url: "s3://evidence?region=a&region=b", wantErr: `parameter "region" is given 2 times`},
		{name: "empty parameter", url: "s3://evidence?region=", wantErr: `parameter "region" is empty`},
		{name: "bad region", url: "s3://evidence?region=US%20East", wantErr: `region "US East" is not a region name`},
		{name: "bad path_style", url: "s3://evidence?path_style=yes", wantErr: `parameter "path_style": "yes" is not true or false`},
		{name: "endpoint without scheme", url: "s3://evidence?endpoint=minio:9000", wantErr: "is not an http or https URL"},
		{name: "endpoint of another scheme", url: "s3://evidence?endpoint=ftp://minio", wantErr: "is not an http or https URL"},
		{name: "endpoint without host", url: "s3://evidence?endpoint=http://", wantErr: "has no host"},
		{name: "endpoint with credentials", url: "s3://evidence?endpoint=http://u:p@minio", wantErr: "endpoint must not carry credentials"},
		{name: "bad lock mode", url: "s3://evidence?object_lock_mode=STRICT&object_lock_days=1", wantErr: `object lock mode "STRICT" is not GOVERNANCE or COMPLIANCE`},
		{name: "lock mode without days", url: "s3://evidence?object_lock_mode=COMPLIANCE", wantErr: "object lock days 0 is not between 1 and 36500"},
		{name: "lock days without mode", url: "s3://evidence?object_lock_days=3", wantErr: "without an object lock mode"},
		{name: "lock days not a number", url: "s3://evidence?object_lock_mode=GOVERNANCE&object_lock_days=ten", wantErr: `parameter "object_lock_days": "ten" is not an integer`},
		{name: "lock days too many", url: "s3://evidence?object_lock_mode=GOVERNANCE&object_lock_days=36501", wantErr: "not between 1 and 36500"},
		{name: "negative lock days", url: "s3://evidence?object_lock_mode=GOVERNANCE&object_lock_days=-1", wantErr: "not between 1 and 36500"},
		{name: "threshold not a number", url: "s3://evidence?compress_threshold=64KiB", wantErr: `"64KiB" is not an integer`},
		{name: "bad query escape", url: "s3://evidence?region=%zz", wantErr: "invalid URL escape"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseURL(tt.url)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseURL(%q) = %v, want an error containing %q", tt.url, err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "s3cr3t") {
					t.Fatalf("error %q repeats the secret from the URL", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURL(%q) = %v", tt.url, err)
			}
			if got != tt.want {
				t.Fatalf("ParseURL(%q) =\n%+v, want\n%+v", tt.url, got, tt.want)
			}
		})
	}
}

func TestNewS3StoreErrors(t *testing.T) {
	// No region anywhere in the environment.
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "no region", opts: Options{Bucket: "evidence"}, wantErr: "no region"},
		{name: "no bucket", opts: Options{Region: "auto"}, wantErr: `bucket "" is not a valid bucket name`},
		{name: "prefix with a slash at the end", opts: Options{Bucket: "evidence", Region: "auto", Prefix: "a/"}, wantErr: "ends with '/'"},
		{name: "negative attempts", opts: Options{Bucket: "evidence", Region: "auto", MaxAttempts: -1}, wantErr: "max attempts -1 is negative"},
		{name: "negative delay", opts: Options{Bucket: "evidence", Region: "auto", RetryMaxDelay: -time.Second}, wantErr: "retry delays must not be negative"},
		{name: "negative timeout", opts: Options{Bucket: "evidence", Region: "auto", AttemptTimeout: -time.Second}, wantErr: "attempt timeout -1s is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(context.Background(), tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || s != nil {
				t.Fatalf("New = (%v, %v), want (nil, an error containing %q)", s, err, tt.wantErr)
			}
		})
	}
}

func TestS3Transient(t *testing.T) {
	t.Parallel()
	status := func(code int) error {
		return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}},
			Err:      errors.New("response"),
		}}
	}
	refused := &smithyhttp.RequestSendError{Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	tests := []struct {
		name      string
		err       error
		transient bool
		notSent   bool
	}{
		{name: "connection refused", err: refused, transient: true, notSent: true},
		{name: "connection reset", err: &smithyhttp.RequestSendError{Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}, transient: true},
		{name: "unknown host", err: &smithyhttp.RequestSendError{Err: &net.DNSError{Err: "no such host", Name: "minio"}}, transient: true, notSent: true},
		{name: "attempt timeout", err: fmt.Errorf("send: %w", context.DeadlineExceeded), transient: true},
		{name: "throttled", err: &smithy.GenericAPIError{Code: "SlowDown"}, transient: true},
		{name: "conditional conflict", err: &smithy.GenericAPIError{Code: "ConditionalRequestConflict"}, transient: true},
		{name: "503", err: status(503), transient: true},
		{name: "500", err: status(500), transient: true},
		{name: "429", err: status(429), transient: true},
		{name: "409", err: status(409), transient: true},
		{name: "412", err: status(412)},
		{name: "404", err: status(404)},
		{name: "403", err: status(403)},
		{name: "bad digest", err: &smithy.GenericAPIError{Code: "BadDigest"}},
		{name: "untrusted certificate", err: &smithyhttp.RequestSendError{Err: &tls.CertificateVerificationError{Err: errors.New("unknown authority")}}},
		{name: "other", err: errors.New("boom")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := transient(tt.err); got != tt.transient {
				t.Errorf("transient = %v, want %v", got, tt.transient)
			}
			if got := notSent(tt.err); got != tt.notSent {
				t.Errorf("notSent = %v, want %v", got, tt.notSent)
			}
		})
	}
}

func TestCanStartKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prefix string
		want   bool
	}{
		{"", true},
		{"requests/", true},
		{"requests/r1", true},
		{"requests/..", true}, // "requests/..x"
		{"requests/.", true},
		{"requests/.tm", true},
		{"r\xc3", true}, // cut inside "é"
		{"requests/r1/request.json", true},
		{"../", false},
		{"requests/../", false},
		{"/requests", false},
		{"requests//", false},
		{"requests/.tmp-", false},
		{"a\\b", false},
		{"a\x01", false},
		{strings.Repeat("a", storage.MaxKeyLen), true},
		{strings.Repeat("a", storage.MaxKeyLen+1), false},
	} {
		if got := canStartKey(tc.prefix); got != tc.want {
			t.Errorf("canStartKey(%q) = %v, want %v", tc.prefix, got, tc.want)
		}
	}
}

func TestS3Backoff(t *testing.T) {
	t.Parallel()
	s := &Store{baseDelay: 100 * time.Millisecond, maxDelay: 2 * time.Second}
	for _, tc := range []struct {
		retry int
		bound time.Duration
	}{
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{5, 1600 * time.Millisecond},
		{6, 2 * time.Second},
		{64, 2 * time.Second},
		{1 << 20, 2 * time.Second},
	} {
		var longest time.Duration
		for range 1000 {
			d := s.backoff(tc.retry)
			if d < 0 || d > tc.bound {
				t.Fatalf("backoff(%d) = %v, want within [0, %v]", tc.retry, d, tc.bound)
			}
			longest = max(longest, d)
		}
		// Full jitter spreads over the whole range.
		if longest < tc.bound/2 {
			t.Errorf("backoff(%d): longest of 1000 waits %v, want some above %v", tc.retry, longest, tc.bound/2)
		}
	}
}

// formatS3URL writes o as a store URL.
func formatS3URL(o Options) string {
	params := url.Values{}
	add := func(name, value string, set bool) {
		if set {
			params.Set(name, value)
		}
	}
	add("endpoint", o.Endpoint, o.Endpoint != "")
	add("region", o.Region, o.Region != "")
	add("path_style", "true", o.PathStyle)
	add("object_lock_mode", o.ObjectLockMode, o.ObjectLockMode != "")
	add("object_lock_days", strconv.Itoa(o.ObjectLockDays), o.ObjectLockDays != 0)
	add("compress_threshold", strconv.Itoa(o.CompressThreshold), o.CompressThreshold != 0)
	u := url.URL{Scheme: "s3", Host: o.Bucket, Path: "/" + o.Prefix, RawQuery: params.Encode()}
	return u.String()
}

func FuzzParseS3URL(f *testing.F) {
	f.Add("s3://evidence/tenant/a?endpoint=http://127.0.0.1:9000&region=us-east-1&path_style=true")
	f.Add("s3://evidence?object_lock_mode=GOVERNANCE&object_lock_days=1&compress_threshold=0")
	f.Add("s3://u:p@evidence/%2e%2e/x")
	f.Add("s3:///")
	f.Fuzz(func(t *testing.T, rawURL string) {
		o, err := ParseURL(rawURL)
		if err != nil {
			return
		}
		if err := o.check(); err != nil {
			t.Fatalf("ParseURL(%q) accepted options that fail their own check: %v", rawURL, err)
		}
		// Whatever was accepted means the same when written out again.
		again, err := ParseURL(formatS3URL(o))
		if err != nil || again != o {
			t.Fatalf("ParseURL(%q) = %+v, but its URL %q parses as (%+v, %v)", rawURL, o, formatS3URL(o), again, err)
		}
	})
}

func BenchmarkS3Put(b *testing.B) {
	m := evidencetest.StartMinIO(b)
	m.CreateBucket(b, "evidence", false)
	s := newTestStore(b, m, Options{Bucket: "evidence"})
	data := bytes.Repeat([]byte("x"), 1<<10)
	ctx := context.Background()
	var n atomic.Int64
	put := func() error {
		return s.Put(ctx, fmt.Sprintf("requests/r%d/request.json", n.Add(1)), data)
	}
	b.Run("sequential", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if err := put(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := put(); err != nil {
					b.Error(err) // Fatal must not be called from these goroutines
					return
				}
			}
		})
	})
}

// TestS3StuckRequestsHoldOnlyTheirSlots checks the bound on requests in
// flight: a stuck PUT holds one slot and no other call waits for it; only
// once every slot is stuck does a caller wait, and only until its own
// context ends. Connections are kept for every slot.
func TestS3StuckRequestsHoldOnlyTheirSlots(t *testing.T) {
	m := evidencetest.StartMinIO(t)
	m.CreateBucket(t, "slots", false)
	release := make(chan struct{})
	hold := func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("stuck",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if p, ok := in.Parameters.(*s3.PutObjectInput); ok && strings.Contains(aws.ToString(p.Key), "stuck") {
						select {
						case <-release:
						case <-ctx.Done():
						}
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
	s := newTestStore(t, m, Options{Bucket: "slots", AttemptTimeout: time.Minute}, hold)
	if s.transport == nil || s.transport.MaxIdleConnsPerHost != MaxInFlight {
		t.Errorf("transport keeps %v idle connections per host, want %d", s.transport, MaxInFlight)
	}
	s.slots = make(chan struct{}, 2)
	ctx := context.Background()
	var wg sync.WaitGroup
	defer wg.Wait()
	unstick := sync.OnceFunc(func() { close(release) })
	defer unstick()
	stuck := func(key string) {
		wg.Go(func() {
			if err := s.Put(ctx, key, []byte(`{}`)); err != nil {
				t.Errorf("stuck Put %s: %v", key, err)
			}
		})
	}
	stuck("requests/stuck1/request.json")
	for len(s.slots) < 1 {
		time.Sleep(time.Millisecond)
	}
	if err := s.Put(ctx, "requests/free/request.json", []byte(`{}`)); err != nil {
		t.Fatalf("a Put beside a stuck one: %v", err)
	}
	stuck("requests/stuck2/request.json")
	for len(s.slots) < 2 {
		time.Sleep(time.Millisecond)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := s.Put(short, "requests/waits/request.json", []byte(`{}`))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "request slots") {
		t.Errorf("Put with every slot stuck: %v, want its own deadline while waiting for a slot", err)
	}
	unstick()
	if _, err := s.Get(ctx, "requests/waits/request.json"); !errors.Is(err, storage.ErrNotExist) {
		t.Errorf("the Put that waited sent its request: %v", err)
	}
}

func TestWalkInfoReportsTheServicesOwnTimeAndSize(t *testing.T) {
	t.Parallel()
	m := evidencetest.StartMinIO(t)
	m.CreateBucket(t, "evidence", false)
	s := newTestStore(t, m, Options{Bucket: "evidence", Prefix: "tenant/a"})
	mustPut(t, s, "requests/r1/request.json", []byte(`{"a":1}`))
	mustPut(t, s, "requests/r1/big", make([]byte, 2*storage.DefaultCompressThreshold))
	var got []storage.KeyInfo
	if err := storage.WalkInfo(context.Background(), s, "requests/", func(ki storage.KeyInfo) error {
		got = append(got, ki)
		return nil
	}); err != nil {
		t.Fatalf("WalkInfo = %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("WalkInfo = %+v, want 2 keys", got)
	}
	for _, ki := range got {
		head, err := m.Client().HeadObject(context.Background(), &s3.HeadObjectInput{
			Bucket: aws.String("evidence"), Key: aws.String("tenant/a/" + ki.Key),
		})
		if err != nil {
			t.Fatalf("HeadObject(%q) = %v", ki.Key, err)
		}
		// HEAD's Last-Modified is an HTTP date, to the second.
		if want := aws.ToTime(head.LastModified); !ki.ModTime.Truncate(time.Second).Equal(want) {
			t.Errorf("%s: ModTime %v, the service says %v", ki.Key, ki.ModTime, want)
		}
		if want := aws.ToInt64(head.ContentLength); ki.Size != want {
			t.Errorf("%s: Size %d, the service says %d", ki.Key, ki.Size, want)
		}
	}
}
