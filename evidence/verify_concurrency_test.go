package evidence

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestVerifyAllConcurrentKeepsOrder: verifying several requests at once
// gives the reports, and the artifacts read, that verifying one at a time
// gives, in the same order, a stray key and a tampered request included.
func TestVerifyAllConcurrentKeepsOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewMemoryStore()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 40 {
		id := fmt.Sprintf("r%02d", i)
		data := []byte(fmt.Sprintf(`{"request_id":%q}`, id))
		key := Key(id, ArtifactRequest)
		m := Manifest{Version: ManifestVersion, RequestID: id, Outcome: OutcomeCompleted, CreatedAt: at,
			Artifacts: []ArtifactDigest{Digest(key, data)}}
		if i%7 == 3 {
			data = []byte(`{"request_id":"forged"}`)
		}
		mb, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string][]byte{key: data, Key(id, ArtifactManifest): mb} {
			if err := s.Put(ctx, k, v); err != nil {
				t.Fatal(err)
			}
		}
		if i == 20 {
			if err := s.Put(ctx, "requests/stray.json", []byte("{}")); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := func(concurrency int) []string {
		var out []string
		err := VerifyAllRead(ctx, s, VerifyOptions{Concurrency: concurrency}, func(rep VerifyReport, got Verified) error {
			data, _ := got.Get(Key(rep.RequestID, ArtifactRequest))
			out = append(out, fmt.Sprintf("%s %s %q %q", rep.RequestID, rep.Verdict(), rep.Problems, data))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// prepared reads the same bytes in prepare, beside the verification,
	// and hands them to fn: the same lines, in the same order.
	prepared := func(concurrency int) []string {
		var out []string
		prepare := func(rep VerifyReport, got Verified) string {
			data, _ := got.Get(Key(rep.RequestID, ArtifactRequest))
			return string(data)
		}
		err := VerifyAllPrepared(ctx, s, VerifyOptions{Concurrency: concurrency}, prepare, func(rep VerifyReport, data string) error {
			out = append(out, fmt.Sprintf("%s %s %q %q", rep.RequestID, rep.Verdict(), rep.Problems, data))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	one := run(1)
	if len(one) != 41 {
		t.Fatalf("%d reports, want 41", len(one))
	}
	for _, c := range []int{2, 8, 64} {
		if got := run(c); !reflect.DeepEqual(got, one) {
			t.Errorf("concurrency %d:\n%q\nwant\n%q", c, got, one)
		}
	}
	for _, c := range []int{1, 2, 8, 64} {
		if got := prepared(c); !reflect.DeepEqual(got, one) {
			t.Errorf("prepared, concurrency %d:\n%q\nwant\n%q", c, got, one)
		}
	}
}
