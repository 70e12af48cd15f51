package netfilter

import (
	"net/netip"
	"strconv"
	"strings"
)

// Family is an IP family: which of iptables or ip6tables a ruleset is for.
type Family int

// The two families.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

// Command returns the family's iptables command: "iptables" or "ip6tables".
func (f Family) Command() string {
	if f == IPv6 {
		return "ip6tables"
	}
	return "iptables"
}

// RestoreCommand returns "iptables-restore" or "ip6tables-restore".
func (f Family) RestoreCommand() string { return f.Command() + "-restore" }

// SaveCommand returns "iptables-save" or "ip6tables-save".
func (f Family) SaveCommand() string { return f.Command() + "-save" }

// Tables, in the order BotBox writes them.
const (
	TableNAT    = "nat"
	TableFilter = "filter"
)

// Rule is one rule specification as iptables arguments, without the
// "-A CHAIN" prefix, e.g. {"-o", "lo", "-j", "RETURN"}. Rules are written in
// the canonical form iptables-save prints (explicit "-m tcp" before
// "--dport", "--to-ports", "/32" and "/128" on addresses), so that what is
// read back from the kernel can be compared to the plan line by line.
type Rule []string

// String joins the arguments with single spaces.
func (r Rule) String() string { return strings.Join(r, " ") }

// Chain is one BotBox chain: the rules appended to it, in order, and the
// rule that OUTPUT uses to enter it (inserted at position 1).
type Chain struct {
	Table string // TableNAT or TableFilter
	Name  string
	Rules []Rule
	Jump  Rule // e.g. {"-p", "tcp", "-j", "EGRESS_REDIRECT"}
}

// Ruleset is everything BotBox installs: per family, the nat chain then the
// filter chain.
type Ruleset struct {
	IPv4 []Chain
	IPv6 []Chain // nil when IPv6 is disabled
}

// Families returns IPv4, then IPv6 when the ruleset has IPv6 chains.
func (rs Ruleset) Families() []Family {
	if len(rs.IPv6) > 0 {
		return []Family{IPv4, IPv6}
	}
	return []Family{IPv4}
}

// Chains returns the chains of family f.
func (rs Ruleset) Chains(f Family) []Chain {
	if f == IPv6 {
		return rs.IPv6
	}
	return rs.IPv4
}

// ndpICMPv6Types are the ICMPv6 types BOTBOX_DROP_ICMP=1 keeps for IPv6:
// neighbour discovery cannot be done without them, and the kernel sends them
// itself (no socket owner, so the UID exemption does not cover them).
//
//	131/132 MLDv1 report/done, 133 router solicitation,
//	135 neighbour solicitation, 136 neighbour advertisement,
//	143 MLDv2 report (switches with MLD snooping need the MLD reports to
//	deliver the solicited-node multicast that neighbour solicitations use).
func ndpICMPv6Types() []string { return []string{"131", "132", "133", "135", "136", "143"} }

// Plan builds the ruleset for s: reference §8.3, plus the optional
// hardening of BOTBOX_DNS_SERVERS and BOTBOX_DROP_ICMP. It is pure.
func Plan(s Settings) Ruleset {
	rs := Ruleset{IPv4: planFamily(s, IPv4)}
	if s.IPv6 {
		rs.IPv6 = planFamily(s, IPv6)
	}
	return rs
}

func planFamily(s Settings, f Family) []Chain {
	uid := strconv.FormatUint(uint64(s.UID), 10)
	port := func(p uint16) string { return strconv.Itoa(int(p)) }

	nat := Chain{
		Table: TableNAT,
		Name:  s.NATChain,
		Rules: []Rule{
			// Loopback traffic (the app talking to BotBox, BotBox's own
			// health port) is never redirected.
			{"-o", "lo", "-j", "RETURN"},
			// BotBox itself dials the real upstreams.
			{"-m", "owner", "--uid-owner", uid, "-j", "RETURN"},
			// Plain HTTP goes to the proxy listener.
			{"-p", "tcp", "-m", "tcp", "--dport", port(s.RedirectFromPort), "-j", "REDIRECT", "--to-ports", port(s.ProxyPort)},
		},
		Jump: Rule{"-p", "tcp", "-j", s.NATChain},
	}
	if s.HTTPSInterception {
		// HTTPS goes to the interception listener.
		nat.Rules = append(nat.Rules,
			Rule{"-p", "tcp", "-m", "tcp", "--dport", "443", "-j", "REDIRECT", "--to-ports", port(s.HTTPSInterceptionPort)})
	}

	loopback := "127.0.0.0/8"
	if f == IPv6 {
		loopback = "::1/128"
	}
	filter := Chain{
		Table: TableFilter,
		Name:  s.FilterChain,
		Rules: []Rule{
			{"-o", "lo", "-j", "RETURN"},
			{"-m", "owner", "--uid-owner", uid, "-j", "RETURN"},
			// REDIRECT rewrites the destination to loopback before the
			// output interface becomes lo on ≥6.x kernels: let those
			// redirected packets reach BotBox.
			{"-d", loopback, "-j", "RETURN"},
		},
		Jump: Rule{"-j", s.FilterChain},
	}
	filter.Rules = append(filter.Rules, dnsRules(s.DNSServers, f)...)
	filter.Rules = append(filter.Rules,
		// Everything else the app sends directly is dropped; UDP includes QUIC.
		Rule{"-p", "tcp", "-j", "DROP"},
		Rule{"-p", "udp", "-j", "DROP"},
	)
	if s.DropICMP {
		if f == IPv4 {
			// A Pod has no reason to originate ICMP (it routes nothing);
			// dropping it closes ping tunnels. Incoming ICMP (PMTU
			// discovery) is not affected: this is the OUTPUT path.
			filter.Rules = append(filter.Rules, Rule{"-p", "icmp", "-j", "DROP"})
		} else {
			for _, typ := range ndpICMPv6Types() {
				filter.Rules = append(filter.Rules,
					Rule{"-p", "ipv6-icmp", "-m", "icmp6", "--icmpv6-type", typ, "-j", "RETURN"})
			}
			filter.Rules = append(filter.Rules, Rule{"-p", "ipv6-icmp", "-j", "DROP"})
		}
	}
	return []Chain{nat, filter}
}

// dnsRules exempts port 53: to any destination (reference), or only to the
// given resolvers of family f. With resolvers given but none of family f,
// no rule is returned, so the TCP/UDP DROP rules drop port 53 for f.
func dnsRules(servers []netip.Addr, f Family) []Rule {
	if len(servers) == 0 {
		return []Rule{
			{"-p", "udp", "-m", "udp", "--dport", "53", "-j", "RETURN"},
			{"-p", "tcp", "-m", "tcp", "--dport", "53", "-j", "RETURN"},
		}
	}
	var out []Rule
	for _, proto := range []string{"udp", "tcp"} {
		for _, a := range servers {
			if a.Is4() != (f == IPv4) {
				continue
			}
			out = append(out, Rule{"-d", netip.PrefixFrom(a, a.BitLen()).String(), "-p", proto, "-m", proto, "--dport", "53", "-j", "RETURN"})
		}
	}
	return out
}
