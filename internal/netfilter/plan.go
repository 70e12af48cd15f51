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
//	133 router solicitation, 135 neighbour solicitation,
//	136 neighbour advertisement.
//
// MLD is not among them: mldRules handles it in both modes.
func ndpICMPv6Types() []string { return []string{"133", "135", "136"} }

// solicitedNodeGroups is the multicast range of the solicited-node groups
// (RFC 4291 §2.7.1) that neighbour discovery joins: the only groups whose
// MLD reports leave the Pod.
const solicitedNodeGroups = "ff02::1:ff00:0/104"

// mldRules keep MLDv1 reports (type 131) for solicited-node groups and
// drop every other MLD message the Pod would send: queries (130), MLDv1
// done (132, sent to ff02::2 with the group inside) and MLDv2 reports (143,
// sent to ff02::16 with the groups inside, so a destination match cannot
// tell them apart). An MLDv1 report goes to the group it announces, so its
// destination is the group. Install sets net.ipv6.conf.all.force_mld_version
// to 1 so that the kernel's reports are MLDv1 and the solicited-node ones
// pass; where it cannot, every report is dropped, which only matters on a
// link whose switch snoops MLD with an active querier (README.md).
// TestPlanMLD and the e2e TestMulticastReportsDropped hold this.
func mldRules() []Rule {
	return []Rule{
		{"-d", solicitedNodeGroups, "-p", "ipv6-icmp", "-m", "icmp6", "--icmpv6-type", "131", "-j", "RETURN"},
		{"-p", "ipv6-icmp", "-m", "icmp6", "--icmpv6-type", "130", "-j", "DROP"},
		{"-p", "ipv6-icmp", "-m", "icmp6", "--icmpv6-type", "131", "-j", "DROP"},
		{"-p", "ipv6-icmp", "-m", "icmp6", "--icmpv6-type", "132", "-j", "DROP"},
		{"-p", "ipv6-icmp", "-m", "icmp6", "--icmpv6-type", "143", "-j", "DROP"},
	}
}

// squatRules drop TCP packets with the SYN flag from BotBox's listening
// ports unless their socket belongs to BotBox's UID: a listener the app
// binds on such a port (127.0.0.2:9090, [::1]:9090, or 127.0.0.1:9090 while
// BotBox is down) can never complete a handshake, because its SYN-ACK is
// dropped. The owner match sees the listener's UID on a SYN-ACK (the request
// socket maps to its listener). Only SYN packets are matched: the kernel's
// own RST for a closed port and the ACKs of time-wait sockets are sent from
// a socket of UID 0 and must pass, so that connecting to a port nobody
// listens on is refused at once instead of hanging. Not limited to lo: the
// app's TCP elsewhere is dropped anyway. Duplicate ports appear once.
// TestPlanSquat and the e2e TestPortSquatHarmless hold this.
func squatRules(s Settings) []Rule {
	uid := strconv.FormatUint(uint64(s.UID), 10)
	var out []Rule
	seen := map[uint16]bool{}
	for _, p := range []uint16{s.ProxyPort, s.HTTPSInterceptionPort, s.MetricsPort} {
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, Rule{"-p", "tcp", "-m", "tcp", "--sport", strconv.Itoa(int(p)), "--tcp-flags", "SYN", "SYN",
			"-m", "owner", "!", "--uid-owner", uid, "-j", "DROP"})
	}
	return out
}

