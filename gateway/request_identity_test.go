package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/toolgate/toolgate/evidence"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

const (
	validTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	validTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
)

func identityRequest(t *testing.T, id string) *toolgatev1.RunToolRequest {
	return &toolgatev1.RunToolRequest{
		RequestId: id, ToolId: "fake.run", Args: mustStruct(t, map[string]any{"a": "x"}),
		Ctx: &toolgatev1.RunContext{RunId: "run-1"},
	}
}

// withoutKeys drops keys from a JSON object and re-encodes it.
func withoutKeys(t *testing.T, b []byte, keys ...string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		delete(m, k)
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRequestJSONRecordsAuthAndTraceOutsideTheHash: a call with an OAuth
// identity and a traceparent records both in request.json, and nothing
// else changes: the canonical hash is the plain call's, a retry without
// them (over gRPC, under a refreshed token) replays the answer without a
// second run, the token's groups are not written, and the evidence
// verifies.
func TestRequestJSONRecordsAuthAndTraceOutsideTheHash(t *testing.T) {
	t.Parallel()
	permit := map[string]string{"policy.default.cedar": permitAll}
	withID, plain := newLiveGateway(t, liveOptions{policies: permit}), newLiveGateway(t, liveOptions{policies: permit})
	ctx := context.Background()
	const id = "traced-1"
	identity := &Identity{Method: "oauth", Issuer: "https://idp.example", Subject: "erin", TokenID: "jti-77", Groups: []string{"secret-group-name"}}
	first, err := withID.gw.Run(ctx, "oauth:erin", Call{FrontDoor: "mcp", Identity: identity, TraceParent: validTraceParent, Request: identityRequest(t, id)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.gw.Run(ctx, "oauth:erin", Call{FrontDoor: "mcp", Request: identityRequest(t, id)}); err != nil {
		t.Fatal(err)
	}
	raw, err := withID.store.Get(ctx, evidence.Key(id, evidence.ArtifactRequest))
	if err != nil {
		t.Fatal(err)
	}
	plainRaw, err := plain.store.Get(ctx, evidence.Key(id, evidence.ArtifactRequest))
	if err != nil {
		t.Fatal(err)
	}
	rec := parseRequestJSON(t, raw)
	want := evidence.RequestAuth{Method: "oauth", Issuer: "https://idp.example", Subject: "erin", TokenID: "jti-77"}
	if rec.Auth == nil || *rec.Auth != want || rec.TraceID != validTraceID {
		t.Fatalf("request.json auth %+v, trace_id %q; want %+v and %s:\n%s", rec.Auth, rec.TraceID, want, validTraceID, raw)
	}
	if !bytes.Contains(raw, []byte(`"jti": "jti-77"`)) || bytes.Contains(raw, []byte("secret-group-name")) {
		t.Fatalf("request.json should name the token id as jti and no group:\n%s", raw)
	}
	if got := parseRequestJSON(t, plainRaw).CanonicalRequestHash; got != rec.CanonicalRequestHash {
		t.Fatalf("canonical hash %s with auth and trace, %s without", rec.CanonicalRequestHash, got)
	}
	if a, b := withoutKeys(t, raw, "auth", "trace_id"), withoutKeys(t, plainRaw); !bytes.Equal(a, b) {
		t.Fatalf("request.json differs beyond auth and trace_id:\nwith:    %s\nwithout: %s", a, b)
	}
	again, err := withID.gw.Run(ctx, "oauth:erin", Call{Request: identityRequest(t, id)})
	if err != nil || !proto.Equal(again, first) {
		t.Fatalf("a retry without identity or trace: %v, %v; want the first answer replayed", again, err)
	}
	if n := withID.driver.runs.Load(); n != 1 {
		t.Fatalf("the driver ran %d times", n)
	}
	rep, err := evidence.Verify(ctx, withID.store, id)
	if err != nil || rep.Status != "ok" {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}

// TestRunRefusesWhatItCannotRecord: a traceparent or an identity that is
// malformed would be written into evidence as given: the call is
// INVALID_ARGUMENT before anything is claimed or run.
func TestRunRefusesWhatItCannotRecord(t *testing.T) {
	t.Parallel()
	lg := newLiveGateway(t, liveOptions{policies: map[string]string{"policy.default.cedar": permitAll}})
	ok := &Identity{Method: "oauth", Subject: "erin"}
	for i, tc := range []struct {
		name, caller, trace string
		identity            *Identity
		want                string
	}{
		{"a traceparent that is not one", "oauth:erin", "hello", nil, "trace_parent"},
		{"an all-zero trace id", "oauth:erin", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", nil, "trace_parent"},
		{"an all-zero span id", "oauth:erin", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", nil, "trace_parent"},
		{"an unknown version", "oauth:erin", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", nil, "trace_parent"},
		{"upper-case hex", "oauth:erin", strings.ToUpper(validTraceParent), nil, "trace_parent"},
		{"a line break after a valid one", "oauth:erin", validTraceParent + "\n{\"forged\":1}", nil, "trace_parent"},
		{"an identity for a caller name auth.keys could not give", "erin\n", "", ok, "caller"},
		{"an identity without a method", "oauth:erin", "", &Identity{Subject: "erin"}, "identity.method"},
		{"an issuer with a control character", "oauth:erin", "", &Identity{Method: "oauth", Issuer: "https://idp\x1b[2J"}, "identity.issuer"},
		{"a subject over the limit", "oauth:erin", "", &Identity{Method: "oauth", Subject: strings.Repeat("s", maxIdentityField+1)}, "identity.subject"},
		{"too many groups", "oauth:erin", "", &Identity{Method: "oauth", Groups: make([]string, maxIdentityNames+1)}, "identity.groups"},
		{"an empty role", "oauth:erin", "", &Identity{Method: "oauth", Roles: []string{""}}, "identity.roles"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "refused-" + string(rune('a'+i))
			_, err := lg.gw.Run(context.Background(), tc.caller, Call{FrontDoor: "mcp", Identity: tc.identity, TraceParent: tc.trace, Request: identityRequest(t, id)})
			wantCode(t, err, codes.InvalidArgument, tc.want)
			keys, err := lg.store.List(context.Background(), evidence.RequestPrefix(id))
			if err != nil || len(keys) != 0 {
				t.Fatalf("evidence written for a refused call: %v, %v", keys, err)
			}
		})
	}
	if n := lg.driver.runs.Load(); n != 0 {
		t.Fatalf("the driver ran %d times", n)
	}
}

// FuzzTraceID: whatever a door passes as TraceParent, traceID either
// refuses it or returns the 32 lowercase hex digits, not all zero, that
// the valid traceparent it was carries; nothing else reaches request.json.
func FuzzTraceID(f *testing.F) {
	for _, s := range []string{validTraceParent, "", "00-" + strings.Repeat("0", 32) + "-00f067aa0ba902b7-01", validTraceParent + "\n", "01-x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := traceID(s)
		if err != nil || s == "" {
			if id != "" {
				t.Fatalf("traceID(%q) = %q with %v", s, id, err)
			}
			return
		}
		if len(s) != 55 || s[:3] != "00-" || s[3:35] != id || strings.Trim(id, "0123456789abcdef") != "" || strings.Trim(id, "0") == "" {
			t.Fatalf("traceID(%q) = %q", s, id)
		}
	})
}
