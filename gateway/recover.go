package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/gateway/recovery"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/gateway/wire"
)

// RecoveryOptions tune how a gateway finalises the requests left without
// a manifest (see Gateway.Recover).
type RecoveryOptions = recovery.Options

// RecoveryStats counts what one pass of recovery did.
type RecoveryStats = recovery.Stats

// Recover walks the store once and finalises this instance's requests that
// were left without a manifest: a stored response gets its manifest
// (rolled forward from what is stored), an attempt abandoned before
// dispatch is closed as not dispatched (a retry may run it), and a request
// dispatched longer ago than RecoveryOptions.InterruptedAfter without a
// response gets an interrupted manifest; it is never run again. Requests
// too young to judge are revisited by RunRecovery.
func (g *Gateway) Recover(ctx context.Context) (RecoveryStats, error) {
	var stats RecoveryStats
	err := evidence.WalkRequests(ctx, g.store, func(id string, keys []string) error {
		if slices.Contains(keys, evidence.Key(id, evidence.ArtifactManifest)) {
			return nil
		}
		g.watchHeld(ctx, id, keys)
		return g.recoverOne(ctx, id, keys, &stats)
	})
	stats.Expired = g.sweepApprovals(ctx)
	return stats, err
}

// watchHeld notes request id for the expiry sweep when it is held for
// approval.
func (g *Gateway) watchHeld(ctx context.Context, id string, keys []string) {
	if !slices.Contains(keys, evidence.Key(id, evidence.ArtifactApprovalRequest)) {
		return
	}
	h, err := g.approvals().Read(ctx, id, keys)
	if err != nil {
		g.log.Warn("a request held for approval cannot be read; its expiry is left to a retry", "request_id", id, "err", err)
		return
	}
	expires := h.Request.ExpiresAt
	if h.Final() {
		expires = time.Time{} // denied, not yet ended: due now
	}
	g.recovery.WatchApproval(id, h.Request.RequestedAt, expires)
	if h.Verdict != nil {
		g.recovery.ApprovalDecided(id)
	}
}

// sweepApprovals ends denied the watched requests whose approval expired
// (or was denied and not yet ended), and reports how many it ended.
func (g *Gateway) sweepApprovals(ctx context.Context) int {
	ended := 0
	for _, id := range g.recovery.ExpiredApprovals(g.now()) {
		if g.finaliseHeld(ctx, id) {
			g.recovery.UnwatchApproval(id)
			ended++
		}
	}
	return ended
}

// RunRecovery runs Recover once, then revisits the requests left unfinished
// every interval until ctx ends. Errors are logged: the next pass retries.
func (g *Gateway) RunRecovery(ctx context.Context) {
	stats, err := g.Recover(ctx)
	g.logRecovery("recovery sweep at start", stats, err)
	t := time.NewTicker(g.recoveryLimits.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if g.recoveryFenced(ctx) {
			g.log.Warn("recovery stopped: a newer process holds this instance name and finalises its requests",
				"instance", g.instance)
			return
		}
		stats, err := g.revisit(ctx)
		stats.Expired = g.sweepApprovals(ctx)
		if stats != (RecoveryStats{}) || err != nil {
			g.logRecovery("recovery sweep", stats, err)
		}
	}
}

func (g *Gateway) logRecovery(msg string, s RecoveryStats, err error) {
	attrs := []any{"examined", s.Examined, "rolled_forward", s.RolledForward, "closed", s.Closed,
		"interrupted", s.Interrupted, "waiting", s.Waiting, "expired", s.Expired}
	if err != nil {
		g.log.Error(msg, append(attrs, "err", err)...)
		return
	}
	g.log.Info(msg, attrs...)
}

// revisit examines the requests noted as left unfinished.
func (g *Gateway) revisit(ctx context.Context) (RecoveryStats, error) {
	var stats RecoveryStats
	var errs []error
	for _, id := range g.recovery.Pending() {
		keys, err := g.store.List(ctx, evidence.RequestPrefix(id))
		if err != nil {
			errs = append(errs, err)
			stats.Waiting++
			continue
		}
		if err := g.recoverOne(ctx, id, keys, &stats); err != nil {
			errs = append(errs, err)
		}
	}
	return stats, errors.Join(errs...)
}

