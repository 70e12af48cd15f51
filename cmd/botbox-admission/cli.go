package main

import (
	"flag"
	"io"

	"github.com/botbox/botbox/internal/cli"
)

// Exit codes (cli's).
const (
	exitOK    = cli.ExitOK
	exitError = cli.ExitError
	exitUsage = cli.ExitUsage
)

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet { return cli.NewFlagSet(name, stderr) }

func setUsage(fs *flag.FlagSet, line string) { cli.SetUsage(fs, line) }

func parseFlags(fs *flag.FlagSet, args []string) (int, bool) { return cli.ParseFlags(fs, args) }

func usageError(stderr io.Writer, line, format string, args ...any) int {
	return cli.UsageError(stderr, line, format, args...)
}

func noArgs(fs *flag.FlagSet, name, line string, stderr io.Writer) (int, bool) {
	return cli.NoArgs(fs, name, line, stderr)
}
