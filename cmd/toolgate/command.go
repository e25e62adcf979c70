package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is the one shape of every toolgate command and subcommand: it
// takes the arguments after its name, reads and writes only through std,
// and returns the process exit code (exitOK … exitPending). A test runs
// any command in-process with buffers for std.
type command func(ctx context.Context, args []string, std stdio) int

// stdio is everything a command takes from its process besides its
// arguments: the standard streams and the environment. main passes the
// process's own; a test passes buffers and a map.
type stdio struct {
	In     io.Reader
	Out    io.Writer
	Err    io.Writer
	Getenv func(string) string
}

// group is a command made of subcommands, such as "toolgate policy": no
// subcommand or an unknown one is a usage error (the usage on stderr,
// exit 2); "help" or -h prints the usage on stdout, as it was asked for.
type group struct {
	name     string // "toolgate policy"
	usage    string
	commands map[string]command
}

func (g group) run(ctx context.Context, args []string, std stdio) int {
	if len(args) == 0 {
		fmt.Fprint(std.Err, g.usage)
		return exitError
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(std.Out, g.usage)
		return exitOK
	}
	cmd, ok := g.commands[args[0]]
	if !ok {
		fmt.Fprintf(std.Err, "%s: unknown command %q\n\n%s", g.name, args[0], g.usage)
		return exitError
	}
	return cmd(ctx, args[1:], std)
}

// newFlagSet returns the flag set of the command name ("toolgate policy
// test"), which reports to std.Err and does not exit. Its usage, printed
// on -h and on a usage error, is "usage: NAME SYNOPSIS", then about when
// there is more to say (such as what the exit codes mean), then the flags.
func newFlagSet(name, synopsis, about string, std stdio) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(std.Err)
	fs.Usage = func() {
		fmt.Fprintln(std.Err, strings.TrimSpace("usage: "+name+" "+synopsis))
		if about != "" {
			fmt.Fprint(std.Err, "\n"+strings.TrimLeft(about, "\n"))
		}
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprint(std.Err, "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// errUsage marks a usage error the flag package or the command has
// already explained, with the usage, on stderr.
var errUsage = errors.New("usage")

// parseFlags parses args into fs. Its error, when there is one, is
// flag.ErrHelp for -h and errUsage otherwise: the flag package has printed
// the usage either way.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return errUsage
}

// flagExit is the exit code after fs.Parse failed and printed the usage:
// 0 when the usage was asked for (-h), 2 for a usage error.
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitError
}

// exit reports the error a command ended with, on stderr under the
// command's name unless it is already explained, and returns the exit
// code: 0 for none and for -h, 2 otherwise.
func (s stdio) exit(name string, err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case !errors.Is(err, errUsage):
		fmt.Fprintf(s.Err, "%s: %v\n", name, err)
	}
	return exitError
}
