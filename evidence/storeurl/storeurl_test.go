package storeurl

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/s3store"
)

func TestOpen(t *testing.T) {
	ctx := context.Background()
	abs := filepath.Join(t.TempDir(), "abs")
	t.Chdir(t.TempDir())
	tests := []struct {
		name    string
		url     string
		wantDir string // for file stores: the directory that must now exist
		wantMem bool
		wantS3  bool
		wantErr string
	}{
		{name: "absolute file", url: "file://" + abs, wantDir: abs},
		{name: "relative file with dot", url: "file://./toolgate-evidence", wantDir: "toolgate-evidence"},
		{name: "relative file", url: "file://ev/nested", wantDir: filepath.Join("ev", "nested")},
		{name: "scheme is case-insensitive", url: "FILE://upper", wantDir: "upper"},
		{name: "memory", url: "mem://", wantMem: true},
		{name: "s3", url: "s3://evidence/tenant?region=us-east-1", wantS3: true},
		{name: "s3 scheme is case-insensitive", url: "S3://evidence?region=auto&endpoint=https://acct.r2.cloudflarestorage.com", wantS3: true},
		{name: "s3 with an unknown parameter", url: "s3://evidence?regoin=us-east-1", wantErr: `unknown parameter "regoin"`},
		{name: "s3 without bucket", url: "s3:///tenant?region=auto", wantErr: `bucket "" is not a valid bucket name`},
		{name: "s3 with bad object lock", url: "s3://evidence?region=auto&object_lock_mode=GOVERNANCE", wantErr: "object lock days 0 is not between 1 and 36500"},
		{name: "http", url: "http://example.com/x", wantErr: `evidence: unsupported store URL scheme "http" (supported: file, mem, s3)`},
		{name: "no scheme", url: "./evidence", wantErr: "has no scheme"},
		{name: "empty", url: "", wantErr: "has no scheme"},
		{name: "file without directory", url: "file://", wantErr: "names no directory"},
		{name: "memory with path", url: "mem://x", wantErr: "takes no path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(ctx, tt.url)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Open(%q) = %v, want an error containing %q", tt.url, err, tt.wantErr)
				}
				if s != nil {
					t.Fatalf("Open(%q) returned a store with its error", tt.url)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q) = %v", tt.url, err)
			}
			defer s.Close()
			switch got := s.(type) {
			case *evidence.MemoryStore:
				if !tt.wantMem {
					t.Fatalf("Open(%q) = MemoryStore, want another store", tt.url)
				}
			case *s3store.Store:
				// Opening makes no request; the s3store tests use a real server.
				if !tt.wantS3 {
					t.Fatalf("Open(%q) = s3store.Store, want another store", tt.url)
				}
			case *evidence.FileStore:
				if tt.wantMem || tt.wantS3 {
					t.Fatalf("Open(%q) = FileStore, want another store", tt.url)
				}
				if err := got.Put(ctx, "k", []byte("v")); err != nil {
					t.Fatalf("Put = %v", err)
				}
				if _, err := os.Stat(filepath.Join(tt.wantDir, "k")); err != nil {
					t.Fatalf("artifact not in %q: %v", tt.wantDir, err)
				}
			default:
				t.Fatalf("Open(%q) = %T", tt.url, s)
			}
		})
	}
}

func TestOpenFileErrorIsNilStore(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), "file://"+file)
	if err == nil || s != nil {
		t.Fatalf("Open(file:// of a regular file) = (%v, %v), want (nil, error)", s, err)
	}
}

// TestOpenS3URL opens a real MinIO by URL, with the credentials of the
// standard AWS environment, and finds the artifact under the prefix.
func TestOpenS3URL(t *testing.T) {
	m := evidencetest.StartMinIO(t)
	m.SetEnv(t)
	m.CreateBucket(t, "open-url", false)
	st, err := Open(context.Background(), m.URL("open-url", "tenant/b"))
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	defer st.Close()
	if _, ok := st.(*s3store.Store); !ok {
		t.Fatalf("Open = %T, want *s3store.Store", st)
	}
	if err := st.Put(context.Background(), "requests/r1/request.json", []byte(`{"a":1}`)); err != nil {
		t.Fatalf("Put = %v", err)
	}
	out, err := m.Client().GetObject(context.Background(), &s3.GetObjectInput{
		Bucket: aws.String("open-url"), Key: aws.String("tenant/b/requests/r1/request.json"),
	})
	if err != nil {
		t.Fatalf("GetObject = %v", err)
	}
	defer out.Body.Close()
	if raw, err := io.ReadAll(out.Body); err != nil || string(raw) != `{"a":1}` {
		t.Fatalf("object under the prefix holds %q (%v)", raw, err)
	}
}
