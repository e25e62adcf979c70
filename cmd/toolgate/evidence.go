package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/storeurl"
	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/gateway/signingkey"
	"github.com/toolgate/toolgate/internal/termsafe"
	"github.com/toolgate/toolgate/policy/history"
)

const evidenceUsage = `Usage: toolgate evidence <command> [flags]

Read and check an evidence store, or manage the key that signs manifests.
The store is --evidence URL (file://DIR or s3://BUCKET/PREFIX?...), or
evidence.url of --config FILE, or the embedded default's file://./toolgate-evidence.

  ls [--run-id R] [--tool T] [--decision allow|deny|approval_required] [--since TIME] [--limit N]
        one tab-separated line per request: received_at, request_id, caller,
        tool, decision, rule_id, ok, approval ("-" when absent). decision is
        the last attempt's. approval is pending, approved (not used yet),
        consumed (approved and run), denied or expired. --decision
        approval_required lists every request that asked for a human's
        approval, whatever came of it (its last decision is then allow,
        deny or approval_required). TIME is RFC 3339 or a duration back
        from now, such as 24h.
  show REQUEST_ID
        every artifact of the request, pretty-printed: the claim, the
        approval asked for and its decision, the attempts in order, the
        result; then the approval's state
  verify (REQUEST_ID | --all) [--pubkey FILE]... [--spool DIR] [--require-signature] [-v] [--json]
         [--require-log] [--log-grace DURATION] [--checkpoint FILE] [--proof FILE]... [--witness-key VKEY]...
         [--witness-threshold N]
        check artifacts against manifests and manifests against signatures,
        and list each request's attempts. The trusted keys are the --pubkey
        files and, with --config, the configuration's evidence.trusted_keys
        (the replicas' keys, which the gateway trusts beside its own: list
        every replica's key there, its own included, and the auditor and the
        replicas trust one set). A manifest signed by any other key is
        unknown-key, told apart from bad-signature (a signature that does not
        match its manifest). --all also re-derives every
        instance's transparency log, checks it extends the checkpoints kept
        in --checkpoint (rewritten with the newest when all verifies) or
        carried by --proof, and every size another replica witnessed of it,
        and joins it with the bucket: a logged request that is gone is
        missing. verify --help says what to keep to catch what.
        A request that asked for approval must tell one story: the approval
        is for the call claimed, decided before it expired, and every run
        after it uses it; with --pubkey its approval_request.json and
        approval.json must be signed by a key given (an unsigned or forged
        one is tampering), and, with the logs, an approval a run used must
        be logged. Without --pubkey approval signatures are unchecked.
        --all judges one view of a live bucket: it lists every request
        first, then reads the logs, and reads nothing the listing lacks (a
        manifest stored since is not read). A request stored within
        --log-grace of that listing (by the store's clock) is pending, not
        failed: in flight (no manifest yet), or with log entries not yet
        sequenced; older, it is incomplete or unlogged. Exit 1 when a
        request shows tampering or lacks what --require-* demands (with
        --require-log: unlogged, never pending), or a log is inconsistent;
        0 otherwise (unsigned, incomplete, not-dispatched,
        awaiting-approval, pending and unlogged requests are reported, not
        failed). --json prints one JSON object a line instead, with the
        approval's id, state and approver.
  prove REQUEST_ID [--out FILE] [--cosigned]
        write a self-contained C2SP tlog-proof of the request's manifest
        (REQUEST_ID.tlog-proof; --out - for standard output): the manifest,
        its log entry, the inclusion proof and the signed checkpoint.
        --cosigned uses the newest witness-cosigned checkpoint. Exit 1 when
        the log shows the manifest was deleted or replaced.
  verify-proof FILE --pubkey FILE [--witness-key VKEY]... [--witness-threshold N] [--json]
        check a proof offline with nothing but the gateway's public key (and
        the witnesses' keys): exit 0 valid, 1 invalid. Every signature line
        must be by a key given; by default one of the witnesses given must
        have cosigned.
  cosign --witness-url URL... [--instance NAME]...
        have each instance's newest checkpoint cosigned by C2SP tlog-witness
        witnesses and store it at log/<instance>/cosigned/<size>. Exit 1 when
        a witness refuses a log as forked or rolled back.
  vkey --pubkey FILE [--instance NAME]...
        print each instance log's verifier key (origin+id+key), what a
        witness is configured with to cosign that log
  pubkey [--config FILE | --key FILE | --key-env VAR]
        print the public key (PEM) and key id of a signing key: by default
        the key evidence.signing_key of the configuration names (--config,
        or the embedded default's ./toolgate-signing.key, which serve
        creates on its first start), read from this folder as serve reads it
  console --listen ADDR [--pubkey FILE]... [--witness-key VKEY]... [--policies DIR] [--allow-non-loopback]
        serve the console read-only from the store, without a gateway: the
        requests, each request verified, runs and a whole-store verification
        in a browser at http://ADDR/. No sign-in: whoever reaches it reads
        the whole store, so it listens on loopback unless
        --allow-non-loopback. --policies shows the deciding rules' text.
  keygen --out FILE
        write a new Ed25519 signing key (PEM PKCS #8, mode 0600) and print
        its public key; "openssl genpkey -algorithm ed25519 -out FILE" works too

Exit status 2 on errors, including a request with no evidence at all.
`

// evidenceCmd runs the auditor's subcommands.
func evidenceCmd(ctx context.Context, args []string, std stdio) int {
	return evidenceGroup().run(ctx, args, std)
}

// evidenceGroup is the commands of "toolgate evidence".
func evidenceGroup() group {
	return group{name: "toolgate evidence", usage: evidenceUsage, commands: map[string]command{
		"ls":           evidenceLs,
		"show":         evidenceShow,
		"verify":       evidenceVerify,
		"prove":        evidenceProve,
		"verify-proof": evidenceVerifyProof,
		"cosign":       evidenceCosign,
		"vkey":         evidenceVkey,
		"pubkey":       evidencePubkey,
		"keygen":       evidenceKeygen,
		"console":      evidenceConsole,
	}}
}

// newEvidenceFlags returns the flag set of one evidence subcommand.
func newEvidenceFlags(name, synopsis string, std stdio) *flag.FlagSet {
	return newFlagSet("toolgate evidence "+name, synopsis, "", std)
}

