package telemetry

import (
	"strings"
	"testing"
)

// env is a getenv over a map.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestTracingIsOffUnlessAnEndpointIsNamed(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		env  map[string]string
		on   bool
	}{
		{name: "nothing configured", on: false},
		{name: "headers alone name no destination", env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "api-key=x"}, on: false},
		{name: "the config names a collector", cfg: Config{OTLPEndpoint: "http://127.0.0.1:4317"}, on: true},
		{name: "the generic endpoint variable", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4317"}, on: true},
		{name: "the traces endpoint variable", env: map[string]string{EnvTracesEndpoint: "https://collector:4317"}, on: true},
		{name: "OTEL_SDK_DISABLED wins over an endpoint", cfg: Config{OTLPEndpoint: "http://127.0.0.1:4317"},
			env: map[string]string{EnvSDKDisabled: "true"}, on: false},
		{name: "OTEL_TRACES_EXPORTER=none wins over an endpoint", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4317", EnvTracesExporter: "none"}, on: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := NewTracing(tc.cfg, Service{Version: "test", Instance: "gw1"}, env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if (tr != nil) != tc.on || (tr.TracerProvider() != nil) != tc.on {
				t.Fatalf("tracing on = %v, want %v", tr != nil, tc.on)
			}
		})
	}
}

func TestTracingRefusesWhatItCannotHonour(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		cfg        Config
		env        map[string]string
		hidden     string // must not appear in the error
	}{
		{name: "an endpoint without a scheme", cfg: Config{OTLPEndpoint: "collector:4317"}, want: "telemetry.otlp_endpoint"},
		{name: "an endpoint with a path", cfg: Config{OTLPEndpoint: "http://collector:4318/v1/traces"}, want: "telemetry.otlp_endpoint"},
		{name: "an endpoint with a password is refused without echoing it",
			cfg: Config{OTLPEndpoint: "https://user:hunter2secret@collector:4317"}, want: "user or password", hidden: "hunter2secret"},
		{name: "a malformed endpoint variable", env: map[string]string{EnvEndpoint: "ftp://x"}, want: EnvEndpoint},
		{name: "another OTLP protocol", env: map[string]string{EnvEndpoint: "http://c:4318", EnvProtocol: "http/protobuf"}, want: EnvProtocol},
		{name: "another exporter", env: map[string]string{EnvEndpoint: "http://c:4317", EnvTracesExporter: "zipkin"}, want: EnvTracesExporter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.OTLPEndpoint != "" {
				if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Validate: %v, want an error naming %s", err, tc.want)
				}
			}
			tr, err := NewTracing(tc.cfg, Service{}, env(tc.env))
			if err == nil {
				tr.Close()
				t.Fatal("NewTracing accepted it")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name %s", err, tc.want)
			}
			if tc.hidden != "" && strings.Contains(err.Error(), tc.hidden) {
				t.Fatalf("error %q echoes the password", err)
			}
		})
	}
}
