// Package history keeps the per-session and per-caller state that
// history-aware policy decides on, in the evidence store, and builds the
// Cedar facts (policy.History) from it.
//
// Every caller has one sequence of create-only slots,
// sessions/<caller hash>/<slot>, numbered from 1. Slot n holds the sealed
// record of the n-th call of that caller that was allowed and claimed for
// dispatch, with the state after it: the call's session (its run id) and
// the caller's. A session is a (caller, run id) pair, so one sequence per
// caller orders every session of the caller as well, and a call is judged
// on the state at the slot it read: it claims the next slot create-only
// (If-None-Match on S3, O_EXCL on disk), and when another replica took that
// slot first it reads the newer state and decides again. Two replicas
// sharing a bucket therefore decide a caller's calls as one gateway would.
//
// A replica keeps the latest record of each caller it served in memory and
// decides on it without reading the store; the claim is the check that it
// is still the latest.
package history

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Prefix is where the slots of every caller are stored.
const Prefix = "sessions/"

// Window is how far back the caller's rate facts count.
const Window = 60 * time.Second

// Bounds of a record, so that its size does not grow with a caller's
// history.
const (
	// maxSessions is how many sessions a record points to. A session
	// dropped from the list starts again from nothing, which only lets a
	// caller escape the run-scoped rules it can escape anyway by starting
	// a new run; caller-scoped state is never dropped.
	maxSessions = 64
	// maxLabels bounds a session's and a caller's label sets.
	maxLabels = 256
	// maxTools bounds the per-tool counts of a session.
	maxTools = 1024
)

// recordVersion is the format of Record.
const recordVersion = 1

// Record is one slot: a call that was allowed and claimed for dispatch,
// and the caller's state after it. The fields up to Labels describe the
// call; the rest is the state, which verification recomputes from the
// earlier records.
type Record struct {
	Version   int       `json:"v"`
	Slot      uint64    `json:"slot"`
	Caller    string    `json:"caller"`
	RunID     string    `json:"run_id,omitempty"`
	RequestID string    `json:"request_id"`
	Tool      string    `json:"tool"`
	Time      time.Time `json:"time"`
	// Labels and CallerLabels are what the call added.
	Labels       []string `json:"labels,omitempty"`
	CallerLabels []string `json:"caller_labels,omitempty"`

	// Session is the state of the call's session after it.
	Session SessionState `json:"session"`
	// CallerLabelSet is every caller-scoped label acquired so far.
	CallerLabelSet []string `json:"caller_label_set,omitempty"`
	// Recent counts the caller's calls per second and tool over the
	// Window before Time, this one included.
	Recent []Bucket `json:"recent,omitempty"`
	// Sessions maps the session id (SessionID of a run id) of the
	// caller's most recent sessions to the slot of their latest record.
	Sessions map[string]uint64 `json:"sessions"`
}

// SessionState is a session's state after one of its calls.
type SessionState struct {
	Calls  int64            `json:"calls"`
	Tools  map[string]int64 `json:"tools,omitempty"`
	Labels []string         `json:"labels,omitempty"`
}

// Bucket counts a caller's calls of one tool in one second.
type Bucket struct {
	Unix  int64  `json:"t"`
	Tool  string `json:"tool"`
	Count int64  `json:"n"`
}

// CallerKey returns the prefix of caller's slots. The name is hashed: it
// can hold anything a key must not.
func CallerKey(caller string) string {
	sum := sha256.Sum256([]byte(caller))
	return Prefix + hex.EncodeToString(sum[:16]) + "/"
}

// SlotKey returns the key of caller's slot n.
func SlotKey(caller string, n uint64) string {
	return CallerKey(caller) + fmt.Sprintf("%016d", n)
}

// SlotOf parses the slot number of a key SlotKey made.
func SlotOf(key string) (uint64, bool) {
	i := strings.LastIndexByte(key, '/')
	s := key[i+1:]
	if len(s) != 16 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil && n > 0
}

