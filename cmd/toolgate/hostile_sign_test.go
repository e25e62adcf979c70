package main

import (
	"bufio"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// keyIDPattern finds the key id serve logs for the key that signs.
var keyIDPattern = regexp.MustCompile(`msg="manifests are signed" .*key_id=(ed25519:[0-9a-f]{16})`)

// loggedKeyID returns the key id a serve log names, or "".
func loggedKeyID(log string) string {
	if m := keyIDPattern.FindStringSubmatch(log); m != nil {
		return m[1]
	}
	return ""
}

// manifestKeyID returns the key id of the signature of a request's stored
// manifest, or "" when it is unsigned.
func manifestKeyID(t *testing.T, dir, id string) string {
	t.Helper()
	m, err := evidence.ParseManifest(mustRead(t, evidenceFile(dir, id, evidence.ArtifactManifest)))
	if err != nil {
		t.Fatal(err)
	}
	if m.Signature == nil {
		return ""
	}
	return m.Signature.KeyID
}

// TestServeSignsByDefault: the first start of the embedded default creates
// the key, mode 0600, and logs its id; the next start signs with the same
// key; `evidence pubkey` with no flags prints that key, and verify with
// --require-signature accepts every manifest by it.
func TestServeSignsByDefault(t *testing.T) {
	t.Parallel()
	dir := tourDir(t)
	keyFile := filepath.Join(dir, "toolgate-signing.key")
	first := startServer(t, dir)
	keyID := loggedKeyID(first.log.String())
	if keyID == "" || !strings.Contains(first.log.String(), "created a new evidence signing key") {
		t.Fatalf("the first start does not log a created key and its id:\n%s", first.log.String())
	}
	fi, err := os.Lstat(keyFile)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v (%v), want a regular file of mode 0600", fi, err)
	}
	if _, stderr, code := runTool(t, dir, "call", "--addr", first.addr, "--request-id", "signed-1",
		"--tool", "workspace.shell", "--args", `{"command": "id"}`); code != exitFailure {
		t.Fatalf("first call: exit %d\n%s", code, stderr)
	}
	first.cmd.Process.Signal(syscall.SIGTERM)
	<-first.done

	second := startServer(t, dir)
	if got := loggedKeyID(second.log.String()); got != keyID || strings.Contains(second.log.String(), "created a new") {
		t.Fatalf("the second start logs key %q (want %q):\n%s", got, keyID, second.log.String())
	}
	writeFiles(t, filepath.Join(dir, "workspace"), map[string]string{"notes.txt": "hi\n"})
	if _, stderr, code := runTool(t, dir, "call", "--addr", second.addr, "--request-id", "signed-2",
		"--tool", "workspace.readFile", "--args", `{"path": "notes.txt"}`); code != exitOK {
		t.Fatalf("second call: exit %d\n%s", code, stderr)
	}
	for _, id := range []string{"signed-1", "signed-2"} {
		if got := manifestKeyID(t, dir, id); got != keyID {
			t.Errorf("%s is signed by %q, want %q", id, got, keyID)
		}
	}

	pub, stderr, code := runTool(t, dir, "evidence", "pubkey")
	if code != exitOK || !strings.HasPrefix(pub, "# key id: "+keyID+"\n-----BEGIN PUBLIC KEY-----\n") {
		t.Fatalf("pubkey with no flags: exit %d\n%s%s", code, pub, stderr)
	}
	if fi2, err := os.Lstat(keyFile); err != nil || fi2.ModTime() != fi.ModTime() {
		t.Fatalf("the key file changed after the first start (%v)", err)
	}
	writeFiles(t, dir, map[string]string{"gateway.pub": pub})
	// Until the log sequences them (within a second) the requests are
	// pending; signed and verified either way.
	eventually(t, faultSettle, "verify --require-signature --pubkey <what pubkey printed>", func() error {
		out, _, code := runTool(t, dir, "evidence", "verify", "--all", "--require-signature", "--pubkey", "gateway.pub")
		if code != exitOK || !strings.HasPrefix(out, "verified 2 requests: 2 ok\n") {
			return fmt.Errorf("exit %d\n%s", code, out)
		}
		return nil
	})
}

