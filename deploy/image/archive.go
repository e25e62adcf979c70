package image

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WriteArchive writes img as an OCI image layout archive (the tar that
// `skopeo copy oci-archive:…`, `crane push` of an extracted layout and
// `podman load` read) to out, tagged ref in its index. Entries are sorted
// and stamped with created, so the archive is as reproducible as the image.
func WriteArchive(img v1.Image, ref string, created time.Time, out io.Writer) error {
	dir, err := os.MkdirTemp("", "toolgate-oci")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	p, err := layout.Write(dir, idx)
	if err != nil {
		return fmt.Errorf("OCI layout: %w", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return fmt.Errorf("OCI layout: %w", err)
	}
	return tarFolder(dir, created, out)
}

// tarFolder writes dir's files as a tar, in name order, owned by root with
// fixed modes and times.
func tarFolder(dir string, created time.Time, out io.Writer) error {
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		names = append(names, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(names)
	tw := tar.NewWriter(out)
	for _, name := range names {
		if err := addFile(tw, dir, name, created); err != nil {
			return err
		}
	}
	return tw.Close()
}

func addFile(tw *tar.Writer, dir, name string, created time.Time) error {
	path := filepath.Join(dir, filepath.FromSlash(name))
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return tw.WriteHeader(&tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: created})
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("OCI layout: %s is not a regular file", name)
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: fi.Size(), ModTime: created}); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}
