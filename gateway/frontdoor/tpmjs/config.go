package tpmjsdoor

import (
	"fmt"
	"regexp"

	"github.com/toolgate/toolgate/gateway/frontdoor"
)

func init() {
	frontdoor.Register(frontdoor.Kind{Name: Name, New: func() frontdoor.Config { return newConfig() }})
}

// catalogPackagePattern keeps catalog_package out of npm's name space: npm
// names cannot start with "_", so the pseudo-package never shadows a real
// one.
var catalogPackagePattern = regexp.MustCompile(`^_[a-z0-9][a-z0-9._-]{0,63}$`)

// Config is the section front_doors.tpmjs. Its defaults are those of
// newConfig: the door off, no catalog package, a 2 MiB body cap.
type Config struct {
	// Listener holds listen (unset: the door is off), cors_origins and
	// max_body_bytes, with the rules every door shares.
	frontdoor.Listener `yaml:",inline"`
	// CatalogPackage, when set (for example "_catalog"), lets TPMJS
	// clients run any catalog tool, the workspace's included, as
	// "<catalog_package>::<tool id>", and lists such tools in the search.
	// Default "": only TPMJS tools are reachable. Policy decides every
	// call either way.
	CatalogPackage string `yaml:"catalog_package"`
}

// newConfig returns the section with its defaults, for YAML to fill.
func newConfig() *Config {
	return &Config{Listener: frontdoor.Listener{MaxBodyBytes: frontdoor.DefaultMaxBodyBytes}}
}

// Validate checks the section; errors start with the key they name.
func (c *Config) Validate() error {
	if err := c.Listener.Validate(); err != nil {
		return err
	}
	if c.CatalogPackage != "" && !catalogPackagePattern.MatchString(c.CatalogPackage) {
		return fmt.Errorf("catalog_package %q: must match %s (npm names cannot start with \"_\", so it never shadows a package)",
			c.CatalogPackage, catalogPackagePattern)
	}
	return nil
}

// Open makes the door for d.Gateway.
func (c *Config) Open(d frontdoor.Deps) (frontdoor.Door, error) {
	if d.Gateway == nil {
		return nil, fmt.Errorf("tpmjsdoor: Open: no gateway")
	}
	return newDoor(d.Gateway, *c, frontdoor.PrincipalFrom, d.Logger), nil
}
