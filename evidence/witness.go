package evidence

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/internal/canonb64"
)

// ErrWitnessRefused is returned (wrapped) by Cosign when a witness refuses
// a checkpoint for what it shows about the log: it does not extend the
// checkpoint the witness cosigned before (a fork or a rollback), or the
// log's signature does not verify under the key the witness was given.
var ErrWitnessRefused = errors.New("evidence: witness refused the checkpoint")

// maxWitnessResponse bounds what Cosign reads of a witness's answer.
const maxWitnessResponse = 64 << 10

// maxWitnessTries bounds the add-checkpoint requests to one witness: the
// first, and a retry from the size a 409 answer names (twice, should the
// witness advance in between).
const maxWitnessTries = 3

// CosignOptions configures Cosign.
type CosignOptions struct {
	// WitnessURLs are the witnesses' C2SP tlog-witness submission
	// prefixes; add-checkpoint is POSTed to <URL>/add-checkpoint.
	WitnessURLs []string
	// Client sends the requests; nil means a client with a 30 s timeout.
	Client *http.Client
}

// CosignReport says what Cosign did for one instance's log.
type CosignReport struct {
	Instance string `json:"instance"`
	Origin   string `json:"origin"`
	Size     uint64 `json:"size"` // the size of the checkpoint cosigned
	// Key is where the cosigned checkpoint is stored.
	Key string `json:"key"`
	// Cosignatures is the number of cosignature lines the witnesses
	// returned; 0 when the checkpoint was already cosigned.
	Cosignatures int `json:"cosignatures"`
	// AlreadyCosigned: the newest checkpoint was cosigned before; nothing
	// was stored. The witnesses were still asked, so that one that has
	// cosigned a larger checkpoint since refuses a rolled-back log.
	AlreadyCosigned bool `json:"already_cosigned"`
}

// Cosign asks the witnesses to cosign the newest checkpoint of an
// instance's log (C2SP tlog-witness add-checkpoint) and stores it, with
// the cosignature lines appended, create-only at
// log/<instance>/cosigned/<size>. Each request carries a consistency
// proof from the size the witness last cosigned, built from the stored
// tiles; a witness that answers 409 with another size is asked again
// from that size. The witnesses are asked even when the newest
// checkpoint was cosigned before, since only they remember a larger one.
// Errors wrap ErrWitnessRefused when a witness refuses the log itself (a
// fork, a rollback, a key it does not know); then nothing is stored.
func Cosign(ctx context.Context, s Store, instance string, opts CosignOptions) (CosignReport, error) {
	if len(opts.WitnessURLs) == 0 {
		return CosignReport{}, errors.New("evidence: cosign: no witness URL")
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 30 * time.Second}
	}
	h, err := findLogHead(ctx, s, instance)
	if err != nil {
		return CosignReport{}, err
	}
	cp, err := s.Get(ctx, h.key)
	if err != nil {
		return CosignReport{}, err
	}
	origin, _, _, err := checkpointBody(cp)
	if err != nil {
		return CosignReport{}, fmt.Errorf("evidence: %s: %w", h.key, err)
	}
	rep := CosignReport{Instance: instance, Origin: origin, Size: h.size, Key: seqKey(LogPrefix(instance)+cosignedDir, h.size)}
	cosignedSize, _ := parseSeqKey(h.cosigned, cosignedDir)
	hint := uint64(0)
	if cosignedSize <= h.size {
		hint = cosignedSize
	}
	cosigned := bytes.Clone(cp)
	for _, url := range opts.WitnessURLs {
		lines, err := addCheckpoint(ctx, opts.Client, url, s, h, cp, hint, origin)
		if err != nil {
			return rep, err
		}
		cosigned = append(cosigned, lines...)
		rep.Cosignatures += bytes.Count(lines, []byte("\n"))
	}
	if h.cosigned != "" && cosignedSize == h.size {
		// Asked all the same: a log rolled back to a checkpoint that was
		// cosigned once is refused by a witness that has seen more.
		rep.AlreadyCosigned, rep.Cosignatures = true, 0
		return rep, nil
	}
	err = s.Put(ctx, rep.Key, cosigned)
	if errors.Is(err, ErrExist) {
		// Another run cosigned the same checkpoint meanwhile; its
		// cosignatures are as good as these.
		rep.AlreadyCosigned = true
		return rep, nil
	}
	return rep, err
}

// findLogHead returns the newest checkpoint of one instance's log.
func findLogHead(ctx context.Context, r Reader, instance string) (logHead, error) {
	if err := validInstance(instance); err != nil {
		return logHead{}, err
	}
	heads, err := logHeads(ctx, r)
	if err != nil {
		return logHead{}, err
	}
	for _, h := range heads {
		if h.instance == instance {
			return h, nil
		}
	}
	return logHead{}, fmt.Errorf("evidence: the log of instance %q has no checkpoint", instance)
}

// LogInstances returns the instances that have a log with a checkpoint in
// the store.
func LogInstances(ctx context.Context, r Reader) ([]string, error) {
	heads, err := logHeads(ctx, r)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(heads))
	for i, h := range heads {
		out[i] = h.instance
	}
	return out, nil
}