// recoverOne examines one request without a manifest and counts what it
// did in stats. A request it settles is no longer noted as unfinished.
func (g *Gateway) recoverOne(ctx context.Context, id string, keys []string, stats *RecoveryStats) error {
	did, err := g.recoverRequest(ctx, id, keys)
	if err != nil {
		stats.Count(recovery.Wait)
		return fmt.Errorf("recover %s: %w", id, err)
	}
	stats.Count(did)
	if did != recovery.Wait {
		g.recovery.Settled(id)
	} else if _, noted := g.recovery.Lookup(id); !noted {
		g.recovery.LeftUnfinished(id, recovery.Unfinished{Aged: true})
	}
	return nil
}

// recoverRequest finalises request id, whose keys in the store are keys,
// when it is this instance's and provably abandoned.
func (g *Gateway) recoverRequest(ctx context.Context, id string, keys []string) (recovery.Action, error) {
	if g.recovery.OthersRunning(id, 0) {
		return recovery.Wait, nil
	}
	if slices.Contains(keys, evidence.Key(id, evidence.ArtifactManifest)) {
		return recovery.None, nil
	}
	if g.spool != nil {
		// The flusher moves these first; the manifest may be among them.
		spooled, err := g.spool.List(ctx, evidence.RequestPrefix(id))
		if err != nil || len(spooled) > 0 {
			return recovery.Wait, err
		}
		// What the flusher moved after keys were listed (a close, the
		// manifest) is in the store now: judge the request by it.
		if keys, err = g.store.List(ctx, evidence.RequestPrefix(id)); err != nil {
			return recovery.Wait, err
		}
		if slices.Contains(keys, evidence.Key(id, evidence.ArtifactManifest)) {
			return recovery.None, nil
		}
	}
	if !slices.Contains(keys, evidence.Key(id, evidence.ArtifactRequest)) {
		if left, noted := g.recovery.Lookup(id); noted && !left.ClaimUnsure.IsZero() &&
			g.now().Sub(left.ClaimUnsure) < g.recoveryLimits.OpenAfter {
			return recovery.Wait, nil // the claim may be on its way still
		}
		return recovery.None, nil // never claimed
	}
	s, err := g.storedRequests().Read(ctx, id, keys)
	if errors.Is(err, trust.ErrTampered) {
		// Finalising it would sign a record no trusted gateway wrote.
		g.tampered(nil, telemetry.RecordClaim, id, err)
		return recovery.None, nil
	}
	if err != nil {
		return recovery.Wait, err
	}
	// Only the instance that owns the last attempt finalises it, even when
	// this process noted the request: a claim this process failed to
	// write may be another replica's request, or a newer process's of
	// this instance name.
	if !g.owns(s.Owner()) {
		return recovery.None, nil
	}
	left, noted := g.recovery.Lookup(id)
	return g.finalise(ctx, s, noted && !left.Aged, left)
}

// finalise does what recovery's rules (recovery.Limits.Next) say of the
// stored state s. noted is set when this process itself left the request
// unfinished: then it is known to be abandoned, and no age is waited for.
func (g *Gateway) finalise(ctx context.Context, s *recovery.Stored, noted bool, left recovery.Unfinished) (recovery.Action, error) {
	step := g.recoveryLimits.Next(recovery.Request{
		Responded: s.Has(evidence.ArtifactResponse), Last: s.Last(), Age: g.now().Sub(s.LastActivity),
	}, noted, left)
	switch step.Do {
	case recovery.RollForward:
		err := g.rollForward(ctx, s)
		if errors.Is(err, trust.ErrTampered) {
			g.tampered(nil, telemetry.RecordResponse, s.ID, err)
			return recovery.None, nil // nothing is signed for it
		}
		return step.Do, err
	case recovery.Close:
		if err := g.confirmInstance(ctx); err != nil {
			return recovery.Wait, err
		}
		_, err := g.closeAttempt(ctx, s.ID, s.Last().Number, step.Marked, g.encodeRecord, step.Reason)
		if !step.Marked && errors.Is(err, errDispatchedElsewhere) {
			return recovery.Wait, nil
		}
		return step.Do, err
	case recovery.Interrupt:
		return step.Do, g.writeRecoveredManifest(ctx, s, step.Outcome, step.Reason)
	}
	return step.Do, nil
}

