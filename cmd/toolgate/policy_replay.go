package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/policy/history"
	"github.com/toolgate/toolgate/policy/replay"
)

const replayAbout = `Decides every call recorded in an evidence store again under the
candidate policy folder and reports the calls it would decide otherwise
(allow, deny, approval_required), counted by kind and by the candidate's
deciding rule. The baseline is the decision on record, or --baseline's
folder; a baseline set whose digest is the recorded one must reach the
recorded decision, or the call is not replayable. A call whose evidence
fails verification, or whose record lacks something a rule reads (a
redacted argument, for one), is listed as not replayable, never guessed.

Exit 0; 1 when a --fail-on kind occurred; 2 on an error.
`

const shadowAbout = `Reports, in the format of "toolgate policy replay", how the shadow
(log-only) policy sets decided the calls recorded in an evidence store
against the enforcing sets: the live view of what replay shows for a
candidate folder.

Exit 0; 1 when a --fail-on kind occurred; 2 on an error.
`

// replayFlags are the flags policy replay and policy shadow-report share.
type replayFlags struct {
	store        *storeFlags
	pubkeys      stringList
	requireSig   *bool
	since, until *string
	caller, tool *string
	asJSON       *bool
	failOn       *string
	concurrency  *int
}

func addReplayFlags(fs *flag.FlagSet) *replayFlags {
	f := &replayFlags{store: addStoreFlags(fs)}
	fs.Var(&f.pubkeys, "pubkey", "trusted public key `file` (PEM or base64) of the gateways whose manifests are checked; repeat for several")
	f.requireSig = fs.Bool("require-signature", false, "count a call whose manifest is not signed by a trusted key as failing verification (needs --pubkey)")
	f.since = fs.String("since", "", "only calls received at or after `TIME`: RFC 3339, or a duration back from now such as 24h")
	f.until = fs.String("until", "", "only calls received before `TIME`: RFC 3339, or a duration back from now")
	f.caller = fs.String("caller", "", "only this caller's calls")
	f.tool = fs.String("tool", "", "only calls of this tool `id`")
	f.asJSON = fs.Bool("json", false, "print the report as JSON")
	f.failOn = fs.String("fail-on", "", "exit 1 when any of these comma-separated `kinds` occurs: "+
		strings.Join(replay.Kinds(), ", ")+", not-replayable, unverified")
	f.concurrency = fs.Int("concurrency", replay.DefaultConcurrency, "how many requests to read, verify and decide at once (reports keep the log order)")
	return f
}

// options returns the verification options, the filter and the --fail-on
// kinds.
func (f *replayFlags) options(now time.Time) (evidence.VerifyOptions, replay.Filter, []string, error) {
	opts := evidence.VerifyOptions{RequireSignature: *f.requireSig, History: history.NewChecker(), Concurrency: *f.concurrency}
	var filter replay.Filter
	var err error
	if *f.concurrency < 1 || *f.concurrency > 256 {
		return opts, filter, nil, errors.New("--concurrency must be between 1 and 256")
	}
	if opts.TrustedKeys, err = readPublicKeys(f.pubkeys); err != nil {
		return opts, filter, nil, err
	}
	if opts.RequireSignature && len(opts.TrustedKeys) == 0 {
		return opts, filter, nil, errors.New("--require-signature needs at least one --pubkey")
	}
	if *f.since != "" {
		if filter.Since, err = parseSince(*f.since, now); err != nil {
			return opts, filter, nil, err
		}
	}
	if *f.until != "" {
		if filter.Until, err = parseSince(*f.until, now); err != nil {
			return opts, filter, nil, errors.New(strings.Replace(err.Error(), "--since", "--until", 1))
		}
	}
	filter.Caller, filter.Tool = *f.caller, *f.tool
	kinds, err := parseFailOn(*f.failOn)
	return opts, filter, kinds, err
}

func parseFailOn(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	known := append(replay.Kinds(), "not-replayable", "unverified")
	var kinds []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(known, k) {
			return nil, fmt.Errorf("--fail-on: unknown kind %q; the kinds are %s", k, strings.Join(known, ", "))
		}
		kinds = append(kinds, k)
	}
	return kinds, nil
}

// finish prints rep and returns the exit code --fail-on asks for.
func (f *replayFlags) finish(name string, std stdio, rep *replay.Report, kinds []string, preface string) int {
	var err error
	if *f.asJSON {
		err = rep.WriteJSON(std.Out)
	} else {
		if preface != "" {
			fmt.Fprintln(std.Out, preface)
		}
		err = rep.WriteText(std.Out)
	}
	if err != nil {
		return std.exit(name, err)
	}
	for _, k := range kinds {
		if n := rep.Count(k); n > 0 {
			fmt.Fprintf(std.Err, "%s: %d %s (--fail-on)\n", name, n, k)
			return exitFailure
		}
	}
	return exitOK
}

// policyReplay is `toolgate policy replay`.
func policyReplay(ctx context.Context, args []string, std stdio) int {
	const name = "toolgate policy replay"
	exit := func(err error) int { return std.exit(name, err) }
	fs := newFlagSet(name, "--evidence URL --candidate DIR [flags]", replayAbout, std)
	f := addReplayFlags(fs)
	candidate := fs.String("candidate", "", "candidate policy `folder` (required)")
	baseline := fs.String("baseline", "", "baseline policy `folder` (default: the decisions on record)")
	if err := parseFlags(fs, args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 || *candidate == "" {
		fs.Usage()
		return exitError
	}
	opts, filter, kinds, err := f.options(time.Now())
	if err != nil {
		return exit(err)
	}
	r := &replay.Replayer{}
	if r.Candidate, err = replay.LoadPolicies(*candidate); err != nil {
		return exit(fmt.Errorf("--candidate: %w", err))
	}
	if *baseline != "" {
		if r.Baseline, err = replay.LoadPolicies(*baseline); err != nil {
			return exit(fmt.Errorf("--baseline: %w", err))
		}
	}
	store, _, err := f.store.open(ctx)
	if err != nil {
		return exit(err)
	}
	defer store.Close()
	rep, err := replay.Replay(ctx, store, opts, filter, r)
	if err != nil {
		return exit(err)
	}
	return f.finish(name, std, rep, kinds, "")
}

// policyShadowReport is `toolgate policy shadow-report`.
func policyShadowReport(ctx context.Context, args []string, std stdio) int {
	const name = "toolgate policy shadow-report"
	exit := func(err error) int { return std.exit(name, err) }
	fs := newFlagSet(name, "--evidence URL [flags]", shadowAbout, std)
	f := addReplayFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return exitError
	}
	opts, filter, kinds, err := f.options(time.Now())
	if err != nil {
		return exit(err)
	}
	store, _, err := f.store.open(ctx)
	if err != nil {
		return exit(err)
	}
	defer store.Close()
	rep, err := replay.Shadow(ctx, store, opts, filter)
	if err != nil {
		return exit(err)
	}
	return f.finish(name, std, rep, kinds, fmt.Sprintf("%d calls decided by no shadow set", rep.NoShadow))
}
