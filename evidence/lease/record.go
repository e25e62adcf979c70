package lease

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
)

// recordVersion is the version of the lease's records.
const recordVersion = 1

const (
	root         = "instances/"
	closedSuffix = ".closed"
	epochDigits  = 20
)

func leaseDir(instance string) string { return root + instance + "/lease/" }

func leaseKey(instance string, epoch uint64) string {
	return fmt.Sprintf("%s%0*d", leaseDir(instance), epochDigits, epoch)
}

func closedKey(instance string, epoch uint64) string { return leaseKey(instance, epoch) + closedSuffix }

func beatKey(instance string, epoch, n uint64) string {
	return fmt.Sprintf("%s%s/heartbeat/%0*d/%0*d", root, instance, epochDigits, epoch, epochDigits, n)
}

// parseLeaseKey reads a key listed under leaseDir: an epoch's lease, or
// its closed marker. ok is false for anything else.
func parseLeaseKey(instance, key string) (epoch uint64, closed, ok bool) {
	rest, found := strings.CutPrefix(key, leaseDir(instance))
	if !found {
		return 0, false, false
	}
	rest, closed = strings.CutSuffix(rest, closedSuffix)
	if len(rest) != epochDigits || strings.Trim(rest, "0123456789") != "" {
		return 0, false, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	if err != nil || n == 0 {
		return 0, false, false
	}
	return n, closed, true
}

// Record is one process's lease on an instance name,
// instances/<name>/lease/<epoch>.
type Record struct {
	Version  int    `json:"v"`
	Instance string `json:"instance"`
	Epoch    uint64 `json:"epoch"`
	// Holder is a random id of the process, repeated in its heartbeats
	// and its closed marker.
	Holder    string    `json:"holder"`
	Host      string    `json:"host"`
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
	// HeartbeatMS is the holder's heartbeat period: a newcomer waits three
	// of them (or three of its own, if longer) before taking over.
	HeartbeatMS int64 `json:"heartbeat_ms"`
	// Previous is the epoch this one took over while its lease was open,
	// 0 when the name was free.
	Previous uint64 `json:"previous,omitempty"`
}

// beat is one heartbeat, instances/<name>/heartbeat/<epoch>/<n>.
type beat struct {
	Version  int       `json:"v"`
	Instance string    `json:"instance"`
	Epoch    uint64    `json:"epoch"`
	N        uint64    `json:"n"`
	Holder   string    `json:"holder"`
	At       time.Time `json:"at"`
}

// closed marks an epoch's lease given up by its holder at a clean stop.
type closed struct {
	Version  int       `json:"v"`
	Instance string    `json:"instance"`
	Epoch    uint64    `json:"epoch"`
	Holder   string    `json:"holder"`
	ClosedAt time.Time `json:"closed_at"`
	Beats    uint64    `json:"beats"`
}

// seal encodes v and seals it for key with s; unsealed when s is nil (a
// gateway that does not sign).
func seal(s *trust.Sealer, key string, v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("lease: encode %s: %w", key, err)
	}
	if s == nil {
		return data, nil
	}
	return s.Sign(key, data)
}

// open checks data's seal for key with ring (when set) and decodes it
// strictly into v. An error wrapping trust.ErrTampered means the record
// is not what a trusted gateway wrote.
func open(ring *trust.Keyring, key string, data []byte, v any) error {
	body := data
	if ring != nil {
		var err error
		if body, _, err = ring.OpenSigned(key, data); err != nil {
			return err
		}
	} else {
		body, _, _ = trust.Split(data)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %w", trust.ErrTampered, key, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: %s: trailing data", trust.ErrTampered, key)
	}
	return nil
}

// ParseRecord opens and decodes the lease record stored under
// instances/<instance>/lease/<epoch>, and checks that it is that epoch's
// lease of that instance. ring may be nil (seals are then not checked).
// Every error wraps trust.ErrTampered.
func ParseRecord(ring *trust.Keyring, instance string, epoch uint64, data []byte) (Record, error) {
	key := leaseKey(instance, epoch)
	var r Record
	if err := open(ring, key, data, &r); err != nil {
		return Record{}, err
	}
	switch {
	case r.Version != recordVersion:
		return Record{}, fmt.Errorf("%w: %s: version %d, want %d", trust.ErrTampered, key, r.Version, recordVersion)
	case r.Instance != instance || r.Epoch != epoch:
		return Record{}, fmt.Errorf("%w: %s holds the lease of %q epoch %d", trust.ErrTampered, key, r.Instance, r.Epoch)
	case r.Holder == "" || r.HeartbeatMS <= 0 || r.Previous >= epoch:
		return Record{}, fmt.Errorf("%w: %s: holder, heartbeat or previous epoch is malformed", trust.ErrTampered, key)
	}
	return r, nil
}

// parseClosed opens the closed marker of epoch, held by holder.
func parseClosed(ring *trust.Keyring, instance string, epoch uint64, holder string, data []byte) error {
	key := closedKey(instance, epoch)
	var c closed
	if err := open(ring, key, data, &c); err != nil {
		return err
	}
	if c.Version != recordVersion || c.Instance != instance || c.Epoch != epoch || c.Holder != holder {
		return fmt.Errorf("%w: %s is not the closed marker of its lease's holder", trust.ErrTampered, key)
	}
	return nil
}

// describe is how messages name a holder.
func (r Record) describe() string {
	return fmt.Sprintf("epoch %d, pid %d on host %s, started %s", r.Epoch, r.PID, r.Host,
		r.StartedAt.UTC().Format(time.RFC3339))
}

// evidenceKeyOK reports whether the lease's keys are valid store keys for
// instance, which they are when the instance name is valid.
func evidenceKeyOK(instance string) error {
	if err := evidence.ValidInstance(instance); err != nil {
		return err
	}
	return evidence.ValidKey(beatKey(instance, 1, 1))
}
