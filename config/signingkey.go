package config

import (
	"errors"
	"fmt"

	"gopkg.in/yaml.v3"
)

// MaxKeyFileBytes bounds what is read of a key file: a PEM Ed25519 key is
// 119 bytes, and a path that names something huge is a mistake.
const MaxKeyFileBytes = 64 << 10

// SigningKeySource is evidence.signing_key: the Ed25519 key that signs
// every manifest. In YAML it is one of
//
//	signing_key: {file: FILE}               a key file (PEM PKCS #8 or base64 seed)
//	signing_key: {env: VAR}                 an environment variable holding the key
//	signing_key: {file: FILE, create: true} a key file the gateway creates if missing
//	signing_key: none                       no signature: manifests are unsigned
//
// Left out, it is the embedded default's {file: ./toolgate-signing.key,
// create: true}: every configuration read from YAML signs.
type SigningKeySource struct {
	SecretSource `yaml:",inline"`
	// Create makes the gateway create File on its first start when it
	// does not exist (Ed25519, PEM PKCS #8, mode 0600, created
	// exclusively). The gateway then owns the file and holds it to more
	// than a configured key: a regular file, never a symbolic link, owned
	// by the gateway's user and neither readable nor writable by group or
	// others.
	Create bool `yaml:"create"`
	// None is the explicit opt-out, `signing_key: none`.
	None bool `yaml:"-"`
}

// UnmarshalYAML accepts the scalar none or a mapping of file, env and
// create. Any other scalar is refused without being quoted: whoever wrote
// one may have pasted the key itself.
func (s *SigningKeySource) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Value != "none" {
			return fmt.Errorf("line %d: evidence.signing_key: want none, {file: FILE} or {env: VAR}; "+
				"a key never goes in the configuration itself", n.Line)
		}
		*s = SigningKeySource{None: true}
		return nil
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			switch k := n.Content[i].Value; k {
			case "file", "env", "create":
			default:
				return fmt.Errorf("line %d: evidence.signing_key: unknown key %q (want file, env or create)", n.Content[i].Line, k)
			}
		}
		var plain struct {
			File   string `yaml:"file"`
			Env    string `yaml:"env"`
			Create bool   `yaml:"create"`
		}
		if err := n.Decode(&plain); err != nil {
			return err
		}
		*s = SigningKeySource{SecretSource: SecretSource{File: plain.File, Env: plain.Env}, Create: plain.Create}
		return nil
	default:
		return fmt.Errorf("line %d: evidence.signing_key: want none, {file: FILE} or {env: VAR}", n.Line)
	}
}

// Validate checks the source without touching the file system.
func (s *SigningKeySource) Validate() error {
	switch {
	case s == nil || s.None:
		return nil
	case s.File != "" && s.Env != "":
		return errors.New("config: evidence.signing_key: give file or env, not both")
	case s.File == "" && s.Env == "":
		return errors.New("config: evidence.signing_key: give file or env (or none for unsigned manifests)")
	case s.Env != "" && !envNamePattern.MatchString(s.Env):
		return fmt.Errorf("config: evidence.signing_key.env %q: not an environment variable name", s.Env)
	case s.Create && s.File == "":
		return errors.New("config: evidence.signing_key.create: needs file (the gateway cannot create an environment variable)")
	}
	return nil
}

// Name says where the key comes from, for messages.
func (s *SigningKeySource) Name() string {
	if s.Env != "" {
		return "environment variable " + s.Env
	}
	return s.File
}
