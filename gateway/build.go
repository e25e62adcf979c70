package gateway

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/storeurl"
	"github.com/toolgate/toolgate/gateway/approval"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/gateway/configsecrets"
	inst "github.com/toolgate/toolgate/gateway/instance"
	"github.com/toolgate/toolgate/gateway/logredact"
	"github.com/toolgate/toolgate/gateway/signingkey"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/gateway/tracefiles"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/redact"
)

// Build assembles a Gateway from a configuration: it validates it, refuses
// a layout that puts the gateway's own files within reach of a workspace
// (config.Config.CheckLayout), loads the policy sets, reads the signing key
// (creating it first when evidence.signing_key says create: true and the
// file does not exist yet), opens the evidence store and starts the
// drivers. getenv reads environment-held keys and secrets
// (os.Getenv in production). The returned closer releases the store and
// drivers; call it after the server stops.
func Build(ctx context.Context, cfg config.Config, getenv func(string) string, log *slog.Logger) (*Gateway, io.Closer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if err := cfg.CheckLayout(); err != nil {
		return nil, nil, err
	}
	auth, err := callerauth.New(cfg.Auth.Keys, getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	engine, err := policy.NewLive(cfg.Policies.Dir)
	if err != nil {
		return nil, nil, fmt.Errorf("policies: %w", err)
	}
	if err := cfg.CheckPolicyRefs(engine.Engine().Refs()); err != nil {
		return nil, nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Auth.Keys) == 0 && engine.Engine().HasApprovalRules() {
		log.Warn("approvals need authenticated approvers; calls held for approval will expire",
			"key", "auth.keys", "policies", cfg.Policies.Dir)
	}
	webhookSecret, err := configsecrets.WebhookSecret(cfg.Approvals.Webhook, getenv)
	if err != nil {
		return nil, nil, err
	}
	signer, signingKey, err := signingkey.Load(cfg, getenv, log)
	if err != nil {
		return nil, nil, err
	}
	replicaKeys, err := cfg.TrustedPublicKeys(getenv)
	if err != nil {
		return nil, nil, err
	}
	sharedMAC, err := config.ReadSharedMACKey(cfg.Evidence.SharedMACKey, getenv)
	if err != nil {
		return nil, nil, err
	}

	tools, err := catalogTools(cfg, getenv)
	if err != nil {
		return nil, nil, err
	}
	fingerprintKey, err := configsecrets.FingerprintKey(cfg.Redact.FingerprintKey, signer, getenv)
	if err != nil {
		return nil, nil, err
	}
	redactCfg := cfg.Redact.Rules()
	redactCfg.KnownSecrets = configuredSecrets(cfg, getenv, tools, signingKey, fingerprintKey, webhookSecret, sharedMAC)
	redactCfg.FingerprintKey = fingerprintKey
	redactor, err := redact.New(redactCfg)
	if err != nil {
		return nil, nil, fmt.Errorf("config: redact: %w", err)
	}
	// Drivers log what callers send them too.
	log = logredact.Logger(log, redactor)

	var closers closeAll
	fail := func(err error) (*Gateway, io.Closer, error) {
		return nil, nil, errors.Join(err, closers.Close())
	}
	storeURL, err := cfg.Evidence.StoreURL()
	if err != nil {
		return fail(fmt.Errorf("config: %w", err))
	}
	opened, err := storeurl.Open(ctx, storeURL)
	if err != nil {
		return fail(fmt.Errorf("config: evidence.url: %w", err))
	}
	store := evidence.WithOpTimeout(opened, cfg.Evidence.EffectiveOpTimeout())
	closers = append(closers, store)
	instance := cfg.Instance
	if instance == "" {
		if instance, err = os.Hostname(); err != nil || instance == "" {
			instance = "localhost"
		}
	}
	tracing, err := telemetry.NewTracing(cfg.Telemetry, telemetry.Service{Version: Version, Instance: instance}, getenv)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, closerFunc(tracing.Close))
	// Every built gateway records metrics (the admin listener serves
	// them), and spans when tracing is on.
	tel, err := telemetry.New(telemetry.Options{Version: Version, TracerProvider: tracing.TracerProvider()})
	if err != nil {
		return fail(fmt.Errorf("telemetry: %w", err))
	}
	// Before anything of the gateway touches the store: a second process
	// with this instance name stops here.
	instanceLease, closeLease, err := inst.AcquireLease(ctx, cfg, store, signer, instance, tel, log)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, closeLease)
	if signer != nil {
		logged, closeLog, err := inst.OpenLog(ctx, cfg, store, signer, instance, gatewayName(instance), replicaKeys, sharedMAC, tel, log)
		if err != nil {
			return fail(err)
		}
		store = logged
		closers = append(closers, closeLog)
	}
	var spool *evidence.Spool
	if dir := cfg.Evidence.SpoolDir; dir != "" && dir != "none" {
		if spool, err = evidence.OpenSpool(dir); err != nil {
			return fail(fmt.Errorf("config: evidence.spool_dir: %w", err))
		}
		closers = append(closers, spool)
	}

	// Probes of downstream executors run until the gateway is closed.
	probeCtx, stopProbes := context.WithCancel(context.WithoutCancel(ctx))
	closers = append(closers, closerFunc(func() error { stopProbes(); return nil }))
	env := drivers.BuildEnv{
		Getenv:     getenv,
		Logger:     log,
		Hide:       hiddenPaths(cfg),
		Trace:      func(dir string) (drivers.TraceWriter, error) { return tracefiles.New(dir, redactor), nil },
		Background: probeCtx,
	}
	drvs, traceDirs, registry, err := buildDrivers(ctx, cfg, env, tools, &closers)
	if err != nil {
		return fail(err)
	}

	approvals := ApprovalOptions{TTL: cfg.Approvals.EffectiveTTL()}
	if wh := cfg.Approvals.Webhook; wh != nil {
		notifier, err := approval.NewWebhookNotifier(approval.WebhookOptions{
			URL: wh.URL, Secret: webhookSecret, Redactor: redactor, Logger: log, Gateway: instance, UserAgent: "toolgate/" + Version,
			Timeout: wh.Timeout, Retries: wh.Retries,
		})
		if err != nil {
			return fail(fmt.Errorf("config: approvals.webhook: %w", err))
		}
		// Closed first, before the store: its queue drains while the
		// rest is still up.
		closers = append(closers, notifier)
		approvals.Notifier = notifier
	}

	g, err := New(Options{
		Decider:    engine,
		Store:      store,
		Spool:      spool,
		Signer:     signer,
		Redactor:   redactor,
		Auth:       auth,
		Drivers:    drvs,
		Tools:      tools,
		Registry:   registry,
		Shadows:    cfg.Policies.Shadow,
		Selectable: cfg.Policies.Selectable,
		TraceDirs:  traceDirs,
		Instance:   instance,
		Lease:      instanceLease,
		Logger:     log,
		Limits:     cfg.Limits,
		Recovery: RecoveryOptions{
			Interval:         cfg.Evidence.SweepInterval,
			InterruptedAfter: cfg.Evidence.InterruptedAfter,
			OpTimeout:        cfg.Evidence.EffectiveOpTimeout(),
		},
		Approvals:    approvals,
		Telemetry:    tel,
		TrustedKeys:  replicaKeys,
		SharedMACKey: sharedMAC,
	})
	if err != nil {
		return fail(err)
	}
	return g, closers, nil
}

