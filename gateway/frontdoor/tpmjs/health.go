package tpmjsdoor

import (
	"net/http"
	"runtime"
	"time"

	"github.com/toolgate/toolgate/gateway"
)

// Capabilities advertised by GET /info.
const (
	// defaultMaxExecutionMs is the tpmjs driver's default call timeout.
	defaultMaxExecutionMs = 120_000
)

// healthReply is GET /health: the protocol's fields, and the gateway's own
// under "toolgate".
type healthReply struct {
	Status                string         `json:"status"`
	ProtocolVersion       string         `json:"protocolVersion"`
	ImplementationVersion string         `json:"implementationVersion"`
	Runtime               string         `json:"runtime"`
	Timestamp             string         `json:"timestamp"`
	Toolgate              healthToolgate `json:"toolgate"`
}

type healthToolgate struct {
	Healthy bool                    `json:"healthy"`
	Drivers map[string]driverHealth `json:"drivers,omitempty"`
}

// driverHealth is one driver's cached health, shown to authenticated
// callers only.
type driverHealth struct {
	Healthy   bool   `json:"healthy"`
	Engine    string `json:"engine,omitempty"`
	Detail    string `json:"detail,omitempty"`
	CheckedAt string `json:"checked_at,omitempty"`
}

// health serves GET /health. It never calls a downstream: it reads the
// drivers' cached health, so it answers at once even while an executor
// is busy. It is open without a key, like gRPC health; the drivers' detail
// is shown only to an authenticated caller.
func (d *Door) health(w http.ResponseWriter, r *http.Request) {
	rep := healthReply{
		Status: "ok", ProtocolVersion: ProtocolVersion, ImplementationVersion: gateway.Version,
		Runtime: "toolgate", Timestamp: d.now().UTC().Format(time.RFC3339Nano),
		Toolgate: healthToolgate{Healthy: true},
	}
	_, authErr := d.callerFrom(r.Context())
	all := d.gw.DriverHealth()
	if authErr == nil {
		rep.Toolgate.Drivers = make(map[string]driverHealth, len(all))
	}
	for name, h := range all {
		rep.Toolgate.Healthy = rep.Toolgate.Healthy && h.Healthy
		if authErr != nil {
			continue
		}
		dh := driverHealth{Healthy: h.Healthy, Engine: h.Engine, Detail: h.Detail}
		if !h.CheckedAt.IsZero() {
			dh.CheckedAt = h.CheckedAt.UTC().Format(time.RFC3339Nano)
		}
		rep.Toolgate.Drivers[name] = dh
	}
	d.writeJSON(w, http.StatusOK, rep)
}

// infoReply is GET /info.
type infoReply struct {
	Name            string       `json:"name"`
	Version         string       `json:"version"`
	ProtocolVersion string       `json:"protocolVersion"`
	Capabilities    capabilities `json:"capabilities"`
	Runtime         infoRuntime  `json:"runtime"`
}

type capabilities struct {
	Isolation           string   `json:"isolation"`
	ExecutionModes      []string `json:"executionModes"`
	MaxExecutionTimeMs  int64    `json:"maxExecutionTimeMs"`
	MaxRequestBodyBytes int64    `json:"maxRequestBodyBytes"`
	SupportsStreaming   bool     `json:"supportsStreaming"`
	SupportsCallbacks   bool     `json:"supportsCallbacks"`
	SupportsCaching     bool     `json:"supportsCaching"`
}

type infoRuntime struct {
	Platform  string `json:"platform"`
	GoVersion string `json:"goVersion"`
}

// info serves GET /info. maxExecutionTimeMs is the tpmjs driver's default
// call timeout: a tpmjs driver of another gateway chained behind this one
// lowers its own timeout to fit under it.
func (d *Door) info(w http.ResponseWriter, _ *http.Request) {
	d.writeJSON(w, http.StatusOK, infoReply{
		Name: "Toolgate", Version: gateway.Version, ProtocolVersion: ProtocolVersion,
		Capabilities: capabilities{
			Isolation: "process", ExecutionModes: []string{"sync"}, MaxExecutionTimeMs: defaultMaxExecutionMs,
			MaxRequestBodyBytes: d.maxBody,
		},
		Runtime: infoRuntime{Platform: runtime.GOOS, GoVersion: runtime.Version()},
	})
}
