package netfilter

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// packet is what the OUTPUT path knows about a packet, for verdict.
type packet struct {
	proto      string // "tcp", "udp", "icmp", "ipv6-icmp", or a number such as "136"
	dst        netip.Addr
	outLo      bool
	uid        int // -1: no socket
	sport      uint16
	dport      uint16
	syn        bool
	icmpv6Type int
	// foreignSrc: the source address is not one of the Pod's (an IPv6
	// socket with IPV6_FREEBIND, or a raw socket); the zero value is the
	// normal, local source.
	foreignSrc bool
	// unspecifiedSrc: the source is the unspecified address (the kernel's
	// DAD probes and early MLD reports); not a local address either.
	unspecifiedSrc bool
}

// srcAddr is the source address as far as a "-s" match can tell: the
// unspecified address, or an invalid one that no prefix contains (some
// address, local or foreign, that no rule names).
func (p packet) srcAddr() netip.Addr {
	switch {
	case !p.unspecifiedSrc:
		return netip.Addr{}
	case p.dst.Is4():
		return netip.IPv4Unspecified()
	default:
		return netip.IPv6Unspecified()
	}
}

// srcLocal is what "-m addrtype --src-type LOCAL" sees.
func (p packet) srcLocal() bool { return !p.foreignSrc && !p.unspecifiedSrc }

// verdict evaluates the filter chain of family f in rs for p, the way the
// kernel walks it: the first matching rule decides; falling off the end
// returns to OUTPUT (policy ACCEPT). The verdict is the rule's target with
// its options: "RETURN", "DROP" or e.g. "REJECT --reject-with tcp-reset". It
// understands exactly the match options Plan writes and fails the test on
// any other, so a new kind of rule cannot be skipped silently.
func verdict(t *testing.T, rs Ruleset, f Family, p packet) string {
	t.Helper()
	for _, c := range rs.Chains(f) {
		if c.Table != TableFilter {
			continue
		}
		for _, r := range c.Rules {
			if matches(t, r, p) {
				return strings.Join(r[slices.Index(r, "-j")+1:], " ")
			}
		}
		return "RETURN"
	}
	t.Fatalf("no filter chain for %v", f)
	return ""
}

func matches(t *testing.T, r Rule, p packet) bool {
	t.Helper()
	ok := true
	for i := 0; i < len(r); i++ {
		neg := false
		if r[i] == "!" {
			neg = true
			i++
		}
		var m bool
		switch r[i] {
		case "-o":
			i++
			m = (r[i] == "lo") == p.outLo
		case "-s":
			i++
			m = netip.MustParsePrefix(r[i]).Contains(p.srcAddr())
		case "-d":
			i++
			m = netip.MustParsePrefix(r[i]).Contains(p.dst)
		case "-p":
			i++
			m = r[i] == p.proto
		case "-m":
			i++
			continue
		case "--socket-exists":
			m = p.uid >= 0
		case "--uid-owner":
			i++
			// Without a socket, xt_owner's owner match is false and its
			// negation true: m stays false either way.
			m = p.uid >= 0 && strconv.Itoa(p.uid) == r[i]
		case "--sport":
			i++
			m = strconv.Itoa(int(p.sport)) == r[i]
		case "--dport":
			i++
			m = strconv.Itoa(int(p.dport)) == r[i]
		case "--tcp-flags":
			if r[i+1] != "SYN" || r[i+2] != "SYN" {
				t.Fatalf("unmodelled flags in %q", r)
			}
			i += 2
			m = p.syn
		case "--icmpv6-type":
			i++
			m = r[i] == strconv.Itoa(p.icmpv6Type)
		case "--src-type":
			i++
			if r[i] != "LOCAL" {
				t.Fatalf("unmodelled address type in %q", r)
			}
			m = p.srcLocal()
		case "-j":
			return ok
		default:
			t.Fatalf("unmodelled option %q in %q", r[i], r)
		}
		if m == neg {
			ok = false
		}
	}
	t.Fatalf("rule without a target: %q", r)
	return false
}

