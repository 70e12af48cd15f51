package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/botbox/botbox/internal/netfilter"
)

const netfilterUsage = `Usage: botbox netfilter install|print|remove

  install   apply BotBox's rules for IPv4 (and IPv6 with BOTBOX_ENABLE_IPV6=1),
            idempotently, then list them
  print     print the rules without applying them: nft syntax with the
            nftables backend, iptables-restore --noflush payloads with
            iptables; -family ipv4|ipv6 prints one family only
  remove    delete BotBox's rules of the backend (nftables: the tables
            ip botbox and ip6 botbox; iptables: the chains and OUTPUT jumps,
            IPv6 wherever ip6tables is available); BOTBOX_ENABLE_IPV6 is
            not required

Environment (empty means the default):
  BOTBOX_ENABLE_IPV6               required for install and print: 1 or 0
  BOTBOX_NETFILTER_BACKEND         auto   nftables (netlink, no program needed),
                                          iptables (iptables-restore), or auto:
                                          nftables when the kernel answers
  BOTBOX_UID                       1337   exempt UID (BotBox's)
  BOTBOX_PROXY_PORT                8080   redirect target of BOTBOX_REDIRECT_FROM_PORT
  BOTBOX_REDIRECT_FROM_PORT        80
  BOTBOX_ENABLE_HTTPS_INTERCEPTION 0      1 redirects 443 to BOTBOX_HTTPS_INTERCEPTION_PORT
  BOTBOX_HTTPS_INTERCEPTION_PORT   8443
  BOTBOX_METRICS_PORT              9090   BotBox's metrics/health port
  BOTBOX_NAT_CHAIN                 EGRESS_REDIRECT
  BOTBOX_FILTER_CHAIN              EGRESS_FILTER
  BOTBOX_IPTABLES_WAIT_SECONDS     5      -w for every iptables call
  BOTBOX_DNS_SERVERS               (any)  comma-separated resolver IPs port 53 is limited to
  BOTBOX_DROP_ICMP                 0      1 drops ICMP (ICMPv6 neighbour discovery kept)
  BOTBOX_REJECT                    0      1 refuses blocked packets at once (TCP reset,
                                          ICMP port unreachable) instead of dropping them

Only BOTBOX_UID answers handshakes from the proxy, interception and metrics
ports; everything else the app sends that the rules do not allow is dropped
(with BOTBOX_REJECT=1: refused, so clients fail fast instead of timing out).
`

// runNetfilter is the init container's job: `botbox netfilter
// install|print|remove`. args are the arguments after "netfilter"; lookupEnv
// has os.LookupEnv semantics (an empty BOTBOX_ENABLE_IPV6 fails the 0-or-1
// check, as in the reference script). Failed checks go to stderr verbatim,
// in the reference script's words. It returns exitOK, exitError when a check
// or an iptables call fails, exitUsage on a usage error.
func runNetfilter(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	return netfilterCommand(ctx, args, lookupEnv, netfilter.System{Runner: netfilter.ExecRunner{}, NFT: netfilter.NetlinkDialer{}}, stdout, stderr)
}

// netfilterCommand is runNetfilter with the system as a parameter, for tests.
func netfilterCommand(ctx context.Context, args []string, lookupEnv func(string) (string, bool), sys netfilter.System, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, netfilterUsage)
		return exitUsage
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, netfilterUsage)
		return exitOK
	case "install", "print", "remove":
	default:
		fmt.Fprintf(stderr, "botbox netfilter: unknown command %q\n\n%s", sub, netfilterUsage)
		return exitUsage
	}

	fs := newFlagSet("botbox netfilter "+sub, stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), netfilterUsage) }
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
		fmt.Fprintf(stderr, "botbox netfilter %s: unexpected argument %q\n\n%s", sub, fs.Arg(0), netfilterUsage)
		return exitUsage
	}

	if sub == "remove" {
		s, err := netfilter.ParseEnvForRemove(lookupEnv)
		if err != nil {
			return netfilterFail(stderr, err)
		}
		if err := netfilter.RemoveWith(ctx, s, sys, stdout, stderr); err != nil {
			return netfilterFail(stderr, err)
		}
		return exitOK
	}

	s, warnings, err := netfilter.ParseEnvLookup(lookupEnv)
	for _, w := range warnings {
		fmt.Fprintln(stderr, w)
	}
	if err != nil {
		return netfilterFail(stderr, err)
	}
	if sub == "install" {
		if err := netfilter.InstallWith(ctx, s, sys, stdout, stderr); err != nil {
			return netfilterFail(stderr, err)
		}
		return exitOK
	}

	families := netfilter.Plan(s).Families()
	switch family {
	case "":
	case "ipv4", "4":
		families = []netfilter.Family{netfilter.IPv4}
	case "ipv6", "6":
		if !s.IPv6 {
			fmt.Fprintln(stderr, "ERROR: -family ipv6 needs BOTBOX_ENABLE_IPV6=1.")
			return exitError
		}
		families = []netfilter.Family{netfilter.IPv6}
	default:
		fmt.Fprintf(stderr, "botbox netfilter print: -family must be ipv4 or ipv6 (got %q)\n", family)
		return exitUsage
	}
	backend := s.Backend
	if backend == netfilter.BackendAuto {
		// print needs no privilege: whatever keeps the probe from
		// succeeding (no nf_tables, not root) prints iptables.
		backend = netfilter.BackendNFTables
		if err := netfilter.ProbeNFTables(sys.NFT); err != nil {
			backend = netfilter.BackendIPTables
			fmt.Fprintf(stderr, "[NOTE] %s=auto: nftables is not available (%v); printing the iptables rules.\n", netfilter.EnvBackend, err)
		}
	}
	if err := netfilter.PrintWith(s, backend, families, stdout); err != nil {
		return netfilterFail(stderr, err)
	}
	return exitOK
}

// netfilterFail prints err and returns exitError. Failed checks are printed
// as they are (the script's "ERROR: …" lines); other errors get an
// "ERROR: " prefix.
func netfilterFail(stderr io.Writer, err error) int {
	if _, ok := errors.AsType[*netfilter.CheckError](err); ok {
		fmt.Fprintln(stderr, err.Error())
	} else {
		fmt.Fprintf(stderr, "ERROR: %s\n", err.Error())
	}
	return exitError
}
