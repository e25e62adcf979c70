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
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/toolgate/toolgate/gateway"
)

// spoolFlushInterval is how often spooled evidence is retried when no new
// call spools anything.
const spoolFlushInterval = 5 * time.Second

func serveCmd(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("toolgate serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML configuration `file` (default: the embedded default)")
	listen := fs.String("listen", "", "gRPC listen `address`, overrides listen")
	policies := fs.String("policies", "", "policy `folder`, overrides policies.dir")
	evidenceURL := fs.String("evidence", "", "evidence store `URL` (file://DIR), overrides evidence.url")
	workspaceRoot := fs.String("workspace", "", "workspace `folder` of the driver named workspace, overrides drivers.workspace.root")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "toolgate serve: unexpected arguments %q\n", fs.Args())
		return errUsage
	}

	var cfg gateway.Config
	var err error
	if *configPath != "" {
		cfg, err = gateway.LoadConfig(*configPath)
	} else {
		cfg, err = gateway.DefaultConfig()
	}
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *policies != "" {
		cfg.Policies.Dir = *policies
	}
	if *evidenceURL != "" {
		cfg.Evidence.URL = *evidenceURL
	}
	if *workspaceRoot != "" {
		d, ok := cfg.Drivers["workspace"]
		if !ok || d.Type != "workspace" {
			return errors.New("--workspace: the configuration has no workspace driver named \"workspace\"")
		}
		d.Root = *workspaceRoot
		cfg.Drivers["workspace"] = d
	}

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
	flusherCtx, stopFlusher := context.WithCancel(context.WithoutCancel(ctx))
	flusherDone := make(chan struct{})
	go func() {
		defer close(flusherDone)
		g.RunSpoolFlusher(flusherCtx, spoolFlushInterval)
	}()
	defer func() {
		stopFlusher()
		<-flusherDone
	}()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	log.Info("toolgate serving", "addr", lis.Addr().String(), "version", gateway.Version,
		"policies", cfg.Policies.Dir, "evidence", cfg.Evidence.URL, "auth", len(cfg.Auth.Keys) > 0, "tls", cfg.TLS.Enabled())

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// A second signal now kills the process the default way, for an
	// operator who does not want to wait for in-flight calls.
	signal.Reset(os.Interrupt, syscall.SIGTERM)
	log.Info("shutting down: refusing new calls, finishing calls in flight")
	health.Shutdown()
	srv.GracefulStop()
	if err := <-served; err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopped")
	return nil
}