// TestPlanDefaultDeny: in every environment, whatever the app (UID 1000)
// sends that the rules do not explicitly allow is dropped, whatever its
// protocol, and the chain ends with an unconditional DROP (redteam finding
// 1: UDP-Lite, and finding 9: IGMP, fell through to ACCEPT).
func TestPlanDefaultDeny(t *testing.T) {
	for _, tc := range envCombinations() {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParseEnv(t, tc.env)
			rs := Plan(s)
			for _, f := range rs.Families() {
				dst := netip.MustParseAddr("192.0.2.7")
				if f == IPv6 {
					dst = netip.MustParseAddr("2001:db8::7")
				}
				chains := rs.Chains(f)
				last := chains[len(chains)-1].Rules
				if got := last[len(last)-1]; !slices.Equal(got, Rule{"-j", "DROP"}) {
					t.Errorf("%v: last filter rule %q, want -j DROP", f, got)
				}
				for _, proto := range []string{"136", "132", "33", "2", "253", "47", "50", "tcp", "udp"} {
					p := packet{proto: proto, dst: dst, uid: 1000, sport: 40000, dport: 9999}
					if got, want := verdict(t, rs, f, p), denial(s, f, proto); got != want {
						t.Errorf("%v: app packet of protocol %s to %s: %s, want %s", f, proto, dst, got, want)
					}
				}
				// IGMP is sent by the kernel (no socket owner). The kernel
				// never answers a multicast destination with an ICMP error.
				if got, want := verdict(t, rs, f, packet{proto: "2", dst: netip.MustParseAddr("224.0.0.22"), uid: -1}), denial(s, f, "2"); f == IPv4 && got != want {
					t.Errorf("IGMP report: %s, want %s", got, want)
				}
				icmp := packet{proto: "icmp", dst: dst, uid: 1000}
				if f == IPv6 {
					icmp = packet{proto: "ipv6-icmp", dst: dst, uid: 1000, icmpv6Type: 128}
				}
				want := "RETURN"
				if s.DropICMP {
					want = denial(s, f, icmp.proto)
				}
				if got := verdict(t, rs, f, icmp); got != want {
					t.Errorf("%v: echo request: %s, want %s", f, got, want)
				}
				// What must pass: loopback, BotBox, DNS to a resolver.
				pass := []packet{
					{proto: "136", dst: dst, uid: 1000, outLo: true},
					{proto: "136", dst: dst, uid: int(s.UID)},
				}
				if r := dnsTarget(s, f, dst); r.IsValid() {
					pass = append(pass, packet{proto: "udp", dst: r, uid: 1000, dport: 53})
				}
				for _, p := range pass {
					if got := verdict(t, rs, f, p); got != "RETURN" {
						t.Errorf("%v: %+v: %s, want RETURN", f, p, got)
					}
				}
			}
		})
	}
}

// denial is the verdict of the chain's end for a packet of proto from a
// local source: DROP, or with BOTBOX_REJECT=1 the REJECT that answers it.
func denial(s Settings, f Family, proto string) string {
	switch {
	case !s.Reject:
		return "DROP"
	case proto == "tcp":
		return "REJECT --reject-with tcp-reset"
	case f == IPv6:
		return "REJECT --reject-with icmp6-port-unreachable"
	default:
		return "REJECT --reject-with icmp-port-unreachable"
	}
}

// dnsTarget is a resolver of family f the settings allow, or dst; none
// with the DNS guard (TestPlanDNSGuard: port 53 is redirected instead).
func dnsTarget(s Settings, f Family, dst netip.Addr) netip.Addr {
	if s.DNSGuardPort != 0 {
		return netip.Addr{}
	}
	if len(s.DNSServers) == 0 {
		return dst
	}
	for _, a := range s.DNSServers {
		if a.Is4() == (f == IPv4) {
			return a
		}
	}
	return netip.Addr{}
}

// TestPlanMLD: only MLDv1 reports for solicited-node groups leave the Pod;
// MLDv2 reports (groups inside the payload), MLDv1 reports for any other
// group, done messages and queries are dropped, with or without
// BOTBOX_DROP_ICMP (redteam finding 9). Neighbour discovery passes.
func TestPlanMLD(t *testing.T) {
	for _, drop := range []string{"0", "1"} {
		rs := Plan(mustParseEnv(t, map[string]string{EnvIPv6: "1", EnvDropICMP: drop}))
		for _, tt := range []struct {
			typ  int
			dst  string
			want string
		}{
			{131, "ff02::1:ff12:3456", "RETURN"},
			{131, "ff05::5345:4352:4554", "DROP"},
			{131, "ff02::1:fe12:3456", "DROP"},
			{143, "ff02::16", "DROP"},
			{132, "ff02::2", "DROP"},
			{130, "ff02::1", "DROP"},
			{135, "ff02::1:ff12:3456", "RETURN"},
			{136, "fe80::1", "RETURN"},
			{133, "ff02::2", "RETURN"},
		} {
			p := packet{proto: "ipv6-icmp", dst: netip.MustParseAddr(tt.dst), uid: -1, icmpv6Type: tt.typ}
			if got := verdict(t, rs, IPv6, p); got != tt.want {
				t.Errorf("BOTBOX_DROP_ICMP=%s: ICMPv6 type %d to %s: %s, want %s", drop, tt.typ, tt.dst, got, tt.want)
			}
		}
	}
}

