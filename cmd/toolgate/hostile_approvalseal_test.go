package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/trust"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// heldShellPolicy holds workspace.shell for the ops group and lets ops
// members approve it.
const heldShellPolicy = `@id("shell_needs_ops") @approval("ops") @reason("runs arbitrary commands")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.shell");

@id("ops_may_approve")
permit (principal, action == Action::"Approve", resource == Tool::"workspace.shell")
when { principal.groups.contains(context.group) };
`

// sealKeys are alice's (dev) and bob's (ops) API keys.
var sealKeys = []string{"KEY_ALICE=k-alice-0123456789", "KEY_BOB=k-bob-0123456789"}

func asCaller(caller string) context.Context {
	key := map[string]string{"alice": "k-alice-0123456789", "bob": "k-bob-0123456789"}[caller]
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
}

// forgeApproval writes, as someone with write access to the store but no
// key, the approval.json of held request id: an approval by bob whose
// digests are copied from the stored approval_request.json, exactly as a
// gateway would bind them.
func forgeApproval(t *testing.T, s evidence.Store, id string) {
	t.Helper()
	ctx := context.Background()
	aData, err := s.Get(ctx, evidence.Key(id, evidence.ArtifactApprovalRequest))
	if err != nil {
		t.Fatal(err)
	}
	body, _, _ := trust.Split(aData)
	var a evidence.ApprovalRequestRecord
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(aData)
	v, err := json.MarshalIndent(evidence.ApprovalRecord{
		RequestID: id, ApprovalID: a.ApprovalID, Decision: evidence.ApprovalApprove, Approver: "bob",
		Reason: "looks fine", DecidedAt: time.Now().UTC(), CanonicalRequestHash: a.CanonicalRequestHash,
		PolicySetDigest: a.PolicySetDigest, RuleID: a.RuleID, ApprovalRequestSHA256: hex.EncodeToString(sum[:]),
		Authorization: &evidence.ApproverDecision{PolicyRef: a.PolicyRef, PolicySetDigest: a.PolicySetDigest, RuleID: "ops_may_approve"},
		Gateway:       a.Gateway,
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, evidence.Key(id, evidence.ArtifactApproval), append(v, '\n')); err != nil {
		t.Fatal(err)
	}
}

// TestHostileForgedApprovalRunsNothing: someone who can write to the
// evidence store (the folder, or the bucket) writes an approval.json for
// a held shell call, with every digest copied from its
// approval_request.json, and retries the call. Nothing runs: the caller
// gets DATA_LOSS naming the tampering, the admin listener's metrics count
// it, and verify with the gateway's public key fails naming approval.json.
// A genuine approval next to it still runs its call exactly once.
func TestHostileForgedApprovalRunsNothing(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"file", "minio"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			writePolicy(t, dir, heldShellPolicy)
			url, env := "file://./audit", sealKeys
			var store evidence.Store
			if kind == "minio" {
				m := evidencetest.StartMinIO(t)
				m.CreateBucket(t, "forge", false)
				url, env = m.URL("forge", "tg"), append(m.Env(), sealKeys...)
				store = openBucket(t, m, url)
			}
			cfg := "auth:\n  keys:\n    - {caller: alice, env: KEY_ALICE, groups: [dev]}\n    - {caller: bob, env: KEY_BOB, groups: [ops]}\n" +
				"evidence: {url: " + strconv.Quote(url) + "}\ndrivers: {workspace: {type: workspace, root: ./ws}}\n"
			if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			srv := startServerEnv(t, dir, env, "--config", "toolgate.yaml")
			if kind == "file" {
				fs, err := evidence.NewFileStore(filepath.Join(dir, "audit"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { fs.Close() })
				store = fs
			}
			client := dial(t, srv.addr)

			forged := shellRequest(t, "forge-1", "touch forged-ran; echo ran")
			wantHeld(t, client, forged)
			forgeApproval(t, store, "forge-1")
			_, err := client.RunTool(asCaller("alice"), forged)
			if st := status.Convert(err); st.Code() != codes.DataLoss ||
				!strings.Contains(st.Message(), "failed authentication (evidence tampering), nothing was executed") ||
				!strings.Contains(st.Message(), "requests/forge-1/approval.json") {
				t.Fatalf("retry after the forgery: %v; want DATA_LOSS naming the tampered approval.json", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "ws", "forged-ran")); !os.IsNotExist(err) {
				t.Fatalf("the held command ran on a forged approval (%v)", err)
			}
			metrics := scrape(t, srv)
			if n, err := strconv.ParseFloat(sampleValue(metrics, "toolgate_evidence_tampering_total", `record="approval"`), 64); err != nil || n < 1 {
				t.Fatalf("toolgate_evidence_tampering_total{record=\"approval\"} = %v (%v):\n%s",
					n, err, strings.Join(series(metrics, "toolgate_evidence_tampering_total"), "\n"))
			}

			genuineApprovalRunsOnce(t, client, dir)

			pub, stderr, code := runToolEnv(t, dir, env, "evidence", "pubkey", "--config", "toolgate.yaml")
			if code != exitOK {
				t.Fatalf("pubkey: %s", stderr)
			}
			if err := os.WriteFile(filepath.Join(dir, "gateway.pub"), []byte(pub), 0o600); err != nil {
				t.Fatal(err)
			}
			out, stderr, code := runToolEnv(t, dir, env, "evidence", "verify", "--all", "--pubkey", "gateway.pub", "--config", "toolgate.yaml")
			if code != exitFailure || !strings.Contains(out, "mismatch forge-1: TAMPERED") ||
				!strings.Contains(out, "requests/forge-1/approval.json: failed authentication: the record carries no seal") ||
				strings.Contains(out, "genuine-1: TAMPERED") {
				t.Fatalf("verify --all --pubkey: exit %d, want 1 naming forge-1's approval.json alone\n%s%s", code, out, stderr)
			}
			out, stderr, code = runToolEnv(t, dir, env, "evidence", "show", "--config", "toolgate.yaml", "genuine-1")
			if code != exitOK || !strings.Contains(out, `"seal": {`) || !strings.Contains(out, "consumed by bob; records signed by key ed25519:") {
				t.Fatalf("evidence show of a signed approval: exit %d\n%s%s", code, out, stderr)
			}
		})
	}
}

