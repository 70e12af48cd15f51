package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/botbox/botbox/internal/cli"
	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/localmode"
)

// Exit codes.
const (
	exitOK    = cli.ExitOK
	exitError = cli.ExitError
	exitUsage = cli.ExitUsage
)

const usage = `botbox — sidecar egress proxy with secret injection

Usage:
  botbox [run] [-c|--config PATH]          run the proxy (default config.yaml)
  botbox check [--files] [-c PATH | PATH]  validate a config, print it with defaults filled in;
                                           --files also checks the secret and CA files it names
  botbox explain -c PATH [--method M] URL  show the decision for one request
  botbox suggest --log FILE [--min-count N] propose an egress_policy from decision log lines
  botbox netfilter install|print|remove    the init step: iptables/ip6tables rules from BOTBOX_* env
  botbox ca new --out DIR [--days N]       make an interception CA (ca.crt 0444, ca.key 0400; 365 days)
  botbox placeholders print [-c PATH]      list the placeholder credentials and the hosts each may go to
  botbox exec [-c PATH] [--log F] [--report] [--quiet] [--tcp-ports P,...] [--] CMD [ARGS...]
                                           local mode: run CMD confined, rootless (docs/local.md)
  botbox probe [--key-file F] URL          exit 0 when BotBox itself answers 200 at URL (exec probes)
  botbox version                           print version information

Flags may come before or after the arguments. Exit codes: 0 ok, 1 error, 2 usage.
Docs: docs/config.md (every key and message), docs/deploy.md.
Kubernetes injection and the admission webhook are botbox-admission's
(botbox-admission inject|webhook; the image carries both binaries).
`

// run dispatches on the subcommand and returns the process exit code.
// lookupEnv has os.LookupEnv's semantics: the init step must tell an empty
// variable from an unset one, as the reference script does.
func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	getenv := func(k string) string { v, _ := lookupEnv(k); return v }
	if len(args) == 1 && args[0] == localmode.HelperCommand {
		// botbox exec's namespace helper, re-executed by localmode.Start.
		return localmode.HelperMain()
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		switch {
		case len(args) > 0 && (args[0] == "--version" || args[0] == "-version" || args[0] == "-V" || args[0] == "-v"):
			return runVersion(args[1:], stdout, stderr)
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
	case "suggest":
		return runSuggest(rest, stdout, stderr)
	case "netfilter":
		return runNetfilter(ctx, rest, lookupEnv, stdout, stderr)
	case "ca":
		return runCA(rest, stdout, stderr)
	case "placeholders":
		return runPlaceholders(rest, stdout, stderr)
	case "exec":
		return runExec(ctx, rest, getenv, stderr)
	case "probe":
		return runProbe(ctx, rest, getenv, stdout, stderr)
	case "inject", "webhook":
		fmt.Fprintf(stderr, "botbox %s: moved to the botbox-admission binary (same flags): botbox-admission %s ...\n"+
			"The sidecar binary links no Kubernetes code; the image carries both (/botbox-admission).\n", cmd, cmd)
		return exitUsage
	case "version":
		return runVersion(rest, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "botbox: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

// newFlagSet returns a FlagSet that reports errors to stderr and does not
// exit (cli.NewFlagSet).
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet { return cli.NewFlagSet(name, stderr) }

// configFlag registers -c and --config (the reference's spelling) on fs.
func configFlag(fs *flag.FlagSet) *string {
	p := new(string)
	fs.StringVar(p, "config", "config.yaml", "`PATH` of the configuration file")
	fs.StringVar(p, "c", "config.yaml", "`PATH` of the configuration file (shorthand for --config)")
	return p
}

// setUsage makes fs's -h output start with line (cli.SetUsage).
func setUsage(fs *flag.FlagSet, line string) { cli.SetUsage(fs, line) }

// parseFlags parses args, flags after positional arguments included
// (cli.ParseFlags); ok is false when the caller should return code.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) { return cli.ParseFlags(fs, args) }

// usageError prints "name: msg" and the usage line, and returns exitUsage.
func usageError(stderr io.Writer, line, format string, args ...any) int {
	return cli.UsageError(stderr, line, format, args...)
}

// configPathArg returns the config path of a command that takes it as -c
// PATH or as its only positional argument ("botbox check some.yaml"). Any
// other positional argument, or a positional path that contradicts -c, is a
// usage error: a command must never validate a file other than the one named.
func configPathArg(fs *flag.FlagSet, flagPath, name, line string, stderr io.Writer) (string, int, bool) {
	switch fs.NArg() {
	case 0:
		return flagPath, 0, true
	case 1:
		explicit := false
		fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "c" || f.Name == "config" })
		if explicit && fs.Arg(0) != flagPath {
			return "", usageError(stderr, line, "%s: config path given twice (-c %q and %q); give it once", name, flagPath, fs.Arg(0)), false
		}
		return fs.Arg(0), 0, true
	default:
		return "", usageError(stderr, line, "%s: unexpected argument %q", name, fs.Arg(1)), false
	}
}

// noArgs refuses positional arguments for a command that takes none.
func noArgs(fs *flag.FlagSet, name, line string, stderr io.Writer) (int, bool) {
	return cli.NoArgs(fs, name, line, stderr)
}

// printConfigError reports a failed config.Load for path: the file's
// problems, one per line, under "PATH: invalid configuration:", or, when
// the file could not be read (no *config.FieldError inside), the read error
// after the command's name ("botbox check: config file not found: PATH").
func printConfigError(stderr io.Writer, name, path string, err error) {
	ps := config.Problems(err)
	if len(ps) == 0 {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return
	}
	fmt.Fprintf(stderr, "%s: invalid configuration (%d %s):\n", path, len(ps), plural(len(ps), "problem", "problems"))
	for _, p := range ps {
		fmt.Fprintf(stderr, "  %v\n", p)
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
