package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/workspace"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/redact"
)

// Build assembles a Gateway from a validated configuration: it loads the
// policy sets, opens the evidence store and starts the drivers. getenv reads
// environment-held keys and secrets (os.Getenv in production). The returned
// closer releases the store and drivers; call it after the server stops.
func Build(ctx context.Context, cfg Config, getenv func(string) string, log *slog.Logger) (*Gateway, io.Closer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	auth, err := NewAuthenticator(cfg.Auth.Keys, getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	engine, err := policy.Load(cfg.Policies.Dir)
	if err != nil {
		return nil, nil, fmt.Errorf("policies: %w", err)
	}
	var secrets []string
	for _, name := range cfg.Redact.SecretsEnv {
		if v := getenv(name); v != "" {
			secrets = append(secrets, v)
		}
	}
	redactor, err := redact.New(redact.Config{KnownSecrets: secrets, KeyNames: cfg.Redact.KeyNames})
	if err != nil {
		return nil, nil, fmt.Errorf("config: redact: %w", err)
	}

	var signer *evidence.Signer
	if src := cfg.Evidence.SigningKey; src != nil {
		pem, err := src.Read(getenv)
		if err != nil {
			return nil, nil, fmt.Errorf("config: evidence.signing_key: %w", err)
		}
		key, err := evidence.ParsePrivateKey(pem)
		if err != nil {
			return nil, nil, fmt.Errorf("config: evidence.signing_key: %w", err)
		}
		if signer, err = evidence.NewSigner(key); err != nil {
			return nil, nil, fmt.Errorf("config: evidence.signing_key: %w", err)
		}
	}

	var closers closeAll
	fail := func(err error) (*Gateway, io.Closer, error) {
		return nil, nil, errors.Join(err, closers.Close())
	}
	storeURL, err := cfg.Evidence.storeURL()
	if err != nil {
		return fail(fmt.Errorf("config: %w", err))
	}
	store, err := evidence.Open(ctx, storeURL)
	if err != nil {
		return fail(fmt.Errorf("config: evidence.url: %w", err))
	}
	closers = append(closers, store)
	var spool *evidence.Spool
	if dir := cfg.Evidence.SpoolDir; dir != "" && dir != "none" {
		if spool, err = evidence.OpenSpool(dir); err != nil {
			return fail(fmt.Errorf("config: evidence.spool_dir: %w", err))
		}
		closers = append(closers, spool)
	}

	drvs := map[string]drivers.Driver{}
	tools := map[string]Tool{}
	for _, name := range sortedKeys(cfg.Drivers) {
		dc := cfg.Drivers[name]
		switch dc.Type {
		case "workspace":
			d, err := workspace.New(workspace.Config{
				Root:           dc.Root,
				OutputLimit:    dc.OutputLimit,
				DefaultTimeout: dc.DefaultTimeout,
			})
			if err != nil {
				return fail(fmt.Errorf("config: drivers.%s: %w", name, err))
			}
			closers = append(closers, d)
			drvs[name] = d
			for _, op := range workspace.Operations() {
				tools[name+"."+op] = Tool{Driver: name, Target: op}
			}
		}
	}
	for _, id := range sortedKeys(cfg.Tools) {
		t := cfg.Tools[id]
		if cfg.Drivers[t.Driver].Type == "workspace" && !slices.Contains(workspace.Operations(), t.Target) {
			return fail(fmt.Errorf("config: tools.%s.target %q: a workspace driver serves %v", id, t.Target, workspace.Operations()))
		}
		tools[id] = Tool{Driver: t.Driver, Target: t.Target}
	}

	instance := cfg.Instance
	if instance == "" {
		if instance, err = os.Hostname(); err != nil || instance == "" {
			instance = "localhost"
		}
	}
	g, err := New(Options{
		Decider:  engine,
		Store:    store,
		Spool:    spool,
		Signer:   signer,
		Redactor: redactor,
		Auth:     auth,
		Drivers:  drvs,
		Tools:    tools,
		Instance: instance,
		Logger:   log,
	})
	if err != nil {
		return fail(err)
	}
	return g, closers, nil
}

// closeAll closes everything in reverse order of opening.
type closeAll []io.Closer

func (c closeAll) Close() error {
	var errs []error
	for i := len(c) - 1; i >= 0; i-- {
		errs = append(errs, c[i].Close())
	}
	return errors.Join(errs...)
}
