package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/tlog"
	"golang.org/x/mod/sumdb/note"
)

// evidenceProve writes the proof file of one request. It returns
// exitFailure when the log shows the request's manifest was deleted or
// replaced: the search for a proof found tampering.
func evidenceProve(ctx context.Context, args []string, std stdio) int {
	stdout, stderr := std.Out, std.Err
	exit := func(err error) int { return std.exit("toolgate evidence prove", err) }
	fs := newEvidenceFlags("prove", "[--evidence URL | --config FILE] [--out FILE] [--cosigned] REQUEST_ID", std)
	sf := addStoreFlags(fs)
	out := fs.String("out", "", "write the proof to this `file` (default: REQUEST_ID.tlog-proof; -: standard output)")
	cosigned := fs.Bool("cosigned", false, "prove inclusion in the newest witness-cosigned checkpoint (see cosign), so the proof carries the cosignatures")
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
	data, err := evidence.Prove(ctx, store, id, evidence.ProveOptions{Cosigned: *cosigned})
	if errors.Is(err, evidence.ErrLoggedManifestGone) {
		fmt.Fprintf(stdout, "TAMPERED %s: %s\n", cell(id), cell(err.Error()))
		return exitFailure
	}
	if err != nil {
		return exit(err)
	}
	file := *out
	if file == "" {
		file = id + ".tlog-proof"
	}
	if file == "-" {
		_, err = stdout.Write(data)
		return exit(err)
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return exit(err)
	}
	p, err := tlog.ParseProof(data)
	if err != nil {
		return exit(err)
	}
	origin, _, _ := strings.Cut(string(p.Checkpoint), "\n")
	fmt.Fprintf(stderr, "wrote the proof of request %s (entry %d of %s, %d bytes) to %s; check it with: toolgate evidence verify-proof %s --pubkey KEY\n",
		cell(id), p.Index, origin, len(data), file, file)
	return exitOK
}

// evidenceVerifyProof checks a proof file offline: exitOK when it is
// valid, exitFailure when it is not.
func evidenceVerifyProof(_ context.Context, args []string, std stdio) int {
	stdout := std.Out
	exit := func(err error) int { return std.exit("toolgate evidence verify-proof", err) }
	fs := newEvidenceFlags("verify-proof", "FILE --pubkey KEY [--witness-key VKEY]... [--witness-threshold N] [--json]", std)
	var pubkeys, witnessKeys stringList
	fs.Var(&pubkeys, "pubkey", "trusted gateway public key `file` (PEM or base64); repeat for several keys")
	fs.Var(&witnessKeys, "witness-key", "trusted witness verifier `key` (name+id+base64, as the witness prints it); repeat for several witnesses")
	threshold := fs.Int("witness-threshold", 0, "how many of the --witness-key witnesses must have cosigned (default: 1 when witness keys are given, as verify)")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exit(err)
	}
	if len(pos) != 1 || len(pubkeys) == 0 {
		fs.Usage()
		return exitError
	}
	var opts evidence.ProofOptions
	if opts.LogKeys, err = readPublicKeys(pubkeys); err != nil {
		return exit(err)
	}
	if opts.Witnesses, err = parseWitnessKeys(witnessKeys); err != nil {
		return exit(err)
	}
	opts.WitnessThreshold = *threshold
	if opts.WitnessThreshold == 0 && len(opts.Witnesses) > 0 {
		opts.WitnessThreshold = 1
	}
	data, err := os.ReadFile(pos[0])
	if err != nil {
		return exit(err)
	}
	rep, err := evidence.VerifyProof(data, opts)
	if err != nil && !errors.Is(err, evidence.ErrInvalidProof) {
		return exit(err)
	}
	if *asJSON {
		if perr := printProofJSON(stdout, rep, err); perr != nil {
			return exit(perr)
		}
	} else {
		printProofReport(stdout, pos[0], rep, err)
	}
	if err != nil {
		return exitFailure
	}
	return exitOK
}

// parseWitnessKeys parses the --witness-key values.
func parseWitnessKeys(vkeys []string) ([]note.Verifier, error) {
	var out []note.Verifier
	for _, k := range vkeys {
		v, err := tlog.ParseWitnessKey(strings.TrimSpace(k))
		if err != nil {
			return nil, fmt.Errorf("--witness-key: %w", err)
		}
		out = append(out, v)
	}
	return out, nil
}

// printProofReport says what a proof proves, or why it proves nothing.
func printProofReport(w io.Writer, file string, rep evidence.ProofReport, err error) {
	if err != nil {
		fmt.Fprintf(w, "INVALID %s: %s\n", cell(file), cell(err.Error()))
		return
	}
	fmt.Fprintf(w, "valid %s: request %s, outcome %s\n", cell(file), cell(rep.RequestID), cell(rep.Outcome))
	fmt.Fprintf(w, "  manifest sha256 %s, signed by trusted key %s\n", rep.ManifestSHA256, rep.KeyID)
	fmt.Fprintf(w, "  entry %d of log %s (logged by %s), under its checkpoint of %d entries signed by trusted key %s\n",
		rep.Index, cell(rep.Origin), cell(rep.Gateway), rep.CheckpointSize, rep.CheckpointKeyID)
	if len(rep.Witnesses) == 0 {
		fmt.Fprintln(w, "  no witness cosignature checked")
		return
	}
	names := make([]string, len(rep.Witnesses))
	for i, n := range rep.Witnesses {
		names[i] = cell(n)
	}
	fmt.Fprintf(w, "  cosigned by trusted witnesses: %s\n", strings.Join(names, ", "))
}

