package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadConfigReadsAtMostMaxConfigBytes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("listen: 127.0.0.1:1\n#"); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxConfigBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cases := []struct {
		name, path, want string
	}{
		{"a file one byte over the bound is refused", big, "too large to be a configuration file"},
		{"an endless file is refused, not read for ever", "/dev/zero", "too large to be a configuration file"},
		{"a folder is refused", dir, "is a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadConfig(c.path)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "config: ") {
				t.Fatalf("LoadConfig(%s) = %v, want an error containing %q", c.path, err, c.want)
			}
		})
	}
	head := "listen: 127.0.0.1:1\n#"
	exact := head + strings.Repeat(" ", MaxConfigBytes-len(head))
	if err := os.WriteFile(big, []byte(exact), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(big)
	if err != nil || cfg.Listen != "127.0.0.1:1" || cfg.File != big {
		t.Fatalf("a file of exactly MaxConfigBytes: %+v, %v", cfg.Listen, err)
	}
}

func TestCheckPolicyRefsNamesTheSetTheFolderLacks(t *testing.T) {
	t.Parallel()
	cfg := Config{Policies: PolicyConfig{Dir: "p",
		Shadow:     map[string]string{"policy.default": "policy.next"},
		Selectable: []PolicySelection{{Refs: []string{"policy.other"}, Callers: []string{"a"}}}}}
	cases := []struct {
		name string
		refs []string
		want string
	}{
		{"a missing shadow candidate is named", []string{"policy.default", "policy.other"}, `config: policies.shadow: no policy set "policy.next" in p`},
		{"a missing selectable set is named", []string{"policy.default", "policy.next"}, `config: policies.selectable[0].refs: no policy set "policy.other" in p`},
		{"every set present is fine", []string{"policy.default", "policy.next", "policy.other"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := cfg.CheckPolicyRefs(c.refs)
			if got := configErrText(err); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

func configErrText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
