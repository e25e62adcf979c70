package config

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/toolgate/toolgate/evidence"
)

// minSharedMACKeyLen is the shortest evidence.shared_mac_key accepted: an
// HMAC-SHA256 key as strong as the hash.
const minSharedMACKeyLen = 32

// PublicKeySource is one entry of evidence.trusted_keys: the Ed25519
// public key of a replica sharing the store. In YAML each entry is one of
//
//	trusted_keys:
//	  - {file: FILE}   # a file holding the key, as `toolgate evidence pubkey` prints it
//	  - {env: VAR}     # an environment variable holding the key
//	  - KEY            # the key itself: the base64 of its 32 bytes, or a PEM
//	                   # "PUBLIC KEY" block (a YAML block scalar)
//
// A public key is no secret: it may stand in the configuration.
type PublicKeySource struct {
	SecretSource `yaml:",inline"`
	// Inline is the key given in the configuration itself.
	Inline string `yaml:"-"`
}

// UnmarshalYAML accepts a scalar (the key itself, parsed at once so that a
// bad one is reported at its line) or a mapping of file or env.
func (p *PublicKeySource) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if _, err := parsePublicKey([]byte(n.Value)); err != nil {
			return fmt.Errorf("line %d: evidence.trusted_keys: %w", n.Line, err)
		}
		*p = PublicKeySource{Inline: n.Value}
		return nil
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i].Value; k != "file" && k != "env" {
				return fmt.Errorf("line %d: evidence.trusted_keys: unknown key %q (want file or env)", n.Content[i].Line, k)
			}
		}
		var src SecretSource
		if err := n.Decode(&src); err != nil {
			return err
		}
		*p = PublicKeySource{SecretSource: src}
		return nil
	default:
		return fmt.Errorf("line %d: evidence.trusted_keys: want {file: FILE}, {env: VAR} or the public key itself", n.Line)
	}
}

// validate checks entry i without touching the file system.
func (p PublicKeySource) validate(i int) error {
	switch {
	case p.Inline != "":
		return nil
	case p.File != "" && p.Env != "":
		return fmt.Errorf("config: evidence.trusted_keys[%d]: give file or env, not both", i)
	case p.File == "" && p.Env == "":
		return fmt.Errorf("config: evidence.trusted_keys[%d]: give file, env or the public key itself", i)
	case p.Env != "" && !envNamePattern.MatchString(p.Env):
		return fmt.Errorf("config: evidence.trusted_keys[%d].env %q: not an environment variable name", i, p.Env)
	}
	return nil
}

// read returns the key of entry i.
func (p PublicKeySource) read(i int, getenv func(string) string) (ed25519.PublicKey, error) {
	data := []byte(p.Inline)
	where := "the key given"
	if p.Inline == "" {
		var err error
		if data, err = p.Read(getenv); err != nil {
			return nil, fmt.Errorf("config: evidence.trusted_keys[%d]: %w", i, err)
		}
		where = p.File
		if p.Env != "" {
			where = "environment variable " + p.Env
		}
	}
	pub, err := parsePublicKey(data)
	if err != nil {
		return nil, fmt.Errorf("config: evidence.trusted_keys[%d]: %s: %w", i, where, err)
	}
	return pub, nil
}

// parsePublicKey is evidence.ParsePublicKey, saying so when what it was
// given is a private key: a replica's private key never leaves it. Like
// ParsePublicKey it never quotes its input.
func parsePublicKey(data []byte) (ed25519.PublicKey, error) {
	pub, err := evidence.ParsePublicKey(data)
	if err != nil && bytes.Contains(data, []byte("PRIVATE KEY")) {
		return nil, errors.New("this is a private key; give the replica's public key (toolgate evidence pubkey prints it), " +
			"and never copy a private key off its gateway")
	}
	return pub, err
}

// TrustedPublicKeys returns the public keys evidence.trusted_keys names,
// read as `toolgate serve` reads them: the replicas whose signatures the
// gateway believes beside its own, and the keys `toolgate evidence verify
// --config` trusts.
func (c Config) TrustedPublicKeys(getenv func(string) string) ([]ed25519.PublicKey, error) {
	keys := make([]ed25519.PublicKey, 0, len(c.Evidence.TrustedKeys))
	var errs []error
	for i, src := range c.Evidence.TrustedKeys {
		if err := src.validate(i); err != nil {
			errs = append(errs, err)
			continue
		}
		pub, err := src.read(i, getenv)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		keys = append(keys, pub)
	}
	return keys, errors.Join(errs...)
}

// validateTrust checks evidence.trusted_keys and evidence.shared_mac_key
// without touching the file system.
func (e EvidenceConfig) validateTrust() error {
	if len(e.TrustedKeys) == 0 && e.SharedMACKey == nil {
		return nil
	}
	if e.SigningKey != nil && e.SigningKey.None {
		return errors.New("config: evidence.trusted_keys and evidence.shared_mac_key need a signing key: with signing_key: none nothing is checked")
	}
	var errs []error
	for i, src := range e.TrustedKeys {
		errs = append(errs, src.validate(i))
	}
	if s := e.SharedMACKey; s != nil {
		switch {
		case s.File != "" && s.Env != "":
			errs = append(errs, errors.New("config: evidence.shared_mac_key: give file or env, not both"))
		case s.File == "" && s.Env == "":
			errs = append(errs, errors.New("config: evidence.shared_mac_key: give file or env; the key never goes in the configuration itself"))
		case s.Env != "" && !envNamePattern.MatchString(s.Env):
			errs = append(errs, fmt.Errorf("config: evidence.shared_mac_key.env %q: not an environment variable name", s.Env))
		}
	}
	return errors.Join(errs...)
}

// ReadSharedMACKey reads evidence.shared_mac_key, without the line end a
// secret file usually has; nil when none is configured.
func ReadSharedMACKey(src *SecretSource, getenv func(string) string) ([]byte, error) {
	if src == nil {
		return nil, nil
	}
	key, err := src.Read(getenv)
	if err != nil {
		return nil, fmt.Errorf("config: evidence.shared_mac_key: %w", err)
	}
	key = bytes.TrimRight(key, "\r\n")
	if len(key) < minSharedMACKeyLen {
		return nil, fmt.Errorf("config: evidence.shared_mac_key: shorter than %d bytes", minSharedMACKeyLen)
	}
	return key, nil
}
