package mcpdoor

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/canonb64"
	"github.com/toolgate/toolgate/internal/regularfile"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// mrtrVersion is the first protocol version with input-required results
// (multi round-trip requests).
const mrtrVersion = "2026-07-28"

// approvalInputID names the door's one input request.
const approvalInputID = "toolgate_approval"

// stateKeySize is the HMAC-SHA256 key's length.
const stateKeySize = 32

// maxStateLen bounds a requestState before any decoding: the door's own
// are about 400 bytes.
const maxStateLen = 4096

// stateVersion prefixes a sealed requestState.
const stateVersion = "v1"

// stateDomain separates the MAC of a requestState from any other use of
// the key.
const stateDomain = "toolgate mcp requestState v1\x00"

// errBadState is the one answer to a requestState that fails any check:
// which check failed is nobody's business.
var errBadState = &toolError{msg: "approval state is invalid or expired; call again"}

// approvalState is what a requestState carries: the call it belongs to,
// bound to its caller, tool, canonical request hash and an expiry.
type approvalState struct {
	RequestID  string `json:"rid"`
	Tool       string `json:"tool"`
	Caller     string `json:"caller"`
	Hash       string `json:"hash"`
	ApprovalID string `json:"aid"`
	Expires    int64  `json:"exp"` // Unix seconds
}

// loadStateKey reads state_key_file, creating it with a random key when
// missing; without a file the key is random for this process.
func loadStateKey(path string) ([]byte, error) {
	if path == "" {
		return randomKey()
	}
	b, err := regularfile.Read(path, 4*stateKeySize)
	if errors.Is(err, fs.ErrNotExist) {
		return createStateKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("mcpdoor: state_key_file: %w", err)
	}
	if len(b) != stateKeySize {
		return nil, fmt.Errorf("mcpdoor: state_key_file %s: holds %d bytes, want %d random bytes", path, len(b), stateKeySize)
	}
	return b, nil
}

// createStateKey writes a fresh key to path, create-only: of replicas
// starting together on one shared file, one writes and the others read.
func createStateKey(path string) ([]byte, error) {
	key, err := randomKey()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return loadStateKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("mcpdoor: state_key_file: %w", err)
	}
	if _, err := f.Write(key); err != nil {
		f.Close()
		return nil, fmt.Errorf("mcpdoor: state_key_file: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("mcpdoor: state_key_file: %w", err)
	}
	return key, nil
}

func randomKey() ([]byte, error) {
	key := make([]byte, stateKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("mcpdoor: a requestState key: %w", err)
	}
	return key, nil
}

// sealState spells st as "v1.<payload>.<mac>", both base64url.
func (d *Door) sealState(st approvalState) string {
	payload, _ := json.Marshal(st) // strings and an int: cannot fail
	body := stateVersion + "." + base64.RawURLEncoding.EncodeToString(payload)
	return body + "." + base64.RawURLEncoding.EncodeToString(d.stateMAC(body))
}

func (d *Door) stateMAC(body string) []byte {
	m := hmac.New(sha256.New, d.stateKey)
	m.Write([]byte(stateDomain))
	m.Write([]byte(body))
	return m.Sum(nil)
}

// openState verifies a requestState the client echoed, which is
// attacker-controlled: the MAC first, then its expiry and that it belongs
// to this caller and tool.
func (d *Door) openState(s, caller, tool string, now time.Time) (approvalState, error) {
	if len(s) > maxStateLen {
		return approvalState{}, errBadState
	}
	version, rest, ok := strings.Cut(s, ".")
	payload64, mac64, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || version != stateVersion {
		return approvalState{}, errBadState
	}
	mac, err := canonb64.RawURL(mac64)
	if err != nil || !hmac.Equal(mac, d.stateMAC(version+"."+payload64)) {
		return approvalState{}, errBadState
	}
	payload, err := canonb64.RawURL(payload64)
	if err != nil {
		return approvalState{}, errBadState
	}
	var st approvalState
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return approvalState{}, errBadState
	}
	if now.Unix() >= st.Expires || st.Caller != caller || st.Tool != tool || !requestIDPattern.MatchString(st.RequestID) {
		return approvalState{}, errBadState
	}
	return st, nil
}

// elicitationMode is how the client can be asked to wait for an
// approval: "form", "url", or "" when it cannot (an older protocol, no
// elicitation capability, or URL only without approval_url).
func (d *Door) elicitationMode(req *mcp.CallToolRequest) string {
	if req.ProtocolVersion() < mrtrVersion {
		return ""
	}
	caps := req.ClientCapabilities()
	if caps == nil || caps.Elicitation == nil {
		return ""
	}
	e := caps.Elicitation
	switch {
	case e.Form != nil || e.URL == nil:
		// An empty elicitation capability means form, as the spec says.
		return "form"
	case d.cfg.ApprovalURL != "":
		return "url"
	}
	return ""
}

// approvalResult answers a call that waits for an approval. A
// 2026-07-28 client that elicits gets an input-required result: its
// answer to the elicitation only means "retry now", never "approved",
// since only an approver's DecideApproval approves. Any other client
// gets a tool error naming the approval: the identical call again, under
// any request id, uses it once approved (see package approvaluse).
func (d *Door) approvalResult(req *mcp.CallToolRequest, caller, rid string, resp *toolgatev1.RunToolResponse) *mcp.CallToolResult {
	pa := resp.GetPendingApproval()
	meta := resultMeta(rid, resp)
	approval := map[string]any{"approvalId": pa.GetApprovalId(), "ruleId": pa.GetRuleId(), "approvers": pa.GetApprovers()}
	if pa.GetExpiresAt() != nil {
		approval["expiresAt"] = pa.GetExpiresAt().AsTime().UTC().Format(time.RFC3339)
	}
	meta[MetaApproval] = approval
	what := fmt.Sprintf("Approval %s is required (rule %s: %s).", pa.GetApprovalId(), pa.GetRuleId(), pa.GetReason())
	mode := d.elicitationMode(req)
	if mode == "" {
		text := fmt.Sprintf("%s Once an approver approves it, call this tool again with the same arguments "+
			"(or with _meta {%q: %q}); it runs once.", what, MetaIdempotencyKey, rid)
		return errorResult(text, meta)
	}
	state := d.sealState(approvalState{
		RequestID: rid, Tool: req.Params.Name, Caller: caller, Hash: pa.GetRequestHash(),
		ApprovalID: pa.GetApprovalId(), Expires: d.now().Add(DefaultStateTTL).Unix(),
	})
	ask := &mcp.ElicitParams{Mode: mode}
	who := "an approver"
	if pa.GetApprovers() != "" {
		who = fmt.Sprintf("an approver (group:%s)", pa.GetApprovers())
	}
	if mode == "url" {
		ask.URL = strings.ReplaceAll(d.cfg.ApprovalURL, "{approval_id}", pa.GetApprovalId())
		ask.ElicitationID = pa.GetApprovalId()
		ask.Message = fmt.Sprintf("%s Ask %s to approve it there, then continue.", what, who)
	} else {
		ask.Message = fmt.Sprintf("%s Ask %s to approve it, then continue.", what, who)
		ask.RequestedSchema = map[string]any{"type": "object", "properties": map[string]any{}}
	}
	return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{approvalInputID: ask}, RequestState: state, Meta: meta}
}
