// Command toolgate is the Toolgate gateway and its companion tools.
//
//	toolgate serve   [--config FILE] [--listen ADDR] [--admin-listen ADDR|off] [--policies DIR] [--evidence URL] [--workspace DIR]
//	toolgate call    --addr ADDR --request-id ID --tool TOOL [--args JSON] [--run-id R] [--step-id S] [--policy-ref P] [--key-env VAR]
//	toolgate tools   [--addr ADDR] [--key-env VAR] [--limit N] [--policy-ref P] [QUERY]
//	toolgate approvals (ls | show ID | approve ID --reason T | deny ID --reason T) [flags]
//	toolgate policy validate DIR
//	toolgate policy authorize --caller C --tool T [--driver D] [--args JSON] [--policies DIR] [--json] [flags]
//	toolgate policy test DIR
//	toolgate check config FILE...
//	toolgate evidence (ls | show | verify | pubkey | keygen) [flags]
//	toolgate redact [--config FILE] [--rules-file FILE] [--disable IDS] [--json] [--list-rules] [FILE]
//	toolgate version
//
// Every command has one shape, [command], and ends with one of the exit
// codes below.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	_ "github.com/toolgate/toolgate/drivers/builtin"
	"github.com/toolgate/toolgate/drivers/workspace"
)

// Exit codes, the same for every command. A command's usage (-h) says
// which of them it uses and when.
//
//	0  success: the command did what was asked and found nothing wrong;
//	   also -h, and a group's "help"
//	1  the command ran and the answer is no: a deny, a tool failure, a
//	   check or verification that found problems, a redaction made, a
//	   refusal by the gateway (approvals)
//	2  the command could not run: a usage error (an unknown command or
//	   flag, a missing or extra argument, with the usage on stderr), or an
//	   error that kept it from answering (an unreachable gateway, a
//	   configuration or policy folder that does not load, an I/O error)
//	3  toolgate call only: the call waits for a human's approval and has
//	   not run
const (
	exitOK      = 0
	exitFailure = 1
	exitError   = 2
	exitPending = 3
)

const usage = `toolgate is a policy-gated evidence gateway for AI tool calls.

Usage:
  toolgate serve [flags]          run the gateway (embedded default config without --config)
  toolgate call [flags]           call RunTool and print the response as JSON
                                  (exit 3: the call waits for a human approval)
  toolgate tools [flags] [QUERY]  list the tools the gateway lets you run
  toolgate approvals <command>    list, show, approve and deny calls waiting for approval
  toolgate policy validate DIR    parse and schema-validate a policy folder
  toolgate policy authorize [flags]  decide one request without running it
  toolgate policy test DIR        run the policy tests kept beside the policies
  toolgate check config FILE      check a configuration (and its policies and signing key)
                                  without starting anything
  toolgate evidence <command>     list, show and verify evidence; manage the signing key
  toolgate redact [flags] [FILE]  redact a file with the gateway's rules; try a rules file
  toolgate bench [flags]          measure governed calls against the evidence store's floor
  toolgate version                print the version

Exit status: 0 success; 1 the command ran and the answer is no (a deny, a
tool failure, problems found); 2 a usage error or an error that kept the
command from answering; 3 (call) the call waits for a human's approval.

Run "toolgate <command> -h" for a command's flags.
`

func main() {
	// A workspace shell call runs in a sandbox whose init is this binary
	// started again; nothing else may happen before it takes over.
	workspace.MaybeRunSandbox()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Getenv: os.Getenv})
	stop()
	os.Exit(code)
}

// run runs the command args name and returns the process exit code.
func run(ctx context.Context, args []string, std stdio) int { return rootGroup().run(ctx, args, std) }

// rootGroup is toolgate's commands.
func rootGroup() group {
	return group{name: "toolgate", usage: usage, commands: map[string]command{
		"serve":     serveCmd,
		"call":      callCmd,
		"tools":     toolsCmd,
		"approvals": approvalsCmd,
		"policy":    policyCmd,
		"check":     checkCmd,
		"evidence":  evidenceCmd,
		"bench":     benchCmd,
		"redact":    redactCmd,
		"version":   versionCmd,
	}}
}

// versionCmd prints the version.
func versionCmd(_ context.Context, args []string, std stdio) int {
	fs := newFlagSet("toolgate version", "", "", std)
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return exitError
	}
	fmt.Fprintln(std.Out, versionString())
	return exitOK
}
