package lease

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolgate/toolgate/evidence/trust"
)

// FuzzParseRecord: a lease record read from the store is untrusted input.
// ParseRecord never panics, and whatever it accepts is sealed by a
// trusted key, belongs to the epoch and instance of its key, and
// survives a round trip.
func FuzzParseRecord(f *testing.F) {
	k := testKeys(f, 1)
	good, _ := seal(k.sealer, leaseKey(testInstance, 3), Record{Version: 1, Instance: testInstance, Epoch: 3, Holder: "h",
		Host: "host", PID: 1, HeartbeatMS: 5000, Previous: 2})
	f.Add(good, uint64(3))
	f.Add(good, uint64(4))
	f.Add([]byte(`{"v":1,"instance":"gw-1","epoch":3,"holder":"h","host":"","pid":0,"started_at":"2026-01-01T00:00:00Z","heartbeat_ms":1}`), uint64(3))
	f.Add([]byte(`{"seal":{"alg":"ed25519","key_id":"x","value":"AA=="}}`), uint64(1))
	f.Add([]byte(`not json`), uint64(1))
	f.Fuzz(func(t *testing.T, data []byte, epoch uint64) {
		for _, ring := range []*trust.Keyring{k.ring, nil} {
			r, err := ParseRecord(ring, testInstance, epoch, data)
			if err != nil {
				if !errors.Is(err, trust.ErrTampered) {
					t.Fatalf("error %v does not wrap ErrTampered", err)
				}
				continue
			}
			if r.Instance != testInstance || r.Epoch != epoch || r.Holder == "" || r.Previous >= epoch {
				t.Fatalf("accepted %+v for epoch %d", r, epoch)
			}
			if ring != nil {
				if _, _, err := ring.OpenSigned(leaseKey(testInstance, epoch), data); err != nil {
					t.Fatalf("accepted a record whose seal fails: %v", err)
				}
			}
			if _, err := json.Marshal(r); err != nil {
				t.Fatal(err)
			}
		}
	})
}