// buildDrivers starts the driver of every drivers section, adds the tools
// the drivers publish to tools (a tools entry of the same id wins), and
// returns the drivers, their trace folders and the registry-id host.
// Started drivers are added to closers.
func buildDrivers(ctx context.Context, cfg config.Config, env drivers.BuildEnv, tools map[string]Tool, closers *closeAll) (map[string]drivers.Driver, map[string]string, *Registry, error) {
	drvs := map[string]drivers.Driver{}
	traceDirs := map[string]string{}
	var registry *Registry
	for _, name := range slices.Sorted(maps.Keys(cfg.Drivers)) {
		sec := cfg.Drivers[name]
		d, err := sec.Config.Build(ctx, name, env)
		if err != nil {
			var key drivers.KeyError
			if errors.As(err, &key) {
				return nil, nil, nil, fmt.Errorf("config: drivers.%s.%w", name, err)
			}
			return nil, nil, nil, fmt.Errorf("config: drivers.%s: %w", name, err)
		}
		if c, ok := d.(io.Closer); ok {
			*closers = append(*closers, c)
		}
		drvs[name] = d
		if dir := config.Footprint(sec.Config, nil).TraceFolder; dir != "" {
			traceDirs[name] = dir
		}
		if rh, ok := sec.Config.(drivers.RegistryHost); ok {
			if version, on := rh.RegistryIDs(); on {
				registry = &Registry{Driver: name, Version: version, Bind: config.Binder(sec.Config)}
			}
		}
		if p, ok := sec.Config.(drivers.Publisher); ok {
			for _, pt := range p.Published() {
				if _, taken := tools[name+"."+pt.Target]; !taken {
					tools[name+"."+pt.Target] = Tool{Driver: name, Target: pt.Target, Description: pt.Description, Tags: pt.Tags}
				}
			}
		}
	}
	return drvs, traceDirs, registry, nil
}

