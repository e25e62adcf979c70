package workspace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHealthIsWhetherTheFolderServes(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if h := d.Health(); !h.Healthy || h.Engine != "workspace" || h.Detail != "" {
		t.Errorf("health of a usable folder: %+v", h)
	}
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	if h := d.Health(); h.Healthy || !strings.Contains(h.Detail, "removed") {
		t.Errorf("health of a removed folder: %+v", h)
	}
}