// TestServeSigningKeyNone: unsigned evidence only when the configuration
// says so: no key is created, the start warns, the manifests are unsigned,
// pubkey says why it has nothing to print, and --require-signature fails
// them.
func TestServeSigningKeyNone(t *testing.T) {
	t.Parallel()
	dir := tourDir(t)
	writeFiles(t, dir, map[string]string{"toolgate.yaml": "evidence: {signing_key: none}\n"})
	srv := startServer(t, dir, "--config", "toolgate.yaml")
	if !strings.Contains(srv.log.String(), "level=WARN") || !strings.Contains(srv.log.String(), "manifests are unsigned") ||
		loggedKeyID(srv.log.String()) != "" {
		t.Fatalf("the start does not warn of unsigned manifests:\n%s", srv.log.String())
	}
	if _, stderr, code := runTool(t, dir, "call", "--addr", srv.addr, "--request-id", "plain-1",
		"--tool", "workspace.shell", "--args", `{"command": "id"}`); code != exitFailure {
		t.Fatalf("call: exit %d\n%s", code, stderr)
	}
	if got := manifestKeyID(t, dir, "plain-1"); got != "" {
		t.Fatalf("signing_key: none signed with %s", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "toolgate-signing.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("signing_key: none created a key (%v)", err)
	}
	out, _, code := runTool(t, dir, "evidence", "verify", "plain-1")
	if code != exitOK || !strings.HasPrefix(out, "unsigned plain-1: ") {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
	_, stderr, code := runTool(t, dir, "evidence", "pubkey", "--config", "toolgate.yaml")
	if code != exitError || !strings.Contains(stderr, "evidence.signing_key: none: manifests are not signed") {
		t.Fatalf("pubkey of signing_key: none: exit %d\n%s", code, stderr)
	}
	pub, _, _ := runTool(t, dir, "evidence", "keygen", "--out", "other.pem")
	writeFiles(t, dir, map[string]string{"other.pub": pub})
	out, _, code = runTool(t, dir, "evidence", "verify", "--all", "--require-signature", "--pubkey", "other.pub")
	if code != exitFailure || !strings.HasPrefix(out, "unsigned-required plain-1: ") {
		t.Fatalf("verify --require-signature of unsigned evidence: exit %d\n%s", code, out)
	}
}

// TestServeFirstStartsAtOnceShareOneKey starts gateways at the same moment
// in one fresh folder: they sign with one key, and one of them made it.
func TestServeFirstStartsAtOnceShareOneKey(t *testing.T) {
	t.Parallel()
	for round := range 3 {
		dir := tourDir(t)
		const starts = 3
		logs := make([]string, starts)
		var wg sync.WaitGroup
		for i := range starts {
			wg.Go(func() { logs[i] = serveUntilSigning(dir) })
		}
		wg.Wait()
		created := 0
		for i, log := range logs {
			if loggedKeyID(log) == "" || loggedKeyID(log) != loggedKeyID(logs[0]) {
				t.Fatalf("round %d: start %d logs key %q, start 0 %q:\n%s", round, i, loggedKeyID(log), loggedKeyID(logs[0]), log)
			}
			if strings.Contains(log, "created a new evidence signing key") {
				created++
			}
		}
		if created != 1 {
			t.Fatalf("round %d: %d starts created a key, want 1", round, created)
		}
		pub, _, code := runTool(t, dir, "evidence", "pubkey")
		if code != exitOK || !strings.HasPrefix(pub, "# key id: "+loggedKeyID(logs[0])+"\n") {
			t.Fatalf("round %d: pubkey prints\n%s", round, pub)
		}
	}
}

// serveUntilSigning starts `toolgate serve` in dir, waits until it logs
// the key it signs with (before it takes its instance name's lease: of
// processes started at once under one name only one serves) or exits,
// stops it, and returns its log. It may run in any goroutine: it reports
// nothing to a testing.T.
func serveUntilSigning(dir string) string {
	cmd := exec.Command(toolgateBin, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	cmd.Dir = dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err.Error()
	}
	if err := cmd.Start(); err != nil {
		return err.Error()
	}
	deadline := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	defer deadline.Stop()
	var log strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if loggedKeyID(sc.Text()) != "" {
			break
		}
	}
	cmd.Process.Kill()
	io.Copy(io.Discard, stderr)
	cmd.Wait()
	return log.String()
}

// TestHostileSigningKeyFile (class: the key file the gateway owns): things
// planted at ./toolgate-signing.key before a start. Each start is refused
// with an error naming the problem: never a start without signatures,
// never a followed link, never evidence written.
func TestHostileSigningKeyFile(t *testing.T) {
	t.Parallel()
	_, attacker, _ := ed25519.GenerateKey(nil)
	attackerPEM, err := evidence.EncodePrivateKey(attacker)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		plant func(t *testing.T, dir, path string)
		want  string
	}{
		{"a symbolic link to a key the attacker knows", func(t *testing.T, dir, path string) {
			writeKey(t, filepath.Join(dir, "known.pem"), attackerPEM, 0o600)
			if err := os.Symlink(filepath.Join(dir, "known.pem"), path); err != nil {
				t.Fatal(err)
			}
		}, "toolgate-signing.key is a symbolic link: the gateway never follows one"},
		{"a dangling symbolic link where the new key would be written", func(t *testing.T, dir, path string) {
			if err := os.Symlink(filepath.Join(dir, "stolen.pem"), path); err != nil {
				t.Fatal(err)
			}
		}, "toolgate-signing.key is a symbolic link"},
		{"a key others can read", func(t *testing.T, dir, path string) { writeKey(t, path, attackerPEM, 0o644) },
			"toolgate-signing.key has mode 0644: group or others may read or change the key"},
		{"a key the group can read", func(t *testing.T, dir, path string) { writeKey(t, path, attackerPEM, 0o640) },
			"has mode 0640"},
		{"a key another user planted", func(t *testing.T, dir, path string) {
			writeKey(t, path, attackerPEM, 0o600)
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatalf("chown (the tests run as root): %v", err)
			}
		}, "belongs to uid 65534, not to the gateway's user"},
		{"a folder", func(t *testing.T, dir, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "toolgate-signing.key is a folder, not a key file"},
		{"a named pipe", func(t *testing.T, dir, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "toolgate-signing.key is a named pipe, not a key file"},
		{"a file that is not a key", func(t *testing.T, dir, path string) { writeKey(t, path, []byte("not a key\n"), 0o600) },
			"evidence.signing_key: ./toolgate-signing.key: evidence: private key: neither a PEM"},
		{"an empty file", func(t *testing.T, dir, path string) { writeKey(t, path, nil, 0o600) },
			"evidence: private key: empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := tourDir(t)
			path := filepath.Join(dir, "toolgate-signing.key")
			tc.plant(t, dir, path)
			stderr := serveMustRefuse(t, dir)
			if !strings.Contains(stderr, "evidence.signing_key") || !strings.Contains(stderr, tc.want) {
				t.Fatalf("stderr lacks evidence.signing_key and %q:\n%s", tc.want, stderr)
			}
			if body := strings.Split(string(attackerPEM), "\n")[1]; strings.Contains(stderr, body[24:]) {
				t.Fatalf("the refusal quotes the planted key:\n%s", stderr)
			}
			for _, name := range []string{"toolgate-evidence", "stolen.pem"} {
				if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s exists after the refused start (%v)", name, err)
				}
			}
			if known, err := os.ReadFile(filepath.Join(dir, "known.pem")); err == nil && string(known) != string(attackerPEM) {
				t.Error("the key behind the link was changed")
			}
		})
	}
}

