// Package image builds Toolgate's OCI image without a container daemon:
// a static cmd/toolgate and the host's CA certificates on an empty base,
// run as a numeric non-root user, with OCI labels and an SPDX SBOM made
// from the binary's build information. Every timestamp is the source date
// (SOURCE_DATE_EPOCH), so two builds of one source give one digest.
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Paths inside the image.
const (
	BinaryPath  = "/toolgate"
	CABundle    = "/etc/ssl/certs/ca-certificates.crt"
	SBOMPath    = "/usr/share/doc/toolgate/sbom.spdx.json"
	WorkDir     = "/var/lib/toolgate"
	UID         = 65532
	userName    = "toolgate"
	sourceLabel = "https://github.com/toolgate/toolgate"
)

// Options say what to build from.
type Options struct {
	// Source is the main module's folder (holding cmd/toolgate).
	Source string
	// Version and Revision go into the labels; Revision "" is "unknown".
	Version, Revision string
	// Created is the source date: every timestamp in the image.
	Created time.Time
	// CABundle is the host's CA certificate bundle to copy in.
	CABundle string
	// Arch is the GOARCH to build for (amd64, arm64).
	Arch string
}

// Build compiles cmd/toolgate and assembles the image.
func Build(ctx context.Context, o Options) (v1.Image, error) {
	dir, err := os.MkdirTemp("", "toolgate-image")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "toolgate")
	if err := compile(ctx, o, bin); err != nil {
		return nil, err
	}
	return Assemble(o, bin)
}

// compile builds a static, reproducible binary: no cgo, no local paths,
// no build id, no VCS stamp (the revision is a label instead).
func compile(ctx context.Context, o Options, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags=-s -w -buildid=", "-o", out, "./cmd/toolgate")
	cmd.Dir = o.Source
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.Arch, "GOFLAGS=-mod=readonly",
		"SOURCE_DATE_EPOCH="+strconv.FormatInt(o.Created.Unix(), 10))
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/toolgate: %w\n%s", err, stderr.String())
	}
	return nil
}

// Assemble puts the binary at bin into an image.
func Assemble(o Options, bin string) (v1.Image, error) {
	binary, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	info, err := buildinfo.Read(bytes.NewReader(binary))
	if err != nil {
		return nil, fmt.Errorf("%s has no Go build information: %w", bin, err)
	}
	if cgo := setting(info, "CGO_ENABLED"); cgo != "0" {
		return nil, fmt.Errorf("%s was built with CGO_ENABLED=%q; the image has no C library", bin, cgo)
	}
	ca, err := os.ReadFile(o.CABundle)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	sbom, err := SBOM(info, binary, o)
	if err != nil {
		return nil, err
	}
	layer, err := rootLayer(o.Created, binary, ca, sbom)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "deploy/imagebuild", Comment: "toolgate, CA certificates, SBOM"},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = o.Arch, "linux"
	cfg.Created = v1.Time{Time: o.Created}
	cfg.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", UID, UID),
		Entrypoint:   []string{BinaryPath},
		Cmd:          []string{"serve"},
		WorkingDir:   WorkDir,
		Env:          []string{"SSL_CERT_FILE=" + CABundle},
		ExposedPorts: map[string]struct{}{"50051/tcp": {}, "9464/tcp": {}},
		Labels:       Labels(o),
	}
	return mutate.ConfigFile(img, cfg)
}

// Labels are the image's OCI annotations as config labels.
func Labels(o Options) map[string]string {
	rev := o.Revision
	if rev == "" {
		rev = "unknown"
	}
	return map[string]string{
		"org.opencontainers.image.title":       "toolgate",
		"org.opencontainers.image.description": "Policy-gated evidence gateway for tool calls",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    rev,
		"org.opencontainers.image.source":      sourceLabel,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
		"dev.toolgate.sbom":                    SBOMPath,
	}
}

func setting(info *buildinfo.BuildInfo, key string) string {
	for _, s := range info.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

// entry is one file or folder of the layer.
type entry struct {
	name string
	mode int64
	uid  int
	dir  bool
	data []byte
}

// rootLayer is the image's one layer: the binary, the CA bundle, a
// passwd and group naming the user, the SBOM, and the folders the gateway
// may write to when they are not mounted (/tmp, its working folder).
func rootLayer(created time.Time, binary, ca, sbom []byte) (v1.Layer, error) {
	entries := []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\n%s:x:%d:\n", userName, UID))},
		{name: "etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/nonexistent\n%s:x:%d:%d:toolgate:%s:/nonexistent\n", userName, UID, UID, WorkDir))},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: CABundle[1:], mode: 0o644, data: ca},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: BinaryPath[1:], mode: 0o755, data: binary},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/share/", mode: 0o755, dir: true},
		{name: "usr/share/doc/", mode: 0o755, dir: true},
		{name: "usr/share/doc/toolgate/", mode: 0o755, dir: true},
		{name: SBOMPath[1:], mode: 0o644, data: sbom},
		{name: "var/", mode: 0o755, dir: true},
		{name: "var/lib/", mode: 0o755, dir: true},
		{name: WorkDir[1:] + "/", mode: 0o700, uid: UID, dir: true},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: created, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		if e.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}
