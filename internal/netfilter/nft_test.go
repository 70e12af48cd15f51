package netfilter

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// TestPrintNFTGolden renders every environment of the iptables goldens in
// nft syntax (testdata/nft/*.golden; -update rewrites them).
func TestPrintNFTGolden(t *testing.T) {
	if *update {
		if err := os.MkdirAll("testdata/nft", 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range envCombinations() {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParseEnv(t, tc.env)
			var b strings.Builder
			b.WriteString(envHeader(tc.env))
			if err := PrintNFTables(s, Plan(s).Families(), &b); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, "nft/"+tc.name, b.String())
		})
	}
}

// TestNFTTranslatesEveryPlan: every rule of every planned chain becomes
// exactly one rule of the same chain (a negated owner match a jump to its
// auxiliary chain), every jump one base chain on the output hook.
func TestNFTTranslatesEveryPlan(t *testing.T) {
	for _, tc := range envCombinations() {
		s := mustParseEnv(t, tc.env)
		rs := Plan(s)
		for _, f := range rs.Families() {
			tab, err := nftPlan(rs, f)
			if err != nil {
				t.Fatalf("%s %v: %v", tc.name, f, err)
			}
			byName := map[string]nftChain{}
			for _, c := range tab.chains {
				byName[c.name] = c
			}
			for _, c := range rs.Chains(f) {
				if got := len(byName[c.Name].rules); got != len(c.Rules) {
					t.Errorf("%s %v: chain %s has %d rules, want %d", tc.name, f, c.Name, got, len(c.Rules))
				}
			}
			if n := len(byName[nftNATBase].rules) + len(byName[nftFilterBase].rules); n != 2 {
				t.Errorf("%s %v: %d base chain rules, want 2", tc.name, f, n)
			}
		}
	}
}

