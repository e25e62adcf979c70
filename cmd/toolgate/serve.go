package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/console"
)

// spoolFlushInterval is how often spooled evidence is retried when no new
// call spools anything.
const spoolFlushInterval = 5 * time.Second

// defaultPolicyReloadInterval is how often the policy folder is checked
// for changes when the configuration does not say.
const defaultPolicyReloadInterval = 2 * time.Second

// serveCmd runs the gateway until ctx ends: exit 0 after a clean
// shutdown, 2 when it cannot start or stops on an error.
func serveCmd(ctx context.Context, args []string, std stdio) int {
	return std.exit("toolgate serve", serve(ctx, args, std.Err, std.Getenv))
}

// serve is serveCmd's body: it returns why the gateway could not start or
// stopped, or nil after a clean shutdown (and for -h).
func serve(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) error {
	// Before anything secret is read: keys and API keys must not be
	// readable from /proc by another process of the gateway's user.
	if err := hideProcess(); err != nil {
		return err
	}
	fs := flag.NewFlagSet("toolgate serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML configuration `file` (default: the embedded default)")
	listen := fs.String("listen", "", "gRPC listen `address`, overrides listen")
	adminListen := fs.String("admin-listen", "", "admin (metrics, health) listen `address` or off, overrides admin.listen")
	policies := fs.String("policies", "", "policy `folder`, overrides policies.dir")
	evidenceURL := fs.String("evidence", "", "evidence store `URL` (file://DIR), overrides evidence.url")
	workspaceRoot := fs.String("workspace", "", "workspace `folder` of the driver named workspace, overrides drivers.workspace.root")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	instance := fs.String("instance", "", "instance `name` of this process, overrides instance (one configuration for many replicas)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "toolgate serve: unexpected arguments %q\n", fs.Args())
		return errUsage
	}

	var cfg config.Config
	var err error
	if *configPath != "" {
		cfg, err = config.LoadConfig(*configPath)
	} else {
		cfg, err = config.DefaultConfig()
	}
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *adminListen != "" {
		cfg.Admin.Listen = *adminListen
	}
	if *policies != "" {
		cfg.Policies.Dir = *policies
	}
	if *evidenceURL != "" {
		cfg.Evidence.URL = *evidenceURL
	}
	if *instance != "" {
		cfg.Instance = *instance
	}
	if *workspaceRoot != "" && !cfg.SetWorkspaceRoot("workspace", *workspaceRoot) {
		return errors.New("--workspace: the configuration has no workspace driver named \"workspace\"")
	}

	// Front-door sections are checked before anything is built, so that a
	// misspelt door or key stops the start at once.
	doors, err := frontdoor.Load(cfg)
	if err != nil {
		return err
	}
	cfg.DoorSettings = frontdoor.Settings(doors)
	consoleCfg, err := console.Load(cfg)
	if err != nil {
		return err
	}
	cfg.SectionSettings = map[string]any{"console": consoleCfg}

	var handler slog.Handler
	switch *logFormat {
	case "text":
		handler = slog.NewTextHandler(stderr, nil)
	case "json":
		handler = slog.NewJSONHandler(stderr, nil)
	default:
		return fmt.Errorf("--log-format %q: want text or json", *logFormat)
	}
	log := slog.New(handler)

	g, closer, err := gateway.Build(ctx, cfg, getenv, log)
	if err != nil {
		return err
	}
	defer closer.Close()
	// From here on every line goes through the gateway's redactor.
	log = g.Logger()

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	var opts []grpc.ServerOption
	if cfg.TLS.Enabled() {
		creds, err := credentials.NewServerTLSFromFile(cfg.TLS.CertFile, cfg.TLS.KeyFile)
		if err != nil {
			lis.Close()
			return fmt.Errorf("tls: %w", err)
		}
		opts = append(opts, grpc.Creds(creds))
	}
	srv, health := g.NewServer(opts...)
	admin, err := startAdmin(ctx, cfg.Admin, g, health, log)
	if err != nil {
		lis.Close()
		return err
	}
	defer admin.Close()
	// The doors listen before the gRPC server serves, so that a door that
	// cannot start stops the gateway before it takes calls.
	doorServers, err := frontdoor.Serve(ctx, cfg, g, doors, log)
	if err != nil {
		lis.Close()
		return err
	}
	doorServers.RegisterGRPC(srv)
	stopConsole, err := startConsole(ctx, consoleCfg, cfg, g, getenv, log, doorServers.Doors())
	if err != nil {
		lis.Close()
		return errors.Join(err, doorServers.Shutdown(context.WithoutCancel(ctx)))
	}
	defer stopConsole()
	for _, d := range doors {
		log.Info("front door serving", "door", d.Name, "addr", doorServers.Addr(d.Config.ListenAddr()))
	}
	// Background work (spool flushing, policy reloads) lives until the
	// server has drained.
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var background sync.WaitGroup
	background.Go(func() { g.RunSpoolFlusher(bgCtx, spoolFlushInterval) })
	background.Go(func() { g.RunRecovery(bgCtx) })
	reloadInterval := cfg.Policies.ReloadInterval
	if reloadInterval == 0 {
		reloadInterval = defaultPolicyReloadInterval
	}
	background.Go(func() { g.WatchPolicies(bgCtx, reloadInterval) })
	background.Go(func() {
		// A process fenced off its instance name serves nothing again.
		select {
		case <-bgCtx.Done():
		case <-g.InstanceFenced():
			health.Shutdown()
		}
	})
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	background.Go(func() {
		for {
			select {
			case <-bgCtx.Done():
				return
			case <-hup:
				swapped, err := g.ReloadPolicies()
				if err != nil {
					log.Error("SIGHUP: policy reload rejected; the running policies stay in force", "err", err)
				} else {
					log.Info("SIGHUP: policies reloaded", "swapped", swapped)
				}
			}
		}
	})
	defer func() {
		stopBackground()
		background.Wait()
	}()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(g.LimitListener(lis)) }()
	log.Info("toolgate serving", "addr", lis.Addr().String(), "version", gateway.Version,
		"policies", cfg.Policies.Dir, "evidence", cfg.Evidence.URL, "auth", len(cfg.Auth.Keys) > 0, "tls", cfg.TLS.Enabled(),
		"max_connections", g.Connections().Max())

	select {
	case err := <-served:
		return errors.Join(fmt.Errorf("serve: %w", err), doorServers.Shutdown(context.WithoutCancel(ctx)))
	case err := <-doorServers.Err():
		srv.Stop()
		<-served
		return errors.Join(err, doorServers.Shutdown(context.WithoutCancel(ctx)))
	case <-ctx.Done():
	}
	// A second signal now kills the process the default way, for an
	// operator who does not want to wait for in-flight calls.
	signal.Reset(os.Interrupt, syscall.SIGTERM)
	log.Info("shutting down: refusing new calls, finishing calls in flight")
	health.Shutdown()
	// The doors drain beside the gRPC server: each waits for its calls in
	// flight.
	var doorsStopped sync.WaitGroup
	var doorsErr error
	doorsStopped.Go(func() { doorsErr = doorServers.Shutdown(context.WithoutCancel(ctx)) })
	srv.GracefulStop()
	doorsStopped.Wait()
	if err := <-served; err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if doorsErr != nil {
		return doorsErr
	}
	log.Info("stopped")
	return nil
}