// TestPlanSquat: a handshake answered from one of BotBox's ports is dropped
// unless BotBox's UID owns the socket, on loopback and both families; the
// kernel's RST for a closed port (no SYN) and BotBox's own answers pass
// (redteam finding 6).
func TestPlanSquat(t *testing.T) {
	s := mustParseEnv(t, map[string]string{EnvIPv6: "1", EnvMetricsPort: "9191", EnvHTTPSInterception: "1"})
	rs := Plan(s)
	for _, f := range rs.Families() {
		lo := netip.MustParseAddr("127.0.0.1")
		if f == IPv6 {
			lo = netip.IPv6Loopback()
		}
		for _, port := range []uint16{8080, 8443, 9191} {
			for _, tt := range []struct {
				name string
				p    packet
				want string
			}{
				{"app's SYN-ACK", packet{proto: "tcp", dst: lo, outLo: true, uid: 1000, sport: port, syn: true}, "DROP"},
				{"root's SYN-ACK", packet{proto: "tcp", dst: lo, outLo: true, uid: 0, sport: port, syn: true}, "DROP"},
				{"BotBox's SYN-ACK", packet{proto: "tcp", dst: lo, outLo: true, uid: 1337, sport: port, syn: true}, "RETURN"},
				{"kernel RST", packet{proto: "tcp", dst: lo, outLo: true, uid: 0, sport: port}, "RETURN"},
			} {
				if got := verdict(t, rs, f, tt.p); got != tt.want {
					t.Errorf("%v port %d %s: %s, want %s", f, port, tt.name, got, tt.want)
				}
			}
		}
		if got := verdict(t, rs, f, packet{proto: "tcp", dst: lo, outLo: true, uid: 1000, sport: 9090, syn: true}); got != "RETURN" {
			t.Errorf("%v: the app's own listener on 9090 (not a BotBox port here): %s, want RETURN", f, got)
		}
	}
}

