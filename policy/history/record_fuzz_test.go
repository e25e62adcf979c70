package history

import (
	"testing"
	"time"
)

// FuzzDecode: a record read from the store is untrusted input (in
// unsealed mode nothing else vouches for it); decoding must never panic,
// and what it accepts is the slot it was asked for.
func FuzzDecode(f *testing.F) {
	good, err := encode(next(nil, SessionState{}, Call{Caller: "a", RunID: "r", Tool: "x"}, Added{Labels: []string{"l"}}, time.Unix(1, 0)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, uint64(1))
	f.Add([]byte(`{"v":1,"slot":2,"caller":"a"}`), uint64(1))
	f.Add([]byte(`{"v":9}`), uint64(0))
	f.Add([]byte(`[]`), uint64(3))
	f.Fuzz(func(t *testing.T, data []byte, n uint64) {
		r, err := decode(data, "a", n)
		if err == nil && (r.Slot != n || r.Caller != "a") {
			t.Fatalf("decode accepted slot %d of %q as slot %d of a", r.Slot, r.Caller, n)
		}
	})
}
