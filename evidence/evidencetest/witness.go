package evidencetest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	fnote "github.com/transparency-dev/formats/note"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/internal/canonb64"
)

// Witness is a C2SP tlog-witness (v1.0.0) on a loopback HTTP server: it
// cosigns the checkpoints of the logs it was given, provided each extends
// the last one it cosigned of that log.
type Witness struct {
	// Name is the witness's key name.
	Name string
	// VKey is its cosignature/v1 verifier key, as a --witness-key.
	VKey string
	// URL is its submission prefix: add-checkpoint is at URL/add-checkpoint.
	URL string

	signer note.Signer
	mu     sync.Mutex
	logs   map[string]note.Verifier // by origin
	latest map[string]witnessed     // the last cosigned checkpoint, by origin
}

type witnessed struct {
	size uint64
	root [32]byte
}

// StartWitness starts a witness named name, closed when t ends.
func StartWitness(t testing.TB, name string) *Witness {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := fnote.NewSignerForCosignatureV1(skey)
	if err != nil {
		t.Fatal(err)
	}
	if vkey, err = fnote.VKeyToCosignatureV1(vkey); err != nil {
		t.Fatal(err)
	}
	w := &Witness{Name: name, VKey: vkey, signer: signer, logs: map[string]note.Verifier{}, latest: map[string]witnessed{}}
	srv := httptest.NewServer(http.HandlerFunc(w.serve))
	t.Cleanup(srv.Close)
	w.URL = srv.URL
	return w
}

// AddLog configures the witness to cosign the log named origin, whose
// checkpoints pub signs.
func (w *Witness) AddLog(t testing.TB, origin string, pub ed25519.PublicKey) {
	t.Helper()
	v, err := tlog.VerifierFor(origin, pub)
	if err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	w.logs[origin] = v
	w.mu.Unlock()
}

// AddVKey configures the witness to cosign the log whose verifier key
// ("<origin>+<id>+<key>", as toolgate evidence vkey prints it) is vkey,
// as an operator configures a real witness.
func (w *Witness) AddVKey(t testing.TB, vkey string) {
	t.Helper()
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	w.logs[v.Name()] = v
	w.mu.Unlock()
}

// Latest returns the size of the last checkpoint of origin the witness
// cosigned.
func (w *Witness) Latest(origin string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest[origin].size
}

// witnessError is an answer other than 200.
type witnessError struct {
	status int
	msg    string
}

func (w *Witness) serve(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/add-checkpoint" {
		http.Error(rw, "not found", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	cosig, conflict, werr := w.addCheckpoint(body)
	switch {
	case werr != nil:
		http.Error(rw, werr.msg, werr.status)
	case conflict != nil:
		rw.Header().Set("Content-Type", "text/x.tlog.size")
		rw.WriteHeader(http.StatusConflict)
		fmt.Fprintf(rw, "%d\n", *conflict)
	default:
		_, _ = rw.Write(cosig)
	}
}

// addCheckpoint follows the checks of the spec in its order: parse, known
// origin, log signature, old size against the latest cosigned, the
// consistency proof; then cosign and remember.
func (w *Witness) addCheckpoint(body []byte) ([]byte, *uint64, *witnessError) {
	old, hashes, cp, err := parseAddCheckpoint(body)
	if err != nil {
		return nil, nil, &witnessError{http.StatusBadRequest, err.Error()}
	}
	origin, _, _ := bytes.Cut(cp, []byte("\n"))
	w.mu.Lock()
	defer w.mu.Unlock()
	v, ok := w.logs[string(origin)]
	if !ok {
		return nil, nil, &witnessError{http.StatusNotFound, "unknown log"}
	}
	n, err := note.Open(cp, note.VerifierList(v))
	if err != nil {
		return nil, nil, &witnessError{http.StatusForbidden, "the log signature does not verify"}
	}
	size, root, err := checkpointSizeRoot(n.Text)
	if err != nil {
		return nil, nil, &witnessError{http.StatusBadRequest, err.Error()}
	}
	if old > size {
		return nil, nil, &witnessError{http.StatusBadRequest, "old size is larger than the checkpoint"}
	}
	latest := w.latest[string(origin)]
	if old != latest.size {
		return nil, &latest.size, nil
	}
	oldRoot := latest.root[:]
	if old == 0 {
		oldRoot = nil
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, old, size, hashes, oldRoot, root[:]); err != nil {
		return nil, nil, &witnessError{http.StatusUnprocessableEntity, "bad consistency proof: " + err.Error()}
	}
	signed, err := note.Sign(&note.Note{Text: n.Text}, w.signer)
	if err != nil {
		return nil, nil, &witnessError{http.StatusInternalServerError, err.Error()}
	}
	w.latest[string(origin)] = witnessed{size, root}
	_, sigs, _ := bytes.Cut(signed, []byte("\n\n"))
	return sigs, nil, nil
}

// parseAddCheckpoint splits an add-checkpoint body.
func parseAddCheckpoint(body []byte) (uint64, [][]byte, []byte, error) {
	head, cp, ok := bytes.Cut(body, []byte("\n\n"))
	if !ok {
		return 0, nil, nil, errors.New("no blank line")
	}
	lines := strings.Split(string(head), "\n")
	oldText, ok := strings.CutPrefix(lines[0], "old ")
	old, err := strconv.ParseUint(oldText, 10, 64)
	if !ok || err != nil {
		return 0, nil, nil, errors.New("no old size line")
	}
	var hashes [][]byte
	for _, l := range lines[1:] {
		h, err := canonb64.Std(l)
		if err != nil || len(h) != 32 {
			return 0, nil, nil, errors.New("a proof line is not a base64 hash")
		}
		hashes = append(hashes, h)
	}
	return old, hashes, cp, nil
}

func checkpointSizeRoot(text string) (uint64, [32]byte, error) {
	lines := strings.Split(text, "\n")
	if len(lines) < 4 {
		return 0, [32]byte{}, errors.New("checkpoint too short")
	}
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil {
		return 0, [32]byte{}, errors.New("checkpoint size")
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != 32 {
		return 0, [32]byte{}, errors.New("checkpoint root")
	}
	return size, [32]byte(root), nil
}
