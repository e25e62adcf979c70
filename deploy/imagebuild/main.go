// Command imagebuild builds Toolgate's OCI image without a container
// daemon and writes it as an OCI image layout archive:
//
//	cd deploy && go run ./imagebuild -o toolgate.oci.tar
//
// The binary is built from the repository (CGO_ENABLED=0, -trimpath) and
// every timestamp is SOURCE_DATE_EPOCH (or the last commit's time, or
// 0), so the same source gives the same digest. It prints the image's
// manifest digest.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toolgate/toolgate/deploy/image"
	"github.com/toolgate/toolgate/gateway"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		slog.Error("imagebuild", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	out := fs.String("o", "toolgate.oci.tar", "OCI image layout archive to write")
	source := fs.String("source", "..", "the repository's folder (holding cmd/toolgate)")
	revision := fs.String("revision", "", "revision label (default: git rev-parse HEAD of -source, else unknown)")
	ref := fs.String("tag", gateway.Version, "tag recorded in the archive's index")
	arch := fs.String("arch", runtime.GOARCH, "GOARCH of the image")
	ca := fs.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "the host's CA certificate bundle to copy in")
	if err := fs.Parse(args); err != nil {
		return err
	}
	src, err := filepath.Abs(*source)
	if err != nil {
		return err
	}
	if *revision == "" {
		*revision = gitOutput(ctx, src, "rev-parse", "HEAD")
	}
	created, err := sourceDate(ctx, src)
	if err != nil {
		return err
	}
	o := image.Options{Source: src, Version: gateway.Version, Revision: *revision, Created: created, CABundle: *ca, Arch: *arch}
	img, err := image.Build(ctx, o)
	if err != nil {
		return err
	}
	if err := writeArchive(*out, img, *ref, created); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s\n", *out, digest)
	return nil
}

// writeArchive writes the archive beside path first and renames it into
// place, so that a failed build leaves no half archive.
func writeArchive(path string, img v1.Image, ref string, created time.Time) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".toolgate-oci-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	if err := image.WriteArchive(img, ref, created, w); err != nil {
		tmp.Close()
		return err
	}
	if err := errors.Join(w.Flush(), tmp.Chmod(0o644), tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// sourceDate is SOURCE_DATE_EPOCH, else the time of the source's last
// commit, else the Unix epoch.
func sourceDate(ctx context.Context, src string) (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		s = gitOutput(ctx, src, "log", "-1", "--format=%ct")
	}
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// gitOutput runs git in dir and returns its trimmed output, or "" when
// git or the repository is not there.
func gitOutput(ctx context.Context, dir string, args ...string) string {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
