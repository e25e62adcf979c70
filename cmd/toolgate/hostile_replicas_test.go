package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// replicaCalls is how many calls a replica test sends, alternating the
// replicas, before resending each to the other one.
const replicaCalls = 50

// replicaKey is one replica's signing key, written to <name>.pem, and its
// public half, written to <name>.pub as `toolgate evidence pubkey` prints
// it.
type replicaKey struct {
	name string
	key  ed25519.PrivateKey
	pub  ed25519.PublicKey
}

func newReplicaKey(t *testing.T, dir, name string) replicaKey {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	pemKey, err := evidence.EncodePrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := writePublicKey(&text, pub); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{name + ".pem": string(pemKey), name + ".pub": text.String()})
	return replicaKey{name: name, key: key, pub: pub}
}

// replicaConfig writes <name>.yaml: a gateway named name, signing with
// its own key, over the bucket b, trusting trusted (YAML list entries).
func replicaConfig(t *testing.T, b *loggedBucket, name string, trusted []string) string {
	t.Helper()
	trust := ""
	if len(trusted) > 0 {
		trust = "  trusted_keys:\n    - " + strings.Join(trusted, "\n    - ") + "\n"
	}
	cfg := fmt.Sprintf(`instance: %s
evidence:
  url: %q
  spool_dir: ./spool-%s
  signing_key: {file: %s.pem}
%sdrivers:
  workspace: {type: workspace, root: ./ws}
`, name, b.url, name, name, trust)
	writeFiles(t, b.dir, map[string]string{name + ".yaml": cfg})
	return name + ".yaml"
}

// readRequest is a workspace.readFile call of hello.txt: cheap, and the
// same for every id, so a replay can only differ by being another's.
func readRequest(t *testing.T, id string) *toolgatev1.RunToolRequest {
	t.Helper()
	args, err := structpb.NewStruct(map[string]any{"path": "hello.txt"})
	if err != nil {
		t.Fatal(err)
	}
	return &toolgatev1.RunToolRequest{RequestId: id, ToolId: "workspace.readFile", Args: args}
}

// replicaDeployment is two gateways, gw-a and gw-b, with keys of their
// own over one bucket.
type replicaDeployment struct {
	b          *loggedBucket
	keyA, keyB replicaKey
	srv        [2]*server
	client     [2]toolgatev1.ToolGatewayClient
}

// startReplicaPair starts gw-a and gw-b over b. With trust, gw-a trusts
// gw-b's key from its pubkey file (its own is trusted anyway), and gw-b
// lists both keys inline, the one list a deployment gives every replica
// and its auditors.
func startReplicaPair(t *testing.T, b *loggedBucket, trust bool) *replicaDeployment {
	t.Helper()
	d := &replicaDeployment{b: b, keyA: newReplicaKey(t, b.dir, "gw-a"), keyB: newReplicaKey(t, b.dir, "gw-b")}
	writeFiles(t, filepath.Join(b.dir, "ws"), map[string]string{"hello.txt": "hello from the shared workspace\n"})
	var trustA, trustB []string
	if trust {
		trustA = []string{"{file: gw-b.pub}"}
		trustB = []string{base64.StdEncoding.EncodeToString(d.keyA.pub), base64.StdEncoding.EncodeToString(d.keyB.pub)}
	}
	for i, cfg := range []string{replicaConfig(t, b, "gw-a", trustA), replicaConfig(t, b, "gw-b", trustB)} {
		d.srv[i] = startServerEnv(t, b.dir, b.env, "--config", cfg)
		d.client[i] = dial(t, d.srv[i].addr)
	}
	return d
}

// call sends req to replica r (0: gw-a, 1: gw-b).
func (d *replicaDeployment) call(r int, req *toolgatev1.RunToolRequest) (*toolgatev1.RunToolResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return d.client[r].RunTool(ctx, req)
}

// runAlternating sends n calls, replica-0 … replica-(n-1), the even ones
// to gw-a and the odd ones to gw-b, and returns their replies.
func (d *replicaDeployment) runAlternating(t *testing.T, n int) []*toolgatev1.RunToolResponse {
	t.Helper()
	first := make([]*toolgatev1.RunToolResponse, n)
	for i := range n {
		resp, err := d.call(i%2, readRequest(t, fmt.Sprintf("replica-%d", i)))
		if err != nil || !resp.GetOk() {
			t.Fatalf("replica-%d on replica %d: %v %v", i, i%2, resp, err)
		}
		first[i] = resp
	}
	return first
}