// TestHostileSigningKeyConfig (class: configuration that would turn
// signatures off or expose the key): only the word none turns them off,
// a key pasted into the configuration is refused without being echoed,
// and the default key is refused inside a workspace or the evidence folder
// before it is created there.
func TestHostileSigningKeyConfig(t *testing.T) {
	t.Parallel()
	const pasted = "ERS3l6UZojNnSwiN+GBHKOEipvPm7Q8fJFgyF5PM/YM="
	tests := []struct {
		name, config, want string
	}{
		{"a word other than none", "evidence: {signing_key: off}", "evidence.signing_key: want none, {file: FILE} or {env: VAR}"},
		{"false", "evidence: {signing_key: false}", "evidence.signing_key: want none"},
		{"the key pasted into the configuration", "evidence: {signing_key: " + pasted + "}", "a key never goes in the configuration itself"},
		{"an empty mapping", "evidence: {signing_key: {}}", "evidence.signing_key: give file or env (or none for unsigned manifests)"},
		{"a misspelt key", "evidence: {signing_key: {fiel: k.pem}}", `evidence.signing_key: unknown key "fiel"`},
		{"the default key inside the workspace", "policies: {dir: OTHER/policies}\nevidence: {url: file://OTHER/ev, spool_dir: OTHER/sp}\ndrivers: {workspace: {type: workspace, root: .}}",
			"contains evidence.signing_key.file (DIR/toolgate-signing.key)"},
		{"the default key inside the evidence folder", "evidence: {url: 'file://.'}\ndrivers: {workspace: {type: workspace, root: ./ws}}",
			"evidence.signing_key.file (DIR/toolgate-signing.key) lies inside evidence.url (DIR)"},
		{"a configured key inside the spool", "evidence: {spool_dir: ./spool, signing_key: {file: ./spool/k.pem}}",
			"evidence.signing_key.file (DIR/spool/k.pem) lies inside evidence.spool_dir (DIR/spool)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			other := t.TempDir()
			for _, d := range []string{dir, other} {
				writePolicy(t, d, `@id("reads") permit (principal, action, resource == Tool::"workspace.readFile");`)
			}
			writeFiles(t, dir, map[string]string{"toolgate.yaml": strings.ReplaceAll(tc.config, "OTHER", other)})
			stderr := serveMustRefuse(t, dir, "--config", "toolgate.yaml")
			if want := strings.ReplaceAll(tc.want, "DIR", dir); !strings.Contains(stderr, want) {
				t.Fatalf("stderr lacks %q:\n%s", want, stderr)
			}
			if strings.Contains(stderr, pasted) {
				t.Fatalf("the refusal echoes the pasted key:\n%s", stderr)
			}
			if _, err := os.Lstat(filepath.Join(dir, "toolgate-signing.key")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("a refused start created the key (%v)", err)
			}
		})
	}
}

// writeKey writes a file with exactly mode.
func writeKey(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// TestHostileSandboxReadsTheCreatedKey (class: reading the key from a
// tool): the key serve creates beside the workspace is hidden from the
// sandboxed shell like a configured one, whatever the spelling.
func TestHostileSandboxReadsTheCreatedKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, `@id("shell_for_all") permit (principal, action, resource in Driver::"workspace");`)
	d := &sandboxDeployment{dir: dir, srv: startServer(t, dir)}
	key := string(mustRead(t, filepath.Join(dir, "toolgate-signing.key")))
	body := strings.Split(key, "\n")[1]
	for _, command := range []string{
		"cat ../toolgate-signing.key",
		"cat " + filepath.Join(dir, "toolgate-signing.key"),
		"cp ../toolgate-signing.key k && base64 k",
		"ln -s ../toolgate-signing.key l && cat l",
	} {
		t.Run(command, func(t *testing.T) {
			res := d.shell(t, command, 10000)
			if res.ToolResult.ExitCode == 0 {
				t.Errorf("the command succeeded: %s", res.raw)
			}
			if strings.Contains(res.raw, body) || strings.Contains(res.raw, body[24:40]) {
				t.Errorf("the response carries the key:\n%s", res.raw)
			}
		})
	}
}
