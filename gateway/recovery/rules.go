package recovery

import (
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// Action is what recovery does, or did, with one request.
type Action int

const (
	// None: settled already, or not this instance's to finalise.
	None Action = iota
	// Wait: revisit later.
	Wait
	// RollForward: a stored response gets its manifest.
	RollForward
	// Close: an open attempt is closed as not dispatched (a retry may
	// run the call).
	Close
	// Interrupt: a dispatched request gets a final manifest (interrupted
	// or failed); it is never run again.
	Interrupt
)

// Request is what the rules judge a request without a manifest by, as
// the gateway read it from the store.
type Request struct {
	// Responded: its response.json is stored.
	Responded bool
	// Last is its last attempt.
	Last evidence.Attempt
	// Age is how long ago the latest time its records show was.
	Age time.Duration
}

// Step is what to do with a request, and with which words.
type Step struct {
	Do Action
	// Marked (Close): the attempt's dispatch marker was written, and this
	// process proved the call did not start.
	Marked bool
	// Outcome (Interrupt) is the manifest's outcome; Reason (Close,
	// Interrupt) what the record says happened.
	Outcome, Reason string
}

// Next applies recovery's rules to r. noted is set when this process
// itself left the request unfinished, as left says: then it is known to
// be abandoned, and no age is waited for.
func (l Limits) Next(r Request, noted bool, left Unfinished) Step {
	switch {
	case r.Responded:
		if !noted && r.Age < l.RespondedAfter {
			return Step{Do: Wait}
		}
		return Step{Do: RollForward}
	case r.Last.State == evidence.NotDispatched:
		return Step{Do: None}
	case r.Last.State == evidence.AttemptOpen:
		if !noted && r.Age < l.OpenAfter {
			return Step{Do: Wait}
		}
		return Step{Do: Close, Reason: "abandoned before dispatch: its gateway stopped, or lost its store, before dispatching it"}
	case left.NotDispatched == r.Last.Number:
		return Step{Do: Close, Marked: true, Reason: left.Reason}
	case left.Told != "":
		return Step{Do: Interrupt, Outcome: evidence.OutcomeFailed,
			Reason: "dispatched, and ended without a response on record; the caller was told: " + left.Told}
	case noted || r.Age >= l.InterruptedAfter:
		return Step{Do: Interrupt, Outcome: evidence.OutcomeInterrupted,
			Reason: "dispatched, and abandoned before its response was recorded (its gateway stopped or lost its store): " +
				"the tool may have run; it is never run again"}
	}
	return Step{Do: Wait}
}

// Count adds what one request's recovery did to s; every request counted
// was examined.
func (s *Stats) Count(did Action) {
	s.Examined++
	switch did {
	case Wait:
		s.Waiting++
	case RollForward:
		s.RolledForward++
	case Close:
		s.Closed++
	case Interrupt:
		s.Interrupted++
	}
}
