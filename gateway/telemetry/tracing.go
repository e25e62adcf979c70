package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// Config is the configuration's telemetry section: where spans go.
// Tracing is off unless otlp_endpoint or one of the standard endpoint
// variables (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT)
// is set.
type Config struct {
	// OTLPEndpoint is the OpenTelemetry collector that receives the spans,
	// over OTLP/gRPC, as a URL: http://host:4317 sends them in plaintext,
	// https://host:4317 over TLS (the system's roots, or the file
	// OTEL_EXPORTER_OTLP_CERTIFICATE names). It overrides the endpoint
	// variables. Collector headers (an API key) come from
	// OTEL_EXPORTER_OTLP_HEADERS, never from this file. Unset: the
	// variables decide.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
}

// The environment variables that turn tracing on or shape it. Only the
// endpoint variables turn it on: headers alone name no destination.
const (
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
	EnvTracesSampler  = "OTEL_TRACES_SAMPLER"
)

// shutdownTimeout bounds the flush of the spans still queued when the
// gateway stops: a collector that is down must not hold the exit.
const shutdownTimeout = 5 * time.Second

// Validate checks the section; errors name the key.
func (c Config) Validate() error {
	if c.OTLPEndpoint == "" {
		return nil
	}
	if err := checkEndpoint(c.OTLPEndpoint); err != nil {
		return fmt.Errorf("telemetry.otlp_endpoint %s", err)
	}
	return nil
}

// checkEndpoint accepts an OTLP/gRPC endpoint URL: a scheme that says
// whether the spans travel in plaintext, a host, and nothing that could
// carry a credential.
func checkEndpoint(raw string) error {
	u, err := url.Parse(raw)
	if err == nil && u.User != nil {
		// Not quoted: the value holds a password, perhaps.
		return errors.New("must not carry a user or password (give collector credentials in OTEL_EXPORTER_OTLP_HEADERS)")
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: want http://host:port (plaintext) or https://host:port (TLS), with no path or query",
			truncate(raw))
	}
	return nil
}

// truncate bounds a value quoted in an error.
func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// Service describes this gateway in every span's resource.
type Service struct {
	// Version is service.version.
	Version string
	// Instance is service.instance.id: the gateway's instance name, the
	// one engine_ref carries, so that a span and the evidence name the
	// same gateway.
	Instance string
}

// Tracing is the span pipeline: an SDK TracerProvider whose batch
// processor exports over OTLP/gRPC. A nil *Tracing is tracing off.
type Tracing struct {
	provider *sdktrace.TracerProvider
}

// NewTracing builds the span pipeline from cfg and the environment
// (getenv; os.Getenv in production), or returns nil when tracing is off:
// no endpoint is configured, OTEL_SDK_DISABLED is true, or
// OTEL_TRACES_EXPORTER is none. Nothing connects until the first batch
// is exported.
func NewTracing(cfg Config, svc Service, getenv func(string) string) (*Tracing, error) {
	endpoint, err := TracingEndpoint(cfg, getenv)
	if endpoint == "" || err != nil {
		return nil, err
	}
	exporter, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	res := resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName("toolgate"),
		semconv.ServiceVersion(svc.Version),
		semconv.ServiceInstanceID(svc.Instance),
	)
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)}
	if getenv(EnvTracesSampler) == "" {
		// Every call is traced: the default would follow the sampled
		// flag of the caller's traceparent, and let a caller keep its
		// calls out of the operator's traces. OTEL_TRACES_SAMPLER, when
		// set, is the operator's choice and the SDK honours it.
		opts = append(opts, sdktrace.WithSampler(sdktrace.AlwaysSample()))
	}
	return &Tracing{provider: sdktrace.NewTracerProvider(opts...)}, nil
}

// TracingEndpoint is the collector NewTracing would export to, or "" when
// tracing is off, and the error NewTracing would refuse cfg and the
// environment with; it builds nothing, for checking a configuration.
func TracingEndpoint(cfg Config, getenv func(string) string) (string, error) {
	if strings.EqualFold(strings.TrimSpace(getenv(EnvSDKDisabled)), "true") {
		return "", nil
	}
	switch exp := strings.TrimSpace(getenv(EnvTracesExporter)); exp {
	case "none":
		return "", nil
	case "", "otlp":
	default:
		return "", fmt.Errorf("telemetry: %s=%q: toolgate exports spans over otlp only (or none)", EnvTracesExporter, truncate(exp))
	}
	for _, name := range []string{EnvTracesProtocol, EnvProtocol} {
		if p := strings.TrimSpace(getenv(name)); p != "" {
			if p != "grpc" {
				return "", fmt.Errorf("telemetry: %s=%q: toolgate exports OTLP over grpc only", name, truncate(p))
			}
			break
		}
	}
	if cfg.OTLPEndpoint != "" {
		return cfg.OTLPEndpoint, cfg.Validate()
	}
	for _, name := range []string{EnvTracesEndpoint, EnvEndpoint} {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			if err := checkEndpoint(v); err != nil {
				return "", fmt.Errorf("telemetry: %s %w", name, err)
			}
			return v, nil
		}
	}
	return "", nil
}

// TracerProvider is the provider to put in Options.TracerProvider; nil
// when tracing is off.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.provider
}

// Close exports the spans still queued and stops the pipeline, waiting at
// most a few seconds for the collector.
func (t *Tracing) Close() error {
	if t == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry: flushing spans (at most %v): %w", shutdownTimeout, err)
	}
	return nil
}