// tampering is the value of toolgate_evidence_tampering_total{record} on
// srv's /metrics.
func tampering(t *testing.T, srv *server, record string) int {
	t.Helper()
	v := sampleValue(scrape(t, srv), "toolgate_evidence_tampering_total", `record="`+record+`"`)
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("toolgate_evidence_tampering_total{record=%q} is %q", record, v)
	}
	return n
}

// TestHostileReplicasTrustEachOther (issue 24, class 4: replicas do not
// trust each other). Two gateway processes with keys of their own share
// one store, the file store and a real MinIO bucket. A retry that lands on
// the other replica is replayed, the same reply, when the replicas trust
// each other's keys (evidence.trusted_keys); without that it is refused
// as tampering naming the key the replica does not trust, and counted in
// toolgate_evidence_tampering_total{record="response"}; a manifest
// re-signed by an attacker's key is refused by both, and verify fails it.
func TestHostileReplicasTrustEachOther(t *testing.T) {
	t.Parallel()
	m := evidencetest.StartMinIO(t)
	stores := []struct {
		name string
		open func(t *testing.T, bucket string) *loggedBucket
	}{
		{"file", func(t *testing.T, _ string) *loggedBucket { return fileLoggedBucket(t) }},
		{"minio", func(t *testing.T, bucket string) *loggedBucket { return minioLoggedBucket(t, m, bucket) }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Run("replicas that trust each other replay each other's answers", func(t *testing.T) {
				d := startReplicaPair(t, st.open(t, "trusted"), true)
				first := d.runAlternating(t, replicaCalls)
				dataLoss := 0
				for i := range replicaCalls {
					other := 1 - i%2
					resp, err := d.call(other, readRequest(t, fmt.Sprintf("replica-%d", i)))
					switch {
					case status.Code(err) == codes.DataLoss:
						dataLoss++
						t.Errorf("replica-%d resent to replica %d: %v", i, other, err)
					case err != nil || !proto.Equal(resp, first[i]):
						t.Errorf("replica-%d resent to replica %d: %v %v, want the first reply %v", i, other, resp, err, first[i])
					}
				}
				if dataLoss > 0 {
					t.Fatalf("%d of %d resends got DATA_LOSS", dataLoss, replicaCalls)
				}
				for i, srv := range d.srv {
					if n := tampering(t, srv, "response"); n != 0 {
						t.Errorf("replica %d counted %d tampered responses, want 0", i, n)
					}
				}
				// Until both logs sequence them (within a second) the newest
				// requests are pending; every one verifies once they have.
				eventually(t, faultSettle, "verify --config gw-b.yaml (both replicas' keys)", func() error {
					out, stderr, code := runToolEnv(t, d.b.dir, d.b.env, "evidence", "verify", "--all", "--config", "gw-b.yaml", "--require-signature")
					if code != exitOK || !strings.Contains(out, fmt.Sprintf("verified %d requests: %d ok", replicaCalls, replicaCalls)) {
						return fmt.Errorf("exit %d\n%s%s", code, out, stderr)
					}
					return nil
				})
			})

			t.Run("replicas that do not trust each other refuse each other's answers as tampering", func(t *testing.T) {
				const n = 6
				d := startReplicaPair(t, st.open(t, "untrusted"), false)
				first := d.runAlternating(t, n)
				keyOf := [2]string{evidence.KeyID(d.keyA.pub), evidence.KeyID(d.keyB.pub)}
				for i := range n {
					id := fmt.Sprintf("replica-%d", i)
					own, other := i%2, 1-i%2
					resp, err := d.call(other, readRequest(t, id))
					want := "requests/" + id + "/manifest.json failed authentication: it is signed by key " + keyOf[own] +
						", which this gateway does not trust (evidence.trusted_keys)"
					if status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "nothing was executed") {
						t.Fatalf("%s resent to the replica that does not trust its key: %v %v, want DATA_LOSS saying %q", id, resp, err, want)
					}
					if resp, err := d.call(own, readRequest(t, id)); err != nil || !proto.Equal(resp, first[i]) {
						t.Fatalf("%s resent to the replica that ran it: %v %v", id, resp, err)
					}
				}
				for i, srv := range d.srv {
					if got := tampering(t, srv, "response"); got != n/2 {
						t.Errorf("replica %d counted %d tampered responses, want %d", i, got, n/2)
					}
					if !strings.Contains(srv.log.String(), "evidence tampering: a stored record failed authentication") {
						t.Errorf("replica %d logged no tampering:\n%s", i, srv.log.String())
					}
				}
			})

			t.Run("a manifest re-signed by an attacker's key is refused by both replicas and by verify", func(t *testing.T) {
				d := startReplicaPair(t, st.open(t, "resigned"), true)
				first := d.runAlternating(t, 2)
				_, attacker, err := ed25519.GenerateKey(nil)
				if err != nil {
					t.Fatal(err)
				}
				d.b.resign(t, "replica-0", attacker)
				want := "which this gateway does not trust (evidence.trusted_keys)"
				for r := range 2 {
					resp, err := d.call(r, readRequest(t, "replica-0"))
					if status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), want) {
						t.Fatalf("replica %d replayed a manifest re-signed by an attacker: %v %v", r, resp, err)
					}
					if n := tampering(t, d.srv[r], "response"); n != 1 {
						t.Errorf("replica %d counted %d tampered responses, want 1", r, n)
					}
					if resp, err := d.call(r, readRequest(t, "replica-1")); err != nil || !proto.Equal(resp, first[1]) {
						t.Fatalf("replica %d: the untouched replica-1: %v %v", r, resp, err)
					}
				}
				out, stderr, code := runToolEnv(t, d.b.dir, d.b.env, "evidence", "verify", "replica-0", "--config", "gw-b.yaml")
				if code != exitFailure || !strings.HasPrefix(out, "unknown-key replica-0: TAMPERED: signed by an untrusted key, "+evidence.KeyID(attacker.Public().(ed25519.PublicKey))) {
					t.Fatalf("verify replica-0: exit %d, want 1\n%s%s", code, out, stderr)
				}
				out, stderr, code = runToolEnv(t, d.b.dir, d.b.env, "evidence", "verify", "--all", "--evidence", d.b.url, "--pubkey", "gw-a.pub", "--pubkey", "gw-b.pub")
				if code != exitFailure || !strings.Contains(out, "replica-0: TAMPERED") {
					t.Fatalf("verify --all: exit %d, want 1\n%s%s", code, out, stderr)
				}
			})
		})
	}
}