// TestNFTRejectsUnknownShapes: a rule the translation does not fully
// understand is an error, never a rule with a part left out.
func TestNFTRejectsUnknownShapes(t *testing.T) {
	for _, tt := range []struct {
		rule Rule
		f    Family
		want string
	}{
		{Rule{"-p", "sctp", "-j", "DROP"}, IPv4, `protocol "sctp"`},
		{Rule{"-p", "icmp", "-j", "RETURN"}, IPv6, `protocol "icmp"`},
		{Rule{"-o", "eth0", "-j", "RETURN"}, IPv4, "output interface"},
		{Rule{"!", "-o", "lo", "-j", "RETURN"}, IPv4, "negated -o"},
		{Rule{"-m", "conntrack", "--ctstate", "NEW", "-j", "DROP"}, IPv4, `match module "conntrack"`},
		{Rule{"-m", "comment", "--comment", "x", "-j", "DROP"}, IPv4, `match module "comment"`},
		{Rule{"-p", "tcp", "--syn", "-j", "DROP"}, IPv4, `option "--syn"`},
		{Rule{"-p", "tcp", "-m", "tcp", "--tcp-flags", "SYN,ACK", "SYN", "-j", "DROP"}, IPv4, "tcp flags"},
		{Rule{"-j", "LOG"}, IPv4, `target "LOG"`},
		{Rule{"-j", "DROP", "--extra"}, IPv4, `target "DROP --extra"`},
		{Rule{"-j", "SOMECHAIN"}, IPv4, `target "SOMECHAIN"`},
		{Rule{"-p", "tcp", "-j", "REJECT", "--reject-with", "icmp-host-prohibited"}, IPv4, "reject-with"},
		{Rule{"-j", "REJECT", "--reject-with", "icmp6-port-unreachable"}, IPv4, "reject-with"},
		{Rule{"-j", "REJECT", "--reject-with", "tcp-reset"}, IPv4, "tcp-reset without -p tcp"},
		{Rule{"-d", "10.0.0.0/12", "-j", "RETURN"}, IPv4, "byte-aligned"},
		{Rule{"-d", "::1/128", "-j", "RETURN"}, IPv4, "byte-aligned IPv4"},
		{Rule{"-d", "10.0.0.1/8", "-j", "RETURN"}, IPv4, "byte-aligned"},
		{Rule{"-d", "0.0.0.0/0", "-j", "RETURN"}, IPv4, "at least 8 bits"},
		{Rule{"!", "-s", "::/0", "-j", "DROP"}, IPv6, "at least 8 bits"},
		{Rule{"-s", "10.0.0.0/12", "-j", "DROP"}, IPv4, "byte-aligned"},
		{Rule{"!", "-s", "::/128", "-j", "DROP"}, IPv4, "byte-aligned IPv4"},
		{Rule{"!", "-d", "::1/128", "-j", "DROP"}, IPv6, "negated -d"},
		{Rule{"!", "-p", "udp", "-j", "DROP"}, IPv6, "negated -p"},
		{Rule{"-s", "::/128", "-s", "::1/128", "-j", "DROP"}, IPv6, "-s given twice"},
		{Rule{"-m", "addrtype", "!", "--src-type", "UNICAST", "-j", "DROP"}, IPv4, "address type"},
		{Rule{"-m", "udp", "--dport", "53", "-j", "RETURN"}, IPv4, "ports without -p"},
		{Rule{"-p", "tcp", "-j", "REDIRECT", "--to-ports", "8080-8081"}, IPv4, "redirect port"},
		{Rule{"-j", "REDIRECT", "--to-ports", "8080"}, IPv4, "REDIRECT without -p"},
		{Rule{"-m", "owner", "!", "--uid-owner", "1337", "-j", "RETURN"}, IPv4, "terminal target"},
		{Rule{"-m", "owner", "--uid-owner", "1337"}, IPv4, "no target"},
		{Rule{"-m", "owner", "--gid-owner", "1337", "-j", "DROP"}, IPv4, `option "--gid-owner"`},
		{Rule{"-p", "tcp", "-p", "udp", "-j", "DROP"}, IPv4, "-p given twice"},
		{Rule{"-m", "addrtype", "--dst-type", "LOCAL", "-j", "DROP"}, IPv4, `option "--dst-type"`},
		{Rule{"-p", "ipv6-icmp", "-m", "icmp6", "--icmpv6-type", "echo-request", "-j", "DROP"}, IPv6, "icmpv6 type"},
	} {
		_, err := parseRule(tt.rule, tt.f, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseRule(%q, %v) = %v, want an error containing %q", tt.rule, tt.f, err, tt.want)
		}
	}
	// A plan chain in an unknown table or a jump elsewhere is refused too.
	rs := Ruleset{IPv4: []Chain{{Table: "mangle", Name: "X", Jump: Rule{"-j", "X"}}}}
	if _, err := nftPlan(rs, IPv4); err == nil || !strings.Contains(err.Error(), `unknown table "mangle"`) {
		t.Errorf("mangle chain: %v", err)
	}
	rs = Ruleset{IPv4: []Chain{{Table: TableFilter, Name: "X", Jump: Rule{"-j", "DROP"}}}}
	if _, err := nftPlan(rs, IPv4); err == nil || !strings.Contains(err.Error(), "does not jump to X") {
		t.Errorf("jump rule without a jump: %v", err)
	}
}

// TestNFTDNSGuardShapes: the DNS guard's nat rules (udp and tcp to port 53
// from any UID but BotBox's redirected to a local port) translate with the
// negated owner match in an auxiliary chain that keeps the protocol match
// the redirect needs.
func TestNFTDNSGuardShapes(t *testing.T) {
	rs := dnsGuardRuleset()
	nat := rs.IPv4[0]
	tab, err := nftPlan(rs, IPv4)
	if err != nil {
		t.Fatal(err)
	}
	got := nftText([]nftTable{tab})
	for _, want := range []string{
		"\t\tudp dport 53 jump EGRESS_REDIRECT.4\n\t\ttcp dport 53 jump EGRESS_REDIRECT.5\n",
		"\tchain EGRESS_REDIRECT.4 {\n\t\tmeta skuid 1337 return\n\t\tudp dport 53 redirect to :15053\n\t}\n",
		"\tchain EGRESS_REDIRECT.5 {\n\t\tmeta skuid 1337 return\n\t\ttcp dport 53 redirect to :15053\n\t}\n",
		"\tchain output.nat {\n\t\ttype nat hook output priority -100; policy accept;\n\t\tjump EGRESS_REDIRECT\n\t}\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("nft text lacks\n%s\nin\n%s", want, got)
		}
	}
	for _, p := range []packet{
		{proto: "udp", dst: netip.MustParseAddr("10.96.0.10"), uid: 1000, dport: 53},
		{proto: "tcp", dst: netip.MustParseAddr("10.96.0.10"), uid: 1000, dport: 53, syn: true},
		{proto: "udp", dst: netip.MustParseAddr("10.96.0.10"), uid: 1337, dport: 53},
		{proto: "udp", dst: netip.MustParseAddr("10.96.0.10"), uid: 1000, dport: 5353},
		{proto: "udp", dst: netip.MustParseAddr("127.0.0.1"), uid: 1000, dport: 53, outLo: true},
	} {
		if got, want := nftVerdict(t, tab, TableNAT, p), iptVerdict(t, nat, p); got != want {
			t.Errorf("%v: nftables %s, iptables %s", p, got, want)
		}
	}
}

