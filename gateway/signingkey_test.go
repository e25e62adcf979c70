package gateway

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/signingkey"
)

// signEnv is a folder to build gateways in: a policy, a workspace, and a
// configuration whose evidence.signing_key is keyYAML.
type signEnv struct {
	dir, key string
	cfg      config.Config
}

func newSignEnv(t *testing.T, keyYAML string) *signEnv {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"policies", "ws"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "policies", "policy.default.cedar"), []byte(`permit (principal, action, resource);`), 0o600); err != nil {
		t.Fatal(err)
	}
	text := "policies: {dir: '" + filepath.Join(dir, "policies") + "'}\n" +
		"evidence: {url: 'mem://', spool_dir: none" + keyYAML + "}\n" +
		"drivers: {workspace: {type: workspace, root: '" + filepath.Join(dir, "ws") + "'}}\n"
	cfg, err := config.ParseConfig([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = cfg.WithDefaults(); err != nil {
		t.Fatal(err)
	}
	// The gateway resolves relative paths from the folder it starts in.
	t.Chdir(dir)
	return &signEnv{dir: dir, key: filepath.Join(dir, "toolgate-signing.key"), cfg: cfg}
}

// build builds a gateway from the configuration in the folder, as serve
// does, and returns it with what it logged.
func (s *signEnv) build(t *testing.T) (*Gateway, string, error) {
	t.Helper()
	var log bytes.Buffer
	g, closer, err := Build(context.Background(), s.cfg, func(string) string { return "" }, slog.New(slog.NewTextHandler(&log, nil)))
	if err == nil {
		t.Cleanup(func() { closer.Close() })
	}
	return g, log.String(), err
}

func TestFirstStartCreatesTheSigningKeyAndLaterStartsReuseIt(t *testing.T) {
	s := newSignEnv(t, "")
	g, log, err := s.build(t)
	if err != nil {
		t.Fatal(err)
	}
	signer := g.Signer()
	if signer == nil {
		t.Fatal("a gateway built from the embedded default's signing_key does not sign")
	}
	fi, err := os.Lstat(s.key)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the created key is %v, want a regular file of mode 0600", fi.Mode())
	}
	pub := base64.StdEncoding.EncodeToString(signer.PublicKey())
	for _, want := range []string{"created a new evidence signing key", "key_file=./toolgate-signing.key",
		"msg=\"manifests are signed\"", "key_id=" + signer.KeyID(), `public_key="` + pub + `"`} {
		if !strings.Contains(log, want) {
			t.Errorf("the first start's log lacks %q:\n%s", want, log)
		}
	}
	if logged, err := evidence.ParsePublicKey([]byte(pub)); err != nil || !logged.Equal(signer.PublicKey()) {
		t.Errorf("the logged public key does not parse as --pubkey text: %v", err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(s.dir, ".toolgate-signing.key.tmp-*")); len(leftovers) > 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}

	g2, log2, err := s.build(t)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Signer() == nil || g2.Signer().KeyID() != signer.KeyID() {
		t.Fatalf("the second start signs with %v, want the first start's %s", g2.Signer(), signer.KeyID())
	}
	if strings.Contains(log2, "created a new") || !strings.Contains(log2, "key_id="+signer.KeyID()) {
		t.Errorf("the second start's log:\n%s", log2)
	}
}

func TestSigningKeyNoneIsUnsignedAndCreatesNothing(t *testing.T) {
	s := newSignEnv(t, ", signing_key: none")
	g, log, err := s.build(t)
	if err != nil {
		t.Fatal(err)
	}
	if g.Signer() != nil {
		t.Fatal("signing_key: none signs")
	}
	if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "manifests are unsigned") {
		t.Errorf("the log does not warn of unsigned manifests:\n%s", log)
	}
	if _, err := os.Lstat(s.key); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("signing_key: none created a key file (%v)", err)
	}
	if _, err := signingkey.PublicKey(s.cfg, os.Getenv); !errors.Is(err, signingkey.ErrUnsigned) {
		t.Errorf("SigningPublicKey = %v, want signingkey.ErrUnsigned", err)
	}
}

