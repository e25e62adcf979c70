package evidence

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence/tlog"
)

// maxLeaseTries bounds how many epochs OpenLog tries when other processes
// take the same instance's lease at the same moment.
const maxLeaseTries = 8

// LogOrigin returns the origin of an instance's log in the bucket:
// "toolgate.log/<bucket-id>/<instance>". The bucket id is 16 random hex
// digits stored create-only by the first gateway, so that the logs of two
// buckets whose gateways share instance names never share an origin, which
// a witness and an auditor's kept checkpoints tell logs apart by.
func LogOrigin(ctx context.Context, s Store, instance string) (string, error) {
	if err := validInstance(instance); err != nil {
		return "", err
	}
	id, err := s.Get(ctx, bucketIDKey)
	if errors.Is(err, ErrNotExist) {
		fresh := make([]byte, 8)
		if _, err := rand.Read(fresh); err != nil {
			return "", fmt.Errorf("evidence: bucket id: %w", err)
		}
		if err = s.Put(ctx, bucketIDKey, []byte(hex.EncodeToString(fresh))); err != nil && !errors.Is(err, ErrExist) {
			return "", fmt.Errorf("evidence: bucket id: %w", err)
		}
		id, err = s.Get(ctx, bucketIDKey)
	}
	if err != nil {
		return "", fmt.Errorf("evidence: bucket id: %w", err)
	}
	if len(id) != 16 || strings.Trim(string(id), "0123456789abcdef") != "" {
		return "", fmt.Errorf("evidence: %s holds %q, not 16 hex digits", bucketIDKey, id)
	}
	return "toolgate.log/" + string(id) + "/" + instance, nil
}

// validInstance checks that an instance name can stand as one key segment
// and in a checkpoint's origin line, which allows no spaces or '+'.
func validInstance(name string) error {
	if err := validRequestID(name); err != nil || strings.ContainsAny(name, " +") {
		return fmt.Errorf("evidence: instance name %q must be one key segment without spaces or '+'", name)
	}
	return nil
}

// OpenLog takes a new lease on an instance's log and brings the log's
// head up to date: it restores the tree from the newest checkpoint and
// integrates every batch stored after it, so that a process killed
// between storing a batch and publishing its checkpoint loses nothing.
func OpenLog(ctx context.Context, s Store, cfg LogConfig) (*LogWriter, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	l := &LogWriter{store: s, cfg: cfg, prefix: LogPrefix(cfg.Instance)}
	if err := l.takeLease(ctx); err != nil {
		return nil, err
	}
	if err := l.restore(ctx); err != nil {
		return nil, err
	}
	if l.previousOpen {
		// Nothing of this process is stored yet, so all it finds is lost.
		found, err := l.catchUp(ctx)
		if err != nil {
			return nil, err
		}
		for _, e := range found {
			l.Append(e)
		}
		l.cfg.Logger.Info("transparency log: caught up with the entries the previous process left unsequenced",
			"origin", l.cfg.Origin, "epoch", l.epoch-1, "entries", len(found))
	}
	return l, nil
}