// dnsGuardRuleset is the default plan with the DNS guard's nat rules (as
// another change adds them: udp and tcp to port 53 from any UID but
// BotBox's redirected to 15053) and a nat jump for every protocol, IPv4
// and IPv6.
func dnsGuardRuleset() Ruleset {
	s := DefaultSettings()
	s.IPv6 = true
	rs := Plan(s)
	for _, chains := range [][]Chain{rs.IPv4, rs.IPv6} {
		nat := &chains[0]
		nat.Jump = Rule{"-j", nat.Name}
		for _, proto := range []string{"udp", "tcp"} {
			nat.Rules = append(nat.Rules, Rule{"-p", proto, "-m", proto, "--dport", "53", "-m", "owner", "!", "--uid-owner", "1337", "-j", "REDIRECT", "--to-ports", "15053"})
		}
	}
	return rs
}

// TestNFTVerdictsMatchIPTables: for every environment, family and table,
// the translated chains give every packet of a large set exactly the
// verdict the planned iptables chains give it (verdict_test.go's model of
// xt matches), including packets without a socket, for which nftables'
// "meta skuid != UID" is false where xt_owner's "! --uid-owner UID" is true
// (the reason for negatedOwnerChain).
func TestNFTVerdictsMatchIPTables(t *testing.T) {
	for _, tc := range envCombinations() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nftVerdictsMatch(t, mustParseEnv(t, tc.env))
		})
	}
}

func nftVerdictsMatch(t *testing.T, s Settings) {
	{
		rs := Plan(s)
		for _, f := range rs.Families() {
			tab, err := nftPlan(rs, f)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, p := range packetSet(s, f) {
				for _, c := range rs.Chains(f) {
					n++
					if got, want := nftVerdict(t, tab, c.Table, p), iptVerdict(t, c, p); got != want {
						t.Errorf("%v %s: %v: nftables %s, iptables %s", f, c.Table, p, got, want)
					}
				}
			}
			if n < 500 {
				t.Fatalf("only %d packets compared", n)
			}
		}
	}
}

// packetSet is every combination of the packet fields the rules look at,
// with values on both sides of each rule.
func packetSet(s Settings, f Family) []packet {
	dsts := []string{"192.0.2.7", "127.0.0.1", "10.96.0.11"}
	protos := []string{"tcp", "udp", "icmp", "136", "2"}
	if f == IPv6 {
		dsts = []string{"2001:db8::7", "::1", "fd00:10::a", "ff02::1:ff12:3456", "ff02::16"}
		protos = []string{"tcp", "udp", "ipv6-icmp", "136", "132"}
	}
	ports := []uint16{s.ProxyPort, s.HTTPSInterceptionPort, s.MetricsPort, s.RedirectFromPort, 53, 443, 40000}
	// The source: local, foreign, and for IPv6 the unspecified address.
	type source struct{ foreign, unspecified bool }
	srcs := []source{{}, {foreign: true}}
	if f == IPv6 {
		srcs = append(srcs, source{unspecified: true})
	}
	var out []packet
	for _, d := range dsts {
		for _, proto := range protos {
			for _, uid := range []int{-1, 1000, int(s.UID)} {
				for _, lo := range []bool{false, true} {
					for _, src := range srcs {
						base := packet{proto: proto, dst: netip.MustParseAddr(d), uid: uid, outLo: lo,
							foreignSrc: src.foreign, unspecifiedSrc: src.unspecified}
						switch proto {
						case "tcp", "udp":
							// Each port as source and as destination
							// (no rule matches both).
							for _, port := range ports {
								for _, sd := range [][2]uint16{{port, 40001}, {40001, port}} {
									for _, syn := range []bool{false, true} {
										if syn && proto != "tcp" {
											continue
										}
										p := base
										p.sport, p.dport, p.syn = sd[0], sd[1], syn
										out = append(out, p)
									}
								}
							}
						case "ipv6-icmp":
							for _, typ := range []int{128, 130, 131, 132, 133, 135, 136, 143} {
								p := base
								p.icmpv6Type = typ
								out = append(out, p)
							}
						default:
							out = append(out, base)
						}
					}
				}
			}
		}
	}
	return out
}

