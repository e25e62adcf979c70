package lease

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/toolgate/toolgate/evidence"
)

// Guard returns s with its writes of request artifacts held to the lease.
// While the lease is held a write costs Held's atomic load and clock read
// more. When it is not (fenced, or lapsed and not renewable), nothing is
// started: a claim, a dispatch marker or an approval is refused with
// Held's error; and nothing is added to a request that already has its
// manifest, which the holder of the name may have written for a request
// of this process's that it took for abandoned (an error wrapping Held's
// and evidence.ErrExist, so that no spool keeps it). The rest of the
// requests this process started may still be recorded, so that a call in
// flight when the lease was lost keeps its record whole. Other keys pass
// through.
func (l *Lease) Guard(s evidence.Store) evidence.Store { return &guarded{Store: s, l: l} }

type guarded struct {
	evidence.Store
	l *Lease
}

func (g *guarded) Put(ctx context.Context, key string, data []byte) error {
	if err := g.l.Held(ctx); err != nil {
		if err := g.mayWrite(ctx, key, err); err != nil {
			return fmt.Errorf("evidence: put %q: %w", key, err)
		}
	}
	return g.Store.Put(ctx, key, data)
}

// WalkInfo keeps the wrapped store's sizes and times.
func (g *guarded) WalkInfo(ctx context.Context, prefix string, fn func(evidence.KeyInfo) error) error {
	return evidence.WalkInfo(ctx, g.Store, prefix, fn)
}

// mayWrite says whether key may be written without the lease, which was
// lost for cause.
func (g *guarded) mayWrite(ctx context.Context, key string, cause error) error {
	rest, ok := strings.CutPrefix(key, "requests/")
	id, name, _ := strings.Cut(rest, "/")
	if !ok || name == "" {
		return nil
	}
	switch path.Base(name) {
	case evidence.ArtifactRequest, evidence.ArtifactDispatch, evidence.ArtifactApproval, evidence.ArtifactApprovalUse:
		return cause
	}
	_, err := g.Store.Get(ctx, evidence.Key(id, evidence.ArtifactManifest))
	switch {
	case err == nil:
		return fmt.Errorf("%w: %w: request %s was finalised by the process that holds the instance name now", cause, evidence.ErrExist, id)
	case errors.Is(err, evidence.ErrNotExist):
		return nil
	}
	return err
}