// storedRequests reads requests as recovery judges them, authenticated
// as the gateway acts on them.
func (g *Gateway) storedRequests() recovery.Reader {
	return recovery.Reader{Store: g.store, Attempts: g.readAttempts, OpenOwn: g.openOwn,
		Foreign: func(err error) bool { return errors.Is(err, errForeignRecord) }}
}

// rollForward completes the record of a request whose response is stored
// without its manifest: the manifest lists what is stored, and says
// completed when the record is whole, or failed naming what is missing.
func (g *Gateway) rollForward(ctx context.Context, s *recovery.Stored) error {
	raw, err := g.store.Get(ctx, evidence.Key(s.ID, evidence.ArtifactResponse))
	if err != nil {
		return err
	}
	if err := g.checkUnmanifested(s.ID, raw); err != nil {
		return err // a manifest would sign a response no trusted gateway wrote
	}
	_, decodeErr := wire.DecodeResponse(raw)
	missing := s.Missing(decodeErr == nil)
	if len(missing) > 0 {
		return g.writeRecoveredManifest(ctx, s, evidence.OutcomeFailed,
			"the stored record is incomplete: "+strings.Join(missing, "; "))
	}
	return g.writeRecoveredManifest(ctx, s, evidence.OutcomeCompleted, "")
}

// writeRecoveredManifest writes the manifest of s from the artifacts
// stored, create-only: if the request's own gateway wrote one meanwhile,
// that one stands. Only the holder of the instance name writes one.
func (g *Gateway) writeRecoveredManifest(ctx context.Context, s *recovery.Stored, outcome, errText string) error {
	if err := g.confirmInstance(ctx); err != nil {
		return err
	}
	m := evidence.Manifest{
		Version:              evidence.ManifestVersion,
		RequestID:            s.ID,
		CanonicalRequestHash: s.Request.CanonicalRequestHash,
		EngineRef:            s.Request.Gateway,
		Outcome:              outcome,
		Error:                truncateText(errText, maxManifestError),
		FingerprintKeyID:     g.redactor.FingerprintKeyID(),
		CreatedAt:            g.now().UTC(),
		Recovered: fmt.Sprintf("written by %s from the artifacts stored, after the request was left unfinished; "+
			"the redaction report of the original writes is not recoverable", g.engineBase),
	}
	if s.Decision != nil {
		m.PolicySetDigest = s.Decision.PolicySetDigest
	}
	for _, key := range s.Keys {
		if key == evidence.Key(s.ID, evidence.ArtifactManifest) || !evidence.IsArtifactKey(s.ID, key) {
			continue // a manifest signs only what a gateway writes
		}
		data, err := g.store.Get(ctx, key)
		if err != nil {
			return err
		}
		if key == evidence.Key(s.ID, evidence.ArtifactResponse) {
			var resp evidence.ResponseRecord
			if json.Unmarshal(data, &resp) == nil && resp.EngineRef != "" {
				m.EngineRef = resp.EngineRef
			}
		}
		m.Artifacts = append(m.Artifacts, evidence.Digest(key, data))
	}
	if g.signer != nil {
		if err := g.signer.Sign(&m); err != nil {
			return err
		}
	}
	data, err := evidence.EncodeManifest(m)
	if err != nil {
		return err
	}
	err = g.store.Put(ctx, evidence.Key(s.ID, evidence.ArtifactManifest), data)
	if errors.Is(err, evidence.ErrExist) {
		return nil
	}
	return err
}

// encodeRecord encodes and redacts a record recovery writes.
func (g *Gateway) encodeRecord(name string, v any) ([]byte, error) {
	raw, err := wire.MarshalJSON(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", name, err)
	}
	out, _, err := g.redactor.JSON(name, raw)
	if err != nil {
		return nil, fmt.Errorf("redact %s: %w", name, err)
	}
	return out, nil
}
