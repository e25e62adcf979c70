package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"

	"github.com/toolgate/toolgate/config"
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
	exit := func(err error) int { return std.exit("toolgate redact", err) }
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
	r, err := redactorFor(*configPath, *rulesFile, *disable)
	if err != nil {
		return exit(err)
	}
	if *listRules {
		return exit(printRules(std.Out, r))
	}
	name, in := "stdin", std.In
	if fs.NArg() == 1 {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return exit(err)
		}
		defer f.Close()
		name, in = fs.Arg(0), f
	}
	findings, err := redactInput(ctx, r, name, in, std.Out, *asJSON)
	if err != nil {
		return exit(err)
	}
	enc := json.NewEncoder(std.Err)
	for _, f := range findings {
		if err := enc.Encode(f); err != nil {
			return exit(err)
		}
	}
	if len(findings) > 0 {
		return exitFailure
	}
	return exitOK
}

// redactorFor builds the redactor of the configuration at configPath (the
// embedded default when empty), with rulesFile instead of its rules file
// when given and the comma-separated rule ids of disable switched off too.
func redactorFor(configPath, rulesFile, disable string) (*redact.Redactor, error) {
	cfg, err := config.DefaultConfig()
	if configPath != "" {
		cfg, err = config.LoadConfig(configPath)
	}
	if err != nil {
		return nil, err
	}
	rc := cfg.Redact
	rc.DisableRules = append(slices.Clip(rc.DisableRules), splitList(disable)...)
	if rulesFile != "" {
		rc.RulesFile = rulesFile
	}
	return newRuleRedactor(rc)
}

// printRules prints a table of r's rules.
func printRules(w io.Writer, r *redact.Redactor) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSOURCE\tKEYWORDS\tDESCRIPTION")
	for _, info := range r.Rules() {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", info.ID, info.Source, len(info.Keywords), info.Description)
	}
	return tw.Flush()
}

// redactInput redacts in, named name, to out: as a stream of text, or
// with asJSON as one JSON document. It returns what it redacted.
func redactInput(ctx context.Context, r *redact.Redactor, name string, in io.Reader, out io.Writer, asJSON bool) ([]redact.Finding, error) {
	if !asJSON {
		findings, _, err := r.Copy(ctx, name, out, in)
		return findings, err
	}
	doc, err := io.ReadAll(in)
	if err != nil {
		return nil, err
	}
	redacted, findings, err := r.JSON(name, doc)
	if err != nil {
		return nil, err
	}
	_, err = out.Write(redacted)
	return findings, err
}

// newRuleRedactor builds the redactor of a configuration's rules
// (config.RedactConfig.Rules), the one "redact" runs and "check config" compiles.
func newRuleRedactor(c config.RedactConfig) (*redact.Redactor, error) {
	return redact.New(c.Rules())
}
