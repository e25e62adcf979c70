package config

import (
	"fmt"
	"net"
	"strings"
)

// DefaultAdminListen is where the admin listener serves when admin.listen
// is not set: this host only.
const DefaultAdminListen = "127.0.0.1:9464"

// AdminOff is the admin.listen value that turns the admin listener off.
const AdminOff = "off"

// AdminConfig is the admin listener: Prometheus metrics on /metrics, and
// liveness (/healthz) and readiness (/readyz, the gRPC health state) for
// load balancers and orchestrators. It has no authentication, so it
// listens on loopback unless told otherwise.
type AdminConfig struct {
	// Listen is the admin listener's host:port; unset means
	// DefaultAdminListen, and "off" turns the listener off.
	Listen string `yaml:"listen"`
	// AllowNonLoopback lets Listen be an address other hosts can reach.
	// The metrics name the tools and the policy rule ids in use and how
	// often callers are denied, which a scraper on another host may need
	// but an attacker should not read: put a firewall or an
	// authenticating proxy in front of it.
	AllowNonLoopback bool `yaml:"allow_non_loopback"`
}

// Addr is the address the admin listener serves on, or "" when it is off.
func (a AdminConfig) Addr() string {
	switch a.Listen {
	case "":
		return DefaultAdminListen
	case AdminOff:
		return ""
	}
	return a.Listen
}

// validate checks admin.listen: a host:port, on loopback unless
// admin.allow_non_loopback, and not the gRPC listener's address.
func (a AdminConfig) validate(grpcListen string) error {
	addr := a.Addr()
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("config: admin.listen %q: %w (or %q to turn it off)", a.Listen, err, AdminOff)
	}
	if !isLoopbackHost(host) && !a.AllowNonLoopback {
		return fmt.Errorf("config: admin.listen %q is not a loopback address: its metrics name the tools and policy "+
			"rule ids in use, and it has no authentication; set admin.allow_non_loopback: true to serve it beyond "+
			"this host (behind a firewall or an authenticating proxy)", addr)
	}
	if port == "0" {
		return nil
	}
	if SameListenAddr(addr, grpcListen) {
		return fmt.Errorf("config: admin.listen %q: the gRPC listener's address (listen); give the admin listener another port", addr)
	}
	return nil
}

// SameListenAddr reports whether listening on a and on b would take the
// same port: the same port number, on the same host or where either host
// is every interface. Port 0 (any free port) never clashes.
func SameListenAddr(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	return strings.EqualFold(ha, hb) || isAnyHost(ha) || isAnyHost(hb)
}

// isAnyHost reports whether host means every interface.
func isAnyHost(host string) bool {
	ip := net.ParseIP(host)
	return host == "" || (ip != nil && ip.IsUnspecified())
}
