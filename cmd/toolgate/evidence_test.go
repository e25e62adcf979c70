package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
	"github.com/toolgate/toolgate/evidence"
)

// recordTour runs the real gateway in a fresh tour folder and makes two
// calls: "ev-deny" (a denied shell command, run id "run-a") and "ev-allow"
// (an allowed read, run id "run-b"). It returns the folder; the evidence
// is in its toolgate-evidence folder.
func recordTour(t *testing.T) string {
	t.Helper()
	dir := tourDir(t)
	srv := startServer(t, dir)
	if out, stderr, code := runTool(t, dir, "call", "--addr", srv.addr, "--request-id", "ev-deny", "--run-id", "run-a",
		"--tool", "workspace.shell", "--args", `{"command": "touch pwned"}`); code != exitFailure {
		t.Fatalf("denied call: exit %d\n%s%s", code, out, stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "workspace", "notes.txt"), []byte("hello from the workspace\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, stderr, code := runTool(t, dir, "call", "--addr", srv.addr, "--request-id", "ev-allow", "--run-id", "run-b",
		"--tool", "workspace.readFile", "--args", `{"path": "notes.txt"}`); code != exitOK {
		t.Fatalf("allowed call: exit %d\n%s%s", code, out, stderr)
	}
	// A graceful stop sequences the log's last entries.
	stopServer(t, srv)
	return dir
}

// evidenceFile is the path of one artifact in a tour folder's store.
func evidenceFile(dir, id, artifact string) string {
	return filepath.Join(dir, "toolgate-evidence", "requests", id, artifact)
}

// ageRequest backdates the files of request id in the file store under
// dir by d, as if they had been stored that long ago: verify --all tells
// a request in flight from one a crash left by how long ago it was
// stored.
func ageRequest(t *testing.T, dir, id string, d time.Duration) {
	t.Helper()
	root := filepath.Join(dir, "toolgate-evidence", "requests", id)
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		then := fi.ModTime().Add(-d)
		return os.Chtimes(p, then, then)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// signStoredManifests re-signs the stored manifests of ids in place with
// key, as a gateway configured with that key would have written them.
func signStoredManifests(t *testing.T, dir string, key ed25519.PrivateKey, ids ...string) {
	t.Helper()
	signer, err := evidence.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		file := evidenceFile(dir, id, evidence.ArtifactManifest)
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m, err := evidence.ParseManifest(data)
		if err != nil {
			t.Fatal(err)
		}
		if err := signer.Sign(&m); err != nil {
			t.Fatal(err)
		}
		if data, err = evidence.EncodeManifest(m); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, data, 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

// dataLines returns the lines of ls output after the header.
func dataLines(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if lines[0] != "received_at\trequest_id\tcaller\ttool\tdecision\trule_id\tok\tapproval" {
		t.Fatalf("ls header = %q", lines[0])
	}
	return lines[1:]
}

// TestEvidenceTour records evidence with the real gateway and reads it
// back with ls, show and verify, as an auditor would.
func TestEvidenceTour(t *testing.T) {
	t.Parallel()
	dir := recordTour(t)

	t.Run("ls", func(t *testing.T) {
		tests := []struct {
			name string
			args []string
			want []string // request_id and the fields after it
		}{
			{"all", nil, []string{
				"ev-allow\tanonymous\tworkspace.readFile\tallow\tworkspace_read_only\ttrue\t-",
				"ev-deny\tanonymous\tworkspace.shell\tdeny\tdefault_deny\tfalse\t-",
			}},
			{"by decision", []string{"--decision", "deny"}, []string{"ev-deny\tanonymous\tworkspace.shell\tdeny\tdefault_deny\tfalse\t-"}},
			{"by run id", []string{"--run-id", "run-b"}, []string{"ev-allow\tanonymous\tworkspace.readFile\tallow\tworkspace_read_only\ttrue\t-"}},
			{"by tool", []string{"--tool", "workspace.shell"}, []string{"ev-deny\tanonymous\tworkspace.shell\tdeny\tdefault_deny\tfalse\t-"}},
			{"since a duration", []string{"--since", "1h"}, []string{
				"ev-allow\tanonymous\tworkspace.readFile\tallow\tworkspace_read_only\ttrue\t-",
				"ev-deny\tanonymous\tworkspace.shell\tdeny\tdefault_deny\tfalse\t-",
			}},
			{"since a future time", []string{"--since", "2999-01-01T00:00:00Z"}, nil},
			{"limit", []string{"--limit", "1"}, []string{"ev-allow\tanonymous\tworkspace.readFile\tallow\tworkspace_read_only\ttrue\t-"}},
			{"explicit store URL", []string{"--evidence", "file://" + filepath.Join(dir, "toolgate-evidence"), "--decision", "allow"},
				[]string{"ev-allow\tanonymous\tworkspace.readFile\tallow\tworkspace_read_only\ttrue\t-"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				out, stderr, code := runTool(t, dir, append([]string{"evidence", "ls"}, tt.args...)...)
				if code != exitOK || stderr != "" {
					t.Fatalf("exit %d, stderr:\n%s", code, stderr)
				}
				var got []string
				for _, line := range dataLines(t, out) {
					received, rest, _ := strings.Cut(line, "\t")
					if ts, err := time.Parse(time.RFC3339, received); err != nil || time.Since(ts) > time.Hour {
						t.Errorf("received_at %q is not a recent RFC 3339 time", received)
					}
					got = append(got, rest)
				}
				if !slices.Equal(got, tt.want) {
					t.Fatalf("ls %v =\n%s\nwant lines ending in\n%s", tt.args, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
				}
			})
		}
	})

	t.Run("ls shows absent and unreadable artifacts", func(t *testing.T) {
		copyDir := copyTour(t, dir)
		if err := os.Remove(evidenceFile(copyDir, "ev-allow", evidence.ArtifactResponse)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(evidenceFile(copyDir, "ev-deny", evidence.ArtifactPolicyDecision), []byte("\x1b[2Jnot json"), 0o640); err != nil {
			t.Fatal(err)
		}
		out, stderr, code := runTool(t, copyDir, "evidence", "ls")
		lines := dataLines(t, out)
		if code != exitOK || len(lines) != 2 ||
			!strings.HasSuffix(lines[0], "\tev-allow\tanonymous\tworkspace.readFile\tallow\tworkspace_read_only\t-\t-") ||
			!strings.HasSuffix(lines[1], "\tev-deny\tanonymous\tworkspace.shell\t?\t?\tfalse\t-") {
			t.Fatalf("exit %d, output:\n%s", code, out)
		}
		if !strings.Contains(stderr, "requests/ev-deny/policy_decision.json: invalid character") {
			t.Fatalf("stderr does not report the unreadable artifact:\n%s", stderr)
		}
	})

	t.Run("show", func(t *testing.T) {
		out, headers := showHeaders(t, dir, "ev-allow")
		want := []string{
			"== requests/ev-allow/request.json ==",
			"== requests/ev-allow/policy_decision.json ==",
			"== requests/ev-allow/dispatch.json ==",
			"== requests/ev-allow/tool_result.json ==",
			"== requests/ev-allow/response.json ==",
			"== requests/ev-allow/manifest.json ==",
		}
		if !slices.Equal(headers, want) {
			t.Fatalf("show headers = %q, want %q", headers, want)
		}
		for _, want := range []string{"\n  \"tool_id\": \"workspace.readFile\"", "\n  \"stdout\": \"hello from the workspace\\n\"", "\n  \"rule_id\": \"workspace_read_only\""} {
			if !strings.Contains(out, want) {
				t.Errorf("show output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("show escapes an artifact that is not JSON", func(t *testing.T) {
		copyDir := copyTour(t, dir)
		if err := os.WriteFile(evidenceFile(copyDir, "ev-deny", evidence.ArtifactResponse), []byte("\x1b]0;owned\x07line\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		out, _, code := runTool(t, copyDir, "evidence", "show", "ev-deny")
		if code != exitOK || strings.ContainsAny(out, "\x1b\x07") ||
			!strings.Contains(out, "== requests/ev-deny/response.json ==\n(not JSON, 15 bytes; control characters escaped)\n\\x1b]0;owned\\aline\n") {
			t.Fatalf("exit %d, output:\n%q", code, out)
		}
	})

	t.Run("verify what the key serve created signed", func(t *testing.T) {
		out, stderr, code := runTool(t, dir, "evidence", "verify", "--all")
		if code != exitOK || stderr != "" {
			t.Fatalf("exit %d, stderr:\n%s", code, stderr)
		}
		want := "verified 2 requests: 2 unchecked-signature\n" +
			"logs: 1 checked, 4 entries in all\n" +
			"note: 2 signed request(s) were not checked: give the gateway's public key with --pubkey\n"
		if out != want {
			t.Fatalf("verify --all =\n%s\nwant\n%s", out, want)
		}
		pub, stderr, code := runTool(t, dir, "evidence", "pubkey")
		if code != exitOK {
			t.Fatalf("pubkey with no flags: exit %d\n%s", code, stderr)
		}
		if err := os.WriteFile(filepath.Join(dir, "gateway.pub"), []byte(pub), 0o600); err != nil {
			t.Fatal(err)
		}
		out, _, code = runTool(t, dir, "evidence", "verify", "--all", "--require-signature", "--pubkey", "gateway.pub")
		if code != exitOK || out != "verified 2 requests: 2 ok\nlogs: 1 checked, 4 entries in all\n" {
			t.Fatalf("verify --require-signature with the key pubkey printed: exit %d\n%s", code, out)
		}
		out, _, code = runTool(t, dir, "evidence", "verify", "ev-allow", "--pubkey", "gateway.pub")
		if code != exitOK || !strings.HasPrefix(out, "ok ev-allow: artifacts match; signed by trusted key "+strings.TrimPrefix(strings.SplitN(pub, "\n", 2)[0], "# key id: ")) {
			t.Fatalf("verify ev-allow: exit %d\n%s", code, out)
		}
	})
}

// copyTour copies a tour folder's evidence into a new folder, so that a
// test can tamper with it alone.
func copyTour(t *testing.T, dir string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(filepath.Join(dst, "toolgate-evidence"), os.DirFS(filepath.Join(dir, "toolgate-evidence"))); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestEvidenceVerifyTampering signs real evidence with a key made by
// keygen, then tampers with copies of it in every way an attacker with
// write access to the bucket could.
func TestEvidenceVerifyTampering(t *testing.T) {
	t.Parallel()
	dir := recordTour(t)
	keys := t.TempDir()
	gatewayKey, attackerKey := filepath.Join(keys, "gateway.pem"), filepath.Join(keys, "attacker.pem")
	for _, file := range []string{gatewayKey, attackerKey} {
		pub, stderr, code := runTool(t, keys, "evidence", "keygen", "--out", file)
		if code != exitOK {
			t.Fatalf("keygen: exit %d\n%s", code, stderr)
		}
		if err := os.WriteFile(strings.TrimSuffix(file, ".pem")+".pub", []byte(pub), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	gatewayPub := strings.TrimSuffix(gatewayKey, ".pem") + ".pub"
	// The manifests are re-signed below with a key of the test's own, which
	// the transparency log would rightly report as manifests it never
	// logged: this test is about the checks of manifests and signatures,
	// the log's have their own suite (tlog_test.go), so the log goes.
	if err := os.RemoveAll(filepath.Join(dir, "toolgate-evidence", "log")); err != nil {
		t.Fatal(err)
	}
	signStoredManifests(t, dir, readKey(t, gatewayKey), "ev-deny", "ev-allow")

	edit := func(id, artifact string, f func([]byte) []byte) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			file := evidenceFile(dir, id, artifact)
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, f(data), 0o640); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name     string
		tamper   func(t *testing.T, dir string)
		args     []string
		wantCode int
		want     []string // lines or parts of lines of the output, in order
	}{
		{
			name:     "intact",
			tamper:   func(*testing.T, string) {},
			args:     []string{"--pubkey", gatewayPub, "-v"},
			wantCode: exitOK,
			want: []string{
				"ok ev-allow: artifacts match; signed by trusted key ed25519:",
				"ok ev-deny: artifacts match; signed by trusted key ed25519:",
				"verified 2 requests: 2 ok",
			},
		},
		{
			name:     "signed, no public key given",
			tamper:   func(*testing.T, string) {},
			wantCode: exitOK,
			want: []string{
				"verified 2 requests: 2 unchecked-signature",
				"note: 2 signed request(s) were not checked: give the gateway's public key with --pubkey",
			},
		},
		{
			name:     "byte flipped in a tool result",
			tamper:   edit("ev-allow", evidence.ArtifactToolResult, func(d []byte) []byte { d[len(d)/2] ^= 1; return d }),
			args:     []string{"--pubkey", gatewayPub},
			wantCode: exitFailure,
			want: []string{
				"mismatch ev-allow: TAMPERED",
				"  requests/ev-allow/tool_result.json: sha256 is ",
				"verified 2 requests: 1 mismatch, 1 ok",
				"TAMPERING: 1 request(s) do not match their manifest or signature",
			},
		},
		{
			name: "artifact deleted",
			tamper: func(t *testing.T, dir string) {
				if err := os.Remove(evidenceFile(dir, "ev-allow", evidence.ArtifactToolResult)); err != nil {
					t.Fatal(err)
				}
			},
			args:     []string{"--pubkey", gatewayPub},
			wantCode: exitFailure,
			want:     []string{"mismatch ev-allow: TAMPERED", "  requests/ev-allow/tool_result.json: listed in the manifest but missing"},
		},
		{
			name: "artifact added",
			tamper: func(t *testing.T, dir string) {
				if err := os.WriteFile(evidenceFile(dir, "ev-deny", evidence.ArtifactToolResult), []byte(`{"exit_code":0}`), 0o640); err != nil {
					t.Fatal(err)
				}
			},
			args:     []string{"--pubkey", gatewayPub},
			wantCode: exitFailure,
			want:     []string{"mismatch ev-deny: TAMPERED", "  requests/ev-deny/tool_result.json: present but not listed in the manifest"},
		},
		{
			name: "manifests swapped",
			tamper: func(t *testing.T, dir string) {
				a, b := evidenceFile(dir, "ev-allow", evidence.ArtifactManifest), evidenceFile(dir, "ev-deny", evidence.ArtifactManifest)
				tmp := a + ".swap"
				for _, mv := range [][2]string{{a, tmp}, {b, a}, {tmp, b}} {
					if err := os.Rename(mv[0], mv[1]); err != nil {
						t.Fatal(err)
					}
				}
			},
			args:     []string{"--pubkey", gatewayPub},
			wantCode: exitFailure,
			want: []string{
				"mismatch ev-allow: TAMPERED", `  requests/ev-allow/manifest.json: request_id is "ev-deny"`,
				"mismatch ev-deny: TAMPERED", `  requests/ev-deny/manifest.json: request_id is "ev-allow"`,
			},
		},
		{
			name: "result forged and manifest re-signed by another key",
			tamper: func(t *testing.T, dir string) {
				edit("ev-allow", evidence.ArtifactToolResult, func(d []byte) []byte {
					return bytes.ReplaceAll(d, []byte("hello from the workspace"), []byte("all clear, nothing here"))
				})(t, dir)
				rewriteManifest(t, dir, "ev-allow", readKey(t, attackerKey))
			},
			args:     []string{"--pubkey", gatewayPub},
			wantCode: exitFailure,
			want: []string{"unknown-key ev-allow: TAMPERED: signed by an untrusted key, ed25519:",
				"  requests/ev-allow/manifest.json: signed by an untrusted key, ed25519:", "not among the trusted keys",
				"verified 2 requests: 1 unknown-key, 1 ok", "TAMPERING: 1 request(s) are signed by an untrusted key"},
		},
		{
			name: "trusted keys from --config's evidence.trusted_keys",
			tamper: func(t *testing.T, dir string) {
				writeFiles(t, dir, map[string]string{"replica.yaml": "evidence:\n  url: file://./toolgate-evidence\n  trusted_keys: [{file: " + gatewayPub + "}]\n"})
			},
			args:     []string{"--config", "replica.yaml", "--require-signature"},
			wantCode: exitOK,
			want:     []string{"verified 2 requests: 2 ok"},
		},
		{
			name: "manifest re-signed by a key --config's evidence.trusted_keys does not list",
			tamper: func(t *testing.T, dir string) {
				writeFiles(t, dir, map[string]string{"replica.yaml": "evidence:\n  url: file://./toolgate-evidence\n  trusted_keys: [{file: " + gatewayPub + "}]\n"})
				rewriteManifest(t, dir, "ev-deny", readKey(t, attackerKey))
			},
			args:     []string{"--config", "replica.yaml"},
			wantCode: exitFailure,
			want:     []string{"unknown-key ev-deny: TAMPERED: signed by an untrusted key, ed25519:", "verified 2 requests: 1 unknown-key, 1 ok"},
		},
		{
			name: "signed manifest edited",
			tamper: edit("ev-deny", evidence.ArtifactManifest, func(d []byte) []byte {
				return bytes.Replace(d, []byte(`"outcome": "completed"`), []byte(`"outcome": "failed"`), 1)
			}),
			args:     []string{"--pubkey", gatewayPub},
			wantCode: exitFailure,
			want: []string{"bad-signature ev-deny: TAMPERED: the signature by key ed25519:", "does not match the manifest's content",
				"TAMPERING: 1 request(s) do not match their manifest or signature"},
		},
		{
			name: "signature stripped, with --require-signature",
			tamper: func(t *testing.T, dir string) {
				rewriteManifest(t, dir, "ev-deny", nil)
			},
			args:     []string{"--pubkey", gatewayPub, "--require-signature"},
			wantCode: exitFailure,
			want: []string{
				"unsigned-required ev-deny: artifacts match, but the manifest is not signed by a trusted key (signature: unsigned)",
				"FAILED: 1 request(s) lack a signature by a trusted key, which --require-signature demands",
			},
		},
		{
			name: "manifest missing",
			tamper: func(t *testing.T, dir string) {
				if err := os.Remove(evidenceFile(dir, "ev-deny", evidence.ArtifactManifest)); err != nil {
					t.Fatal(err)
				}
				// Stored an hour ago: not in flight.
				ageRequest(t, dir, "ev-deny", time.Hour)
			},
			args:     []string{"--pubkey", gatewayPub},
			wantCode: exitOK,
			want:     []string{"incomplete ev-deny: no manifest (in flight, or a crash or failure left it)", "verified 2 requests: 1 incomplete, 1 ok"},
		},
		{
			name:     "artifacts waiting in the spool",
			tamper:   moveToSpool("ev-allow", evidence.ArtifactToolResult, evidence.ArtifactResponse),
			args:     []string{"--pubkey", gatewayPub, "--spool", "spool"},
			wantCode: exitOK,
			want:     []string{"pending ev-allow: artifacts match; 2 not yet uploaded from the spool (signature: valid)", "verified 2 requests: 1 pending, 1 ok"},
		},
		{
			name:     "artifacts in the spool, spool not given",
			tamper:   moveToSpool("ev-allow", evidence.ArtifactToolResult),
			args:     []string{"--pubkey", gatewayPub, "--spool", "none"},
			wantCode: exitFailure,
			want:     []string{"mismatch ev-allow: TAMPERED", "  requests/ev-allow/tool_result.json: listed in the manifest but missing"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			work := copyTour(t, dir)
			tt.tamper(t, work)
			out, stderr, code := runTool(t, work, append([]string{"evidence", "verify", "--all"}, tt.args...)...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; output:\n%s%s", code, tt.wantCode, out, stderr)
			}
			if stderr != "" {
				t.Errorf("stderr is not empty (no progress line when it is not a terminal):\n%s", stderr)
			}
			rest := out
			for _, want := range tt.want {
				i := strings.Index(rest, want)
				if i < 0 {
					t.Fatalf("output lacks %q (in order):\n%s", want, out)
				}
				rest = rest[i+len(want):]
			}
		})
	}

	t.Run("one request", func(t *testing.T) {
		work := copyTour(t, dir)
		edit("ev-deny", evidence.ArtifactResponse, func(d []byte) []byte { return append(d, ' ') })(t, work)
		out, _, code := runTool(t, work, "evidence", "verify", "ev-allow", "--pubkey", gatewayPub)
		if code != exitOK || !strings.HasPrefix(out, "ok ev-allow: artifacts match; signed by trusted key ed25519:") {
			t.Fatalf("verify ev-allow: exit %d\n%s", code, out)
		}
		out, _, code = runTool(t, work, "evidence", "verify", "--pubkey", gatewayPub, "ev-deny")
		if code != exitFailure || !strings.Contains(out, "requests/ev-deny/response.json: size is ") {
			t.Fatalf("verify ev-deny: exit %d\n%s", code, out)
		}
	})
}

// readKey reads a private key file as keygen writes it.
func readKey(t *testing.T, file string) ed25519.PrivateKey {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	key, err := evidence.ParsePrivateKey(data)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// rewriteManifest replaces a request's manifest with one whose digests
// match the artifacts now stored, signed by key (unsigned if key is nil),
// as an attacker who rewrote the artifacts would.
func rewriteManifest(t *testing.T, dir, id string, key ed25519.PrivateKey) {
	t.Helper()
	file := evidenceFile(dir, id, evidence.ArtifactManifest)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m, err := evidence.ParseManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	m.Signature = nil
	for i, a := range m.Artifacts {
		content, err := os.ReadFile(filepath.Join(dir, "toolgate-evidence", filepath.FromSlash(a.Key)))
		if err != nil {
			t.Fatal(err)
		}
		m.Artifacts[i] = evidence.Digest(a.Key, content)
	}
	if key != nil {
		signer, err := evidence.NewSigner(key)
		if err != nil {
			t.Fatal(err)
		}
		if err := signer.Sign(&m); err != nil {
			t.Fatal(err)
		}
	}
	if data, err = evidence.EncodeManifest(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o640); err != nil {
		t.Fatal(err)
	}
}

// moveToSpool moves artifacts of a request from the store into a spool
// folder named "spool" beside it, as if their upload had failed.
func moveToSpool(id string, artifacts ...string) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		spoolDir := filepath.Join(dir, "spool", "requests", id)
		if err := os.MkdirAll(spoolDir, 0o750); err != nil {
			t.Fatal(err)
		}
		for _, a := range artifacts {
			if err := os.Rename(evidenceFile(dir, id, a), filepath.Join(spoolDir, a)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestEvidenceKeys covers keygen and pubkey: the key file is private and
// never overwritten, and pubkey prints what keygen printed, in a form
// verify --pubkey reads back.
func TestEvidenceKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, stderr, code := runTool(t, dir, "evidence", "keygen", "--out", "signing.pem")
	if code != exitOK || !strings.Contains(stderr, "wrote the private key to signing.pem") {
		t.Fatalf("keygen: exit %d\n%s%s", code, out, stderr)
	}
	fi, err := os.Stat(filepath.Join(dir, "signing.pem"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want mode 0600", err, fi.Mode())
	}
	key := readKey(t, filepath.Join(dir, "signing.pem"))
	pub, err := evidence.ParsePublicKey([]byte(out))
	if err != nil {
		t.Fatalf("keygen's output is not a public key file: %v\n%s", err, out)
	}
	if !pub.Equal(key.Public()) || !strings.HasPrefix(out, "# key id: "+evidence.KeyID(pub)+"\n-----BEGIN PUBLIC KEY-----\n") {
		t.Fatalf("keygen printed\n%s\nwant the key id %s and the public key of the file", out, evidence.KeyID(pub))
	}

	got, stderr, code := runTool(t, dir, "evidence", "pubkey", "--key", "signing.pem")
	if code != exitOK || got != out {
		t.Fatalf("pubkey --key: exit %d\n%s%s\nwant\n%s", code, got, stderr, out)
	}

	_, stderr, code = runTool(t, dir, "evidence", "keygen", "--out", "signing.pem")
	if code != exitError || !strings.Contains(stderr, "signing.pem already exists; refusing to overwrite") {
		t.Fatalf("second keygen: exit %d\n%s", code, stderr)
	}
	if again := readKey(t, filepath.Join(dir, "signing.pem")); !again.Equal(key) {
		t.Fatal("the second keygen changed the key file")
	}

	// --key-env takes either form; the base64 seed is the handier one.
	for name, value := range map[string]string{
		"seed": base64.StdEncoding.EncodeToString(key.Seed()),
		"PEM":  string(mustRead(t, filepath.Join(dir, "signing.pem"))),
	} {
		t.Run("key-env "+name, func(t *testing.T) {
			got, stderr, code := runToolEnv(t, dir, []string{"TOOLGATE_TEST_SIGNING_KEY=" + value}, "evidence", "pubkey", "--key-env", "TOOLGATE_TEST_SIGNING_KEY")
			if code != exitOK || got != out {
				t.Fatalf("pubkey --key-env: exit %d\n%s%s\nwant\n%s", code, got, stderr, out)
			}
		})
	}

	t.Run("bad key", func(t *testing.T) {
		secret := "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA=="
		if err := os.WriteFile(filepath.Join(dir, "bad.pem"), []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := runTool(t, dir, "evidence", "pubkey", "--key", "bad.pem")
		if code != exitError || !strings.Contains(stderr, "base64 seed is 34 bytes, want 32") || strings.Contains(stderr, secret) {
			t.Fatalf("pubkey of a bad key: exit %d\n%s", code, stderr)
		}
	})
}

func mustRead(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestEvidenceConfig reads the store named by a configuration file.
func TestEvidenceConfig(t *testing.T) {
	t.Parallel()
	dir := recordTour(t)
	if err := os.Rename(filepath.Join(dir, "toolgate-evidence"), filepath.Join(dir, "audit")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "audit.yaml"), []byte("evidence:\n  url: file://./audit\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runTool(t, dir, "evidence", "ls", "--config", "audit.yaml", "--tool", "workspace.readFile")
	if lines := dataLines(t, out); code != exitOK || len(lines) != 1 || !strings.Contains(lines[0], "\tev-allow\t") {
		t.Fatalf("ls --config: exit %d\n%s%s", code, out, stderr)
	}
	out, _, code = runTool(t, dir, "evidence", "verify", "--config", "audit.yaml", "--all")
	if code != exitOK || !strings.HasPrefix(out, "verified 2 requests: 2 unchecked-signature\n") {
		t.Fatalf("verify --config: exit %d\n%s", code, out)
	}
}

func TestEvidenceUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "toolgate-evidence"), 0o750); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", []string{"evidence"}, "Usage: toolgate evidence <command>"},
		{"unknown subcommand", []string{"evidence", "rm"}, `unknown command "rm"`},
		{"verify without a request", []string{"evidence", "verify"}, "(REQUEST_ID | --all)"},
		{"verify a request and --all", []string{"evidence", "verify", "r1", "--all"}, "(REQUEST_ID | --all)"},
		{"verify an unknown request", []string{"evidence", "verify", "r1"}, `no evidence stored for request "r1"`},
		{"verify an invalid request id", []string{"evidence", "verify", "../x"}, `request id "../x" is not a valid request id`},
		{"require a signature without a key", []string{"evidence", "verify", "--all", "--require-signature"}, "--require-signature needs at least one --pubkey"},
		{"missing public key file", []string{"evidence", "verify", "--all", "--pubkey", "nope.pem"}, "--pubkey: open nope.pem"},
		{"missing spool", []string{"evidence", "verify", "--all", "--spool", "nope"}, "--spool: stat nope"},
		{"negative log grace", []string{"evidence", "verify", "--all", "--log-grace", "-1s"}, "--log-grace must not be negative"},
		{"log grace of one request", []string{"evidence", "verify", "r1", "--log-grace", "5m"}, "which only --all reads"},
		{"show an unknown request", []string{"evidence", "show", "r1"}, `no evidence stored for request "r1"`},
		{"show two requests", []string{"evidence", "show", "r1", "r2"}, "usage: toolgate evidence show"},
		{"missing store folder", []string{"evidence", "ls", "--evidence", "file://nope"}, "evidence store file://nope: stat nope"},
		{"unsupported store", []string{"evidence", "ls", "--evidence", "ftp://x"}, `unsupported store URL scheme "ftp"`},
		{"bad decision", []string{"evidence", "ls", "--decision", "maybe"}, `--decision "maybe": want allow, deny or approval_required`},
		{"bad since", []string{"evidence", "ls", "--since", "yesterday"}, `--since "yesterday"`},
		{"negative limit", []string{"evidence", "ls", "--limit", "-1"}, "--limit -1: must not be negative"},
		{"pubkey before the gateway's first start", []string{"evidence", "pubkey"}, "./toolgate-signing.key: file does not exist; gateway: no signing key yet: `toolgate serve` creates it on its first start"},
		{"pubkey from two sources", []string{"evidence", "pubkey", "--key", "k.pem", "--config", "c.yaml"}, "usage: toolgate evidence pubkey [--config FILE | --key FILE | --key-env VAR]"},
		{"pubkey from an empty variable", []string{"evidence", "pubkey", "--key-env", "TOOLGATE_TEST_UNSET_VARIABLE"}, "TOOLGATE_TEST_UNSET_VARIABLE is empty or unset"},
		{"keygen without --out", []string{"evidence", "keygen"}, "usage: toolgate evidence keygen --out FILE"},
		{"unknown flag", []string{"evidence", "ls", "--nope"}, "flag provided but not defined: -nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, code := runTool(t, dir, tt.args...)
			if code != exitError || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, output:\n%s%s\nwant exit %d mentioning %q", code, out, stderr, exitError, tt.want)
			}
		})
	}
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		wantPos  []string
		wantFlag string
	}{
		{"flags first", []string{"--pubkey", "k", "r1"}, []string{"r1"}, "k"},
		{"flags last", []string{"r1", "--pubkey", "k"}, []string{"r1"}, "k"},
		{"flags between", []string{"r1", "--pubkey", "k", "r2"}, []string{"r1", "r2"}, "k"},
		{"after --", []string{"--pubkey", "k", "--", "--all"}, []string{"--all"}, "k"},
		{"none", nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			pubkey := fs.String("pubkey", "", "")
			pos, err := parseArgs(fs, tt.args)
			if err != nil || !slices.Equal(pos, tt.wantPos) || *pubkey != tt.wantFlag {
				t.Fatalf("parseArgs(%q) = %q, %v with --pubkey %q; want %q with %q", tt.args, pos, err, *pubkey, tt.wantPos, tt.wantFlag)
			}
		})
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := parseArgs(fs, []string{"r1", "--nope"}); !errors.Is(err, errUsage) {
		t.Fatalf("parseArgs with an unknown flag = %v, want errUsage", err)
	}
}

func TestParseSince(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{"2025-01-02T03:04:05Z", time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), false},
		{"2025-01-02T03:04:05+02:00", time.Date(2025, 1, 2, 1, 4, 5, 0, time.UTC), false},
		{"90m", now.Add(-90 * time.Minute), false},
		{"-1h", time.Time{}, true},
		{"2025-01-02", time.Time{}, true},
		{"", time.Time{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSince(tt.in, now)
			if (err != nil) != tt.wantErr || !got.Equal(tt.want) {
				t.Fatalf("parseSince(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestCell(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", "-"},
		{"workspace.readFile", "workspace.readFile"},
		{"caller with spaces", "caller with spaces"},
		{"a\tb", `"a\tb"`},
		{"line\nbreak", `"line\nbreak"`},
		{"\x1b[31mred", `"\x1b[31mred"`},
		{"bad\xffutf8", `"bad\xffutf8"`},
	}
	for _, tt := range tests {
		if got := cell(tt.in); got != tt.want {
			t.Errorf("cell(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestIsTerminal(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, out := range map[string]io.Writer{"buffer": &bytes.Buffer{}, "pipe": w} {
		if isTerminal(out) {
			t.Errorf("isTerminal(%s) = true, want false", name)
		}
	}
}

// layoutWriter writes evidence in the attempts layout straight into a
// folder's store, as gateways that retried, crashed or were forged against
// would have left it.
type layoutWriter struct {
	t       *testing.T
	s       evidence.Store
	written map[string]map[string][]byte // request id → name → data
	// signer signs the closes of attempts not dispatched, as a gateway
	// does; its key is layoutKey's.
	signer *evidence.Signer
}

// layoutKey is the private key of the gateway a layoutWriter plays.
func layoutKey() ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{42}, ed25519.SeedSize))
}

func newLayoutWriter(t *testing.T, dir string) *layoutWriter {
	t.Helper()
	s, err := evidence.NewFileStore(filepath.Join(dir, "toolgate-evidence"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	signer, err := evidence.NewSigner(layoutKey())
	if err != nil {
		t.Fatal(err)
	}
	return &layoutWriter{t: t, s: s, written: map[string]map[string][]byte{}, signer: signer}
}

// put stores v as JSON under name within request id's folder.
func (w *layoutWriter) put(id, name string, v any) {
	w.t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		w.t.Fatal(err)
	}
	w.putRaw(id, name, data)
}

// putRaw stores data under name within request id's folder.
func (w *layoutWriter) putRaw(id, name string, data []byte) {
	w.t.Helper()
	if err := w.s.Put(context.Background(), evidence.Key(id, name), data); err != nil {
		w.t.Fatal(err)
	}
	if w.written[id] == nil {
		w.written[id] = map[string][]byte{}
	}
	w.written[id][name] = data
}

// claim stores request.json and attempt n's decision.
func (w *layoutWriter) claim(id string, attempts int, ruleIDs ...string) {
	w.t.Helper()
	at := time.Now().UTC().Truncate(time.Second)
	w.put(id, evidence.ArtifactRequest, evidence.RequestRecord{RequestID: id, Caller: "agent", ToolID: "workspace.readFile",
		Args: json.RawMessage(`{"path":"notes.txt"}`), ReceivedAt: at, Gateway: "toolgate/test@a"})
	for n := 1; n <= attempts; n++ {
		w.put(id, evidence.AttemptArtifact(n, evidence.ArtifactPolicyDecision), evidence.DecisionRecord{RequestID: id, Attempt: n,
			Caller: "agent", ToolID: "workspace.readFile", Decision: "allow", RuleID: ruleIDs[n-1], DecidedAt: at})
	}
}

// dispatch stores attempt n's dispatch record (or, with name
// ArtifactNotDispatched, its closing record) for request forID.
func (w *layoutWriter) dispatch(id string, n int, name, state, forID string) {
	w.t.Helper()
	d := evidence.DispatchRecord{RequestID: forID, Attempt: n, State: state, Gateway: "toolgate/test@a", At: time.Now().UTC()}
	if state != evidence.NotDispatched {
		w.put(id, evidence.AttemptArtifact(n, name), d)
		return
	}
	d.Reason = "connection refused"
	data, err := json.Marshal(d)
	if err != nil {
		w.t.Fatal(err)
	}
	sealer, err := w.signer.Sealer()
	if err == nil {
		data, err = sealer.Sign(evidence.Key(id, evidence.AttemptArtifact(n, name)), data)
	}
	if err != nil {
		w.t.Fatal(err)
	}
	w.putRaw(id, evidence.AttemptArtifact(n, name), data)
}

// finish stores a result, a response and an unsigned manifest listing
// everything written for the request.
func (w *layoutWriter) finish(id string) {
	w.t.Helper()
	w.put(id, evidence.ArtifactToolResult, evidence.ToolResultRecord{RunRecord: evidence.RunRecord{RequestID: id, Driver: "workspace"}, Stdout: "hello\n"})
	w.put(id, evidence.ArtifactResponse, evidence.ResponseRecord{OK: true, ToolResult: &evidence.ResponseToolResult{Stdout: "hello\n"},
		PolicyCheck: evidence.ResponsePolicyCheck{Decision: "allow"}})
	m := evidence.Manifest{Version: evidence.ManifestVersion, RequestID: id, EngineRef: "test", Outcome: evidence.OutcomeCompleted, CreatedAt: time.Now().UTC()}
	for name, data := range w.written[id] {
		m.Artifacts = append(m.Artifacts, evidence.Digest(evidence.Key(id, name), data))
	}
	data, err := evidence.EncodeManifest(m)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.s.Put(context.Background(), evidence.Key(id, evidence.ArtifactManifest), data); err != nil {
		w.t.Fatal(err)
	}
}

// TestEvidenceAttempts reads evidence of retried, never-dispatched,
// interrupted and forged requests with ls, show and verify.
func TestEvidenceAttempts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := newLayoutWriter(t, dir)
	// Refused by an unreachable executor, then run by a retry under a
	// policy reloaded in between.
	w.claim("ev-retried", 2, "rule_v1", "rule_v2")
	w.dispatch("ev-retried", 1, evidence.ArtifactDispatch, evidence.NotDispatched, "ev-retried")
	w.dispatch("ev-retried", 2, evidence.ArtifactDispatch, evidence.Dispatched, "ev-retried")
	w.finish("ev-retried")
	// Refused, and never retried.
	w.claim("ev-never", 1, "rule_v1")
	w.dispatch("ev-never", 1, evidence.ArtifactDispatch, evidence.Dispatched, "ev-never")
	w.dispatch("ev-never", 1, evidence.ArtifactNotDispatched, evidence.NotDispatched, "ev-never")
	// Dispatched, then its gateway died, an hour ago.
	w.claim("ev-inflight", 1, "rule_v1")
	w.dispatch("ev-inflight", 1, evidence.ArtifactDispatch, evidence.Dispatched, "ev-inflight")
	ageRequest(t, dir, "ev-inflight", time.Hour)
	// Someone made a dispatched request look never dispatched with a
	// record copied from another request.
	w.claim("ev-forged", 1, "rule_v1")
	w.dispatch("ev-forged", 1, evidence.ArtifactDispatch, evidence.NotDispatched, "other")

	t.Run("verify --all reports each state and fails on the forgery", func(t *testing.T) {
		out, stderr, code := runTool(t, dir, "evidence", "verify", "--all")
		want := `mismatch ev-forged: TAMPERED
  requests/ev-forged/dispatch.json: evidence: dispatch record: request_id is "other", want "ev-forged"
incomplete ev-inflight: no manifest (in flight, or a crash or failure left it)
  attempts: 1 dispatched
not-dispatched ev-never: nothing ran, every attempt was closed not_dispatched; a retry with the same request id may still run it
  attempts: 1 not_dispatched ("connection refused")
verified 4 requests: 1 mismatch, 1 incomplete, 1 not-dispatched, 1 unsigned
TAMPERING: 1 request(s) do not match their manifest or signature
note: 1 request(s) never ran: every attempt was closed not_dispatched, and a retry with the same request id may still run them
note: 1 request(s) have unsigned manifests: their artifacts match, but nothing shows who wrote them
`
		if code != exitFailure || out != want || stderr != "" {
			t.Fatalf("exit %d, output:\n%s\nwant:\n%s\nstderr:\n%s", code, out, want, stderr)
		}
	})

	t.Run("verify of a retried request lists its attempts", func(t *testing.T) {
		out, _, code := runTool(t, dir, "evidence", "verify", "ev-retried")
		want := "unsigned ev-retried: artifacts match, but the manifest is not signed, so nothing shows who wrote it\n" +
			"  attempts: 1 not_dispatched (\"connection refused\"), 2 dispatched; outcome completed\n"
		if code != exitOK || out != want {
			t.Fatalf("exit %d, output:\n%s\nwant:\n%s", code, out, want)
		}
	})

	t.Run("verify --json has the status, outcome and attempts of every request", func(t *testing.T) {
		out, _, code := runTool(t, dir, "evidence", "verify", "--all", "--json")
		if code != exitFailure {
			t.Fatalf("exit %d, want %d for the forgery\n%s", code, exitFailure, out)
		}
		type line struct {
			RequestID string             `json:"request_id"`
			Status    string             `json:"status"`
			Verdict   string             `json:"verdict"`
			Outcome   string             `json:"outcome"`
			Attempts  []evidence.Attempt `json:"attempts"`
			Problems  []string           `json:"problems"`
		}
		var got []string
		for l := range strings.Lines(out) {
			var r line
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			var states []string
			for _, a := range r.Attempts {
				states = append(states, fmt.Sprintf("%d:%s", a.Number, a.State))
			}
			got = append(got, fmt.Sprintf("%s %s/%s outcome=%s attempts=%s problems=%d", r.RequestID, r.Status, r.Verdict, r.Outcome, strings.Join(states, ","), len(r.Problems)))
		}
		want := []string{
			"ev-forged mismatch/mismatch outcome= attempts= problems=1",
			"ev-inflight incomplete/incomplete outcome= attempts=1:dispatched problems=1",
			"ev-never not-dispatched/not-dispatched outcome= attempts=1:not_dispatched problems=0",
			"ev-retried ok/unsigned outcome=completed attempts=1:not_dispatched,2:dispatched problems=0",
		}
		if !slices.Equal(got, want) {
			t.Fatalf("verify --json =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("a required signature is not demanded of a request that never ran", func(t *testing.T) {
		var pem bytes.Buffer
		if err := writePublicKey(&pem, layoutKey().Public().(ed25519.PublicKey)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "gateway.pub"), pem.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		out, _, code := runTool(t, dir, "evidence", "verify", "ev-never", "--require-signature", "--pubkey", "gateway.pub")
		if code != exitOK || !strings.HasPrefix(out, "not-dispatched ev-never: ") {
			t.Fatalf("exit %d, output:\n%s", code, out)
		}
		out, _, code = runTool(t, dir, "evidence", "verify", "ev-retried", "--require-signature", "--pubkey", "gateway.pub")
		if code != exitFailure || !strings.HasPrefix(out, "unsigned-required ev-retried: ") {
			t.Fatalf("exit %d, output:\n%s", code, out)
		}
	})

	t.Run("ls shows the decision of the attempt that ran", func(t *testing.T) {
		out, stderr, code := runTool(t, dir, "evidence", "ls", "--decision", "allow")
		var got []string
		for _, l := range dataLines(t, out) {
			_, rest, _ := strings.Cut(l, "\t")
			got = append(got, rest)
		}
		want := []string{
			"ev-forged\tagent\tworkspace.readFile\tallow\trule_v1\t-\t-",
			"ev-inflight\tagent\tworkspace.readFile\tallow\trule_v1\t-\t-",
			"ev-never\tagent\tworkspace.readFile\tallow\trule_v1\t-\t-",
			"ev-retried\tagent\tworkspace.readFile\tallow\trule_v2\ttrue\t-",
		}
		if code != exitOK || stderr != "" || !slices.Equal(got, want) {
			t.Fatalf("exit %d, ls =\n%s\nwant lines ending in\n%s\nstderr:\n%s", code, strings.Join(got, "\n"), strings.Join(want, "\n"), stderr)
		}
	})

	t.Run("show prints attempts in order, by number", func(t *testing.T) {
		many := t.TempDir()
		mw := newLayoutWriter(t, many)
		rules := make([]string, 10)
		for i := range rules {
			rules[i] = fmt.Sprintf("rule_%d", i+1)
		}
		mw.claim("ev-many", 10, rules...)
		for n := 1; n <= 10; n++ {
			mw.dispatch("ev-many", n, evidence.ArtifactDispatch, evidence.NotDispatched, "ev-many")
		}
		out, stderr, code := runTool(t, many, "evidence", "show", "ev-many")
		if code != exitOK {
			t.Fatalf("exit %d, stderr:\n%s", code, stderr)
		}
		var headers []string
		for l := range strings.Lines(out) {
			if strings.HasPrefix(l, "== ") {
				headers = append(headers, strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "== requests/ev-many/"), " =="))
			}
		}
		want := []string{"request.json", "policy_decision.json", "dispatch.json"}
		for n := 2; n <= 10; n++ {
			want = append(want, fmt.Sprintf("attempts/%d/policy_decision.json", n), fmt.Sprintf("attempts/%d/dispatch.json", n))
		}
		if !slices.Equal(headers, want) {
			t.Fatalf("show headers =\n%s\nwant\n%s", strings.Join(headers, "\n"), strings.Join(want, "\n"))
		}

		out, _, code = runTool(t, dir, "evidence", "show", "ev-retried")
		headers = headers[:0]
		for l := range strings.Lines(out) {
			if strings.HasPrefix(l, "== ") {
				headers = append(headers, strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "== requests/ev-retried/"), " =="))
			}
		}
		want = []string{"request.json", "policy_decision.json", "dispatch.json", "attempts/2/policy_decision.json",
			"attempts/2/dispatch.json", "tool_result.json", "response.json", "manifest.json"}
		if code != exitOK || !slices.Equal(headers, want) {
			t.Fatalf("exit %d, show headers =\n%s\nwant\n%s", code, strings.Join(headers, "\n"), strings.Join(want, "\n"))
		}
	})
}

// TestEvidenceVerifyAfterARetry runs the real gateway against an executor
// that refuses connections, then, restarted, against one that works, and
// retries with the same request id: verify first says the request never
// ran, then lists both attempts of the request that ran once.
func TestEvidenceVerifyAfterARetry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, `permit (principal, action, resource);`)
	executor := tpmjstest.New(t, tpmjstest.NodeV10)
	config := func(name, url string) {
		text := `
instance: gw-retry
evidence: {url: "file://./toolgate-evidence", spool_dir: none, lease_heartbeat: 200ms}
drivers:
  tpmjs: {type: tpmjs, url: "` + url + `"}
tools:
  fake.echo: {driver: tpmjs, package: "` + tpmjstest.Package + `", version: "1.0.0", export: ` + tpmjstest.EchoTool + `}
`
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	config("down.yaml", "http://127.0.0.1:1") // nothing listens on port 1
	config("up.yaml", executor.URL)
	call := func(srv *server) (string, string, int) {
		return runTool(t, dir, "call", "--addr", srv.addr, "--request-id", "retry-1", "--tool", "fake.echo", "--args", `{"text":"hi"}`)
	}

	down := startServer(t, dir, "--config", "down.yaml")
	if out, stderr, code := call(down); code != exitError || !strings.Contains(stderr, "nothing was executed") {
		t.Fatalf("call with the executor down: exit %d\n%s%s", code, out, stderr)
	}
	out, _, code := runTool(t, dir, "evidence", "verify", "retry-1")
	if code != exitOK || !strings.HasPrefix(out, "not-dispatched retry-1: nothing ran") ||
		!strings.Contains(out, "\n  attempts: 1 not_dispatched (\"driver tpmjs: ") || !strings.Contains(out, "refused the connection") {
		t.Fatalf("verify after the refused call: exit %d\n%s", code, out)
	}
	if err := down.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-down.done

	up := startServer(t, dir, "--config", "up.yaml")
	if out, stderr, code := call(up); code != exitOK {
		t.Fatalf("retry with the executor up: exit %d\n%s%s", code, out, stderr)
	}
	out, _, code = runTool(t, dir, "evidence", "verify", "retry-1")
	if code != exitOK || !strings.HasPrefix(out, "unchecked-signature retry-1: artifacts match") ||
		!strings.HasSuffix(out, "), 2 dispatched; outcome completed\n") {
		t.Fatalf("verify after the retry: exit %d\n%s", code, out)
	}
	runs := 0
	for _, r := range executor.Requests() {
		if r.Method == "POST" {
			runs++ // the others are its /health and /info probes
		}
	}
	if runs != 1 {
		t.Fatalf("the executor ran the tool %d times, want once", runs)
	}
}

// showHeaders runs evidence show for request id and returns its output
// and the artifact headers ("== key ==") it prints, in order.
func showHeaders(t *testing.T, dir, id string) (string, []string) {
	t.Helper()
	out, stderr, code := runTool(t, dir, "evidence", "show", id)
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	var headers []string
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "== ") {
			headers = append(headers, strings.TrimSpace(line))
		}
	}
	return out, headers
}