// parseArgs parses flags that may come before, between or after the
// positional arguments, as in "verify r1 --pubkey k.pem", and returns the
// positional ones. Everything after "--" is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// storeFlags name the evidence store a subcommand reads.
type storeFlags struct {
	url    string
	config string
	// cfg is the configuration resolve read: --config, or the embedded
	// default.
	cfg config.Config
}

func addStoreFlags(fs *flag.FlagSet) *storeFlags {
	f := &storeFlags{}
	fs.StringVar(&f.url, "evidence", "", "evidence store `URL` (file://DIR or s3://BUCKET/PREFIX?...); overrides the configuration's evidence.url")
	fs.StringVar(&f.config, "config", "", "read evidence.url from this YAML configuration `file` (default: the embedded default)")
	return f
}

// resolve returns the store URL and, when the URL comes from the
// configuration, the configuration's spool folder (empty when spooling is
// off).
func (f *storeFlags) resolve() (url, spoolDir string, err error) {
	var cfg config.Config
	if f.config != "" {
		cfg, err = config.LoadConfig(f.config)
	} else {
		cfg, err = config.DefaultConfig()
	}
	if err != nil {
		return "", "", err
	}
	f.cfg = cfg
	if f.url != "" {
		return f.url, "", nil
	}
	if cfg.Evidence.SpoolDir != "none" {
		spoolDir = cfg.Evidence.SpoolDir
	}
	return cfg.Evidence.URL, spoolDir, nil
}

// openStore opens a store for reading. Unlike the gateway, an auditor's
// command never creates a missing file:// folder: a typing mistake must
// not look like an empty store.
// open opens the store the flags name, and returns the configuration's
// spool folder as resolve does.
func (f *storeFlags) open(ctx context.Context) (evidence.StoreCloser, string, error) {
	url, spoolDir, err := f.resolve()
	if err != nil {
		return nil, "", err
	}
	store, err := openStore(ctx, url)
	return store, spoolDir, err
}

func openStore(ctx context.Context, url string) (evidence.StoreCloser, error) {
	if dir, ok := strings.CutPrefix(url, "file://"); ok {
		if err := requireDir(dir); err != nil {
			return nil, fmt.Errorf("evidence store %s: %w", url, err)
		}
	}
	return storeurl.Open(ctx, url)
}

func requireDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	return nil
}

// errLimit stops a walk once --limit lines are printed.
var errLimit = errors.New("limit reached")

// evidenceLs lists the requests of a store, one line each, as they are
// found.
func evidenceLs(ctx context.Context, args []string, std stdio) int {
	stdout, stderr := std.Out, std.Err
	exit := func(err error) int { return std.exit("toolgate evidence ls", err) }
	fs := newEvidenceFlags("ls", "[--run-id R] [--tool T] [--decision D] [--since TIME] [--limit N] [--evidence URL | --config FILE]", std)
	sf := addStoreFlags(fs)
	runID := fs.String("run-id", "", "only requests with this ctx.run_id")
	tool := fs.String("tool", "", "only requests for this tool `id`")
	decision := fs.String("decision", "", "only requests whose last policy decision is allow or deny, or, with approval_required, that asked for approval")
	sinceArg := fs.String("since", "", "only requests received at or after `TIME`: RFC 3339, or a duration back from now such as 24h")
	limit := fs.Int("limit", 0, "print at most `N` requests (0: all)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exit(err)
	}
	if len(pos) > 0 {
		return exit(fmt.Errorf("unexpected arguments %q", pos))
	}
	if *decision != "" && *decision != "allow" && *decision != "deny" && *decision != evidence.DecisionApprovalRequired {
		return exit(fmt.Errorf("--decision %q: want allow, deny or approval_required", *decision))
	}
	if *limit < 0 {
		return exit(fmt.Errorf("--limit %d: must not be negative", *limit))
	}
	var since time.Time
	if *sinceArg != "" {
		if since, err = parseSince(*sinceArg, time.Now()); err != nil {
			return exit(err)
		}
	}
	store, _, err := sf.open(ctx)
	if err != nil {
		return exit(err)
	}
	defer store.Close()

	// Lines are written as they are found, never aligned, so that a
	// bucket of any size streams and the output stays easy to cut(1).
	fmt.Fprintln(stdout, "received_at\trequest_id\tcaller\ttool\tdecision\trule_id\tok\tapproval")
	printed := 0
	err = evidence.WalkRequests(ctx, store, func(id string, keys []string) error {
		var req evidence.RequestRecord
		reqState, err := readArtifact(ctx, store, keys, evidence.Key(id, evidence.ArtifactRequest), &req, stderr)
		if err != nil {
			return err
		}
		if (*runID != "" && req.Ctx.RunID != *runID) || (*tool != "" && req.ToolID != *tool) ||
			(!since.IsZero() && (reqState != artifactRead || req.ReceivedAt.Before(since))) {
			return nil
		}
		var dec evidence.DecisionRecord
		decState, err := readArtifact(ctx, store, keys, lastDecisionKey(id, keys), &dec, stderr)
		if err != nil {
			return err
		}
		asked := slices.Contains(keys, evidence.Key(id, evidence.ArtifactApprovalRequest))
		if *decision == evidence.DecisionApprovalRequired && !asked ||
			*decision != "" && *decision != evidence.DecisionApprovalRequired && dec.Decision != *decision {
			return nil
		}
		approval, err := approvalCell(ctx, store, id, keys, stderr)
		if err != nil {
			return err
		}
		var resp evidence.ResponseRecord
		respState, err := readArtifact(ctx, store, keys, evidence.Key(id, evidence.ArtifactResponse), &resp, stderr)
		if err != nil {
			return err
		}
		received := ""
		if !req.ReceivedAt.IsZero() {
			received = req.ReceivedAt.UTC().Format(time.RFC3339)
		}
		ok := ""
		if respState == artifactRead {
			ok = strconv.FormatBool(resp.OK)
		}
		fmt.Fprintln(stdout, strings.Join([]string{
			reqState.cell(received), cell(id), reqState.cell(req.Caller), reqState.cell(req.ToolID),
			decState.cell(dec.Decision), decState.cell(dec.RuleID), respState.cell(ok), approval,
		}, "\t"))
		printed++
		if *limit > 0 && printed >= *limit {
			return errLimit
		}
		return nil
	})
	if errors.Is(err, errLimit) {
		return exitOK
	}
	return exit(err)
}

