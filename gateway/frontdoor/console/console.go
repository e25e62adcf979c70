// Package console serves the console from a running gateway: the pages of
// package browse, with sign-in by an API key of auth.keys exchanged once
// for a session cookie, Cedar's Action::"ReadEvidence" deciding which
// calls a person may read, and the approvals inbox deciding held calls
// through the gateway's own approval path (DecideApprovalAs: single-use,
// signed, create-only). It listens on its own address, console.listen,
// under the listener rules of the gRPC listener. It imports gateway;
// gateway never imports it.
package console

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/storeurl"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/console/browse"
	"github.com/toolgate/toolgate/gateway/frontdoor/console/oidc"
	"github.com/toolgate/toolgate/policy"
)

// Defaults of the section.
const (
	DefaultSessionTTL    = 8 * time.Hour
	DefaultIndexInterval = 5 * time.Second
)

// Config is the configuration's console section.
type Config struct {
	// Listen is the console's host:port; unset, the console is off.
	Listen string `yaml:"listen"`
	// PolicyRef is the policy set that decides Action::"ReadEvidence"
	// (default policy.default).
	PolicyRef string `yaml:"policy_ref"`
	// SessionTTL is how long a sign-in lasts (default 8h).
	SessionTTL time.Duration `yaml:"session_ttl"`
	// IndexInterval is how often the index is refreshed from the store
	// (default 5s).
	IndexInterval time.Duration `yaml:"index_interval"`
	// OIDC, when set, offers sign-in with an OpenID Connect provider
	// beside the API keys.
	OIDC *oidc.Config `yaml:"oidc"`
}

// Load decodes and checks cfg's console section. The console listens
// under the rules of the gRPC listener (loopback, or a way to sign in with
// TLS or tls.allow_plaintext), and needs auth.keys or oidc in any case:
// people sign in with an API key or at the OpenID Connect provider.
func Load(cfg config.Config) (Config, error) {
	c := Config{SessionTTL: DefaultSessionTTL, IndexInterval: DefaultIndexInterval}
	if err := cfg.Console.DecodeStrict(&c); err != nil {
		return Config{}, fmt.Errorf("config: console: %w", err)
	}
	if c.Listen == "" {
		return c, nil
	}
	if c.OIDC != nil {
		if err := c.OIDC.Validate(cfg.TLS.Enabled()); err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
	}
	if err := cfg.ValidateListenerAuth("console.listen", c.Listen, c.OIDC != nil); err != nil {
		return Config{}, err
	}
	if c.OIDC != nil {
		if err := c.OIDC.CheckListen(c.Listen); err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
	}
	if len(cfg.Auth.Keys) == 0 && c.OIDC == nil {
		return Config{}, errors.New("config: console.listen: the console signs people in with the API keys of auth.keys or console.oidc, and there are none")
	}
	if config.SameListenAddr(c.Listen, cfg.Listen) || config.SameListenAddr(c.Listen, cfg.Admin.Addr()) {
		return Config{}, fmt.Errorf("config: console.listen %q: taken by the gRPC or the admin listener", c.Listen)
	}
	if c.SessionTTL <= 0 || c.IndexInterval <= 0 {
		return Config{}, errors.New("config: console: session_ttl and index_interval must be positive")
	}
	return c, nil
}

// Console is a running console.
type Console struct {
	srv    *http.Server
	addr   net.Addr
	stop   context.CancelFunc
	closer func() error
}

// Addr is the address the console listens on.
func (c *Console) Addr() net.Addr { return c.addr }

// Shutdown stops the console.
func (c *Console) Shutdown(ctx context.Context) error {
	c.stop()
	return errors.Join(c.srv.Shutdown(ctx), c.closer())
}

// Start opens the console of c for gateway g: its own reader of the
// evidence store, its own view of the policy folder (reloaded as the
// gateway reloads it) and the index, and listens. getenv reads the
// replicas' trusted keys as the gateway does.
//
// tokens, when given, let people sign in with an OAuth access token they
// accept as well (the front doors configured with an issuer).
func Start(ctx context.Context, c Config, cfg config.Config, g *gateway.Gateway, getenv func(string) string, log *slog.Logger, tokens ...TokenVerifier) (*Console, error) {
	store, err := storeurl.Open(ctx, cfg.Evidence.URL)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	fail := func(err error) (*Console, error) { return nil, errors.Join(err, store.Close()) }
	live, err := policy.NewLive(cfg.Policies.Dir)
	if err != nil {
		return fail(fmt.Errorf("console: policies: %w", err))
	}
	trusted, err := cfg.TrustedPublicKeys(getenv)
	if err != nil {
		return fail(fmt.Errorf("console: %w", err))
	}
	if s := g.Signer(); s != nil {
		trusted = append(trusted, s.PublicKey())
	}
	acc := newAccess(g, live, c.PolicyRef, tokens...)
	var external browse.ExternalSignIn
	if c.OIDC != nil {
		client, err := oidc.New(*c.OIDC, getenv, nil, oidc.Options{Logger: log})
		if err != nil {
			return fail(fmt.Errorf("config: %w", err))
		}
		external = oidcSignIn{client: client, access: acc}
	}
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	index := browse.NewIndex(store, log)
	if err := index.Refresh(ctx); err != nil {
		stop()
		return fail(err)
	}
	go index.Run(bg, c.IndexInterval)
	go reloadPolicies(bg, live, c.IndexInterval, log)
	srv, err := browse.NewServer(browse.Options{
		Store: store, Index: index, Rules: live, Logger: log, SessionTTL: c.SessionTTL,
		Access: acc, External: external,
		Approvals: approvals{g: g},
		Verify:    evidence.VerifyOptions{TrustedKeys: trusted},
	})
	if err != nil {
		stop()
		return fail(err)
	}
	con, err := listen(bg, c.Listen, srv.Handler(), cfg, g, log)
	if err != nil {
		stop()
		return fail(err)
	}
	con.stop, con.closer = stop, store.Close
	return con, nil
}

// reloadPolicies follows the policy folder, as the gateway's own reload
// does, so that a changed ReadEvidence rule takes effect on both.
func reloadPolicies(ctx context.Context, live *policy.Live, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := live.Reload(false); err != nil {
				log.Warn("console: policy reload rejected; the console keeps the policies it had", "err", err)
			}
		}
	}
}

func listen(ctx context.Context, addr string, h http.Handler, cfg config.Config, g *gateway.Gateway, log *slog.Logger) (*Console, error) {
	var tlsConfig *tls.Config
	if cfg.TLS.Enabled() {
		cert, err := tls.LoadX509KeyPair(cfg.TLS.CertFile, cfg.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("console: tls: %w", err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("console: listen %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler: h, TLSConfig: tlsConfig, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	frontdoor.ServeLimited(g, srv, lis, tlsConfig, func(err error) { log.Error("console: serve failed", "err", err) })
	return &Console{srv: srv, addr: lis.Addr()}, nil
}