// Plan builds the ruleset for s: the rules of reference §8.3 with the
// filter chain made default-deny (a final DROP for every protocol instead
// of the reference's TCP and UDP DROPs, ICMP returned explicitly unless
// BOTBOX_DROP_ICMP=1, MLD limited to solicited-node reports), the drop of
// foreign source addresses first and the port-squat rules after it, the
// optional BOTBOX_DNS_SERVERS restriction,
// with BOTBOX_DNS_GUARD_PORT the port-53 redirect to the DNS guard instead
// of any port-53 exemption, and with BOTBOX_REJECT=1 REJECT rules before
// the final DROP. It is pure.
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
	if s.DNSGuardPort != 0 {
		// Before "-o lo -j RETURN": a resolver on loopback (127.0.0.53,
		// ::1) must not be a way around the guard. BotBox's own queries
		// are excluded by the negated owner match. UDP must now enter the
		// chain too, so the jump takes every protocol (the chain's other
		// rules name tcp themselves). TestPlanDNSGuard and the e2e
		// TestDNSGuardContainsExfiltration hold this.
		nat.Rules = append(dnsGuardRules(s), nat.Rules...)
		nat.Jump = Rule{"-j", s.NATChain}
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
	// The filter chain is default-deny: what the rules below do not return
	// is dropped by the final rule, whatever its protocol (UDP-Lite, SCTP,
	// DCCP, IGMP, raw IP of any number). TestPlanDefaultDeny and the e2e
	// TestOtherProtocolsDropped hold this.
	filter := Chain{
		Table: TableFilter,
		Name:  s.FilterChain,
		Jump:  Rule{"-j", s.FilterChain},
	}
	filter.Rules = append(filter.Rules, sourceRules(f)...)
	filter.Rules = append(filter.Rules, squatRules(s)...)
	filter.Rules = append(filter.Rules,
		Rule{"-o", "lo", "-j", "RETURN"},
		Rule{"-m", "owner", "--uid-owner", uid, "-j", "RETURN"},
		// REDIRECT rewrites the destination to loopback before the
		// output interface becomes lo on ≥6.x kernels: let those
		// redirected packets reach BotBox.
		Rule{"-d", loopback, "-j", "RETURN"},
	)
	if s.DNSGuardPort == 0 {
		// With the guard, port 53 gets no exemption: every app packet to
		// it was redirected to loopback (returned above), so any that was
		// not (a conntrack entry from before the rules) is dropped.
		filter.Rules = append(filter.Rules, dnsRules(s.DNSServers, f)...)
	}
	if f == IPv6 {
		filter.Rules = append(filter.Rules, mldRules()...)
	}
	switch {
	case !s.DropICMP && f == IPv4:
		filter.Rules = append(filter.Rules, Rule{"-p", "icmp", "-j", "RETURN"})
	case !s.DropICMP:
		filter.Rules = append(filter.Rules, Rule{"-p", "ipv6-icmp", "-j", "RETURN"})
	case f == IPv6:
		// A Pod routes nothing, so it never needs to originate ICMP;
		// dropping it closes ping tunnels. Incoming ICMP (PMTU
		// discovery) is not affected: this is the OUTPUT path. IPv6 keeps
		// neighbour discovery.
		for _, typ := range ndpICMPv6Types() {
			filter.Rules = append(filter.Rules,
				Rule{"-p", "ipv6-icmp", "-m", "icmp6", "--icmpv6-type", typ, "-j", "RETURN"})
		}
	}
	// Everything else the app sends directly: TCP, UDP (QUIC included),
	// every other protocol.
	filter.Rules = append(filter.Rules, finalDeny(s, f)...)
	return []Chain{nat, filter}
}

// finalDeny is the end of the filter chain: an unconditional DROP, or with
// BOTBOX_REJECT=1 two REJECT rules before it: a TCP reset for TCP and an ICMP
// port-unreachable for every other protocol, both only for packets whose
// source address is local. The chain ends with the unconditional DROP in
// both modes, and the REJECT target drops the packet too (it only adds a
// reply), so no packet that was dropped before passes now.
//
// The reply cannot leak: it is addressed to the rejected packet's source,
// which "--src-type LOCAL" guarantees is an address of the Pod, so it is
// routed through lo (and returned by "-o lo"). Without that match it could:
// an unprivileged socket may send IPv6 from a foreign source address
// (IPV6_FREEBIND), and the ICMPv6 error, quoting up to 1232 bytes of the
// app's packet, would go to that foreign address past the ICMP RETURN.
// The chain's first rule (sourceRules) already drops such packets; the
// match keeps the REJECT rules safe on their own. Packets from "::" (which
// sourceRules lets through) are not local either and reach the final DROP
// silently. A reset answering a reset
// and an ICMP error answering an ICMP error are never sent by the kernel.
// TestPlanReject and the e2e TestRejectFailsFast hold this.
//
// Port-unreachable rather than adm-prohibited: it is what the kernel
// answers for a closed port and iptables' default, and a connected UDP
// socket reports it as ECONNREFUSED in both families, like the TCP reset;
// adm-prohibited gives EHOSTUNREACH for IPv4 but EACCES for IPv6.
func finalDeny(s Settings, f Family) []Rule {
	if !s.Reject {
		return []Rule{{"-j", "DROP"}}
	}
	unreachable := "icmp-port-unreachable"
	if f == IPv6 {
		unreachable = "icmp6-port-unreachable"
	}
	return []Rule{
		{"-p", "tcp", "-m", "addrtype", "--src-type", "LOCAL", "-j", "REJECT", "--reject-with", "tcp-reset"},
		{"-m", "addrtype", "--src-type", "LOCAL", "-j", "REJECT", "--reject-with", unreachable},
		{"-j", "DROP"},
	}
}

