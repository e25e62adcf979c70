package replay

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/evidence"
)

// Log order. Where the store has transparency logs, a report lists the
// calls in the logs' order rather than their keys': each instance's log
// in its own order, the logs merged by position (every log's claim at
// index n before any claim at index n+1, claims at the same index in the
// order of their logs' origins), and the requests no log records yet
// (pending) after all of them, in key order. A request several logs
// claim is placed by the claim of lowest index, then origin. A store
// without logs is reported in key order.
//
// The store is still read and verified in key order, which is what lets
// VerifyAll join the logs with the listing at flat memory; the outcomes,
// a few hundred bytes each, go through an evidence.Sorter that keeps at
// most evidence.SorterInMemory of them in memory and the rest on disk.

// event is one outcome on its way to a report, in the form it is sorted
// in.
type event struct {
	// Kind is 'a' (a call decided again), 's' (one not replayable) or
	// 'u' (one whose evidence fails verification).
	Kind    byte    `json:"k"`
	ID      string  `json:"i"`
	Caller  string  `json:"c,omitempty"`
	Tool    string  `json:"t,omitempty"`
	Outcome Outcome `json:"o"`
	// Verdict and Problem are an unverified request's.
	Verdict string `json:"v,omitempty"`
	Problem string `json:"p,omitempty"`
}

// apply adds e to rep.
func (e event) apply(rep *Report) {
	switch e.Kind {
	case 'a':
		rep.Add(Call{RequestID: e.ID, Caller: e.Caller, ToolID: e.Tool}, e.Outcome)
	case 's':
		rep.Skip(e.ID, e.Outcome.Why)
	default:
		var problems []string
		if e.Problem != "" {
			problems = []string{e.Problem}
		}
		rep.SkipUnverified(e.ID, e.Verdict, problems)
	}
}

// logOrderKey places a request in the log order: "L", its claim's index
// in 20 digits and its log's origin, or "P" when no log claims it, which
// sorts after every claim and keeps the key order among pending requests
// (the Sorter keeps equal keys in the order added).
func logOrderKey(rep evidence.VerifyReport) string {
	if pos, ok := rep.Claim(); ok {
		return fmt.Sprintf("L%020d %s", pos.Index, pos.Origin)
	}
	return "P"
}

// orderedReport fills a report in log order (see above). It passes
// outcomes straight to the report while the store has shown no log, and
// sorts them once it has: VerifyAll reports every log before the first
// request.
type orderedReport struct {
	rep     *Report
	tempDir string
	sorter  *evidence.Sorter
}

// onLog is VerifyOptions.OnLog: a log exists, so outcomes are sorted.
func (o *orderedReport) onLog(evidence.LogReport) error {
	if o.sorter != nil {
		return nil
	}
	s, err := evidence.NewSorter(o.tempDir)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	o.sorter = s
	return nil
}

// put adds e, for the request rep reports, to the report or the sorter.
func (o *orderedReport) put(rep evidence.VerifyReport, e event) error {
	if o.sorter == nil {
		e.apply(o.rep)
		return nil
	}
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	return o.sorter.Add(logOrderKey(rep), data)
}

// finish adds the sorted outcomes to the report and removes the sorter's
// files.
func (o *orderedReport) finish(ctx context.Context) error {
	if o.sorter == nil {
		return nil
	}
	defer o.sorter.Close()
	return o.sorter.Sorted(ctx, func(_ string, data []byte) error {
		var e event
		if err := json.Unmarshal(data, &e); err != nil {
			return fmt.Errorf("replay: a sorted outcome: %w", err)
		}
		e.apply(o.rep)
		return nil
	})
}

// close removes the sorter's files when finish was not reached.
func (o *orderedReport) close() error {
	if o.sorter == nil {
		return nil
	}
	return o.sorter.Close()
}

// sink returns the walk's callbacks that put each outcome into o.
func (o *orderedReport) sink() sink {
	return sink{
		add: func(rep evidence.VerifyReport, c Call, out Outcome) error {
			return o.put(rep, event{Kind: 'a', ID: c.RequestID, Caller: c.Caller, Tool: c.ToolID, Outcome: out})
		},
		skip: func(rep evidence.VerifyReport, why string) error {
			return o.put(rep, event{Kind: 's', ID: rep.RequestID, Outcome: Outcome{Why: why}})
		},
		unverified: func(rep evidence.VerifyReport) error {
			e := event{Kind: 'u', ID: rep.RequestID, Verdict: rep.Verdict()}
			if len(rep.Problems) > 0 {
				e.Problem = rep.Problems[0]
			}
			return o.put(rep, e)
		},
	}
}

// inLogOrder runs walk, which reports through the sink it is given, with
// opts' OnLog noting the logs, and returns the report it filled in log
// order.
func inLogOrder(ctx context.Context, opts evidence.VerifyOptions,
	walk func(evidence.VerifyOptions, sink) error) (*Report, error) {
	o := &orderedReport{rep: NewReport(), tempDir: opts.TempDir}
	defer o.close()
	onLog := opts.OnLog
	opts.OnLog = func(r evidence.LogReport) error {
		if onLog != nil {
			if err := onLog(r); err != nil {
				return err
			}
		}
		return o.onLog(r)
	}
	if err := walk(opts, o.sink()); err != nil {
		return o.rep, err
	}
	return o.rep, o.finish(ctx)
}