// proofJSON is verify-proof's --json output.
type proofJSON struct {
	Valid bool   `json:"valid"`
	Error string `json:"error,omitempty"`
	*evidence.ProofReport
}

func printProofJSON(w io.Writer, rep evidence.ProofReport, verr error) error {
	out := proofJSON{Valid: verr == nil}
	if verr != nil {
		out.Error = verr.Error()
	} else {
		out.ProofReport = &rep
	}
	data, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return printJSONLine(w, data)
}

// evidenceCosign has every instance's newest checkpoint cosigned by the
// witnesses. It returns exitFailure when a witness refused a log as
// forked or rolled back.
func evidenceCosign(ctx context.Context, args []string, std stdio) int {
	stdout, stderr := std.Out, std.Err
	exit := func(err error) int { return std.exit("toolgate evidence cosign", err) }
	fs := newEvidenceFlags("cosign", "--witness-url URL... [--instance NAME]... [--evidence URL | --config FILE]", std)
	sf := addStoreFlags(fs)
	var urls, instances stringList
	fs.Var(&urls, "witness-url", "a C2SP tlog-witness submission `URL` (add-checkpoint is posted below it); repeat for several witnesses")
	fs.Var(&instances, "instance", "cosign only this gateway instance's log (`name`); repeat for several (default: every log in the store)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exit(err)
	}
	if len(pos) > 0 || len(urls) == 0 {
		fs.Usage()
		return exitError
	}
	store, _, err := sf.open(ctx)
	if err != nil {
		return exit(err)
	}
	defer store.Close()
	if len(instances) == 0 {
		if instances, err = evidence.LogInstances(ctx, store); err != nil {
			return exit(err)
		}
		if len(instances) == 0 {
			return exit(errors.New("the store holds no log with a checkpoint"))
		}
	}
	code := exitOK
	for _, inst := range instances {
		rep, err := evidence.Cosign(ctx, store, inst, evidence.CosignOptions{WitnessURLs: urls})
		switch {
		case errors.Is(err, evidence.ErrWitnessRefused):
			fmt.Fprintf(stdout, "REFUSED %s: %s\n", cell(inst), cell(err.Error()))
			code = exitFailure
		case err != nil:
			// The other logs are still worth cosigning.
			fmt.Fprintf(stderr, "toolgate evidence cosign: %s: %s\n", cell(inst), cell(err.Error()))
			code = max(code, exitError)
		case rep.AlreadyCosigned:
			fmt.Fprintf(stdout, "cosigned %s: checkpoint of %d entries already cosigned (%s)\n", cell(rep.Origin), rep.Size, rep.Key)
		default:
			fmt.Fprintf(stdout, "cosigned %s: checkpoint of %d entries, %d cosignature(s), stored at %s\n", cell(rep.Origin), rep.Size, rep.Cosignatures, rep.Key)
		}
	}
	return code
}

// evidenceVkey prints the signed-note verifier key of each instance's
// log: what a witness is configured with to cosign it.
func evidenceVkey(ctx context.Context, args []string, std stdio) int {
	stdout := std.Out
	exit := func(err error) int { return std.exit("toolgate evidence vkey", err) }
	fs := newEvidenceFlags("vkey", "--pubkey FILE [--instance NAME]... [--evidence URL | --config FILE]", std)
	sf := addStoreFlags(fs)
	var pubkeys, only stringList
	fs.Var(&pubkeys, "pubkey", "the gateway's public key `file` (PEM or base64), as pubkey prints it")
	fs.Var(&only, "instance", "print only this gateway instance's log (`name`); repeat for several (default: every log in the store)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exit(err)
	}
	if len(pos) > 0 || len(pubkeys) != 1 {
		fs.Usage()
		return exitError
	}
	keys, err := readPublicKeys(pubkeys)
	if err != nil {
		return exit(err)
	}
	store, _, err := sf.open(ctx)
	if err != nil {
		return exit(err)
	}
	defer store.Close()
	instances, err := evidence.LogInstances(ctx, store)
	if err != nil {
		return exit(err)
	}
	for _, name := range only {
		if !slices.Contains(instances, name) {
			return exit(fmt.Errorf("--instance %s: the store holds no log of that instance", cell(name)))
		}
	}
	if len(only) > 0 {
		instances = only
	}
	if len(instances) == 0 {
		return exit(errors.New("the store holds no log with a checkpoint"))
	}
	for _, inst := range instances {
		origin, err := evidence.LogOrigin(ctx, store, inst)
		if err != nil {
			return exit(err)
		}
		vkey, err := note.NewEd25519VerifierKey(origin, keys[0])
		if err != nil {
			return exit(err)
		}
		fmt.Fprintln(stdout, vkey)
	}
	return exitOK
}
