package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// built is one build of the image, written as an archive.
type built struct {
	archive []byte
	digest  string
}

func build(t *testing.T, o Options) built {
	t.Helper()
	img, err := Build(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteArchive(img, "test", o.Created, &buf); err != nil {
		t.Fatal(err)
	}
	return built{archive: buf.Bytes(), digest: d.String()}
}

// TestImage builds the image twice from this checkout and checks that
// the builds are the same to the byte, then reads the archive back as a
// registry client would and checks what it runs and holds: a numeric
// non-root user, the binary as entrypoint, no shell or any other program,
// no private key, the labels, and an SBOM of exactly the binary's modules.
func TestImage(t *testing.T) {
	src, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Source: src, Version: "0.1.0-test", Revision: "0123456789abcdef0123456789abcdef01234567",
		Created: time.Unix(1767225600, 0).UTC(), CABundle: "/etc/ssl/certs/ca-certificates.crt", Arch: runtime.GOARCH}
	first, second := build(t, o), build(t, o)
	if first.digest != second.digest || !bytes.Equal(first.archive, second.archive) {
		t.Fatalf("two builds of one source differ: %s and %s", first.digest, second.digest)
	}
	t.Logf("image %s, archive %d bytes", first.digest, len(first.archive))
	files := readImage(t, first, o)
	checkFiles(t, files, src)
}

// readImage extracts the archive into an OCI layout, loads the image from
// it, checks its configuration and returns its files by path.
func readImage(t *testing.T, b built, o Options) map[string]*layerFile {
	t.Helper()
	dir := t.TempDir()
	untar(t, b.archive, dir)
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Digest.String() != b.digest {
		t.Fatalf("index %+v: want one image, %s", m.Manifests, b.digest)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want the numeric non-root 65532:65532", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/toolgate"}) || !slices.Equal(c.Cmd, []string{"serve"}) {
		t.Errorf("entrypoint %q cmd %q, want [/toolgate] [serve]", c.Entrypoint, c.Cmd)
	}
	for k, want := range map[string]string{"org.opencontainers.image.version": o.Version, "org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.source": "https://github.com/toolgate/toolgate", "org.opencontainers.image.created": "2026-01-01T00:00:00Z"} {
		if c.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], want)
		}
	}
	if !cfg.Created.Time.Equal(o.Created) {
		t.Errorf("created %v, want the source date %v", cfg.Created.Time, o.Created)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	return layerFiles(t, rc, o.Created)
}

// layerFile is one entry of the layer.
type layerFile struct {
	hdr  *tar.Header
	data []byte
}

func layerFiles(t *testing.T, r io.Reader, created time.Time) map[string]*layerFile {
	t.Helper()
	files := map[string]*layerFile{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(created) {
			t.Errorf("%s is dated %v, not the source date", h.Name, h.ModTime)
		}
		files["/"+strings.TrimSuffix(h.Name, "/")] = &layerFile{hdr: h, data: data}
	}
}

// checkFiles checks the layer holds the binary, the CA bundle, the SBOM
// and the user's files, and nothing else: no shell, no second program,
// no key.
func checkFiles(t *testing.T, files map[string]*layerFile, src string) {
	t.Helper()
	var programs, names []string
	for name, f := range files {
		names = append(names, name)
		if f.hdr.Typeflag == tar.TypeReg && f.hdr.Mode&0o111 != 0 {
			programs = append(programs, name)
		}
		if f.hdr.Typeflag == tar.TypeSymlink || f.hdr.Typeflag == tar.TypeLink {
			t.Errorf("%s is a link", name)
		}
		if bytes.Contains(f.data, []byte("PRIVATE KEY-----")) {
			t.Errorf("%s holds a private key", name)
		}
	}
	if !slices.Equal(programs, []string{"/toolgate"}) {
		t.Errorf("executables %v, want only /toolgate (no shell)", programs)
	}
	for _, gone := range []string{"/bin", "/bin/sh", "/usr/bin", "/sbin"} {
		if files[gone] != nil {
			t.Errorf("the image holds %s", gone)
		}
	}
	slices.Sort(names)
	t.Logf("files: %v", names)
	bin := files["/toolgate"]
	if bin == nil || files[CABundle] == nil || files[SBOMPath] == nil {
		t.Fatalf("want /toolgate, %s and %s; have %v", CABundle, SBOMPath, names)
	}
	ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil || !bytes.Equal(files[CABundle].data, ca) {
		t.Errorf("the CA bundle is not the host's (%v)", err)
	}
	checkStatic(t, bin.data, src)
	checkSBOM(t, files[SBOMPath].data, bin.data)
	if w := files[WorkDir]; w == nil || w.hdr.Uid != UID || w.hdr.Mode&0o077 != 0 {
		t.Errorf("%s: want a folder of uid %d that only it may use", WorkDir, UID)
	}
	if p := files["/etc/passwd"]; p == nil || !strings.Contains(string(p.data), ":65532:65532:") {
		t.Error("/etc/passwd does not name the image's user")
	}
}

// checkStatic checks the binary is static (no interpreter, no dynamic
// section) and carries no path of the machine that built it.
func checkStatic(t *testing.T, binary []byte, src string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (%v)", p.Type)
		}
	}
	// The source, module cache and toolchain folders; -trimpath leaves
	// none of them in the binary.
	locals := []string{src, runtime.GOROOT()}
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		locals = append(locals, strings.TrimSpace(string(out)))
	}
	for _, local := range locals {
		if local != "" && local != "/" && bytes.Contains(binary, []byte(local+"/")) {
			t.Errorf("the binary holds the build machine's path %s (-trimpath)", local)
		}
	}
}

// checkSBOM checks the SBOM names the binary by its digest and lists every
// module of its build information, at its version.
func checkSBOM(t *testing.T, sbom, binary []byte) {
	t.Helper()
	var doc spdxDocument
	dec := json.NewDecoder(bytes.NewReader(sbom))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("SBOM: %v", err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || len(doc.Packages) < 3 {
		t.Fatalf("SBOM: %s with %d packages", doc.SPDXVersion, len(doc.Packages))
	}
	sum := sha256.Sum256(binary)
	if got := doc.Packages[0].Checksums; len(got) != 1 || got[0].Value != hex.EncodeToString(sum[:]) {
		t.Errorf("SBOM names the binary by %v, want its SHA-256", got)
	}
	info, err := buildinfo.Read(bytes.NewReader(binary))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, p := range doc.Packages {
		listed[p.Name] = p.VersionInfo
	}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		if listed[d.Path] != d.Version {
			t.Errorf("SBOM lists %s at %q, the binary holds %s", d.Path, listed[d.Path], d.Version)
		}
	}
	if len(info.Deps) < 10 {
		t.Errorf("the binary lists %d modules; is it Toolgate?", len(info.Deps))
	}
}

func untar(t *testing.T, archive []byte, dir string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, dir+string(filepath.Separator)) {
			t.Fatalf("archive entry %q leaves the folder", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("archive entry %q of type %c", h.Name, h.Typeflag)
		}
	}
}