// TestPlanReject: BOTBOX_REJECT=1 answers the app's blocked TCP with a reset
// and everything else with port-unreachable (issue 10 item 7), but only for
// packets from a local source, so every reply is delivered inside the Pod:
// a packet with a foreign source (IPV6_FREEBIND) is dropped silently, and
// the replies themselves (to a local address, through lo) pass. The chain
// is the default one with the two REJECT rules inserted right before the
// final DROP: what is allowed, and in which order, does not change.
func TestPlanReject(t *testing.T) {
	for _, icmp := range []string{"0", "1"} {
		env := map[string]string{EnvIPv6: "1", EnvDropICMP: icmp}
		s := mustParseEnv(t, env)
		env[EnvReject] = "1"
		rej := mustParseEnv(t, env)
		drop, rs := Plan(s), Plan(rej)
		for _, f := range rs.Families() {
			dst, src := netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("10.0.0.2")
			unreachable := "REJECT --reject-with icmp-port-unreachable"
			if f == IPv6 {
				dst, src = netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("fd00::2")
				unreachable = "REJECT --reject-with icmp6-port-unreachable"
			}
			name := fmt.Sprintf("%v BOTBOX_DROP_ICMP=%s", f, icmp)

			got, want := filterRules(rs, f), filterRules(drop, f)
			n := len(want) - 1
			want = append(slices.Clone(want[:n]),
				Rule{"-p", "tcp", "-m", "addrtype", "--src-type", "LOCAL", "-j", "REJECT", "--reject-with", "tcp-reset"},
				Rule{"-m", "addrtype", "--src-type", "LOCAL", "-j", "REJECT", "--reject-with", unreachable[len("REJECT --reject-with "):]},
				Rule{"-j", "DROP"})
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%s: filter chain (-want +got):\n%s", name, d)
			}

			for _, tt := range []struct {
				what string
				p    packet
				want string
			}{
				{"app TCP SYN to 443", packet{proto: "tcp", dst: dst, uid: 1000, dport: 443, syn: true}, "REJECT --reject-with tcp-reset"},
				{"app UDP to 443 (QUIC)", packet{proto: "udp", dst: dst, uid: 1000, dport: 443}, unreachable},
				{"app UDP-Lite", packet{proto: "136", dst: dst, uid: 1000, dport: 9999}, unreachable},
				{"app raw IP 253", packet{proto: "253", dst: dst, uid: 1000}, unreachable},
				{"app UDP from a foreign source", packet{proto: "udp", dst: dst, uid: 1000, dport: 9999, foreignSrc: true}, "DROP"},
				{"app TCP from a foreign source", packet{proto: "tcp", dst: dst, uid: 1000, dport: 443, syn: true, foreignSrc: true}, "DROP"},
				{"app SYN-ACK from BotBox's port", packet{proto: "tcp", dst: dst, uid: 1000, sport: 8080, syn: true}, "DROP"},
				{"the reset, to the app's address", packet{proto: "tcp", dst: src, uid: -1, outLo: true}, "RETURN"},
				{"the port-unreachable, to the app's address", packet{proto: "icmp", dst: src, uid: -1, outLo: true, icmpv6Type: 1}, "RETURN"},
				{"the app to loopback", packet{proto: "tcp", dst: src, uid: 1000, outLo: true, dport: 8080, syn: true}, "RETURN"},
				{"BotBox", packet{proto: "tcp", dst: dst, uid: 1337, dport: 443, syn: true}, "RETURN"},
				{"app DNS", packet{proto: "udp", dst: dst, uid: 1000, dport: 53}, "RETURN"},
			} {
				p := tt.p
				if f == IPv6 && p.proto == "icmp" {
					p.proto = "ipv6-icmp"
				}
				if got := verdict(t, rs, f, p); got != tt.want {
					t.Errorf("%s: %s: %s, want %s", name, tt.what, got, tt.want)
				}
			}
			if f == IPv6 {
				mld := packet{proto: "ipv6-icmp", dst: netip.MustParseAddr("ff02::16"), uid: -1, icmpv6Type: 143}
				if got := verdict(t, rs, f, mld); got != "DROP" {
					t.Errorf("%s: MLDv2 report: %s, want DROP", name, got)
				}
			}
		}
	}
}

// filterRules returns the filter chain's rules of family f.
func filterRules(rs Ruleset, f Family) []Rule {
	for _, c := range rs.Chains(f) {
		if c.Table == TableFilter {
			return c.Rules
		}
	}
	return nil
}

// natVerdict evaluates the nat chain of family f for p as the kernel
// does for a connection's first packet: OUTPUT's jump (its protocol match
// included), then the chain's first matching rule; "" when the packet is
// not redirected (no jump, RETURN, or the end of the chain).
func natVerdict(t *testing.T, rs Ruleset, f Family, p packet) string {
	t.Helper()
	for _, c := range rs.Chains(f) {
		if c.Table != TableNAT {
			continue
		}
		if !matches(t, c.Jump, p) {
			return ""
		}
		for _, r := range c.Rules {
			if matches(t, r, p) {
				if v := strings.Join(r[slices.Index(r, "-j")+1:], " "); v != "RETURN" {
					return v
				}
				return ""
			}
		}
		return ""
	}
	t.Fatalf("no nat chain for %v", f)
	return ""
}