// approvalCell returns ls's approval column: the approval's state, "-"
// when the request never asked for one, "?" when its records do not
// parse (reported on stderr; verify says more).
func approvalCell(ctx context.Context, s evidence.Reader, id string, keys []string, stderr io.Writer) (string, error) {
	sum, found, err := evidence.ReadApproval(ctx, s, id, keys)
	switch {
	case errors.Is(err, evidence.ErrMalformedApproval):
		fmt.Fprintf(stderr, "toolgate evidence ls: %s: %v\n", cell(id), err)
		return "?", nil
	case err != nil:
		return "", err
	case !found:
		return "-", nil
	}
	return sum.State, nil
}

// lastDecisionKey returns the key of the policy decision of the request's
// last decided attempt, the one that counts: earlier attempts were closed
// not_dispatched. Without any, it is the first attempt's key, absent.
func lastDecisionKey(id string, keys []string) string {
	key, last := evidence.Key(id, evidence.ArtifactPolicyDecision), 0
	for _, k := range keys {
		if n, name, ok := evidence.ParseAttemptKey(id, k); ok && name == evidence.ArtifactPolicyDecision && n > last {
			key, last = k, n
		}
	}
	return key
}

// artifactState says what became of reading one artifact for ls.
type artifactState int

const (
	artifactAbsent     artifactState = iota // not stored (yet)
	artifactRead                            // read and decoded
	artifactUnreadable                      // stored but not the expected JSON
)

// cell renders a field of an artifact in this state: "-" when the
// artifact or the field is absent, "?" when the artifact is unreadable.
func (s artifactState) cell(v string) string {
	if s == artifactUnreadable {
		return "?"
	}
	return cell(v)
}

// readArtifact decodes key into v if keys lists it. A malformed artifact
// is reported on stderr and yields artifactUnreadable; only a failing
// store is an error.
func readArtifact(ctx context.Context, s evidence.Reader, keys []string, key string, v any, stderr io.Writer) (artifactState, error) {
	if !slices.Contains(keys, key) {
		return artifactAbsent, nil
	}
	data, err := s.Get(ctx, key)
	if errors.Is(err, evidence.ErrNotExist) {
		return artifactAbsent, nil
	}
	if err != nil {
		return artifactAbsent, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		fmt.Fprintf(stderr, "toolgate evidence ls: %s: %v\n", key, err)
		return artifactUnreadable, nil
	}
	return artifactRead, nil
}

// cell renders one field of a tab-separated line: "-" when empty, quoted
// with its unsafe runes escaped when it holds any (termsafe.Quote), so that
// evidence cannot break the columns, send escape sequences to a terminal
// or reorder what it shows.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return termsafe.Quote(s)
}

// parseSince reads --since: an RFC 3339 time, or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time (2025-01-02T15:04:05Z) or a positive duration (24h)", s)
	}
	return now.Add(-d), nil
}

// showOrder is the order in which show prints the known artifacts: the
// order the gateway writes them in, each attempt's artifacts (see
// attemptOrder) taking the place of attemptsPlace. Others follow in key
// order.
var showOrder = []string{
	evidence.ArtifactRequest, evidence.ArtifactApprovalRequest, evidence.ArtifactApproval, attemptsPlace,
	evidence.ArtifactToolResult, evidence.ArtifactResponse, evidence.ArtifactManifest,
}

// attemptsPlace stands in showOrder for the attempts' artifacts; it ends
// in a slash, so no artifact's name can equal it.
const attemptsPlace = "attempts/"

// attemptOrder is the order of one attempt's artifacts; attempts follow
// one another by number.
var attemptOrder = []string{evidence.ArtifactPolicyDecision, evidence.ArtifactDispatch, evidence.ArtifactNotDispatched}

// showRank returns where show prints key of request id: its place in
// showOrder, then its attempt and its place in attemptOrder.
func showRank(id, key string) (place, attempt, within int) {
	n, name, ok := evidence.ParseAttemptKey(id, key)
	if i := slices.Index(attemptOrder, name); ok && i >= 0 {
		return slices.Index(showOrder, attemptsPlace), n, i
	}
	if i := slices.Index(showOrder, name); ok && n == 1 && i >= 0 {
		return i, 0, 0
	}
	return len(showOrder), 0, 0
}

// evidenceShow prints every artifact of one request, then the state of
// its approval.
func evidenceShow(ctx context.Context, args []string, std stdio) int {
	stdout := std.Out
	exit := func(err error) int { return std.exit("toolgate evidence show", err) }
	fs := newEvidenceFlags("show", "[--evidence URL | --config FILE] REQUEST_ID", std)
	sf := addStoreFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exit(err)
	}
	if len(pos) != 1 {
		fs.Usage()
		return exitError
	}
	id := pos[0]
	store, _, err := sf.open(ctx)
	if err != nil {
		return exit(err)
	}
	defer store.Close()
	keys, err := listRequest(ctx, store, id)
	if err != nil {
		return exit(err)
	}
	slices.SortStableFunc(keys, func(a, b string) int {
		pa, na, wa := showRank(id, a)
		pb, nb, wb := showRank(id, b)
		return cmp.Or(cmp.Compare(pa, pb), cmp.Compare(na, nb), cmp.Compare(wa, wb))
	})
	for i, key := range keys {
		data, err := store.Get(ctx, key)
		if err != nil {
			return exit(err)
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(stdout, "== %s ==\n", key)
		if pretty, err := termsafe.Indent(data, "", "  "); err == nil {
			fmt.Fprintf(stdout, "%s\n", bytes.TrimSpace(pretty))
			continue
		}
		fmt.Fprintf(stdout, "(not JSON, %d bytes; control characters escaped)\n%s\n", len(data), termsafe.Text(string(bytes.TrimSuffix(data, []byte("\n")))))
	}
	return exit(showApproval(ctx, stdout, store, id, keys))
}

