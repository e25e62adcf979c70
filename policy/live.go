package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/regularfile"
)

// Live is an Engine that follows its folder: Reload parses and validates
// the whole folder and, only if all of it is good, swaps it in at once. An
// invalid change is rejected and the running set stays. Every decision is
// made by exactly one loaded set, whose digest it records. Live is safe for
// concurrent use.
type Live struct {
	dir     string
	current atomic.Pointer[Engine]
	mu      sync.Mutex // serializes reloads
	seen    string     // fingerprint of the folder last loaded or rejected
}

// NewLive loads dir. Unlike later reloads, a first load that fails is an
// error: there is no running set to keep.
func NewLive(dir string) (*Live, error) {
	l := &Live{dir: dir}
	fp, err := fingerprint(dir)
	if err != nil {
		return nil, err
	}
	e, err := Load(dir)
	if err != nil {
		return nil, err
	}
	l.current.Store(e)
	l.seen = fp
	return l, nil
}

// Engine returns the policy sets in force.
func (l *Live) Engine() *Engine { return l.current.Load() }

// Decide decides with the policy sets in force.
func (l *Live) Decide(ctx context.Context, req Request) Decision {
	return l.current.Load().Decide(ctx, req)
}

// Explain explains a decision of the policy sets in force.
func (l *Live) Explain(ctx context.Context, req Request) Explanation {
	return l.current.Load().Explain(ctx, req)
}

// DecideApproval decides an approver with the policy sets in force.
func (l *Live) DecideApproval(ctx context.Context, a ApprovalRequest) Decision {
	return l.current.Load().DecideApproval(ctx, a)
}

// Reload loads the folder again if its files changed since the last load
// (or if force is set) and swaps the new sets in. It reports whether it
// swapped. On an error the running sets stay in force.
func (l *Live) Reload(force bool) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fp, err := fingerprint(l.dir)
	if err != nil {
		return false, err
	}
	if fp == l.seen && !force {
		return false, nil
	}
	return l.loadLocked(fp)
}

// loadLocked loads the folder, whose fingerprint is fp, and swaps it in
// when it is valid. l.mu is held.
func (l *Live) loadLocked(fp string) (bool, error) {
	// Remember a rejected folder too, so it is reported once rather than
	// on every poll until someone fixes it.
	l.seen = fp
	e, err := Load(l.dir)
	if err != nil {
		return false, fmt.Errorf("policy reload rejected, the running policies stay: %w", err)
	}
	l.current.Store(e)
	return true, nil
}

// Watch reloads whenever the folder's files change, checking every
// interval until ctx ends. A change is loaded only once the folder has
// looked the same on two checks in a row: an editor or a copy that
// truncates a file and then writes it must not have its empty or
// half-written file swapped in between. report is called after each
// reload attempt that swapped or failed.
func (l *Live) Watch(ctx context.Context, interval time.Duration, report func(swapped bool, err error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var pending string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			var swapped bool
			var err error
			pending, swapped, err = l.reloadSettled(pending)
			if swapped || err != nil {
				report(swapped, err)
			}
		}
	}
}

// reloadSettled is one of Watch's checks. pending is the fingerprint a
// changed folder had at the previous check; the folder is loaded when it
// still has it now. It returns the fingerprint to wait on next.
func (l *Live) reloadSettled(pending string) (string, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fp, err := fingerprint(l.dir)
	switch {
	case err != nil:
		return "", false, err
	case fp == l.seen:
		return "", false, nil
	case fp != pending:
		return fp, false, nil
	}
	swapped, err := l.loadLocked(fp)
	return "", swapped, err
}

// fingerprint digests the names, sizes and contents of the folder's
// regular files (following links, as Load does), so any change to what
// Load would read changes it.
func fingerprint(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("policy: read %s: %w", dir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		// Load reads no dot file; a Kubernetes ConfigMap volume keeps its
		// files behind a ..data link to a timestamped folder, and a link
		// to a folder is no policy either.
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", fmt.Errorf("policy: read %s: %w", filepath.Join(dir, e.Name()), err)
		}
		if !info.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	h := sha256.New()
	for _, name := range names {
		data, err := regularfile.Read(filepath.Join(dir, name), MaxPolicyFileBytes)
		if err != nil {
			return "", fmt.Errorf("policy: read %s: %w", filepath.Join(dir, name), err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