// TestPlanDNSGuard: with BOTBOX_DNS_GUARD_PORT every UDP and TCP packet to
// port 53 from any UID but BotBox's is redirected to the guard, whatever
// its destination (the Pod's resolver, one the app picks, a resolver on
// loopback); BotBox's own queries are not; HTTP is still redirected to the
// proxy; and no direct port 53 stays open in the filter chain, while the
// redirected packet (now to loopback) passes. Without the variable, port
// 53 is not redirected (the reference's behaviour).
func TestPlanDNSGuard(t *testing.T) {
	for _, tc := range envCombinations() {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParseEnv(t, tc.env)
			rs := Plan(s)
			for _, f := range rs.Families() {
				dsts := []string{"10.96.0.10", "192.0.2.53", "127.0.0.53", "127.0.0.1"}
				loopback := netip.MustParseAddr("127.0.0.1")
				if f == IPv6 {
					dsts = []string{"fd00:10::a", "2001:db8::53", "::1"}
					loopback = netip.IPv6Loopback()
				}
				for _, d := range dsts {
					dst := netip.MustParseAddr(d)
					for _, proto := range []string{"udp", "tcp"} {
						app := packet{proto: proto, dst: dst, uid: 1000, sport: 40000, dport: 53, outLo: dst.IsLoopback()}
						got := natVerdict(t, rs, f, app)
						want := ""
						if s.DNSGuardPort != 0 {
							want = "REDIRECT --to-ports " + strconv.Itoa(int(s.DNSGuardPort))
						}
						if got != want {
							t.Errorf("%v: app %s to [%s]:53: nat %q, want %q", f, proto, dst, got, want)
						}
						own := app
						own.uid = int(s.UID)
						if got := natVerdict(t, rs, f, own); got != "" {
							t.Errorf("%v: BotBox's %s to [%s]:53 redirected: %q", f, proto, dst, got)
						}
						if s.DNSGuardPort == 0 || dst.IsLoopback() {
							continue
						}
						// A port-53 packet that escaped the redirect is dropped.
						if v := verdict(t, rs, f, app); v != denial(s, f, proto) {
							t.Errorf("%v: unredirected app %s to [%s]:53: %s, want %s", f, proto, dst, v, denial(s, f, proto))
						}
						// The redirected one (destination now loopback) passes.
						redirected := app
						redirected.dst, redirected.dport = loopback, s.DNSGuardPort
						if v := verdict(t, rs, f, redirected); v != "RETURN" {
							t.Errorf("%v: redirected app %s: %s, want RETURN", f, proto, v)
						}
					}
				}
				http := packet{proto: "tcp", dst: netip.MustParseAddr(dsts[1]), uid: 1000, sport: 40000, dport: s.RedirectFromPort}
				if got, want := natVerdict(t, rs, f, http), "REDIRECT --to-ports "+strconv.Itoa(int(s.ProxyPort)); got != want {
					t.Errorf("%v: app HTTP: nat %q, want %q", f, got, want)
				}
			}
		})
	}
}

// TestPlanSourceFirst: in every environment and family the filter chain
// starts with the drop of foreign sources, before any RETURN, REDIRECT or
// REJECT can let a packet go, and every nat rule that redirects port 53
// matches local sources only (issue 18 §1: the DNS guard answered queries
// from spoofed IPv6 sources).
func TestPlanSourceFirst(t *testing.T) {
	for _, tc := range envCombinations() {
		t.Run(tc.name, func(t *testing.T) {
			rs := Plan(mustParseEnv(t, tc.env))
			for _, f := range rs.Families() {
				want := Rule{"-m", "addrtype", "!", "--src-type", "LOCAL", "-m", "owner", "--socket-exists", "-j", "DROP"}
				if f == IPv6 {
					want = append(Rule{"!", "-s", "::/128"}, want...)
				}
				for _, c := range rs.Chains(f) {
					if c.Table == TableFilter {
						if len(c.Rules) == 0 || !slices.Equal(c.Rules[0], want) {
							t.Errorf("%v: filter chain starts with %q, want %q", f, c.Rules[0], want)
						}
						if n := slices.IndexFunc(c.Rules[1:], func(r Rule) bool { return slices.Equal(r, want) }); n >= 0 {
							t.Errorf("%v: the source drop appears twice", f)
						}
						continue
					}
					for _, r := range c.Rules {
						if !slices.Contains(r, "REDIRECT") || !slices.Contains(r, "53") {
							continue
						}
						i := slices.Index(r, "--src-type")
						if i < 1 || r[i-1] == "!" || r[i+1] != "LOCAL" {
							t.Errorf("%v: DNS redirect %q does not match local sources only", f, r)
						}
					}
				}
			}
		})
	}
}