// iptVerdict is what the OUTPUT chain of c's table does with p when its
// only rule is c.Jump: "ACCEPT" (no match, or the chain returned) or the
// target of c's first matching rule, as verdict_test.go's matches models
// xt.
func iptVerdict(t *testing.T, c Chain, p packet) string {
	t.Helper()
	if !matches(t, c.Jump, p) {
		return "ACCEPT"
	}
	for _, r := range c.Rules {
		if matches(t, r, p) {
			v := strings.Join(r[slices.Index(r, "-j")+1:], " ")
			if v == "RETURN" {
				return "ACCEPT"
			}
			return v
		}
	}
	return "ACCEPT"
}

// nftVerdict walks the base chain of table kind in tab for p the way
// nf_tables does: jump descends, return (or the end of a regular chain)
// continues after the jump, a terminal verdict ends the walk, the end of
// the base chain applies its policy (accept). Verdicts are spelled like
// iptVerdict's.
func nftVerdict(t *testing.T, tab nftTable, kind string, p packet) string {
	t.Helper()
	byName := map[string]nftChain{}
	for _, c := range tab.chains {
		byName[c.name] = c
	}
	base := nftFilterBase
	if kind == TableNAT {
		base = nftNATBase
	}
	v, _ := nftWalk(t, tab.family, byName, base, p, 0)
	if v == "" {
		return "ACCEPT"
	}
	return v
}

// nftWalk returns a terminal verdict, or "" when the chain ran out or
// returned.
func nftWalk(t *testing.T, f Family, chains map[string]nftChain, name string, p packet, depth int) (string, bool) {
	t.Helper()
	c, ok := chains[name]
	if !ok || depth > 4 {
		t.Fatalf("chain %q missing or jumps too deep", name)
	}
	for _, r := range c.rules {
		if !nftMatches(t, r, p) {
			continue
		}
		switch r.verdict {
		case verdictReturn:
			return "", false
		case verdictJump:
			if v, _ := nftWalk(t, f, chains, r.chain, p, depth+1); v != "" {
				return v, true
			}
		case verdictDrop:
			return "DROP", true
		case verdictRedirect:
			return "REDIRECT --to-ports " + strconv.Itoa(int(r.port)), true
		case verdictRejectTCPReset:
			return "REJECT --reject-with tcp-reset", true
		case verdictRejectPortUnreachable:
			if f == IPv6 {
				return "REJECT --reject-with icmp6-port-unreachable", true
			}
			return "REJECT --reject-with icmp-port-unreachable", true
		default:
			t.Fatalf("unmodelled verdict %d", r.verdict)
		}
	}
	return "", false
}

// nftMatches models the nf_tables expressions of r: meta skuid breaks (no
// match, whatever the operator) for a packet without a socket.
func nftMatches(t *testing.T, r nftRule, p packet) bool {
	t.Helper()
	proto, ok := protocols[p.proto]
	if !ok {
		n, err := strconv.Atoi(p.proto)
		if err != nil {
			t.Fatalf("packet protocol %q", p.proto)
		}
		proto = n
	}
	switch {
	case r.outLo && !p.outLo,
		r.src.IsValid() && r.src.Contains(p.srcAddr()) == r.srcNeg,
		r.dst.IsValid() && !r.dst.Contains(p.dst),
		r.proto >= 0 && r.proto != proto,
		r.sport != 0 && r.sport != p.sport,
		r.dport != 0 && r.dport != p.dport,
		r.synOnly && !p.syn,
		r.icmpType >= 0 && r.icmpType != p.icmpv6Type,
		r.srcLocal && p.srcLocal() == r.srcLocalNeg:
		return false
	case (r.hasUID || r.hasSocket) && p.uid < 0:
		return false
	case r.hasUID && (uint32(p.uid) == r.uid) == r.uidNeg:
		return false
	}
	return true
}

