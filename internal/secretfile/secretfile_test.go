package secretfile

import (
	"reflect"
	"slices"
	"testing"
)

type source struct {
	File string `yaml:"file" secret:"file"`
	Env  string `yaml:"env"`
}

type signing struct {
	source `yaml:",inline"`
	Create bool `yaml:"create"`
}

type plugin struct {
	StateKeyFile string `yaml:"state_key_file" secret:"file"`
	JWKSFile     string `yaml:"jwks_file" secret:"public"`
}

type section struct {
	Type   string
	Config any
}

type config struct {
	TLS struct {
		CertFile string `yaml:"cert_file" secret:"public"`
		KeyFile  string `yaml:"key_file" secret:"file"`
	} `yaml:"tls"`
	Signing *signing            `yaml:"signing_key"`
	Trusted []source            `yaml:"trusted_keys"`
	Extra   []string            `yaml:"extra_files" secret:"file"`
	Drivers map[string]section  `yaml:"drivers"`
	Hooks   map[string]*source  `yaml:"hooks"`
	Ignored string              `yaml:"-" secret:"file"`
	Raw     map[string][]string `yaml:"raw"`
	hidden  source
}

func TestFindFollowsEveryShapeOfConfiguration(t *testing.T) {
	t.Parallel()
	var c config
	c.TLS.CertFile, c.TLS.KeyFile = "/etc/cert.pem", "/etc/key.pem"
	c.Signing = &signing{source: source{File: "/etc/sign.pem"}}
	c.Trusted = []source{{Env: "PUB"}, {File: "/etc/peer.pub"}}
	c.Extra = []string{"", "/etc/extra"}
	c.Drivers = map[string]section{"b": {Type: "x", Config: &plugin{StateKeyFile: "/etc/b.key", JWKSFile: "/etc/jwks"}}, "a": {Config: plugin{}}}
	c.Hooks = map[string]*source{"h": {File: "/etc/hook.key"}, "nil": nil}
	c.Ignored = "/etc/not-a-key-of-the-file"
	c.hidden = source{File: "/etc/unexported"}
	got := Find("", c)
	want := []Path{
		{"tls.key_file", "/etc/key.pem"},
		{"signing_key.file", "/etc/sign.pem"},
		{"trusted_keys[1].file", "/etc/peer.pub"},
		{"extra_files[1]", "/etc/extra"},
		{"drivers.b.state_key_file", "/etc/b.key"},
		{"hooks.h.file", "/etc/hook.key"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Find =\n%v\nwant\n%v", got, want)
	}
	if got := Find("front_doors.mcp", &plugin{StateKeyFile: "s"}); !slices.Equal(got, []Path{{"front_doors.mcp.state_key_file", "s"}}) {
		t.Errorf("Find with a prefix = %v", got)
	}
	if got := Find("", nil); got != nil {
		t.Errorf("Find(nil) = %v", got)
	}
}

func TestUndeclaredNamesEveryFileKeyWithoutADeclaration(t *testing.T) {
	t.Parallel()
	type bad struct {
		RulesFile  string   `yaml:"rules_file"`
		File       *string  `yaml:"file"`
		KeyFiles   []string `yaml:"key_files"`
		Typo       string   `yaml:"x_file" secret:"secret"`
		NotAString int      `yaml:"n" secret:"file"`
		Nested     struct {
			CAFile string `yaml:"ca_file"`
			Fine   string `yaml:"ca_file_mode"`
		} `yaml:"nested"`
		Sections map[string]struct {
			TokenFile string `yaml:"token_file"`
		} `yaml:"sections"`
		Profile string `yaml:"profile"`
	}
	got := Undeclared("root", reflect.TypeFor[bad]())
	want := []string{
		"root.rules_file", "root.file", "root.key_files",
		`root.x_file: secret tag "secret" (want "file" or "public")`,
		"root.n: secret tag on a int, not a file name",
		"root.nested.ca_file", "root.sections.*.token_file",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Undeclared =\n%q\nwant\n%q", got, want)
	}
	if got := Undeclared("", reflect.TypeFor[*config]()); len(got) != 0 {
		t.Errorf("a fully declared configuration: Undeclared = %q", got)
	}
}