// TestOwnedSigningKeyAttacksAreRefused plants things at the path of the key
// the gateway creates: each refuses the start with an error that says what
// is wrong, never a start without signatures, never a followed link.
func TestOwnedSigningKeyAttacksAreRefused(t *testing.T) {
	_, attackerKey, _ := ed25519.GenerateKey(nil)
	attackerPEM, err := evidence.EncodePrivateKey(attackerKey)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		plant func(t *testing.T, path string)
		want  string
	}{
		{"a symbolic link to a key the attacker knows", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "known.key")
			mustWrite(t, target, attackerPEM, 0o600)
			mustSymlink(t, target, path)
		}, "is a symbolic link"},
		{"a dangling symbolic link, where the new key would land", func(t *testing.T, path string) {
			mustSymlink(t, filepath.Join(filepath.Dir(path), "landing.key"), path)
		}, "is a symbolic link"},
		{"a key readable by others", func(t *testing.T, path string) { mustWrite(t, path, attackerPEM, 0o644) }, "has mode 0644"},
		{"a key readable by the group", func(t *testing.T, path string) { mustWrite(t, path, attackerPEM, 0o640) }, "has mode 0640"},
		{"a key writable by the group", func(t *testing.T, path string) { mustWrite(t, path, attackerPEM, 0o620) }, "has mode 0620"},
		{"a key of another user", func(t *testing.T, path string) {
			mustWrite(t, path, attackerPEM, 0o600)
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatalf("chown (the tests run as root): %v", err)
			}
		}, "belongs to uid 65534"},
		{"a folder", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "is a folder, not a key file"},
		{"a named pipe, which must not hang the start", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "is a named pipe, not a key file"},
		{"a file that is not a key", func(t *testing.T, path string) { mustWrite(t, path, []byte("hello\n"), 0o600) }, "private key"},
		{"an empty file", func(t *testing.T, path string) { mustWrite(t, path, nil, 0o600) }, "private key: empty"},
		{"a public key", func(t *testing.T, path string) {
			mustWrite(t, path, []byte("MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n"), 0o600)
		}, "private key"},
		{"a huge file", func(t *testing.T, path string) {
			mustWrite(t, path, bytes.Repeat([]byte("A"), config.MaxKeyFileBytes+1), 0o600)
		}, "too large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSignEnv(t, "")
			tc.plant(t, s.key)
			before := folderState(t, s.dir)
			done := make(chan error, 1)
			go func() {
				_, _, err := s.build(t)
				done <- err
			}()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the start hangs")
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "evidence.signing_key") {
				t.Fatalf("Build: %v, want a refusal naming evidence.signing_key and saying %q", err, tc.want)
			}
			if after := folderState(t, s.dir); after != before {
				t.Fatalf("the folder changed:\n%s\nwant\n%s", after, before)
			}
			if _, err := signingkey.PublicKey(s.cfg, os.Getenv); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("SigningPublicKey: %v, want the same refusal", err)
			}
		})
	}
}

func TestConcurrentFirstStartsCreateOneKey(t *testing.T) {
	for round := range 10 {
		s := newSignEnv(t, "")
		const starts = 6
		ids := make([]string, starts)
		created := make([]bool, starts)
		errs := make([]error, starts)
		var wg sync.WaitGroup
		for i := range starts {
			wg.Go(func() {
				var log bytes.Buffer
				signer, _, err := signingkey.Load(s.cfg, os.Getenv, slog.New(slog.NewTextHandler(&log, nil)))
				if errs[i] = err; err == nil {
					ids[i], created[i] = signer.KeyID(), strings.Contains(log.String(), "created a new")
				}
			})
		}
		wg.Wait()
		creators := 0
		for i := range starts {
			if errs[i] != nil {
				t.Fatalf("round %d, start %d: %v", round, i, errs[i])
			}
			if ids[i] != ids[0] {
				t.Fatalf("round %d: starts sign with %q and %q", round, ids[0], ids[i])
			}
			if created[i] {
				creators++
			}
		}
		if creators != 1 {
			t.Fatalf("round %d: %d starts say they created the key, want 1", round, creators)
		}
		entries, err := os.ReadDir(s.dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.Contains(e.Name(), ".tmp-") {
				t.Fatalf("round %d: temporary file left behind: %s", round, e.Name())
			}
		}
	}
}

func TestSigningPublicKeyReadsButNeverCreates(t *testing.T) {
	s := newSignEnv(t, "")
	if _, err := signingkey.PublicKey(s.cfg, os.Getenv); !errors.Is(err, signingkey.ErrNoKeyYet) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("before the first start: %v, want signingkey.ErrNoKeyYet", err)
	}
	if _, err := os.Lstat(s.key); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("SigningPublicKey created the key (%v)", err)
	}
	g, _, err := s.build(t)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := signingkey.PublicKey(s.cfg, os.Getenv)
	if err != nil || !pub.Equal(g.Signer().PublicKey()) {
		t.Fatalf("after the first start: %v, want the gateway's key", err)
	}

	configured := newSignEnv(t, ", signing_key: {file: elsewhere.pem}")
	if _, err := signingkey.PublicKey(configured.cfg, os.Getenv); !errors.Is(err, fs.ErrNotExist) || errors.Is(err, signingkey.ErrNoKeyYet) {
		t.Fatalf("a configured key that is missing: %v, want a plain not-found error", err)
	}
	if _, _, err := configured.build(t); err == nil || !strings.Contains(err.Error(), "evidence.signing_key") {
		t.Fatalf("a configured key that is missing: Build %v, want a refusal", err)
	}
	if _, err := os.Lstat(filepath.Join(configured.dir, "elsewhere.pem")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a configured key without create: true was created")
	}
}

func mustWrite(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// folderState describes every entry of dir (not below its sub-folders): name,
// type, mode, size, link target.
func folderState(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		target, _ := os.Readlink(filepath.Join(dir, e.Name()))
		size := fi.Size()
		if fi.IsDir() {
			size = 0
		}
		fmt.Fprintf(&b, "%s %v %d %q\n", e.Name(), fi.Mode(), size, target)
	}
	return b.String()
}