// TestHostileReplicaTrustedKeyConfig: a replica's trusted keys are
// checked before it starts: check config and serve refuse a key that is
// not a public key without quoting it, and a private key pasted where a
// public one belongs is named for what it is.
func TestHostileReplicaTrustedKeyConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, faultPolicy)
	k := newReplicaKey(t, dir, "gw-a")
	pemKey, err := os.ReadFile(filepath.Join(dir, "gw-a.pem"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, entry, want string
	}{
		{"a private key file", "{file: gw-a.pem}", "evidence.trusted_keys[0]: gw-a.pem: this is a private key"},
		{"a file of something else", "{file: garbage.pub}", "evidence.trusted_keys[0]: garbage.pub: evidence: public key: neither a PEM"},
		{"a missing file", "{file: nope.pub}", "evidence.trusted_keys[0]: open nope.pub: no such file or directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			work := t.TempDir()
			if err := os.CopyFS(work, os.DirFS(dir)); err != nil {
				t.Fatal(err)
			}
			writeFiles(t, work, map[string]string{
				"toolgate.yaml": "evidence:\n  url: file://./ev\n  signing_key: {file: gw-a.pem}\n  trusted_keys: [" + tc.entry + "]\n",
				"garbage.pub":   "not-a-key-but-a-secret-0123456789\n",
			})
			_, stderr, code := runTool(t, work, "check", "config", "toolgate.yaml")
			if code != exitFailure || !strings.Contains(stderr, "toolgate.yaml:4: "+strings.TrimPrefix(tc.want, "config: ")) {
				t.Fatalf("check config: exit %d, want 1 and %q at line 4:\n%s", code, tc.want, stderr)
			}
			for _, secret := range []string{string(pemKey[28:60]), "not-a-key-but-a-secret", base64.StdEncoding.EncodeToString(k.key.Seed())} {
				if strings.Contains(stderr, secret) {
					t.Fatalf("check config quotes a secret:\n%s", stderr)
				}
			}
			stderr = serveMustRefuse(t, work, "--config", "toolgate.yaml", "--admin-listen", "off")
			if !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "not-a-key-but-a-secret") || strings.Contains(stderr, string(pemKey[28:60])) {
				t.Errorf("serve: stderr lacks %q, or quotes a secret:\n%s", tc.want, stderr)
			}
		})
	}
}
