package evidence

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/s3store"
)

// S3Options are the options of the S3 backend, under the name these
// tests give them.
type S3Options = s3store.Options

// The conformance tests of store_test.go also run against an S3 store on
// a MinIO server of its own, with keys under a prefix. The S3 backend's
// own tests are in evidence/s3store.
func init() {
	storeFactories = append(storeFactories, struct {
		name string
		new  func(t testing.TB) Store
	}{"s3", func(t testing.TB) Store {
		m := evidencetest.StartMinIO(t)
		m.CreateBucket(t, "evidence", false)
		return newTestS3Store(t, m, S3Options{Bucket: "evidence", Prefix: "tenant/a"})
	}})
}

// newTestS3Store returns a store on m with the given options, the
// connection settings filled in, and fast retries unless opts sets them.
// The server's credentials go to the client itself rather than through
// the process's environment, so tests using it may run in parallel.
func newTestS3Store(t testing.TB, m *evidencetest.MinIO, opts S3Options) *s3store.Store {
	t.Helper()
	opts.Endpoint = m.Endpoint
	opts.Region = evidencetest.Region
	opts.PathStyle = true
	opts.RetryBaseDelay = cmp.Or(opts.RetryBaseDelay, 5*time.Millisecond)
	opts.RetryMaxDelay = cmp.Or(opts.RetryMaxDelay, 50*time.Millisecond)
	s, err := s3store.New(context.Background(), opts, func(o *s3.Options) {
		o.Credentials = credentials.NewStaticCredentialsProvider(m.AccessKey, m.SecretKey, "")
	})
	if err != nil {
		t.Fatalf("s3store.New = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
