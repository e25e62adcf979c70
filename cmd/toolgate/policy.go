package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/policy"
)

// policyCmd runs the policy subcommands. Exit 1 when a check finds problems.
func policyCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "check" {
		fmt.Fprintln(stderr, "usage: toolgate policy check DIR")
		return exitError
	}
	engine, err := policy.Load(args[1])
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFailure
	}
	refs := engine.Refs()
	fmt.Fprintf(stdout, "ok: %d policy set(s) in %s: %s\n", len(refs), args[1], strings.Join(refs, ", "))
	return exitOK
}

func versionString() string {
	return "toolgate " + gateway.Version
}
