package evidence

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/internal/canonb64"
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
//
// The store is untrusted, so OpenLog signs nothing it cannot
// authenticate: the newest checkpoint must be signed by a trusted key,
// every batch it integrates sealed by one (ErrLogTampered otherwise), and
// the log must extend what this gateway signed before, as the state file
// and the newest closed lease record it (ErrLogBehind otherwise).
func OpenLog(ctx context.Context, s Store, cfg LogConfig) (*LogWriter, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	l := &LogWriter{store: s, cfg: cfg, prefix: LogPrefix(cfg.Instance), seal: cfg.Sealer.Sign, encode: encodeBatch}
	state, err := l.readState()
	if err != nil {
		return nil, err
	}
	closed, err := l.takeLease(ctx)
	if err != nil {
		return nil, err
	}
	if err := l.restore(ctx, append(state, closed...)); err != nil {
		return nil, err
	}
	if err := l.initState(); err != nil {
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

// LogKeys returns what a log signed by signer seals its records with, and
// the keyring it opens them with: the signer's own key, which alone signs
// the log's batches, leases and checkpoints, and the MAC keys its
// gateway's claims may carry (its own, and a key the replicas share).
func LogKeys(signer *Signer, macKeys ...[]byte) (*trust.Sealer, *trust.Keyring, error) {
	sealer, err := signer.Sealer()
	if err != nil {
		return nil, nil, fmt.Errorf("evidence: log: %w", err)
	}
	ring, err := trust.NewKeyring([]ed25519.PublicKey{sealer.PublicKey()}, append([][]byte{sealer.MACKey()}, macKeys...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("evidence: log: %w", err)
	}
	return sealer, ring, nil
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
	case c.Sealer == nil || c.Trusted == nil:
		return errors.New("evidence: log: no sealer or trusted keys: the log cannot authenticate what it reads back")
	case c.Interval <= 0 || c.OpTimeout <= 0 || c.MaxPending <= 0:
		return errors.New("evidence: log: interval, op timeout and backlog must be positive")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// takeLease stores the next epoch's lease, sealed, create-only: of two
// processes starting at once, each ends up with its own epoch. It returns
// the tree recorded by the newest closed lease it can authenticate.
func (l *LogWriter) takeLease(ctx context.Context) ([]signedHead, error) {
	keys, err := l.store.List(ctx, l.prefix+leaseDir)
	if err != nil {
		return nil, fmt.Errorf("evidence: log lease: %w", err)
	}
	var last uint64
	var closed []uint64
	for _, k := range keys {
		n, ok := parseSeqKey(strings.TrimSuffix(k, closedSuffix), leaseDir)
		if !ok {
			continue
		}
		last = max(last, n)
		if strings.HasSuffix(k, closedSuffix) {
			closed = append(closed, n)
		}
	}
	if last > math.MaxUint64-maxLeaseTries {
		return nil, l.tampered(fmt.Errorf("%w: %s: a lease of epoch %d leaves no epoch to take", trust.ErrTampered, l.prefix+leaseDir, last))
	}
	head, err := l.newestClosed(ctx, closed)
	if err != nil {
		return nil, err
	}
	l.previousOpen = last > 0 && (head == nil || head.epoch != last)
	for try := uint64(1); try <= maxLeaseTries; try++ {
		key := seqKey(l.prefix+leaseDir, last+try)
		data, err := json.Marshal(lease{Epoch: last + try, Origin: l.cfg.Origin, StartedAt: time.Now().UTC()})
		if err == nil {
			data, err = l.seal(key, data)
		}
		if err != nil {
			return nil, fmt.Errorf("evidence: log lease: %w", err)
		}
		err = l.store.Put(ctx, key, data)
		if err == nil {
			l.epoch = last + try
			if head == nil {
				return nil, nil
			}
			return []signedHead{head.signedHead}, nil
		}
		if !errors.Is(err, ErrExist) {
			return nil, fmt.Errorf("evidence: log lease: %w", err)
		}
	}
	return nil, fmt.Errorf("evidence: log lease: %d epochs after %d taken at once", maxLeaseTries, last)
}

// closedHead is a closed lease's record, authenticated.
type closedHead struct {
	signedHead
	epoch uint64
}

// newestClosed returns the record of the newest closed lease whose seal
// opens, or nil. A closed lease whose seal does not open is tampering
// (someone hiding that a process died with entries queued, or faking the
// size it left); it is reported and passed over.
func (l *LogWriter) newestClosed(ctx context.Context, epochs []uint64) (*closedHead, error) {
	slices.Sort(epochs)
	for i := len(epochs) - 1; i >= 0; i-- {
		key := seqKey(l.prefix+leaseDir, epochs[i]) + closedSuffix
		data, err := l.store.Get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("evidence: log lease: %w", err)
		}
		body, _, err := l.cfg.Trusted.OpenSigned(key, data)
		var c closedLease
		if err == nil {
			if err = decodeStrict(body, &c); err == nil && len(c.Root) != len(tlog.Hash{}) {
				err = errors.New("the root is not a SHA-256 hash")
			}
			if err != nil {
				err = fmt.Errorf("%w: %s: %v", trust.ErrTampered, key, err)
			}
		}
		if err != nil {
			l.legacyOrTampered(err)
			continue
		}
		head := signedHead{source: "the closed lease " + key, remove: "the object " + key, origin: l.cfg.Origin, size: c.Size, root: tlog.Hash(c.Root)}
		return &closedHead{head, epochs[i]}, nil
	}
	return nil, nil
}

// legacyOrTampered reports a record that failed authentication where the
// writer can pass over it: as tampering, unless it is an unsealed record
// of the version before seals, met once after the upgrade.
func (l *LogWriter) legacyOrTampered(err error) {
	if l.legacy && errors.Is(err, trust.ErrUnsealed) {
		l.cfg.Logger.Info("transparency log: an unsealed record of an earlier version passed over", "origin", l.cfg.Origin, "err", err)
		return
	}
	_ = l.tampered(err)
}

// restore rebuilds the tree at the newest checkpoint, checks that it
// extends the trees this gateway signed before, and integrates the batches
// stored after it.
func (l *LogWriter) restore(ctx context.Context, signed []signedHead) error {
	l.tree = tlog.NewTree()
	size, root, err := l.newestCheckpoint(ctx)
	if err != nil {
		return err
	}
	if size > 0 {
		if l.tree, err = tlog.RestoreTree(ctx, size, l.read); err != nil {
			return fmt.Errorf("evidence: log %s: %w", l.cfg.Origin, err)
		}
		if l.tree.Root() != root {
			return fmt.Errorf("evidence: log %s: the tiles at size %d do not hash to the checkpoint's root", l.cfg.Origin, size)
		}
	}
	if err := l.checkHistory(ctx, size, root, signed); err != nil {
		return l.refuse(err)
	}
	l.published = size
	for {
		b, err := l.readBatch(ctx, l.tree.Size())
		if errors.Is(err, ErrNotExist) {
			break
		}
		if errors.Is(err, trust.ErrTampered) {
			return l.tampered(fmt.Errorf("%w; remove it if it was planted (a batch of a version before seals: "+
				"stop the gateway cleanly with that version first)", err))
		}
		if err != nil {
			return err
		}
		l.integrate(b)
	}
	return l.writeUnwritten(ctx)
}

// refuse reports a store that does not extend what this gateway signed.
func (l *LogWriter) refuse(err error) error {
	l.cfg.Logger.Error("transparency log: refusing to sign", "origin", l.cfg.Origin, "err", err)
	if l.cfg.Tampered != nil {
		l.cfg.Tampered(err)
	}
	return err
}

// newestCheckpoint returns the size and root of the newest stored
// checkpoint of the log, or size 0 when there is none. It must be signed
// by a trusted key: the writer continues the tree it names.
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
	cp, err := tlog.OpenCheckpoint(data, tlog.CheckpointPolicy{LogKeys: l.cfg.Trusted.PublicKeys()})
	if err != nil {
		return 0, tlog.Hash{}, l.tampered(fmt.Errorf("%w: %s: not a checkpoint signed by a trusted key (%v); "+
			"if the signing key was replaced, the previous key must stay trusted to continue its log", trust.ErrTampered, newest, err))
	}
	if cp.Origin != l.cfg.Origin {
		return 0, tlog.Hash{}, l.refuse(fmt.Errorf("%w: %s is a checkpoint of %s, but this log is %s: the store's log/bucket-id "+
			"was replaced; put the one the checkpoints name back", ErrLogBehind, newest, cp.Origin, l.cfg.Origin))
	}
	if n, ok := parseSeqKey(newest, checkpointDir); !ok || n != cp.Size {
		return 0, tlog.Hash{}, l.tampered(fmt.Errorf("%w: %s holds the checkpoint of size %d", trust.ErrTampered, newest, cp.Size))
	}
	l.newest = data
	return cp.Size, cp.Root, nil
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
	root, err := canonb64.Std(lines[2])
	if err != nil || len(root) != len(tlog.Hash{}) {
		return "", 0, tlog.Hash{}, errors.New("root is not a base64 SHA-256 hash")
	}
	return lines[0], size, tlog.Hash(root), nil
}
