package chart

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

// toolgateBin is cmd/toolgate, built once by TestMain from the main module.
var toolgateBin string

// chartDir is the chart under test.
const chartDir = "../helm/toolgate"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "toolgate-deploy")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	toolgateBin = filepath.Join(dir, "toolgate")
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	// -race as cmd/toolgate's tests build it, so that the test command
	// builds it once for both.
	build := exec.Command("go", "build", "-race", "-o", toolgateBin, "./cmd/toolgate")
	build.Dir = "../.."
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building toolgate:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runTool runs the toolgate binary in dir with env added and returns its
// outputs and exit code.
func runTool(t *testing.T, dir string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(toolgateBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// replicaKeys are the signing keys of a release's pods: the Secret's data
// (<pod>.pem) and the public keys for signing.publicKeys.
type replicaKeys struct {
	secret map[string][]byte
	public []any
	pubs   []ed25519.PublicKey
}

func newReplicaKeys(t *testing.T, podPrefix string, n int) replicaKeys {
	t.Helper()
	k := replicaKeys{secret: map[string][]byte{}}
	for i := range n {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		k.secret[fmt.Sprintf("%s-%d.pem", podPrefix, i)] = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
		k.public = append(k.public, base64.StdEncoding.EncodeToString(pub))
		k.pubs = append(k.pubs, pub)
	}
	return k
}

// render renders and strictly decodes the chart for r.
func render(t *testing.T, r Release) (string, []runtime.Object) {
	t.Helper()
	manifest, err := Render(context.Background(), chartDir, r)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	objs, err := Decode(manifest)
	if err != nil {
		t.Fatalf("strict decode: %v", err)
	}
	return manifest, objs
}