// showApproval ends show's output with the state of the request's
// approval, which no single artifact states: whether it was used, and,
// for a parent waiting on its guest's call, the nested request holding it.
func showApproval(ctx context.Context, w io.Writer, s evidence.Reader, id string, keys []string) error {
	sum, found, err := evidence.ReadApproval(ctx, s, id, keys)
	switch {
	case errors.Is(err, evidence.ErrMalformedApproval):
		fmt.Fprintf(w, "\n== approval: unreadable (%s); run toolgate evidence verify %s ==\n", cell(err.Error()), cell(id))
		return nil
	case err != nil:
		return err
	case !found:
		return nil
	}
	line := fmt.Sprintf("approval %s: %s", sum.ApprovalID, sum.State)
	if sum.Approver != "" {
		line += " by " + cell(sum.Approver)
	}
	if sum.NestedRequestID != "" {
		line += "; held by nested request " + cell(sum.NestedRequestID)
	}
	fmt.Fprintf(w, "\n== %s%s ==\n", line, cell(approvalSignature(sum)))
	return nil
}

// errNoEvidence reports a request id without a single artifact.
var errNoEvidence = errors.New("no evidence stored")

// listRequest returns the keys of a request, or an error when it has none.
func listRequest(ctx context.Context, s evidence.Reader, id string) ([]string, error) {
	if strings.Contains(id, "/") || evidence.ValidKey(id) != nil {
		return nil, fmt.Errorf("request id %q is not a valid request id", id)
	}
	keys, err := s.List(ctx, evidence.RequestPrefix(id))
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w for request %q", errNoEvidence, id)
	}
	return keys, nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// verdictOrder lists the verdicts of evidence.VerifyReport.Verdict, worst
// first, for the summary.
var verdictOrder = []string{
	"mismatch", "missing", "bad-signature", "unknown-key", "unsigned-required",
	"incomplete", "not-dispatched", "awaiting-approval", "pending", "unlogged", "unchecked-signature", "unsigned", "ok",
}

// progressEvery is how many requests verify --all checks between updates
// of its progress line.
const progressEvery = 100

// verifyFlags are evidence verify's flags.
type verifyFlags struct {
	store                        *storeFlags
	all, requireSig, reqLog      *bool
	verbose, asJSON              *bool
	spool, checkpoint            *string
	pubkeys, witnessKeys, proofs stringList
	witnessThreshold             *int
	logGrace                     *time.Duration
}

// verifyAbout is verify's --help: its verdicts and exit codes, what it
// catches, and what an auditor must keep outside the store for it to (the
// auditor's walkthrough in docs/auditors/evidence.md says the same at length).
const verifyAbout = `
Checks each request's artifacts against its manifest and the manifest's
signature; --all also re-derives every transparency log and joins it with
the requests. One verdict per request, worst first:

  mismatch, missing, bad-signature, unknown-key   tampering: exit 1
  unsigned-required   with --require-signature: exit 1
  unlogged            no log records it, stored longer ago than the log
                      grace: exit 1 with --require-log
  pending             on its way: in flight (no manifest yet), its log
                      entries not sequenced yet, or waiting in the spool;
                      with --all, stored within --log-grace of the listing
                      by the store's clock: exit 0, even with --require-log
  incomplete, not-dispatched, awaiting-approval, unchecked-signature,
  unsigned, ok        exit 0

--all judges one view of a live bucket: it lists every request first, then
reads the logs, and reads nothing the listing lacks. A log that is
inconsistent or unwitnessed also exits 1; errors exit 2.

What catches each kind of tampering by someone who can write to the store
but holds no gateway's key (the last row: one who holds a log's key too):
  an artifact or manifest altered or deleted   the store alone; a manifest
                                               re-signed: --pubkey
  a record forged, or signed by another key    --pubkey of every replica
  a logged request deleted                     --all with --pubkey of every replica
  a request planted that no log records        --all --require-log
  one replica's log rolled back, truncated or  --all with --pubkey of every replica,
    forked, its newest requests deleted        where the replicas witness each other
                                               (the default once they trust each
                                               other's keys): another log recorded
                                               its size, and its gateway is named
  every log rolled back together, a single     a kept --checkpoint, a --proof from
    gateway's log rolled back, the whole       before, or --witness-key while the
    store replaced by an older copy            external witness's larger cosigned
                                               checkpoint is in the store (if it was
                                               deleted too, the next cosign fails:
                                               the witness refuses the log)
  a log rewritten by a holder of its key       a replica that witnessed it, a kept
                                               --checkpoint, or an external witness
Without a kept checkpoint, a proof or an external witness, nothing detects
every log of the store rolled back at once to copies taken at one moment
(witness entries and cosigned checkpoints with them), or a lone gateway's log
rolled back. Keep, outside the store: each replica's public key (toolgate
evidence pubkey), the file --checkpoint rewrites, the proofs you were handed,
and the external witnesses' verifier keys.
`

func newVerifyFlags(std stdio) (*flag.FlagSet, *verifyFlags) {
	fs := newFlagSet("toolgate evidence verify", "[flags] (REQUEST_ID | --all)", verifyAbout, std)
	f := &verifyFlags{store: addStoreFlags(fs)}
	f.all = fs.Bool("all", false, "verify every request in the store, and the transparency logs with them")
	fs.Var(&f.pubkeys, "pubkey", "trusted public key `file` (PEM or base64); repeat for several keys (with --config, evidence.trusted_keys are trusted too)")
	f.spool = fs.String("spool", "", "spool `folder` of artifacts not yet uploaded (default: the configuration's evidence.spool_dir when it exists and the store comes from the configuration; none: no spool)")
	f.requireSig = fs.Bool("require-signature", false, "fail on manifests that are not signed by a trusted key (needs --pubkey)")
	f.reqLog = fs.Bool("require-log", false, "with --all, fail on requests no transparency log records (not on those still pending: see --log-grace)")
	f.logGrace = fs.Duration("log-grace", 0, "with --all, how recently before the listing (by the store's clock) a request must have been stored to count as pending: in flight, or with log entries on their way (default: from the configuration's log.checkpoint_interval and evidence.op_timeout, at least 1m)")
	f.checkpoint = fs.String("checkpoint", "", "with --all, `file` of the checkpoints kept from the last verification: the logs must extend them; rewritten with the newest ones when everything verifies")
	fs.Var(&f.witnessKeys, "witness-key", "with --all, a witness's cosignature verifier `key` (name+hash+base64); repeat for several")
	f.witnessThreshold = fs.Int("witness-threshold", 0, "with --all, how many --witness-key witnesses must have cosigned a checkpoint of each log (default: 1 when witness keys are given)")
	fs.Var(&f.proofs, "proof", "with --all, a proof `file` (toolgate evidence prove) from earlier: checked as verify-proof does, its checkpoint counts as kept, so the log must still reach it; repeat for several")
	f.verbose = fs.Bool("v", false, "print every request, not only those with findings, with its attempts and outcome")
	f.asJSON = fs.Bool("json", false, "print every log and request as one JSON object a line (its report and verdict) instead of text; no summary")
	return fs, f
}

