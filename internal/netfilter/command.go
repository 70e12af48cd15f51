package netfilter

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
)

// Exit statuses of RunCommand.
const (
	exitOK    = 0
	exitError = 1 // a failed check or a failed iptables call
	exitUsage = 2
)

const commandUsage = `Usage: botbox netfilter install|print|remove

  install   apply BotBox's iptables rules (and ip6tables rules with
            BOTBOX_ENABLE_IPV6=1), idempotently, then list the chains
  print     print the iptables-restore --noflush payloads without touching
            the kernel; -family ipv4|ipv6 prints one payload only
  remove    delete BotBox's chains and OUTPUT jumps (IPv4, and IPv6 wherever
            ip6tables is available; BOTBOX_ENABLE_IPV6 is not required)

Environment (empty means the default):
  BOTBOX_ENABLE_IPV6               required for install and print: 1 or 0
  BOTBOX_UID                       1337   exempt UID (BotBox's)
  BOTBOX_PROXY_PORT                8080   redirect target of BOTBOX_REDIRECT_FROM_PORT
  BOTBOX_REDIRECT_FROM_PORT        80
  BOTBOX_ENABLE_HTTPS_INTERCEPTION 0      1 redirects 443 to BOTBOX_HTTPS_INTERCEPTION_PORT
  BOTBOX_HTTPS_INTERCEPTION_PORT   8443
  BOTBOX_NAT_CHAIN                 EGRESS_REDIRECT
  BOTBOX_FILTER_CHAIN              EGRESS_FILTER
  BOTBOX_IPTABLES_WAIT_SECONDS     5      -w for every iptables call
  BOTBOX_DNS_SERVERS               (any)  comma-separated resolver IPs port 53 is limited to
  BOTBOX_DROP_ICMP                 0      1 drops ICMP (ICMPv6 neighbour discovery kept)
`

// RunCommand implements `botbox netfilter install|print|remove`. args are
// the arguments after "netfilter". Warnings and errors go to stderr (failed
// checks verbatim, in the reference script's words). It returns 0 on
// success, 1 when a check or an iptables call fails, 2 on a usage error.
func RunCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return runCommand(ctx, args, lookupOf(getenv), ExecRunner{}, stdout, stderr)
}

// RunCommandLookup is RunCommand with os.LookupEnv semantics (see
// ParseEnvLookup); the botbox binary uses it.
func RunCommandLookup(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	return runCommand(ctx, args, lookup, ExecRunner{}, stdout, stderr)
}

func runCommand(ctx context.Context, args []string, lookup func(string) (string, bool), r Runner, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, commandUsage)
		return exitUsage
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, commandUsage)
		return exitOK
	case "install", "print", "remove":
	default:
		fmt.Fprintf(stderr, "botbox netfilter: unknown command %q\n\n%s", sub, commandUsage)
		return exitUsage
	}

	fs := flag.NewFlagSet("botbox netfilter "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), commandUsage) }
	family := ""
	if sub == "print" {
		fs.StringVar(&family, "family", "", "print only this family's payload: ipv4 or ipv6")
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "botbox netfilter %s: unexpected argument %q\n\n%s", sub, fs.Arg(0), commandUsage)
		return exitUsage
	}

	if sub == "remove" {
		s, err := parseEnvForRemove(lookup)
		if err != nil {
			return fail(stderr, err)
		}
		if err := Remove(ctx, s, r, stdout, stderr); err != nil {
			return fail(stderr, err)
		}
		return exitOK
	}

	s, warnings, err := parseEnv(lookup, true)
	for _, w := range warnings {
		fmt.Fprintln(stderr, w)
	}
	if err != nil {
		return fail(stderr, err)
	}
	if sub == "install" {
		if err := Install(ctx, s, r, stdout, stderr); err != nil {
			return fail(stderr, err)
		}
		return exitOK
	}

	families := Plan(s).Families()
	switch family {
	case "":
	case "ipv4", "4":
		families = []Family{IPv4}
	case "ipv6", "6":
		if !s.IPv6 {
			fmt.Fprintln(stderr, "ERROR: -family ipv6 needs BOTBOX_ENABLE_IPV6=1.")
			return exitError
		}
		families = []Family{IPv6}
	default:
		fmt.Fprintf(stderr, "botbox netfilter print: -family must be ipv4 or ipv6 (got %q)\n", family)
		return exitUsage
	}
	if err := printFamilies(s, families, stdout); err != nil {
		return fail(stderr, err)
	}
	return exitOK
}

// fail prints err and returns exitError. Failed checks are printed as they
// are (the script's "ERROR: …" lines); other errors get an "ERROR: " prefix.
func fail(stderr io.Writer, err error) int {
	if _, ok := errors.AsType[*CheckError](err); ok {
		fmt.Fprintln(stderr, err.Error())
	} else {
		fmt.Fprintf(stderr, "ERROR: %s\n", err.Error())
	}
	return exitError
}
