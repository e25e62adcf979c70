package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/console"
	"github.com/toolgate/toolgate/gateway/frontdoor/console/browse"
	"github.com/toolgate/toolgate/policy"
)

// startConsole starts the gateway's console when console.listen is set,
// and returns what stops it.
//
// The doors that verify OAuth access tokens let people sign in with one.
func startConsole(ctx context.Context, c console.Config, cfg config.Config, g *gateway.Gateway, getenv func(string) string, log *slog.Logger,
	doors []frontdoor.Door) (func(), error) {
	if c.Listen == "" {
		return func() {}, nil
	}
	var tokens []console.TokenVerifier
	for _, d := range doors {
		if v, ok := d.(frontdoor.BearerVerifier); ok {
			tokens = append(tokens, v)
		}
	}
	con, err := console.Start(ctx, c, cfg, g, getenv, log, tokens...)
	if err != nil {
		return nil, err
	}
	log.Info("console serving", "addr", con.Addr().String(), "tls", cfg.TLS.Enabled())
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = con.Shutdown(sctx)
	}, nil
}

// consoleIndexInterval is how often the read-only console refreshes its
// index from the store.
const consoleIndexInterval = 5 * time.Second

// evidenceConsole serves the console read-only from a store until ctx
// ends.
func evidenceConsole(ctx context.Context, args []string, std stdio) int {
	exit := func(err error) int { return std.exit("toolgate evidence console", err) }
	fs := newEvidenceFlags("console", "--listen ADDR [--evidence URL | --config FILE] [--pubkey FILE]... [--policies DIR]", std)
	sf := addStoreFlags(fs)
	listen := fs.String("listen", "127.0.0.1:8470", "listen `address` host:port")
	allowRemote := fs.Bool("allow-non-loopback", false, "listen on an address other hosts can reach (there is no sign-in: put an authenticating TLS proxy in front)")
	policiesDir := fs.String("policies", "", "policy `folder` whose rules' text the request page shows")
	var pubkeys, witnessKeys stringList
	fs.Var(&pubkeys, "pubkey", "trusted public key `file` (PEM or base64); repeat for several keys")
	fs.Var(&witnessKeys, "witness-key", "trusted witness verifier `key`; repeat for several")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exit(err)
	}
	if len(pos) > 0 {
		return exit(fmt.Errorf("unexpected arguments %q", pos))
	}
	if !*allowRemote && !config.IsLoopbackAddr(*listen) {
		return exit(fmt.Errorf("--listen %q is not a loopback address: the read-only console has no sign-in; "+
			"give --allow-non-loopback to serve it beyond this host behind an authenticating TLS proxy", *listen))
	}
	opts := evidence.VerifyOptions{}
	if opts.TrustedKeys, err = readPublicKeys(pubkeys); err != nil {
		return exit(err)
	}
	for _, k := range witnessKeys {
		v, err := tlog.ParseWitnessKey(k)
		if err != nil {
			return exit(fmt.Errorf("--witness-key: %w", err))
		}
		opts.Witnesses = append(opts.Witnesses, v)
	}
	if len(opts.Witnesses) > 0 {
		opts.WitnessThreshold = 1
	}
	store, _, err := sf.open(ctx)
	if err != nil {
		return exit(err)
	}
	defer store.Close()
	var rules browse.RuleTexts
	if *policiesDir != "" {
		eng, err := policy.Load(*policiesDir)
		if err != nil {
			return exit(fmt.Errorf("--policies: %w", err))
		}
		rules = eng
	}
	return exit(serveReadOnly(ctx, store, opts, rules, *listen, std))
}

// serveReadOnly indexes the store, then serves the read-only console on
// addr until ctx ends.
func serveReadOnly(ctx context.Context, store evidence.Reader, opts evidence.VerifyOptions, rules browse.RuleTexts, addr string, std stdio) error {
	log := slog.New(slog.NewTextHandler(std.Err, nil))
	index := browse.NewIndex(store, log)
	if err := index.Refresh(ctx); err != nil {
		return err
	}
	srv, err := browse.NewServer(browse.Options{Store: store, Index: index, Rules: rules, Verify: opts, Logger: log})
	if err != nil {
		return err
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	bg, stop := context.WithCancel(ctx)
	defer stop()
	go index.Run(bg, consoleIndexInterval)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(lis) }()
	fmt.Fprintf(std.Err, "toolgate evidence console: %d requests indexed; serving http://%s/\n", index.Len(), lis.Addr())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
