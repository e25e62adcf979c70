package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"

	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/redact"
)

// redactAbout is what "toolgate redact -h" says before the flags.
const redactAbout = `Redacts FILE (or standard input) with the gateway's rules and writes the result to standard
output; each redaction is reported on standard error as one JSON object per line (rule, offset
or JSON path, never the secret). Use it to try a rules file on real output before deploying it.
Exit 1 when something was redacted, 0 when nothing was, 2 on errors.
`

// redactCmd runs the redactor the way the gateway configures it, on one
// file or on standard input.
func redactCmd(ctx context.Context, args []string, std stdio) int {
	stdout, stderr := std.Out, std.Err
	fs := newFlagSet("toolgate redact", "[flags] [FILE]", redactAbout, std)
	configPath := fs.String("config", "", "take redact.rules_file, disable_rules and key_names from this YAML configuration `file` (default: the embedded default)")
	rulesFile := fs.String("rules-file", "", "gitleaks-format rules `file` to add; overrides the configuration's redact.rules_file")
	disable := fs.String("disable", "", "comma-separated rule `ids` to switch off, besides the configuration's")
	asJSON := fs.Bool("json", false, "redact the input as one JSON document (structure kept, findings name JSON paths)")
	listRules := fs.Bool("list-rules", false, "print the active rules and exit")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return exitError
	}

	cfg, err := gateway.DefaultConfig()
	if *configPath != "" {
		cfg, err = gateway.LoadConfig(*configPath)
	}
	if err != nil {
		fmt.Fprintf(stderr, "toolgate redact: %v\n", err)
		return exitError
	}
	rc := cfg.Redact
	rc.DisableRules = append(slices.Clip(rc.DisableRules), splitList(*disable)...)
	if *rulesFile != "" {
		rc.RulesFile = *rulesFile
	}
	r, err := newRuleRedactor(rc)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate redact: %v\n", err)
		return exitError
	}
	if *listRules {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSOURCE\tKEYWORDS\tDESCRIPTION")
		for _, info := range r.Rules() {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", info.ID, info.Source, len(info.Keywords), info.Description)
		}
		if err := tw.Flush(); err != nil {
			return exitError
		}
		return exitOK
	}

	name, in := "stdin", std.In
	if fs.NArg() == 1 {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			fmt.Fprintf(stderr, "toolgate redact: %v\n", err)
			return exitError
		}
		defer f.Close()
		name, in = fs.Arg(0), f
	}
	var findings []redact.Finding
	if *asJSON {
		doc, err := io.ReadAll(in)
		if err != nil {
			fmt.Fprintf(stderr, "toolgate redact: %v\n", err)
			return exitError
		}
		out, found, err := r.JSON(name, doc)
		if err != nil {
			fmt.Fprintf(stderr, "toolgate redact: %v\n", err)
			return exitError
		}
		findings = found
		if _, err := stdout.Write(out); err != nil {
			return exitError
		}
	} else if findings, _, err = r.Copy(ctx, name, stdout, in); err != nil {
		fmt.Fprintf(stderr, "toolgate redact: %v\n", err)
		return exitError
	}
	enc := json.NewEncoder(stderr)
	for _, f := range findings {
		if err := enc.Encode(f); err != nil {
			return exitError
		}
	}
	if len(findings) > 0 {
		return exitFailure
	}
	return exitOK
}

// newRuleRedactor builds the redactor of a configuration's rules: the
// default rules, its key names and rules file, less the rules it disables.
// It is what "redact" runs and what "check config" compiles; serve's
// redactor (gateway.Build) adds what only a running gateway knows, the
// values of its secrets and keys.
func newRuleRedactor(c gateway.RedactConfig) (*redact.Redactor, error) {
	return redact.New(redact.Config{KeyNames: c.KeyNames, RulesFile: c.RulesFile, DisableRules: c.DisableRules})
}
