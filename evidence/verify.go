package evidence

import (
	"context"
	"errors"
	"fmt"
)

// Verification statuses reported in VerifyReport.Status.
const (
	StatusOK         = "ok"         // every artifact matches the manifest
	StatusIncomplete = "incomplete" // the request has no manifest
	StatusMismatch   = "mismatch"   // the artifacts and the manifest disagree
)

// VerifyReport is the result of Verify.
type VerifyReport struct {
	RequestID string   `json:"request_id"`
	Status    string   `json:"status"`             // StatusOK, StatusIncomplete or StatusMismatch
	Problems  []string `json:"problems,omitempty"` // one line each; empty when Status is StatusOK
}

// Verify checks the evidence of one request against its manifest: every
// artifact the manifest lists must be present with the recorded size and
// SHA-256, and every artifact under the request's prefix must be listed.
//
// A missing manifest yields StatusIncomplete; an unreadable manifest or
// any disagreement yields StatusMismatch. Verify returns an error only for
// an invalid request id or when the store itself fails.
func Verify(ctx context.Context, s Store, requestID string) (VerifyReport, error) {
	if err := validRequestID(requestID); err != nil {
		return VerifyReport{}, err
	}
	rep := VerifyReport{RequestID: requestID}
	manifestKey := Key(requestID, ArtifactManifest)
	raw, err := s.Get(ctx, manifestKey)
	if errors.Is(err, ErrNotExist) {
		rep.Status = StatusIncomplete
		rep.Problems = []string{manifestKey + ": missing"}
		return rep, nil
	}
	if err != nil {
		return VerifyReport{}, fmt.Errorf("evidence: verify %q: %w", requestID, err)
	}
	m, err := ParseManifest(raw)
	if err != nil {
		rep.Status = StatusMismatch
		rep.Problems = []string{fmt.Sprintf("%s: %v", manifestKey, err)}
		return rep, nil
	}
	if m.RequestID != requestID {
		// Its artifacts lie under another prefix, so checking them would
		// say nothing about this request.
		rep.Status = StatusMismatch
		rep.Problems = []string{fmt.Sprintf("%s: request_id is %q", manifestKey, m.RequestID)}
		return rep, nil
	}

	listed := make(map[string]bool, len(m.Artifacts))
	for _, want := range m.Artifacts {
		listed[want.Key] = true
		data, err := s.Get(ctx, want.Key)
		if errors.Is(err, ErrNotExist) {
			rep.Problems = append(rep.Problems, want.Key+": listed in the manifest but missing")
			continue
		}
		if err != nil {
			return VerifyReport{}, fmt.Errorf("evidence: verify %q: %w", requestID, err)
		}
		got := Digest(want.Key, data)
		if got.Size != want.Size {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: size is %d, manifest says %d", want.Key, got.Size, want.Size))
		}
		if got.SHA256 != want.SHA256 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: sha256 is %s, manifest says %s", want.Key, got.SHA256, want.SHA256))
		}
	}

	present, err := s.List(ctx, RequestPrefix(requestID))
	if err != nil {
		return VerifyReport{}, fmt.Errorf("evidence: verify %q: %w", requestID, err)
	}
	for _, k := range present {
		if k != manifestKey && !listed[k] {
			rep.Problems = append(rep.Problems, k+": present but not listed in the manifest")
		}
	}

	rep.Status = StatusOK
	if len(rep.Problems) > 0 {
		rep.Status = StatusMismatch
	}
	return rep, nil
}