// hiddenPaths lists the gateway's own files and folders, which a sandboxed
// shell command must never reach: the same set CheckLayout keeps apart from
// every workspace.
func hiddenPaths(cfg config.Config) []string {
	var paths []string
	for _, p := range cfg.GatewayPaths() {
		paths = append(paths, p.Path)
	}
	return paths
}

// configuredSecrets returns every secret the configuration hands the
// gateway, to be redacted from all evidence and logs wherever it appears:
// redact.secrets_env; each tool's env; each TPMJS executor's API key; the
// API keys behind auth.keys env entries; the signing key as its file holds
// it (PEM or base64 text), as its seed and as its PKCS #8 DER (whose
// base64 is the PEM body), so that every encoding of it is known; the
// fingerprint key; the approval webhook's HMAC key; and the MAC key the
// replicas share. Values that are unset are skipped: Build reports those
// that must be set where they are used.
func configuredSecrets(cfg config.Config, getenv func(string) string, tools map[string]Tool, signingKey signingkey.Text, fingerprintKey, webhookSecret, sharedMAC []byte) []string {
	var secrets []string
	addEnv := func(name string) {
		if name == "" {
			return
		}
		if v := getenv(name); v != "" {
			secrets = append(secrets, v)
		}
	}
	for _, name := range cfg.Redact.SecretsEnv {
		addEnv(name)
	}
	for _, id := range slices.Sorted(maps.Keys(tools)) {
		for _, name := range slices.Sorted(maps.Keys(tools[id].Env)) {
			secrets = append(secrets, tools[id].Env[name])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Drivers)) {
		secrets = append(secrets, config.Footprint(cfg.Drivers[name].Config, getenv).Secrets...)
	}
	for _, k := range cfg.Auth.Keys {
		addEnv(k.Env)
	}
	if signingKey.Key != nil {
		secrets = append(secrets, strings.TrimSpace(string(signingKey.File)), string(signingKey.Key.Seed()))
		if der, err := x509.MarshalPKCS8PrivateKey(signingKey.Key); err == nil {
			secrets = append(secrets, string(der))
		}
	}
	for _, key := range [][]byte{fingerprintKey, webhookSecret, sharedMAC} {
		if len(key) > 0 {
			secrets = append(secrets, string(key))
		}
	}
	return secrets
}

// catalogTools builds the configured part of the catalog, reading each
// tool's environment values from the gateway's environment.
func catalogTools(cfg config.Config, getenv func(string) string) (map[string]Tool, error) {
	tools := map[string]Tool{}
	for _, id := range slices.Sorted(maps.Keys(cfg.Tools)) {
		t := cfg.Tools[id]
		b, err := t.Bind(cfg.Drivers[t.Driver].Config)
		if err != nil {
			return nil, fmt.Errorf("config: tools.%s.%w", id, err)
		}
		tool := Tool{
			Driver: t.Driver, Target: b.Target, Package: b.Package, Version: b.Version,
			Description: t.Description, Tags: t.Tags, Labels: t.Labels, CallerEnv: t.CallerEnv,
			InputSchema: t.InputSchemaJSON(),
		}
		for _, name := range slices.Sorted(maps.Keys(t.Env)) {
			v := getenv(t.Env[name].FromEnv)
			if v == "" {
				return nil, fmt.Errorf("config: tools.%s.env.%s: environment variable %s is empty or unset", id, name, t.Env[name].FromEnv)
			}
			if tool.Env == nil {
				tool.Env = map[string]string{}
			}
			tool.Env[name] = v
		}
		tools[id] = tool
	}
	return tools, nil
}

// closerFunc adapts a function to io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// closeAll closes everything in reverse order of opening.
type closeAll []io.Closer

func (c closeAll) Close() error {
	var errs []error
	for i := len(c) - 1; i >= 0; i-- {
		errs = append(errs, c[i].Close())
	}
	return errors.Join(errs...)
}
