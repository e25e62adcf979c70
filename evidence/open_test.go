package evidence

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		wantErr string
	}{
		{name: "absolute file", url: "file://" + abs, wantDir: abs},
		{name: "relative file with dot", url: "file://./toolgate-evidence", wantDir: "toolgate-evidence"},
		{name: "relative file", url: "file://ev/nested", wantDir: filepath.Join("ev", "nested")},
		{name: "scheme is case-insensitive", url: "FILE://upper", wantDir: "upper"},
		{name: "memory", url: "mem://", wantMem: true},
		{name: "s3 is not supported", url: "s3://bucket/prefix", wantErr: `evidence: unsupported store URL scheme "s3" (supported: file, mem)`},
		{name: "http", url: "http://example.com/x", wantErr: `unsupported store URL scheme "http"`},
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
			case *MemoryStore:
				if !tt.wantMem {
					t.Fatalf("Open(%q) = MemoryStore, want FileStore", tt.url)
				}
			case *FileStore:
				if tt.wantMem {
					t.Fatalf("Open(%q) = FileStore, want MemoryStore", tt.url)
				}
				mustPut(t, got, "k", []byte("v"))
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
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), "file://"+file)
	if err == nil || s != nil {
		t.Fatalf("Open(file:// of a regular file) = (%v, %v), want (nil, error)", s, err)
	}
}
