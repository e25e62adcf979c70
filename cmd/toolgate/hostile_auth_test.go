package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// authProbeKey is the one key the probed gateway accepts, for caller alice.
const authProbeKey = "k-probe-0123456789abcdef"

// TestHostileAuthProbes sends a gateway with API keys every malformed or
// borrowed credential a caller might try. Each must be UNAUTHENTICATED and
// leave no trace in the evidence; the real key still works.
func TestHostileAuthProbes(t *testing.T) {
	t.Parallel()
	dir := tourDir(t)
	cfg := "auth: {keys: [{caller: alice, env: TOOLGATE_PROBE_KEY}]}\n" +
		"evidence: {url: file://./audit}\n" +
		"drivers: {workspace: {type: workspace, root: ./ws}}\n"
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServerEnv(t, dir, []string{"TOOLGATE_PROBE_KEY=" + authProbeKey}, "--config", "toolgate.yaml")
	conn, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := toolgatev1.NewToolGatewayClient(conn)

	probes := []struct {
		name   string
		header []string // authorization values sent, in order
	}{
		{"no authorization header", nil},
		{"an unknown key", []string{"Bearer k-probe-0123456789abcdeX"}},
		{"the key cut short by one byte", []string{"Bearer " + authProbeKey[:len(authProbeKey)-1]}},
		{"the key with a byte added", []string{"Bearer " + authProbeKey + "0"}},
		{"the key under another scheme", []string{"Basic " + authProbeKey}},
		{"the key with no scheme", []string{authProbeKey}},
		{"a scheme with no key", []string{"Bearer "}},
		{"the key's SHA-256 instead of the key", []string{"Bearer " + hexDigest(authProbeKey)}},
		{"two headers, a wrong one first", []string{"Bearer wrong-key-0123456789", "Bearer " + authProbeKey}},
		{"two headers, the right one first", []string{"Bearer " + authProbeKey, "Bearer wrong-key-0123456789"}},
	}
	for i, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			ctx := probeContext(t, p.header)
			id := "probe-" + string(rune('a'+i))
			_, err := client.RunTool(ctx, &toolgatev1.RunToolRequest{RequestId: id, ToolId: "workspace.readFile",
				Args: &structpb.Struct{Fields: map[string]*structpb.Value{"path": structpb.NewStringValue("notes.txt")}}})
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("RunTool: %v, want Unauthenticated", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "audit", "requests", id)); !os.IsNotExist(err) {
				t.Errorf("an unauthenticated call left evidence (%v)", err)
			}
			if _, err := client.ListTools(ctx, &toolgatev1.ListToolsRequest{}); status.Code(err) != codes.Unauthenticated {
				t.Errorf("ListTools: %v, want Unauthenticated", err)
			}
		})
	}
	t.Run("the real key still works", func(t *testing.T) {
		ctx := probeContext(t, []string{"bearer " + authProbeKey})
		resp, err := client.ListTools(ctx, &toolgatev1.ListToolsRequest{})
		if err != nil || len(resp.GetTools()) == 0 {
			t.Fatalf("ListTools with the key: %v, %v", resp, err)
		}
	})
	if strings.Contains(srv.log.String(), authProbeKey) {
		t.Errorf("the API key reached the gateway's log")
	}
}

// probeContext is a call context carrying the given authorization values.
func probeContext(t *testing.T, header []string) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	for _, h := range header {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", h)
	}
	return ctx
}

// TestHostileListenRefusals starts the gateway where it would hand its API
// keys, or unauthenticated access, to the network: serve must refuse.
func TestHostileListenRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, config, want string
	}{
		{"no keys beyond loopback", "listen: 0.0.0.0:0\n", "not a loopback address and auth.keys is empty"},
		{"keys in clear text beyond loopback", "listen: 0.0.0.0:0\nauth: {keys: [{caller: a, sha256: " +
			hexDigest("k") + "}]}\n", "tls is not configured"},
		{"an IPv6 wildcard without keys", "listen: '[::]:0'\n", "not a loopback address and auth.keys is empty"},
		{"a half-configured TLS", "tls: {cert_file: cert.pem}\n", "give both cert_file and key_file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := tourDir(t)
			if err := os.WriteFile(filepath.Join(dir, "refused.yaml"), []byte(tc.config), 0o600); err != nil {
				t.Fatal(err)
			}
			// Bounded: a gateway that wrongly starts is killed, and the
			// test fails on its exit status instead of hanging.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, toolgateBin, "serve", "--config", "refused.yaml")
			cmd.Dir = dir
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exitError || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("serve: %v, stderr:\n%s\nwant exit %d mentioning %q", err, stderr.String(), exitError, tc.want)
			}
		})
	}
}

// hexDigest is the hex SHA-256 of s, the form auth.keys takes a key in.
func hexDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
