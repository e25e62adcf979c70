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
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolgate/toolgate/drivers/workspace"
)

// Exit codes shared by the subcommands.
const (
	exitOK      = 0
	exitFailure = 1 // a deny, a tool failure, a check that found problems
	exitError   = 2 // usage errors, unreachable gateway, bad configuration
	exitPending = 3 // toolgate call: the call waits for a human approval and has not run
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
  toolgate version                print the version

Run "toolgate <command> -h" for a command's flags.
`

func main() {
	// A workspace shell call runs in a sandbox whose init is this binary
	// started again; nothing else may happen before it takes over.
	workspace.MaybeRunSandbox()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run dispatches a subcommand and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError
	}
	var err error
	switch args[0] {
	case "serve":
		err = serveCmd(ctx, args[1:], stderr, getenv)
	case "call":
		return callCmd(ctx, args[1:], stdout, stderr, getenv)
	case "tools":
		return toolsCmd(ctx, args[1:], stdout, stderr, getenv)
	case "approvals":
		return approvalsCmd(ctx, args[1:], stdout, stderr, getenv)
	case "policy":
		return policyCmd(ctx, args[1:], stdout, stderr)
	case "check":
		return checkCmd(ctx, args[1:], stdout, stderr, getenv)
	case "evidence":
		return evidenceCmd(ctx, args[1:], stdout, stderr, getenv)
	case "redact":
		return redactCmd(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, versionString())
		return exitOK
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "toolgate: unknown command %q\n\n%s", args[0], usage)
		return exitError
	}
	if err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "toolgate %s: %v\n", args[0], err)
		}
		return exitError
	}
	return exitOK
}

// errUsage marks an error the flag package has already explained.
var errUsage = errors.New("usage")
