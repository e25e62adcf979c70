package drivers

import "time"

// Health is what a driver last knew of its downstream. It is read from
// state the driver keeps anyway, never from a fresh request, so asking for
// it costs nothing and cannot block on a slow downstream.
type Health struct {
	// Healthy reports whether the driver expects calls to reach its
	// downstream now.
	Healthy bool `json:"healthy"`
	// Engine is the driver's engine name, as in engine_ref.
	Engine string `json:"engine"`
	// Detail says why the driver is unhealthy, or what it knows beyond
	// Healthy (a pool's idle runners); never a credential.
	Detail string `json:"detail,omitempty"`
	// CheckedAt is when the state was last learned; zero when the driver
	// learns it on every call (a local folder) or has not checked yet.
	CheckedAt time.Time `json:"checked_at,omitzero"`
}

// HealthReporter is implemented by a driver that can say how its
// downstream is doing. Health must return at once: it reads cached state
// (a background probe's last answer, a pool's count), and must not take a
// lock a running call holds for long.
type HealthReporter interface {
	Health() Health
}