// wantHeld calls req as alice and wants it held for approval.
func wantHeld(t *testing.T, client toolgatev1.ToolGatewayClient, req *toolgatev1.RunToolRequest) string {
	t.Helper()
	resp, err := client.RunTool(asCaller("alice"), req)
	if err != nil || resp.GetPendingApproval() == nil {
		t.Fatalf("%s: %v, %v; want it held for approval", req.GetRequestId(), resp, err)
	}
	return resp.GetPendingApproval().GetApprovalId()
}

// genuineApprovalRunsOnce: bob approves a held call; alice's retry runs it
// once and a further retry replays it.
func genuineApprovalRunsOnce(t *testing.T, client toolgatev1.ToolGatewayClient, dir string) {
	t.Helper()
	req := shellRequest(t, "genuine-1", "echo ran >> genuine.count; echo done")
	id := wantHeld(t, client, req)
	if _, err := client.DecideApproval(asCaller("bob"), &toolgatev1.DecideApprovalRequest{
		ApprovalId: id, Decision: "approve", Reason: "checked",
	}); err != nil {
		t.Fatalf("DecideApproval: %v", err)
	}
	for range 2 {
		resp, err := client.RunTool(asCaller("alice"), req)
		if err != nil || resp.GetToolResult().GetStdout() != "done\n" {
			t.Fatalf("retry after a genuine approval: %v, %v", resp, err)
		}
	}
	if n := lines(t, filepath.Join(dir, "ws", "genuine.count")); n != 1 {
		t.Fatalf("the approved call ran %d times, want once", n)
	}
}