func (c *LogConfig) check() error {
	if err := validInstance(c.Instance); err != nil {
		return err
	}
	switch {
	case c.Origin == "" || strings.ContainsAny(c.Origin, " +\n"):
		return fmt.Errorf("evidence: log origin %q is empty or holds a space, '+' or newline", c.Origin)
	case c.SignCheckpoint == nil:
		return errors.New("evidence: log: no checkpoint signer")
	case c.Interval <= 0 || c.OpTimeout <= 0 || c.MaxPending <= 0:
		return errors.New("evidence: log: interval, op timeout and backlog must be positive")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// takeLease stores the next epoch's lease create-only: of two processes
// starting at once, each ends up with its own epoch.
func (l *LogWriter) takeLease(ctx context.Context) error {
	keys, err := l.store.List(ctx, l.prefix+leaseDir)
	if err != nil {
		return fmt.Errorf("evidence: log lease: %w", err)
	}
	var last uint64
	closed := map[uint64]bool{}
	for _, k := range keys {
		if n, ok := parseSeqKey(strings.TrimSuffix(k, closedSuffix), leaseDir); ok {
			last = max(last, n)
			closed[n] = closed[n] || strings.HasSuffix(k, closedSuffix)
		}
	}
	l.previousOpen = last > 0 && !closed[last]
	for try := uint64(1); try <= maxLeaseTries; try++ {
		data, err := json.Marshal(lease{Epoch: last + try, Origin: l.cfg.Origin, StartedAt: time.Now().UTC()})
		if err != nil {
			return fmt.Errorf("evidence: log lease: %w", err)
		}
		err = l.store.Put(ctx, seqKey(l.prefix+leaseDir, last+try), data)
		if err == nil {
			l.epoch = last + try
			return nil
		}
		if !errors.Is(err, ErrExist) {
			return fmt.Errorf("evidence: log lease: %w", err)
		}
	}
	return fmt.Errorf("evidence: log lease: %d epochs after %d taken at once", maxLeaseTries, last)
}

// restore rebuilds the tree at the newest checkpoint and integrates the
// batches stored after it.
func (l *LogWriter) restore(ctx context.Context) error {
	l.tree = tlog.NewTree()
	size, root, err := l.newestCheckpoint(ctx)
	if err != nil {
		return err
	}
	if size > 0 {
		read := func(ctx context.Context, path string) ([]byte, error) { return l.store.Get(ctx, l.prefix+path) }
		if l.tree, err = tlog.RestoreTree(ctx, size, read); err != nil {
			return fmt.Errorf("evidence: log %s: %w", l.cfg.Origin, err)
		}
		if l.tree.Root() != root {
			return fmt.Errorf("evidence: log %s: the tiles at size %d do not hash to the checkpoint's root", l.cfg.Origin, size)
		}
	}
	l.published = size
	for {
		b, err := l.readBatch(ctx, l.tree.Size())
		if errors.Is(err, ErrNotExist) {
			break
		}
		if err != nil {
			return err
		}
		l.integrate(b)
	}
	return l.writeUnwritten(ctx)
}

// newestCheckpoint returns the size and root of the newest stored
// checkpoint of the log, or size 0 when there is none.
func (l *LogWriter) newestCheckpoint(ctx context.Context) (uint64, tlog.Hash, error) {
	var newest string
	err := l.store.Walk(ctx, l.prefix+checkpointDir, func(key string) error {
		newest = key
		return nil
	})
	if err != nil || newest == "" {
		return 0, tlog.Hash{}, err
	}
	data, err := l.store.Get(ctx, newest)
	if err != nil {
		return 0, tlog.Hash{}, err
	}
	origin, size, root, err := checkpointBody(data)
	if err != nil || origin != l.cfg.Origin {
		return 0, tlog.Hash{}, fmt.Errorf("evidence: %s: not a checkpoint of %s: %v", newest, l.cfg.Origin, err)
	}
	if n, ok := parseSeqKey(newest, checkpointDir); !ok || n != size {
		return 0, tlog.Hash{}, fmt.Errorf("evidence: %s holds the checkpoint of size %d", newest, size)
	}
	return size, root, nil
}

// checkpointBody reads the origin, size and root of a checkpoint note
// without checking its signature: the writer compares the root with the
// tiles it restores; auditors check signatures with tlog.OpenCheckpoint.
func checkpointBody(note []byte) (string, uint64, tlog.Hash, error) {
	text, _, ok := bytes.Cut(note, []byte("\n\n"))
	lines := strings.Split(string(text), "\n")
	if !ok || len(lines) < 3 {
		return "", 0, tlog.Hash{}, errors.New("not a signed checkpoint")
	}
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil {
		return "", 0, tlog.Hash{}, fmt.Errorf("size: %w", err)
	}
	root, err := base64.StdEncoding.Strict().DecodeString(lines[2])
	if err != nil || len(root) != len(tlog.Hash{}) {
		return "", 0, tlog.Hash{}, errors.New("root is not a base64 SHA-256 hash")
	}
	return lines[0], size, tlog.Hash(root), nil
}
