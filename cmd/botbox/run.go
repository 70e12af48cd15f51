package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

const usage = `botbox — sidecar egress proxy with secret injection

Usage:
  botbox [run] [-c|--config PATH]          run the proxy (default config.yaml)
  botbox check -c PATH                     validate a config, print it with defaults filled in
  botbox explain -c PATH [--method M] URL  show the decision for one request
  botbox netfilter install|print|remove    the init step: iptables/ip6tables rules from BOTBOX_* env
  botbox ca new --out DIR [--days N]       make an interception CA (ca.crt 0444, ca.key 0400)
  botbox probe [--key-file F] URL          exit 0 when BotBox itself answers 200 at URL (exec probes)
  botbox version                           print version information
`

// run dispatches on the subcommand and returns the process exit code.
// lookupEnv has os.LookupEnv's semantics: the init step must tell an empty
// variable from an unset one, as the reference script does.
func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	getenv := func(k string) string { v, _ := lookupEnv(k); return v }
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		switch {
		case len(args) > 0 && (args[0] == "--version" || args[0] == "-version" || args[0] == "-V"):
			return runVersion(stdout)
		case len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help"):
			fmt.Fprint(stdout, usage)
			return exitOK
		}
		return runServe(ctx, args, getenv, stdout, stderr)
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run", "serve":
		return runServe(ctx, rest, getenv, stdout, stderr)
	case "check":
		return runCheck(rest, getenv, stdout, stderr)
	case "explain":
		return runExplain(rest, stdout, stderr)
	case "netfilter":
		return runNetfilter(ctx, rest, lookupEnv, stdout, stderr)
	case "ca":
		return runCA(rest, stdout, stderr)
	case "probe":
		return runProbe(ctx, rest, getenv, stdout, stderr)
	case "version":
		return runVersion(stdout)
	case "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "botbox: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

// newFlagSet returns a FlagSet that reports errors to stderr and does not exit.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// configFlag registers -c and --config (the reference's spelling) on fs.
func configFlag(fs *flag.FlagSet) *string {
	p := new(string)
	fs.StringVar(p, "config", "config.yaml", "path to the configuration file")
	fs.StringVar(p, "c", "config.yaml", "path to the configuration file (shorthand)")
	return p
}

// parseFlags parses and maps flag errors to exit codes; ok is false when the
// caller should return code.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitOK, false
		}
		return exitUsage, false
	}
	return 0, true
}