// options turns the flags into the library's options; the kept
// checkpoints are read from --checkpoint when the file exists. The
// trusted keys are the --pubkey files and, with --config, the
// configuration's evidence.trusted_keys: the keys its gateway trusts.
func (f *verifyFlags) options(getenv func(string) string) (evidence.VerifyOptions, error) {
	opts := evidence.VerifyOptions{RequireSignature: *f.requireSig, RequireLog: *f.reqLog, History: history.NewChecker()}
	var err error
	if opts.TrustedKeys, err = readPublicKeys(f.pubkeys); err != nil {
		return opts, err
	}
	if f.store.config != "" {
		cfg, err := config.LoadConfig(f.store.config)
		if err != nil {
			return opts, err
		}
		replicas, err := cfg.TrustedPublicKeys(getenv)
		if err != nil {
			return opts, fmt.Errorf("--config %s: %w", f.store.config, err)
		}
		opts.TrustedKeys = append(opts.TrustedKeys, replicas...)
	}
	if *f.requireSig && len(opts.TrustedKeys) == 0 {
		return opts, errors.New("--require-signature needs at least one --pubkey, or --config with evidence.trusted_keys")
	}
	for _, k := range f.witnessKeys {
		v, err := tlog.ParseWitnessKey(k)
		if err != nil {
			return opts, fmt.Errorf("--witness-key: %w", err)
		}
		opts.Witnesses = append(opts.Witnesses, v)
	}
	opts.WitnessThreshold = *f.witnessThreshold
	if opts.WitnessThreshold == 0 && len(opts.Witnesses) > 0 {
		opts.WitnessThreshold = 1
	}
	if *f.checkpoint != "" {
		data, err := os.ReadFile(*f.checkpoint)
		switch {
		case errors.Is(err, fs.ErrNotExist): // the first verification
		case err != nil:
			return opts, fmt.Errorf("--checkpoint: %w", err)
		default:
			if opts.Kept, err = evidence.ParseCheckpoints(data); err != nil {
				return opts, fmt.Errorf("--checkpoint %s: %w", *f.checkpoint, err)
			}
		}
	}
	return opts, f.keepProofs(&opts)
}

// keepProofs checks each --proof as verify-proof does and adds its
// checkpoint to the kept ones: a proof handed out before a rollback
// shows the log's size then.
func (f *verifyFlags) keepProofs(opts *evidence.VerifyOptions) error {
	if len(f.proofs) > 0 && len(opts.TrustedKeys) == 0 {
		return errors.New("--proof needs the --pubkey of the gateway that signed it")
	}
	for _, file := range f.proofs {
		data, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("--proof: %w", err)
		}
		if _, err := evidence.VerifyProof(data, evidence.ProofOptions{LogKeys: opts.TrustedKeys, Witnesses: opts.Witnesses}); err != nil {
			return fmt.Errorf("--proof %s: %w", file, err)
		}
		p, err := tlog.ParseProof(data)
		if err != nil {
			return fmt.Errorf("--proof %s: %w", file, err)
		}
		opts.Kept = append(opts.Kept, p.Checkpoint)
	}
	return nil
}

// grace is --log-grace, or else the grace of the configuration's gateway:
// how long its log may take to sequence an entry, from its checkpoint
// interval and store operation timeout.
func (f *verifyFlags) grace() time.Duration {
	if *f.logGrace > 0 {
		return *f.logGrace
	}
	cfg := f.store.cfg
	return evidence.LogGraceFor(cmp.Or(cfg.Log.CheckpointInterval, config.DefaultCheckpointInterval),
		cmp.Or(cfg.Evidence.OpTimeout, evidence.DefaultOpTimeout))
}

// evidenceVerify returns exitFailure when a request shows tampering or
// lacks what the flags require, or a log is inconsistent, exitError when
// something kept it from checking, and exitOK otherwise.
func evidenceVerify(ctx context.Context, args []string, std stdio) int {
	stdout, stderr := std.Out, std.Err
	exit := func(err error) int { return std.exit("toolgate evidence verify", err) }
	flags, f := newVerifyFlags(std)
	pos, err := parseArgs(flags, args)
	if err != nil {
		return exit(err)
	}
	if (len(pos) == 1) == *f.all || len(pos) > 1 {
		flags.Usage()
		return exitError
	}
	if !*f.all && (*f.reqLog || *f.checkpoint != "" || len(f.witnessKeys) > 0 || len(f.proofs) > 0 || *f.logGrace != 0) {
		return exit(errors.New("--require-log, --log-grace, --checkpoint, --proof and --witness-key check the logs, which only --all reads"))
	}
	if *f.logGrace < 0 {
		return exit(errors.New("--log-grace must not be negative"))
	}
	opts, err := f.options(std.Getenv)
	if err != nil {
		return exit(err)
	}
	store, spoolDir, err := f.store.open(ctx)
	if err != nil {
		return exit(err)
	}
	defer store.Close()
	opts.LogGrace = f.grace()
	if spoolDir, err = chooseSpool(*f.spool, spoolDir); err != nil {
		return exit(err)
	}
	if spoolDir != "" {
		// A spool is a folder in the file store's layout.
		spool, err := evidence.NewFileStore(spoolDir)
		if err != nil {
			return exit(fmt.Errorf("--spool: %w", err))
		}
		defer spool.Close()
		opts.Spool = spool
	}
	p := &verifyPrinter{stdout: stdout, verbose: *f.verbose, asJSON: *f.asJSON, counts: map[string]int{}}
	if !*f.all {
		p.printAll = true // one request is always printed
		rep, err := verifyRequest(ctx, store, pos[0], opts)
		if err != nil {
			return exit(err)
		}
		if err := p.request(rep); err != nil {
			return exit(err)
		}
		return p.exitCode()
	}
	if isTerminal(stderr) {
		p.progress = stderr
	}
	opts.OnLog = p.log
	if err := evidence.VerifyAll(ctx, store, opts, p.request); err != nil {
		p.clearProgress()
		return exit(err)
	}
	p.clearProgress()
	if !*f.asJSON {
		printSummary(stdout, p.total, p.counts, p.logs)
	}
	if *f.checkpoint != "" && p.exitCode() == exitOK {
		if err := writeFileAtomic(*f.checkpoint, evidence.FormatCheckpoints(p.kept)); err != nil {
			return exit(fmt.Errorf("--checkpoint: %w", err))
		}
	}
	return p.exitCode()
}

