package gateway

import (
	"context"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/telemetry"
)

// spoolScanTimeout bounds one scrape's look at the spool: a spool that
// cannot be listed this fast reads as what was seen by then.
const spoolScanTimeout = 2 * time.Second

// observeState gives telemetry the gauges that read the gateway's state:
// the calls holding a slot, the spool, and the approvals waiting.
func (g *Gateway) observeState() {
	g.telemetry.SetGauges(telemetry.Gauges{
		CallsInFlight: func() int { return int(g.running.Load()) },
		Spool:         g.spoolState,
		Approvals:     func() (int, time.Duration) { return g.recovery.PendingApprovals(g.now()) },
	})
}

// spoolState counts the spooled artifacts and the age of the oldest.
func (g *Gateway) spoolState() (int, time.Duration) {
	if g.spool == nil {
		return 0, 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), spoolScanTimeout)
	defer cancel()
	n := 0
	var oldest time.Time
	// An error leaves the count at what was walked: the gauge is a
	// reading, not a record.
	_ = g.spool.WalkInfo(ctx, "", func(k evidence.KeyInfo) error {
		n++
		if !k.ModTime.IsZero() && (oldest.IsZero() || k.ModTime.Before(oldest)) {
			oldest = k.ModTime
		}
		return ctx.Err()
	})
	if oldest.IsZero() {
		return n, 0
	}
	return n, max(g.now().Sub(oldest), 0)
}
