// Package netfilter is BotBox's init step: the iptables and ip6tables rules
// that send a Pod's HTTP (and, with interception, HTTPS) to BotBox and drop
// every other TCP and UDP packet the app sends, as the reference init script
// does (reference §8), run as `botbox netfilter install|print|remove`.
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
// Typical use (cmd/botbox):
//
//	code := netfilter.RunCommand(ctx, args, os.Getenv, os.Stdout, os.Stderr)
//
// or, piecewise:
//
//	s, warnings, err := netfilter.ParseEnv(os.Getenv)
//	...
//	err = netfilter.Install(ctx, s, netfilter.ExecRunner{}, os.Stdout, os.Stderr)
//
// See README.md in this directory for the rules and why each exists.
package netfilter
