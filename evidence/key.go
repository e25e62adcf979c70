package evidence

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/evidence/storage"
)

// MaxKeyLen is the longest key, in bytes, that ValidKey accepts.
const MaxKeyLen = storage.MaxKeyLen

// ErrInvalidKey is returned (wrapped) for a key that ValidKey rejects.
var ErrInvalidKey = storage.ErrInvalidKey

// tempPrefix starts the name of every file FileStore writes before it is
// linked into place; ValidKey reserves it.
const tempPrefix = storage.TempPrefix

// Artifact names within a request's prefix. See Key.
const (
	ArtifactRequest        = "request.json"
	ArtifactPolicyDecision = "policy_decision.json"
	// ArtifactDispatch and ArtifactNotDispatched are an attempt's
	// dispatch records (see DispatchRecord and AttemptArtifact).
	ArtifactDispatch      = "dispatch.json"
	ArtifactNotDispatched = "not_dispatched.json"
	ArtifactToolResult    = "tool_result.json"
	ArtifactResponse      = "response.json"
	ArtifactManifest      = "manifest.json"
	// ArtifactApprovalRequest and ArtifactApproval belong to a request, not
	// to an attempt: what a held-back call asks a human to approve, and the
	// one decision on it (see ApprovalRequestRecord and ApprovalRecord).
	ArtifactApprovalRequest = "approval_request.json"
	ArtifactApproval        = "approval.json"
)

// Key returns the key of the named artifact of a request:
// "requests/<requestID>/<artifact>". It does not validate its arguments;
// the store does when the key is used.
func Key(requestID, artifact string) string {
	return RequestPrefix(requestID) + artifact
}

// RequestPrefix returns the prefix shared by every artifact of a request,
// "requests/<requestID>/", suitable for List.
func RequestPrefix(requestID string) string {
	return "requests/" + requestID + "/"
}

// ValidKey reports whether key may name an artifact: see storage.ValidKey.
func ValidKey(key string) error {
	return storage.ValidKey(key)
}

// validRequestID reports whether id can stand as the single key segment
// that Key and RequestPrefix put it in.
func validRequestID(id string) error {
	if strings.Contains(id, "/") || ValidKey(id) != nil {
		return fmt.Errorf("%w: request id %q is not a single valid key segment", ErrInvalidKey, id)
	}
	return nil
}