// dnsGuardRules redirect every UDP and TCP packet to port 53 whose source
// is an address of the Pod, from any UID but BotBox's and to any address,
// to the DNS guard on loopback (the REDIRECT target maps locally generated
// packets to 127.0.0.1 and ::1). A packet from a foreign source is not
// redirected, so the guard never sees it, and the filter chain's first rule
// drops it (sourceRules).
func dnsGuardRules(s Settings) []Rule {
	uid := strconv.FormatUint(uint64(s.UID), 10)
	to := strconv.Itoa(int(s.DNSGuardPort))
	return []Rule{
		{"-p", "udp", "-m", "addrtype", "--src-type", "LOCAL", "-m", "owner", "!", "--uid-owner", uid, "-m", "udp", "--dport", "53", "-j", "REDIRECT", "--to-ports", to},
		{"-p", "tcp", "-m", "addrtype", "--src-type", "LOCAL", "-m", "owner", "!", "--uid-owner", uid, "-m", "tcp", "--dport", "53", "-j", "REDIRECT", "--to-ports", to},
	}
}

// sourceRules open the filter chain: every packet of a socket whose source
// address is not an address of the Pod is dropped, whatever its UID,
// protocol or interface (lo included), before any rule can return it. Every responder in the Pod
// answers the source of what it received (the DNS guard, BotBox's proxy
// and health listeners, the kernel's ICMP errors, echo replies and resets,
// REJECT), and an unprivileged socket may send IPv6 from any source
// address (IPV6_FREEBIND): without this rule the app makes any of them send
// its data, from the Pod's own address, to an address of its choice. The
// app's packet is dropped in OUTPUT, before conntrack confirms its entry,
// so no answer can be sent through one (the exemption of BotBox's UID
// never applies: BotBox never receives the query).
//
// Only packets of a socket are dropped: every packet a process sends has
// one, while the resets of "REJECT --reject-with tcp-reset" have none and
// carry the rejected packet's destination, a foreign address, as their
// source (to the app's own address, through lo); they must pass. A packet
// without a socket is the kernel's reaction to a packet it received, and
// what the app sends can no longer be received from a foreign source.
//
// IPv6 exempts the unspecified source "::", which the kernel uses for
// duplicate address detection (neighbour solicitations, RFC 4862 §5.4.2),
// MLD reports sent before a link-local address exists (RFC 3590) and
// router solicitations: such packets go on through the rest of the chain
// like any other (the MLD and ICMP rules, the final DROP). Only the kernel
// or a raw socket (CAP_NET_RAW, a complete bypass anyway, README.md) can
// send from "::", and nothing can be addressed back to it, so it makes no
// responder answer anyone. IPv4 needs no exemption: an unprivileged socket
// cannot send from a foreign IPv4 source (the route lookup refuses it), and
// a Pod sends nothing from 0.0.0.0 (DHCP and IGMP without an address are
// not used; IGMP is dropped anyway).
//
// TestPlanSourceFirst, TestPlanForeignSourceDropped and the e2e
// TestSpoofedSourcesGetNoAnswer and TestDADFromUnspecifiedSource hold this.
func sourceRules(f Family) []Rule {
	r := Rule{"-m", "addrtype", "!", "--src-type", "LOCAL", "-m", "owner", "--socket-exists", "-j", "DROP"}
	if f == IPv6 {
		r = append(Rule{"!", "-s", "::/128"}, r...)
	}
	return []Rule{r}
}

// dnsRules exempts port 53: to any destination (reference), or only to the
// given resolvers of family f. With resolvers given but none of family f,
// no rule is returned, so the final DROP drops port 53 for f.
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
