package oidc

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/toolgate/toolgate/config"
)

// ClientSecret is where the client secret is read from: {file: PATH} or
// {env: NAME}.
type ClientSecret struct {
	config.SecretSource `yaml:",inline"`
}

// UnmarshalYAML refuses anything but a mapping of file or env, without
// quoting it: whoever wrote a scalar may have pasted the secret itself.
func (s *ClientSecret) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: console.oidc.client_secret: want {file: FILE} or {env: VAR}; "+
			"a secret never goes in the configuration itself", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; k != "file" && k != "env" {
			return fmt.Errorf("line %d: console.oidc.client_secret: unknown key %q (want file or env)", n.Content[i].Line, k)
		}
	}
	var plain struct {
		File string `yaml:"file"`
		Env  string `yaml:"env"`
	}
	if err := n.Decode(&plain); err != nil {
		return fmt.Errorf("line %d: console.oidc.client_secret: want {file: FILE} or {env: VAR}", n.Line)
	}
	s.SecretSource = config.SecretSource{File: plain.File, Env: plain.Env}
	return nil
}