// TestNFTExprsFollowText spot-checks the netlink expressions of the rule
// shapes against what nft 1.0 generates for their text (nft --debug=netlink;
// the privileged TestPrivilegedNFTPrintMatchesInstall compares them all on
// a real kernel).
func TestNFTExprsFollowText(t *testing.T) {
	r, err := parseRule(Rule{"-d", "ff02::1:ff00:0/104", "-p", "ipv6-icmp", "-m", "icmp6", "--icmpv6-type", "131", "-j", "RETURN"}, IPv6, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.text(IPv6), "ip6 daddr ff02::1:ff00:0/104 icmpv6 type 131 return"; got != want {
		t.Errorf("text %q, want %q", got, want)
	}
	if got, want := fmt.Sprintf("%d", len(r.exprs(IPv6))), "7"; got != want {
		t.Errorf("%s expressions, want %s (payload+cmp, meta+cmp, payload+cmp, verdict)", got, want)
	}
	r, err = parseRule(sourceRules(IPv6)[0], IPv6, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.text(IPv6), "ip6 saddr != :: fib saddr type != local meta skuid != 4294967295 drop"; got != want {
		t.Errorf("text %q, want %q", got, want)
	}
	if e := r.exprs(IPv6); len(e) != 7 || e[1].(*expr.Cmp).Op != expr.CmpOpNeq || e[3].(*expr.Cmp).Op != expr.CmpOpNeq || e[5].(*expr.Cmp).Op != expr.CmpOpNeq {
		t.Errorf("source drop: %d expressions %v, want payload, cmp !=, fib, cmp !=, meta, cmp !=, verdict", len(e), e)
	}
	r, err = parseRule(Rule{"-p", "tcp", "-m", "tcp", "--dport", "80", "-j", "REDIRECT", "--to-ports", "8080"}, IPv4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff("tcp dport 80 redirect to :8080", r.text(IPv4)); d != "" {
		t.Error(d)
	}
	if r.proto != unix.IPPROTO_TCP || r.dport != 80 || r.port != 8080 || r.verdict != verdictRedirect {
		t.Errorf("parsed %+v", r)
	}
}

// String makes a packet readable in failure messages.
func (p packet) String() string {
	return fmt.Sprintf("{%s dst=%v lo=%v uid=%d sport=%d dport=%d syn=%v icmpv6=%d foreign-src=%v unspecified-src=%v}",
		p.proto, p.dst, p.outLo, p.uid, p.sport, p.dport, p.syn, p.icmpv6Type, p.foreignSrc, p.unspecifiedSrc)
}

// FuzzParseRule: any argument list either fails to translate or becomes a
// rule with a verdict whose text and expressions can be built; it never
// panics, and a rule that translates keeps every match it had (each
// iptables match option shows up in the text).
func FuzzParseRule(f *testing.F) {
	for _, tc := range envCombinations() {
		st, _, err := ParseEnv(getenvFrom(tc.env))
		if err != nil {
			f.Fatal(err)
		}
		rs := Plan(st)
		for _, fam := range rs.Families() {
			for _, c := range rs.Chains(fam) {
				for _, r := range c.Rules {
					f.Add(strings.Join(r, "\x00"), fam == IPv6)
				}
			}
		}
	}
	f.Add("-p\x00udp\x00-m\x00udp\x00--dport\x0053\x00-m\x00owner\x00!\x00--uid-owner\x001337\x00-j\x00REDIRECT\x00--to-ports\x0015053", false)
	f.Fuzz(func(t *testing.T, args string, v6 bool) {
		fam := IPv4
		if v6 {
			fam = IPv6
		}
		r, err := parseRule(Rule(strings.Split(args, "\x00")), fam, []string{"CHAIN"})
		if err != nil {
			return
		}
		if r.verdict == 0 || len(r.exprs(fam)) == 0 {
			t.Fatalf("%q: translated without a verdict", args)
		}
		text := r.text(fam)
		for opt, word := range map[string]string{"-o": "oifname", "-d": "daddr", "--sport": "sport", "--dport": "dport",
			"--tcp-flags": "tcp flags", "--icmpv6-type": "icmpv6 type", "--src-type": "fib saddr", "--uid-owner": "meta skuid", "-s": " saddr ", "--socket-exists": "meta skuid != 4294967295"} {
			if slices.Contains(strings.Split(args, "\x00"), opt) && !strings.Contains(text, word) {
				t.Fatalf("%q: %s lost in %q", args, opt, text)
			}
		}
	})
}