// SessionID names a run's session within its caller's records.
func SessionID(runID string) string {
	sum := sha256.Sum256([]byte("run\x00" + runID))
	return hex.EncodeToString(sum[:12])
}

// Call is a call being decided: whose, in which run, of which tool.
type Call struct {
	Caller, RunID, RequestID, Tool string
}

// Added is what a dispatched call adds to its session and its caller.
type Added struct {
	Labels, CallerLabels []string
}

// next returns the record of call, claimed at slot prev.Slot+1 at now,
// given prev, the caller's latest record (nil before the first), and
// session, the state of call's session at prev.
func next(prev *Record, session SessionState, c Call, add Added, now time.Time) Record {
	r := Record{
		Version: recordVersion, Caller: c.Caller, RunID: c.RunID, RequestID: c.RequestID, Tool: c.Tool,
		Time: now.UTC(), Labels: sortedUnique(add.Labels), CallerLabels: sortedUnique(add.CallerLabels),
		Sessions: map[string]uint64{},
	}
	if prev != nil {
		r.Slot = prev.Slot
		r.CallerLabelSet = prev.CallerLabelSet
		r.Recent = prev.Recent
		maps.Copy(r.Sessions, prev.Sessions)
	}
	r.Slot++
	r.CallerLabelSet = capped(sortedUnique(append(slices.Clone(r.CallerLabelSet), r.CallerLabels...)), maxLabels)
	r.Recent = addBucket(r.Recent, now, c.Tool)
	r.Session = SessionState{
		Calls:  session.Calls + 1,
		Tools:  maps.Clone(session.Tools),
		Labels: capped(sortedUnique(append(slices.Clone(session.Labels), r.Labels...)), maxLabels),
	}
	if r.Session.Tools == nil {
		r.Session.Tools = map[string]int64{}
	}
	if _, ok := r.Session.Tools[c.Tool]; ok || len(r.Session.Tools) < maxTools {
		r.Session.Tools[c.Tool]++
	}
	r.Sessions[SessionID(c.RunID)] = r.Slot
	evictOldest(r.Sessions)
	return r
}

// addBucket counts a call of tool at now, dropping what is out of the
// window.
func addBucket(recent []Bucket, now time.Time, tool string) []Bucket {
	sec := now.Unix()
	out := make([]Bucket, 0, len(recent)+1)
	counted := false
	for _, b := range recent {
		if b.Unix <= sec-int64(Window/time.Second) {
			continue
		}
		if b.Unix == sec && b.Tool == tool {
			b.Count++
			counted = true
		}
		out = append(out, b)
	}
	if !counted {
		out = append(out, Bucket{Unix: sec, Tool: tool, Count: 1})
	}
	slices.SortFunc(out, func(a, b Bucket) int {
		return cmp.Or(cmp.Compare(a.Unix, b.Unix), strings.Compare(a.Tool, b.Tool))
	})
	return out
}

// evictOldest keeps the maxSessions sessions with the latest slots.
func evictOldest(m map[string]uint64) {
	for len(m) > maxSessions {
		oldest := ""
		for id, slot := range m {
			if oldest == "" || slot < m[oldest] || (slot == m[oldest] && id < oldest) {
				oldest = id
			}
		}
		delete(m, oldest)
	}
}

func sortedUnique(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// capped keeps at most n items: a label set at its bound stops growing
// rather than the record growing without bound.
func capped(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// encode is the stored form of r, before sealing.
func encode(r Record) ([]byte, error) {
	return json.Marshal(r)
}

// decode parses a record stored at slot n of caller and checks that it
// says so: a record copied to another slot or caller is not that slot's.
func decode(data []byte, caller string, n uint64) (*Record, error) {
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("history: slot %d: %w", n, err)
	}
	switch {
	case r.Version != recordVersion:
		return nil, fmt.Errorf("history: slot %d: unknown record version %d", n, r.Version)
	case r.Slot != n || r.Caller != caller:
		return nil, fmt.Errorf("history: slot %d holds the record of slot %d of caller %q", n, r.Slot, r.Caller)
	}
	return &r, nil
}