// verifyPrinter prints verify's reports as they come and counts them.
type verifyPrinter struct {
	stdout, progress io.Writer
	verbose, asJSON  bool
	printAll         bool
	counts           map[string]int
	total            int
	failed           bool
	logs             []evidence.LogReport
	kept             [][]byte
}

func (p *verifyPrinter) request(rep evidence.VerifyReport) error {
	v := rep.Verdict()
	p.counts[v]++
	p.total++
	p.failed = p.failed || rep.Failed()
	if a := rep.Approval; a != nil && (a.Signature == evidence.SignatureUnchecked || a.Signature == evidence.SignatureUnsigned) {
		p.counts["approval-"+a.Signature]++
	}
	if p.printAll || p.verbose || p.asJSON || (v != "ok" && v != "unsigned" && v != "unchecked-signature") {
		p.clearProgress()
		if p.asJSON {
			if err := printJSONReport(p.stdout, rep, v); err != nil {
				return err
			}
		} else {
			printReport(p.stdout, rep, v, p.verbose)
		}
	}
	if p.progress != nil && p.total%progressEvery == 0 {
		fmt.Fprintf(p.progress, "\rverified %d requests…", p.total)
	}
	return nil
}

func (p *verifyPrinter) log(rep evidence.LogReport) error {
	p.logs = append(p.logs, rep)
	p.failed = p.failed || rep.Status != evidence.LogOK
	if rep.Checkpoint != nil {
		p.kept = append(p.kept, rep.Checkpoint)
	}
	if p.asJSON {
		data, err := json.Marshal(struct {
			Log evidence.LogReport `json:"transparency_log"`
		}{rep})
		if err != nil {
			return err
		}
		return printJSONLine(p.stdout, data)
	}
	if p.verbose || rep.Status != evidence.LogOK {
		printLogReport(p.stdout, rep)
	}
	return nil
}

func (p *verifyPrinter) clearProgress() {
	if p.progress != nil && p.total >= progressEvery {
		fmt.Fprint(p.progress, "\r\033[K")
	}
}

func (p *verifyPrinter) exitCode() int {
	if p.failed {
		return exitFailure
	}
	return exitOK
}

// printLogReport prints one log's status line and its findings.
func printLogReport(w io.Writer, rep evidence.LogReport) {
	switch rep.Status {
	case evidence.LogOK:
		fmt.Fprintf(w, "log ok %s: %d entries, checkpoint signature %s", cell(rep.Origin), rep.Size, rep.Signature)
		if len(rep.Witnesses) > 0 {
			fmt.Fprintf(w, ", cosigned at size %d by %s", rep.WitnessedSize, cell(strings.Join(rep.Witnesses, ", ")))
		}
		for i, p := range rep.PeerWitnessed {
			sep := ", "
			if i == 0 {
				sep = ", witnessed by "
			}
			fmt.Fprintf(w, "%s%s at size %d", sep, cell(p.By), p.Size)
		}
		fmt.Fprintln(w)
	default:
		fmt.Fprintf(w, "%s %s: LOG NOT TRUSTWORTHY\n", rep.Status, cell(rep.Origin))
	}
	for _, pr := range rep.Problems {
		fmt.Fprintf(w, "  %s\n", cell(pr))
	}
}

// writeFileAtomic replaces name with data, so that a crash leaves the old
// kept checkpoints or the new ones, never half of either.
func writeFileAtomic(name string, data []byte) error {
	return evidence.WriteFileAtomic(name, data)
}

// verifyRequest verifies one request, which must have evidence in the
// store or the spool.
func verifyRequest(ctx context.Context, store evidence.Reader, id string, opts evidence.VerifyOptions) (evidence.VerifyReport, error) {
	if _, err := listRequest(ctx, store, id); err != nil {
		// A request may so far be in the spool alone.
		if opts.Spool == nil || !errors.Is(err, errNoEvidence) {
			return evidence.VerifyReport{}, err
		}
		if _, err := listRequest(ctx, opts.Spool, id); err != nil {
			return evidence.VerifyReport{}, err
		}
	}
	return evidence.Verify(ctx, store, id, opts)
}

// readPublicKeys reads the --pubkey files.
func readPublicKeys(files []string) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--pubkey: %w", err)
		}
		pub, err := evidence.ParsePublicKey(data)
		if err != nil {
			return nil, fmt.Errorf("--pubkey %s: %w", file, err)
		}
		keys = append(keys, pub)
	}
	return keys, nil
}

// chooseSpool returns the spool folder verify reads, empty for none, from
// --spool (arg) and the configuration's spool folder.
func chooseSpool(arg, configured string) (string, error) {
	switch arg {
	case "":
		// The configuration's spool is used only if it is there: an
		// auditor on another machine has none.
		if configured != "" && requireDir(configured) != nil {
			return "", nil
		}
		return configured, nil
	case "none":
		return "", nil
	default:
		if err := requireDir(arg); err != nil {
			return "", fmt.Errorf("--spool: %w", err)
		}
		return arg, nil
	}
}

// jsonReport is a line of verify --json: the library's report and the
// verdict the command judged it by.
type jsonReport struct {
	evidence.VerifyReport
	Verdict string `json:"verdict"`
}

// printJSONReport prints one request's report as a line of JSON.
func printJSONReport(w io.Writer, rep evidence.VerifyReport, verdict string) error {
	data, err := json.Marshal(jsonReport{rep, verdict})
	if err != nil {
		return err
	}
	return printJSONLine(w, data)
}

// printJSONLine prints the JSON document data as a line, its unsafe runes
// escaped (termsafe.JSON): it is read by people as well as programs.
func printJSONLine(w io.Writer, data []byte) error {
	safe, err := termsafe.JSON(data)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", safe)
	return err
}

