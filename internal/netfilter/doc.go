// Package netfilter is BotBox's init step: the rules (IPv4 and IPv6) that
// send a Pod's HTTP (and, with interception, HTTPS) to BotBox and drop every
// other packet the app sends, whatever its protocol (the reference init
// script of reference §8 dropped only TCP and UDP), run by
// `botbox netfilter install|print|remove` (cmd/botbox parses the command
// line; this package has no CLI).
//
// The rules are built by a pure function from validated settings (ParseEnv →
// Settings → Plan → Ruleset) and reach the kernel through one of two
// backends (BOTBOX_NETFILTER_BACKEND, backend.go):
//
//   - iptables: rendered as iptables-restore --noflush payloads (Render), one
//     atomic commit per table and family, which declare BotBox's chains
//     (creating or flushing them), delete the OUTPUT jumps that exist, and
//     insert one jump at OUTPUT position 1. Install and Remove reach the
//     system only through a Runner (ExecRunner runs the real programs).
//   - nftables: the same Ruleset translated rule by rule (nft.go; an
//     untranslatable rule is an error) into BotBox's own tables "ip botbox"
//     and "ip6 botbox", installed in one netlink batch with no external
//     program (InstallNFTables, through an NFTDialer).
//
// It deliberately does not: touch chains, rules or tables other than its
// own (BotBox's chains and the OUTPUT jumps into them, or BotBox's nftables
// tables); remove chains left behind under an old chain name; or decide
// which hosts are allowed (that is the proxy's job).
//
// Typical use (cmd/botbox/netfilter.go):
//
//	s, warnings, err := netfilter.ParseEnvLookup(os.LookupEnv)
//	... // print warnings, then err (a *CheckError prints as is)
//	sys := netfilter.System{Runner: netfilter.ExecRunner{}, NFT: netfilter.NetlinkDialer{}}
//	err = netfilter.InstallWith(ctx, s, sys, os.Stdout, os.Stderr)
//
// Tests of callers substitute netfiltertest.Runner for ExecRunner and
// netfiltertest.NoNFTables for NetlinkDialer.
//
// See README.md in this directory for the rules and why each exists.
package netfilter