// addCheckpoint runs the add-checkpoint exchange with one witness and
// returns its cosignature lines.
func addCheckpoint(ctx context.Context, c *http.Client, url string, s Store, h logHead, cp []byte, old uint64, origin string) ([]byte, error) {
	url = strings.TrimSuffix(url, "/") + "/add-checkpoint"
	for range maxWitnessTries {
		body, err := addCheckpointBody(ctx, s, h, cp, old)
		if err != nil {
			return nil, err
		}
		status, ctype, resp, err := post(ctx, c, url, body)
		if err != nil {
			return nil, err
		}
		switch {
		case status == http.StatusOK:
			return checkCosignatures(resp, origin, url)
		case status == http.StatusConflict && ctype == "text/x.tlog.size":
			size, err := parseSizeBody(resp)
			if err != nil {
				return nil, fmt.Errorf("evidence: witness %s: %w", url, err)
			}
			if size > h.size {
				return nil, fmt.Errorf("%w: witness %s has cosigned size %d of %s, more than the log's newest checkpoint (%d): the log was rolled back or forked",
					ErrWitnessRefused, url, size, origin, h.size)
			}
			old = size
		case status == http.StatusConflict || status == http.StatusUnprocessableEntity:
			return nil, fmt.Errorf("%w: witness %s (HTTP %d): checkpoint %d of %s is not consistent with the one it cosigned before (a fork or a rewritten log): %s",
				ErrWitnessRefused, url, status, h.size, origin, quoteBody(resp))
		case status == http.StatusForbidden:
			return nil, fmt.Errorf("%w: witness %s (HTTP 403): the log signature of %s does not verify under the key it was given: %s",
				ErrWitnessRefused, url, origin, quoteBody(resp))
		case status == http.StatusNotFound:
			return nil, fmt.Errorf("evidence: witness %s does not know the log %s (HTTP 404): add its origin and public key to the witness", url, origin)
		default:
			return nil, fmt.Errorf("evidence: witness %s: HTTP %d: %s", url, status, quoteBody(resp))
		}
	}
	return nil, fmt.Errorf("evidence: witness %s: its size kept changing over %d requests", url, maxWitnessTries)
}

// addCheckpointBody is the request body: "old <size>", the consistency
// proof from that size, a blank line and the signed checkpoint.
func addCheckpointBody(ctx context.Context, s Store, h logHead, cp []byte, old uint64) ([]byte, error) {
	hashes, err := tlog.ConsistencyProof(ctx, old, h.size, h.read(s))
	if err != nil {
		return nil, fmt.Errorf("evidence: log %s: %w", h.instance, err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "old %d\n", old)
	for _, hash := range hashes {
		b.WriteString(base64.StdEncoding.EncodeToString(hash[:]) + "\n")
	}
	b.WriteByte('\n')
	b.Write(cp)
	return b.Bytes(), nil
}

func post(ctx context.Context, c *http.Client, url string, body []byte) (int, string, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", nil, fmt.Errorf("evidence: witness: %w", err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", nil, fmt.Errorf("evidence: witness: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxWitnessResponse+1))
	if err != nil {
		return 0, "", nil, fmt.Errorf("evidence: witness %s: %w", url, err)
	}
	if len(data) > maxWitnessResponse {
		return 0, "", nil, fmt.Errorf("evidence: witness %s: answer larger than %d bytes", url, maxWitnessResponse)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), data, nil
}

// parseSizeBody reads a text/x.tlog.size body: a decimal and a newline.
func parseSizeBody(data []byte) (uint64, error) {
	s, ok := strings.CutSuffix(string(data), "\n")
	n, err := strconv.ParseUint(s, 10, 64)
	if !ok || err != nil || strconv.FormatUint(n, 10) != s {
		return 0, fmt.Errorf("409 answer %s is not a tree size", quoteBody(data))
	}
	return n, nil
}

// checkCosignatures checks that a witness's 200 answer is one or more
// signature lines of signed-note form, none in the log's own name, so
// that appending them to the checkpoint leaves a well-formed note.
// Whether they verify is for whoever trusts the witness's key.
func checkCosignatures(data []byte, origin, url string) ([]byte, error) {
	if len(data) == 0 || data[len(data)-1] != '\n' {
		return nil, fmt.Errorf("evidence: witness %s: the answer is not cosignature lines: %s", url, quoteBody(data))
	}
	for line := range strings.Lines(string(data)) {
		name, sig, ok := strings.Cut(strings.TrimPrefix(strings.TrimSuffix(line, "\n"), "\u2014 "), " ")
		raw, err := canonb64.Std(sig)
		if !ok || !strings.HasPrefix(line, "\u2014 ") || name == "" || name == origin || err != nil || len(raw) < 5 ||
			strings.ContainsAny(name, " +") {
			return nil, fmt.Errorf("evidence: witness %s: %s is not a cosignature line", url, quoteBody([]byte(line)))
		}
	}
	return data, nil
}

// quoteBody renders a witness's answer for an error message: bounded and
// quoted, so a hostile witness cannot drive the terminal.
func quoteBody(data []byte) string {
	if len(data) > 200 {
		data = data[:200]
	}
	return strconv.Quote(string(data))
}