// TestPlanForeignSourceDropped: whatever its UID (the app, root, BotBox's),
// protocol, destination and interface, a packet of a socket from a foreign
// source is dropped by the filter chain and never redirected to the DNS
// guard; REJECT's reset, which has no socket and a foreign source, still
// reaches the app. A packet from the unspecified IPv6 source (only the kernel and raw
// sockets send one, and nothing can answer it) walks the rest of the chain
// as one from a local source would, so the kernel's DAD probe and
// solicited-node MLD report pass and other MLD is dropped, except that
// REJECT never answers it and port 53 is never redirected.
func TestPlanForeignSourceDropped(t *testing.T) {
	for _, tc := range envCombinations() {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParseEnv(t, tc.env)
			rs := Plan(s)
			for _, f := range rs.Families() {
				dsts := []string{"192.0.2.7", "10.96.0.10", "127.0.0.1"}
				proto := []string{"tcp", "udp", "icmp", "136"}
				if f == IPv6 {
					dsts = []string{"2001:db8::7", "fd00:10::a", "::1", "ff02::1:ff12:3456"}
					proto = []string{"tcp", "udp", "ipv6-icmp", "136"}
				}
				for _, d := range dsts {
					dst := netip.MustParseAddr(d)
					for _, pr := range proto {
						for _, uid := range []int{1000, 0, int(s.UID)} {
							for _, port := range []uint16{53, s.ProxyPort, s.RedirectFromPort, 443, 9999} {
								p := packet{proto: pr, dst: dst, uid: uid, outLo: dst.IsLoopback(), sport: 40000, dport: port,
									syn: pr == "tcp", icmpv6Type: 128, foreignSrc: true}
								if got := verdict(t, rs, f, p); got != "DROP" {
									t.Errorf("%v: %v: filter %s, want DROP", f, p, got)
								}
								if got := natVerdict(t, rs, f, p); port == 53 && got != "" {
									t.Errorf("%v: %v: nat %q, want no redirect", f, p, got)
								}
							}
						}
					}
				}
				// REJECT's reset has no socket and the rejected packet's
				// destination as its source; it goes to the app's address.
				reset := packet{proto: "tcp", dst: netip.MustParseAddr("10.0.0.2"), uid: -1, outLo: true, sport: 443, dport: 40000, foreignSrc: true}
				if f == IPv6 {
					reset.dst = netip.MustParseAddr("fd00::2")
				}
				if got := verdict(t, rs, f, reset); got != "RETURN" {
					t.Errorf("%v: REJECT's reset to the app: %s, want RETURN", f, got)
				}
				if f != IPv6 {
					continue
				}
				for _, tt := range []struct {
					what string
					p    packet
				}{
					{"DAD neighbour solicitation", packet{proto: "ipv6-icmp", dst: netip.MustParseAddr("ff02::1:ff12:3456"), uid: -1, icmpv6Type: 135}},
					{"router solicitation", packet{proto: "ipv6-icmp", dst: netip.MustParseAddr("ff02::2"), uid: -1, icmpv6Type: 133}},
					{"MLDv1 solicited-node report", packet{proto: "ipv6-icmp", dst: netip.MustParseAddr("ff02::1:ff12:3456"), uid: -1, icmpv6Type: 131}},
					{"MLDv1 report for another group", packet{proto: "ipv6-icmp", dst: netip.MustParseAddr("ff05::5345:4352:4554"), uid: -1, icmpv6Type: 131}},
					{"MLDv2 report", packet{proto: "ipv6-icmp", dst: netip.MustParseAddr("ff02::16"), uid: -1, icmpv6Type: 143}},
					{"echo request", packet{proto: "ipv6-icmp", dst: netip.MustParseAddr("2001:db8::7"), uid: 1000, icmpv6Type: 128}},
					{"UDP", packet{proto: "udp", dst: netip.MustParseAddr("2001:db8::7"), uid: 1000, dport: 9999}},
					{"UDP to port 53", packet{proto: "udp", dst: netip.MustParseAddr("2001:db8::7"), uid: 1000, dport: 53}},
					{"TCP SYN", packet{proto: "tcp", dst: netip.MustParseAddr("2001:db8::7"), uid: 1000, dport: 443, syn: true}},
				} {
					unspec := tt.p
					unspec.unspecifiedSrc = true
					want := verdict(t, rs, f, tt.p)
					if strings.HasPrefix(want, "REJECT") {
						want = "DROP"
					}
					switch tt.what {
					case "DAD neighbour solicitation", "router solicitation", "MLDv1 solicited-node report":
						if want != "RETURN" {
							t.Errorf("%s: %s from a local source, want RETURN", tt.what, want)
						}
					case "MLDv1 report for another group", "MLDv2 report":
						if want != "DROP" {
							t.Errorf("%s: %s from a local source, want DROP", tt.what, want)
						}
					}
					if got := verdict(t, rs, f, unspec); got != want {
						t.Errorf("%s from ::: %s, want %s", tt.what, got, want)
					}
					if got := natVerdict(t, rs, f, unspec); tt.p.dport == 53 && got != "" {
						t.Errorf("%s from ::: nat %q, want no redirect", tt.what, got)
					}
				}
			}
		})
	}
}
