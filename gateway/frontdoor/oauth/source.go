package oauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/toolgate/toolgate/internal/regularfile"
)

// fetchTimeout bounds one fetch of jwks_url.
const fetchTimeout = 5 * time.Second

// statEvery is how often a jwks_file is checked for changes.
const statEvery = time.Second

// keySource gives the key set to look kid up in. It may refresh the set
// first; it returns the set it has (possibly stale) when a refresh fails,
// and an error only when it has no usable set at all.
type keySource interface {
	keys(ctx context.Context, kid string) (*KeySet, error)
}

// fileKeys is a jwks_file, read again when its mtime or size changes.
type fileKeys struct {
	path string
	now  func() time.Time
	log  *slog.Logger

	mu      sync.Mutex
	set     *KeySet
	mod     time.Time
	size    int64
	checked time.Time
}

// newFileKeys reads path; a missing or invalid file is an error at start.
func newFileKeys(path string, now func() time.Time, log *slog.Logger) (*fileKeys, error) {
	f := &fileKeys{path: path, now: now, log: log}
	if err := f.reload(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *fileKeys) keys(_ context.Context, kid string) (*KeySet, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// An unknown kid is checked against the file at once: a stat is cheap
	// and the operator may just have rotated the key.
	if now := f.now(); now.Sub(f.checked) >= statEvery || !f.set.Has(kid) {
		f.checked = now
		if err := f.reload(); err != nil {
			f.log.Warn("oauth: jwks_file: keeping the keys read before", "path", f.path, "err", err)
		}
	}
	return f.set, nil
}

// reload reads the file when it changed since it was last read; the
// caller holds mu (or is the constructor).
func (f *fileKeys) reload() error {
	fi, err := os.Stat(f.path)
	if err != nil {
		return fmt.Errorf("oauth: jwks_file: %w", err)
	}
	if f.set != nil && fi.ModTime().Equal(f.mod) && fi.Size() == f.size {
		return nil
	}
	data, err := regularfile.Read(f.path, maxJWKSBytes)
	if err != nil {
		return fmt.Errorf("oauth: jwks_file: %w", err)
	}
	set, err := ParseJWKS(data)
	if err != nil {
		return fmt.Errorf("oauth: jwks_file %s: %w", f.path, err)
	}
	f.set, f.mod, f.size = set, fi.ModTime(), fi.Size()
	return nil
}

// urlKeys is a jwks_url with its cache: the set is used for ttl, then
// refreshed in the background while it is still served; a token whose kid
// is unknown makes the caller wait for a fetch. Fetches are never closer
// than minGap, one at a time (singleflight); a failed fetch keeps the old
// set until it is 4×ttl old.
type urlKeys struct {
	url    string
	client *http.Client
	ttl    time.Duration
	minGap time.Duration
	now    func() time.Time
	log    *slog.Logger
	flight singleflight.Group

	mu      sync.Mutex
	set     *KeySet
	fetched time.Time // when set was fetched
	tried   time.Time // when a fetch last started
}

// newURLClient is the HTTP client of jwks_url: a 5 s timeout, no
// redirects (a redirect could point the gateway anywhere).
func newURLClient() *http.Client {
	return &http.Client{
		Timeout:       fetchTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func (u *urlKeys) keys(ctx context.Context, kid string) (*KeySet, error) {
	u.mu.Lock()
	set, fetched, tried := u.set, u.fetched, u.tried
	u.mu.Unlock()
	now := u.now()
	if set != nil && now.Sub(fetched) < 4*u.ttl && set.Has(kid) {
		if now.Sub(fetched) >= u.ttl && now.Sub(tried) >= u.minGap {
			u.flight.DoChan("fetch", u.fetchFunc(ctx)) // served stale meanwhile
		}
		return set, nil
	}
	// An unknown kid, or no set to trust: join the fetch in flight, or
	// start one, which fetchFunc skips when the last began under minGap
	// ago.
	select {
	case <-u.flight.DoChan("fetch", u.fetchFunc(ctx)):
	case <-ctx.Done():
		return nil, fmt.Errorf("oauth: jwks: %w", ctx.Err())
	}
	u.mu.Lock()
	set, fetched = u.set, u.fetched
	u.mu.Unlock()
	if set == nil || now.Sub(fetched) >= 4*u.ttl {
		return nil, errors.New("oauth: jwks: no current key set from jwks_url (fetches failed)")
	}
	return set, nil
}

// fetchFunc returns the singleflight body: fetch unless another fetch
// started less than minGap ago. It runs on a context that outlives the
// request that started it, since later requests share its result.
func (u *urlKeys) fetchFunc(ctx context.Context) func() (any, error) {
	return func() (any, error) {
		u.mu.Lock()
		if !u.tried.IsZero() && u.now().Sub(u.tried) < u.minGap {
			u.mu.Unlock()
			return nil, nil
		}
		u.tried = u.now()
		u.mu.Unlock()
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
		defer cancel()
		set, err := u.fetch(fctx)
		if err != nil {
			u.log.Warn("oauth: jwks_url: fetch failed; keeping the keys fetched before", "url", u.url, "err", err)
			return nil, err
		}
		u.mu.Lock()
		u.set, u.fetched = set, u.now()
		u.mu.Unlock()
		return nil, nil
	}
}

// fetch GETs and decodes the set.
func (u *urlKeys) fetch(ctx context.Context) (*KeySet, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.url, nil)
	if err != nil {
		return nil, fmt.Errorf("oauth: jwks_url: %w", err)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := u.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("oauth: jwks_url: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("oauth: jwks_url: HTTP %d (redirects are not followed)", resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("oauth: jwks_url: %w", err)
	}
	return ParseJWKS(data)
}