// printReport prints one request's verdict line, its findings and, when
// verbose or when they tell more than "one attempt, run", its attempts.
func printReport(w io.Writer, rep evidence.VerifyReport, verdict string, verbose bool) {
	id := cell(rep.RequestID)
	switch verdict {
	case "ok":
		fmt.Fprintf(w, "ok %s: artifacts match; signed by trusted key %s\n", id, rep.KeyID)
	case "unsigned":
		fmt.Fprintf(w, "unsigned %s: artifacts match, but the manifest is not signed, so nothing shows who wrote it\n", id)
	case "unsigned-required":
		fmt.Fprintf(w, "unsigned-required %s: artifacts match, but the manifest is not signed by a trusted key (signature: %s)\n", id, rep.Signature)
	case "unchecked-signature":
		fmt.Fprintf(w, "unchecked-signature %s: artifacts match; signed by key %s, not checked (no --pubkey given)\n", id, rep.KeyID)
	case "pending":
		printPending(w, rep)
	case "incomplete":
		fmt.Fprintf(w, "incomplete %s: no manifest (in flight, or a crash or failure left it)\n", id)
	case "not-dispatched":
		fmt.Fprintf(w, "not-dispatched %s: nothing ran, every attempt was closed not_dispatched; a retry with the same request id may still run it\n", id)
	case "awaiting-approval":
		fmt.Fprintf(w, "awaiting-approval %s: nothing ran; it waits for a human's approval, or, once approved, for its retry\n", id)
	case "unlogged":
		fmt.Fprintf(w, "unlogged %s: artifacts match, but no transparency log records the request, so its deletion would go unnoticed\n", id)
	case "unknown-key":
		fmt.Fprintf(w, "unknown-key %s: TAMPERED: signed by an untrusted key, %s (not among --pubkey and --config's evidence.trusted_keys)\n", id, rep.KeyID)
	case "bad-signature":
		fmt.Fprintf(w, "bad-signature %s: TAMPERED: the signature by key %s does not match the manifest's content\n", id, rep.KeyID)
	default:
		fmt.Fprintf(w, "%s %s: TAMPERED\n", verdict, id)
	}
	for _, p := range rep.Problems {
		if rep.Status == evidence.StatusIncomplete {
			break // the line above says it
		}
		fmt.Fprintf(w, "  %s\n", cell(p))
	}
	if verbose || attemptsNotable(rep) {
		fmt.Fprintf(w, "  %s\n", describeAttempts(rep))
	}
	if a := rep.Approval; a != nil {
		line := fmt.Sprintf("approval %s: %s", a.ApprovalID, a.State)
		if a.Approver != "" {
			line += " by " + a.Approver
		}
		if a.NestedRequestID != "" {
			line += "; held by nested request " + a.NestedRequestID
		}
		fmt.Fprintf(w, "  %s\n", cell(line+approvalSignature(*a)))
	}
}

// approvalSignature says how an approval's records are signed, as a
// clause of its line.
func approvalSignature(a evidence.ApprovalSummary) string {
	switch a.Signature {
	case evidence.SignatureValid:
		return "; records signed by trusted key " + a.KeyID
	case evidence.SignatureUnchecked:
		return "; records signed by key " + a.KeyID + ", not checked (verify --pubkey checks them)"
	case evidence.SignatureUnsigned:
		return "; records not signed"
	}
	return ""
}

// printPending prints the line of a request on its way: waiting in the
// spool, in flight, or with log entries not yet sequenced.
func printPending(w io.Writer, rep evidence.VerifyReport) {
	id := cell(rep.RequestID)
	switch {
	case rep.Status == evidence.StatusIncomplete:
		fmt.Fprintf(w, "pending %s: in flight: no manifest yet, stored within the log grace of the listing\n", id)
	case len(rep.Spooled) > 0:
		fmt.Fprintf(w, "pending %s: artifacts match; %d not yet uploaded from the spool (signature: %s)\n", id, len(rep.Spooled), rep.Signature)
	default:
		fmt.Fprintf(w, "pending %s: artifacts match; stored within the log grace of the listing, its log entries are not sequenced yet (signature: %s)\n", id, rep.Signature)
	}
}

// attemptsNotable reports whether a request's attempts and outcome tell
// more than its verdict line: anything but a single attempt that ran to
// its outcome.
func attemptsNotable(rep evidence.VerifyReport) bool {
	switch {
	case len(rep.Attempts) == 0: // a dispatch record is unreadable; Problems says which
		return false
	case rep.Status == evidence.StatusIncomplete || rep.Status == evidence.StatusNotDispatched ||
		rep.Status == evidence.StatusAwaitingApproval:
		return true
	case rep.Outcome == evidence.OutcomeInterrupted:
		return true
	}
	return len(rep.Attempts) > 1 || rep.Attempts[0].State == evidence.NotDispatched
}

// describeAttempts renders a request's attempts and outcome on one line:
// "attempts: 1 not_dispatched (\"connection refused\"), 2 dispatched;
// outcome completed".
func describeAttempts(rep evidence.VerifyReport) string {
	parts := make([]string, 0, len(rep.Attempts))
	for _, a := range rep.Attempts {
		state := a.State
		if state == evidence.AttemptOpen && a.Decided && rep.Outcome != "" {
			// Finished without a dispatch marker: a deny, which runs
			// nothing and so is never dispatched.
			state = "decided"
		}
		p := fmt.Sprintf("%d %s", a.Number, state)
		if a.Reason != "" {
			p += fmt.Sprintf(" (%q)", a.Reason) // quoted: evidence must not drive the terminal
		}
		parts = append(parts, p)
	}
	line := "attempts: " + strings.Join(parts, ", ")
	if len(parts) == 0 {
		line = "attempts: unreadable"
	}
	if rep.Outcome != "" {
		line += "; outcome " + cell(rep.Outcome)
	}
	return line
}

