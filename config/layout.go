package config

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/internal/secretfile"
)

// GatewayPath is one of the gateway's own files or folders, named by the
// configuration key it comes from.
type GatewayPath struct {
	Key  string
	Path string
}

// GatewayPaths lists the files and folders a workspace must never reach:
// whoever can write them can rewrite policy, forge or erase evidence, or
// read the keys. The secret files are not listed here by hand: they are
// every file a field tagged `secret:"file"` names, in this configuration,
// its drivers' sections and its front doors' (secretFiles).
func (c Config) GatewayPaths() []GatewayPath {
	var out []GatewayPath
	add := func(key, path string) {
		if path != "" {
			out = append(out, GatewayPath{key, path})
		}
	}
	add("policies.dir", c.Policies.Dir)
	if scheme, rest, ok := strings.Cut(c.Evidence.URL, "://"); ok && strings.EqualFold(scheme, "file") {
		add("evidence.url", rest)
	}
	if c.Evidence.SpoolDir != "none" {
		add("evidence.spool_dir", c.Evidence.SpoolDir)
	}
	if f := c.Log.StateFile; f != "none" {
		add("log.state_file", f)
	}
	for _, p := range c.secretFiles() {
		add(p.Key, p.Path)
	}
	add("redact.rules_file", c.Redact.RulesFile)
	add("tls.cert_file", c.TLS.CertFile)
	for _, name := range slices.Sorted(maps.Keys(c.Drivers)) {
		for _, p := range Footprint(c.Drivers[name].Config, nil).OwnPaths {
			add("drivers."+name+"."+p.Key, p.Path)
		}
	}
	add("the configuration file", c.File)
	return out
}

// secretFiles lists every file the configuration names as a secret: the
// fields tagged `secret:"file"` of the configuration (the signing,
// fingerprint, shared MAC, webhook and TLS keys, the trusted keys), of its
// drivers' sections and of its front doors' decoded sections (DoorSettings).
func (c Config) secretFiles() []secretfile.Path {
	out := secretfile.Find("", c)
	for _, name := range slices.Sorted(maps.Keys(c.DoorSettings)) {
		out = append(out, secretfile.Find("front_doors."+name, c.DoorSettings[name])...)
	}
	for _, name := range slices.Sorted(maps.Keys(c.SectionSettings)) {
		out = append(out, secretfile.Find(name, c.SectionSettings[name])...)
	}
	return out
}

// Footprint is what a driver section holds on the host (drivers.HostUser),
// the zero Footprint for a section that holds nothing. A nil getenv reads
// an empty environment, for callers that want paths only.
func Footprint(dc drivers.Config, getenv func(string) string) drivers.Footprint {
	hu, ok := dc.(drivers.HostUser)
	if !ok {
		return drivers.Footprint{}
	}
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	return hu.Footprint(getenv)
}

// workspaces lists the folders the drivers let callers write, named by
// their keys.
func (c Config) workspaces() []GatewayPath {
	var out []GatewayPath
	for _, name := range slices.Sorted(maps.Keys(c.Drivers)) {
		for _, w := range Footprint(c.Drivers[name].Config, nil).Workspaces {
			if w.Path != "" {
				out = append(out, GatewayPath{"drivers." + name + "." + w.Key, w.Path})
			}
		}
	}
	return out
}

// CheckLayout refuses a configuration in which a workspace driver's root
// equals, contains or lies inside one of the gateway's own files or folders:
// the policy folder, a file:// evidence folder, the spool, a trace folder,
// the signing, fingerprint and TLS keys, the redaction rules or the
// configuration file (Config.File). A workspace caller could otherwise
// rewrite a policy that hot reload then enforces, or forge evidence.
//
// Paths are compared after filepath.Abs and with the symbolic links of
// their longest existing prefix resolved, so "." from the repository root,
// a symlinked alias and "ws/../" spellings are all recognised. Unlike
// Validate, it reads the file system; Build calls it.
func (c Config) CheckLayout() error {
	if err := c.checkKeyPlacement(); err != nil {
		return err
	}
	var protected []GatewayPath
	for _, p := range c.GatewayPaths() {
		real, err := resolvedPath(p.Path)
		if err != nil {
			return fmt.Errorf("config: %s %q: %w", p.Key, p.Path, err)
		}
		protected = append(protected, GatewayPath{p.Key, real})
	}
	for _, ws := range c.workspaces() {
		key := ws.Key
		root, err := resolvedPath(ws.Path)
		if err != nil {
			return fmt.Errorf("config: %s %q: %w", key, ws.Path, err)
		}
		for _, p := range protected {
			var rel string
			switch {
			case root == p.Path:
				rel = "is"
			case within(p.Path, root):
				rel = "contains"
			case within(root, p.Path):
				rel = "lies inside"
			default:
				continue
			}
			return fmt.Errorf("config: %s (%s) %s %s (%s): callers of the workspace tools could read or rewrite "+
				"the gateway's own files; move the workspace and the gateway's files apart", key, root, rel, p.Key, p.Path)
		}
	}
	return nil
}

// checkKeyPlacement refuses a private key file (the signing key, the
// fingerprint key, the TLS key) that is, or lies inside, one of the folders
// the gateway fills for others to read: the evidence folder, which auditors
// copy and publish, the spool, whose contents go to the store, the policy
// folder and the trace folders. Paths are compared as CheckLayout compares
// them.
func (c Config) checkKeyPlacement() error {
	var keys, folders []GatewayPath
	for _, p := range c.GatewayPaths() {
		switch {
		case p.Key == "evidence.signing_key.file" || p.Key == "redact.fingerprint_key.file" || p.Key == "tls.key_file":
			keys = append(keys, p)
		case p.Key == "evidence.url" || p.Key == "evidence.spool_dir" || p.Key == "policies.dir" || strings.HasSuffix(p.Key, ".trace_dir"):
			folders = append(folders, p)
		}
	}
	for _, k := range keys {
		key, err := resolvedPath(k.Path)
		if err != nil {
			return fmt.Errorf("config: %s %q: %w", k.Key, k.Path, err)
		}
		for _, f := range folders {
			folder, err := resolvedPath(f.Path)
			if err != nil {
				return fmt.Errorf("config: %s %q: %w", f.Key, f.Path, err)
			}
			if key == folder || within(key, folder) {
				return fmt.Errorf("config: %s (%s) lies inside %s (%s): whoever is given that folder would get the key; "+
					"keep the gateway's keys outside the folders it fills", k.Key, key, f.Key, folder)
			}
		}
	}
	return nil
}

// within reports whether path lies strictly inside dir; both are clean
// absolute paths.
func within(path, dir string) bool {
	if dir == string(filepath.Separator) {
		return path != dir
	}
	return strings.HasPrefix(path, dir+string(filepath.Separator))
}

// resolvedPath returns p made absolute, with the symbolic links of its
// longest existing prefix resolved; the part that does not exist yet is
// appended as written (cleaned), since nothing can redirect it.
func resolvedPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var missing []string
	for {
		real, err := filepath.EvalSymlinks(abs)
		if err == nil {
			return filepath.Join(append([]string{real}, missing...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(abs)
		if parent == abs {
			return "", err
		}
		missing = append([]string{filepath.Base(abs)}, missing...)
		abs = parent
	}
}
