package evidence_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// A request whose first attempt was closed before anything ran and which
// a retry then ran: Verify lists both attempts. Without a manifest, a
// request that never ran is not-dispatched rather than incomplete.
func ExampleVerify() {
	ctx := context.Background()
	store := evidence.NewMemoryStore()
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	put := func(key, data string) {
		if err := store.Put(ctx, key, []byte(data)); err != nil {
			log.Fatal(err)
		}
	}
	record := func(id string, attempt int, state string) string {
		return fmt.Sprintf(`{"request_id":%q,"attempt":%d,"state":%q,"gateway":"toolgate/1@a","at":%q}`, id, attempt, state, at.Format(time.RFC3339))
	}
	put(evidence.Key("never", evidence.ArtifactRequest), `{}`)
	put(evidence.AttemptKey("never", 1, evidence.ArtifactDispatch), record("never", 1, evidence.NotDispatched))

	m := evidence.Manifest{Version: evidence.ManifestVersion, RequestID: "retried", Outcome: evidence.OutcomeCompleted, CreatedAt: at}
	for key, data := range map[string]string{
		evidence.Key("retried", evidence.ArtifactRequest):            `{}`,
		evidence.AttemptKey("retried", 1, evidence.ArtifactDispatch): record("retried", 1, evidence.NotDispatched),
		evidence.AttemptKey("retried", 2, evidence.ArtifactDispatch): record("retried", 2, evidence.Dispatched),
		evidence.Key("retried", evidence.ArtifactResponse):           `{"ok":true}`,
	} {
		put(key, data)
		m.Artifacts = append(m.Artifacts, evidence.Digest(key, []byte(data)))
	}
	manifest, err := evidence.EncodeManifest(m)
	if err != nil {
		log.Fatal(err)
	}
	put(evidence.Key("retried", evidence.ArtifactManifest), string(manifest))

	err = evidence.VerifyAll(ctx, store, evidence.VerifyOptions{}, func(rep evidence.VerifyReport) error {
		fmt.Printf("%s: %s", rep.RequestID, rep.Verdict())
		for _, a := range rep.Attempts {
			fmt.Printf(", attempt %d %s", a.Number, a.State)
		}
		fmt.Println()
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// never: not-dispatched, attempt 1 not_dispatched
	// retried: unsigned, attempt 1 not_dispatched, attempt 2 dispatched
}