// printSummary prints the counts per verdict and says plainly what the
// quiet verdicts mean.
func printSummary(w io.Writer, total int, counts map[string]int, logs []evidence.LogReport) {
	var parts []string
	for _, v := range verdictOrder {
		if counts[v] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[v], v))
		}
	}
	if total == 0 {
		fmt.Fprintln(w, "verified 0 requests: the store holds no evidence")
	} else {
		fmt.Fprintf(w, "verified %d requests: %s\n", total, strings.Join(parts, ", "))
	}
	if tampered := counts["mismatch"] + counts["bad-signature"]; tampered > 0 {
		fmt.Fprintf(w, "TAMPERING: %d request(s) do not match their manifest or signature\n", tampered)
	}
	if n := counts["unknown-key"]; n > 0 {
		fmt.Fprintf(w, "TAMPERING: %d request(s) are signed by an untrusted key (a replica's belongs in --pubkey or evidence.trusted_keys)\n", n)
	}
	if n := counts["missing"]; n > 0 {
		fmt.Fprintf(w, "TAMPERING: %d logged request(s) are gone from the store, in part or whole\n", n)
	}
	var entries uint64
	for _, l := range logs {
		entries += l.Size
		if l.Status != evidence.LogOK {
			fmt.Fprintf(w, "TAMPERING: the log %s is %s\n", cell(l.Origin), l.Status)
		}
	}
	if len(logs) > 0 {
		fmt.Fprintf(w, "logs: %d checked, %d entries in all\n", len(logs), entries)
	}
	for _, line := range []struct {
		verdict, text string
	}{
		{"unsigned-required", "FAILED: %d request(s) lack a signature by a trusted key, which --require-signature demands\n"},
		{"pending", "note: %d request(s) are on their way: in flight, waiting in the spool, or stored within the log grace and not yet sequenced; verify again later to see them settled\n"},
		{"unlogged", "note: %d request(s) are in no transparency log (--require-log fails them)\n"},
		{"not-dispatched", "note: %d request(s) never ran: every attempt was closed not_dispatched, and a retry with the same request id may still run them\n"},
		{"awaiting-approval", "note: %d request(s) never ran and wait for a human's approval, or for their retry once approved\n"},
		{"unsigned", "note: %d request(s) have unsigned manifests: their artifacts match, but nothing shows who wrote them\n"},
		{"unchecked-signature", "note: %d signed request(s) were not checked: give the gateway's public key with --pubkey\n"},
		{"approval-unchecked", "note: the approval signatures of %d request(s) were not checked: give the gateway's public key with --pubkey\n"},
		{"approval-unsigned", "note: %d request(s) have approval records no gateway signed; with --pubkey they fail as tampered\n"},
	} {
		if n := counts[line.verdict]; n > 0 {
			fmt.Fprintf(w, line.text, n)
		}
	}
}

// isTerminal reports whether w is a character device such as a terminal,
// where a progress line helps; a pipe or file gets none.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// evidencePubkey prints the public key and key id of a signing key.
func evidencePubkey(_ context.Context, args []string, std stdio) int {
	stdout := std.Out
	exit := func(err error) int { return std.exit("toolgate evidence pubkey", err) }
	fs := newEvidenceFlags("pubkey", "[--config FILE | --key FILE | --key-env VAR]", std)
	keyFile := fs.String("key", "", "private key `file`: PEM PKCS #8 or the base64 of the 32-byte seed")
	keyEnv := fs.String("key-env", "", "environment `variable` holding the private key, in either form")
	configPath := fs.String("config", "", "the key evidence.signing_key of this YAML configuration `file` names (default: the embedded default's)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exit(err)
	}
	if len(pos) > 0 {
		return exit(fmt.Errorf("unexpected arguments %q", pos))
	}
	given := 0
	for _, v := range []string{*keyFile, *keyEnv, *configPath} {
		if v != "" {
			given++
		}
	}
	if given > 1 {
		fs.Usage()
		return exitError
	}
	var data []byte
	switch {
	case *keyFile != "":
		if data, err = os.ReadFile(*keyFile); err != nil {
			return exit(fmt.Errorf("--key: %w", err))
		}
	case *keyEnv != "":
		if data = []byte(std.Getenv(*keyEnv)); len(data) == 0 {
			return exit(fmt.Errorf("--key-env: environment variable %s is empty or unset", *keyEnv))
		}
	default:
		pub, err := configuredPublicKey(*configPath, std.Getenv)
		if err != nil {
			return exit(err)
		}
		return exit(writePublicKey(stdout, pub))
	}
	key, err := evidence.ParsePrivateKey(data)
	if err != nil {
		return exit(err)
	}
	signer, err := evidence.NewSigner(key)
	if err != nil {
		return exit(err)
	}
	return exit(writePublicKey(stdout, signer.PublicKey()))
}

// configuredPublicKey returns the public key of the key the configuration
// at path (the embedded default when empty) signs with, without creating
// it.
func configuredPublicKey(path string, getenv func(string) string) (ed25519.PublicKey, error) {
	var cfg config.Config
	var err error
	if path != "" {
		cfg, err = config.LoadConfig(path)
	} else {
		cfg, err = config.DefaultConfig()
	}
	if err != nil {
		return nil, err
	}
	return signingkey.PublicKey(cfg, getenv)
}

// evidenceKeygen writes a new signing key and prints its public key.
func evidenceKeygen(_ context.Context, args []string, std stdio) int {
	stdout, stderr := std.Out, std.Err
	exit := func(err error) int { return std.exit("toolgate evidence keygen", err) }
	fs := newEvidenceFlags("keygen", "--out FILE", std)
	out := fs.String("out", "", "`file` to write the new private key to (must not exist)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exit(err)
	}
	if len(pos) > 0 || *out == "" {
		fs.Usage()
		return exitError
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return exit(err)
	}
	data, err := evidence.EncodePrivateKey(key)
	if err != nil {
		return exit(err)
	}
	if err := writeNewFile(*out, data); err != nil {
		return exit(err)
	}
	fmt.Fprintf(stderr, "wrote the private key to %s (mode 0600); keep it secret, the public key below verifies its signatures\n", *out)
	return exit(writePublicKey(stdout, pub))
}

// writeNewFile writes a key to a file that must not exist yet, readable
// by its owner only.
func writeNewFile(name string, data []byte) error {
	err := signingkey.CreatePrivateFile(name, data)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s already exists; refusing to overwrite a key", name)
	}
	return err
}

// writePublicKey prints a comment line with the key id, then the key as a
// PEM "PUBLIC KEY" block. The output is a valid --pubkey file: the parser
// and openssl skip the comment line.
func writePublicKey(w io.Writer, pub ed25519.PublicKey) error {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "# key id: %s\n%s", evidence.KeyID(pub), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	return nil
}
