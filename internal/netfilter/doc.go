// Package netfilter is BotBox's init step: the iptables and ip6tables rules
// that send a Pod's HTTP (and, with interception, HTTPS) to BotBox and drop
// every other packet the app sends, whatever its protocol (the reference
// init script of reference §8 dropped only TCP and UDP), run by
// `botbox netfilter install|print|remove` (cmd/botbox parses the command
// line; this package has no CLI).
//
// The rules are built by a pure function from validated settings (ParseEnv →
// Settings → Plan → Ruleset) and rendered as iptables-restore --noflush
// payloads (Render), one atomic commit per table and family, which declare
// BotBox's chains (creating or flushing them), delete the OUTPUT jumps that
// exist, and insert one jump at OUTPUT position 1. Install and Remove reach
// the system only through a Runner (ExecRunner runs the real programs).
//
// It deliberately does not: touch chains or rules other than BotBox's chains
// and the OUTPUT jumps into them; remove chains left behind under an old
// chain name; speak nftables natively (iptables-nft is fine); or decide
// which hosts are allowed (that is the proxy's job).
//
// Typical use (cmd/botbox/netfilter.go):
//
//	s, warnings, err := netfilter.ParseEnvLookup(os.LookupEnv)
//	... // print warnings, then err (a *CheckError prints as is)
//	err = netfilter.Install(ctx, s, netfilter.ExecRunner{}, os.Stdout, os.Stderr)
//
// Tests of callers substitute netfiltertest.Runner for ExecRunner.
//
// See README.md in this directory for the rules and why each exists.
package netfilter
