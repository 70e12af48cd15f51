package netfilter

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The nftables backend renders the same Plan as the iptables backend: Plan
// stays the one source of truth, and parseRule translates its closed set of
// rule shapes (the iptables arguments plan.go writes) into a typed nftRule,
// from which both the netlink expressions (exprs) and the `nft` text
// (nftText) are built. An argument parseRule does not know is an error, so a
// new kind of rule in plan.go can never be skipped or half-translated
// silently: TestNFTRejectsUnknownShapes and TestNFTTranslatesEveryPlan hold
// this.

// NFTTable is the name of BotBox's nftables tables: "ip botbox" and, with
// IPv6, "ip6 botbox". Everything the nftables backend installs lives in
// them; nothing outside them is read or changed.
const NFTTable = "botbox"

// The base chains of BotBox's tables. Their names contain a dot, which
// ValidateChainName never allows, so they cannot collide with
// BOTBOX_NAT_CHAIN or BOTBOX_FILTER_CHAIN; the same holds for the
// auxiliary chains (negatedOwnerChain).
const (
	nftNATBase    = "output.nat"
	nftFilterBase = "output.filter"
)

// nftVerdictKind is what a rule does when it matches.
type nftVerdictKind int

const (
	verdictReturn nftVerdictKind = iota + 1
	verdictDrop
	verdictJump
	verdictRedirect
	verdictRejectTCPReset
	verdictRejectPortUnreachable
)

// noUID is (uid_t)-1, which no process has (BOTBOX_UID stops below it):
// "meta skuid != noUID" is true for every socket and breaks (no match)
// without one, which is xt_owner's "--socket-exists".
const noUID = ^uint32(0)

// nftRule is one rule of Plan in typed form: every match is a conjunction,
// so the order in which they are evaluated does not change the verdict.
type nftRule struct {
	outLo       bool         // -o lo
	src         netip.Prefix // [!] -s PREFIX (invalid: none)
	srcNeg      bool
	dst         netip.Prefix // -d PREFIX (invalid: none)
	proto       int          // -p NAME (-1: none), an IP protocol number
	sport       uint16       // --sport P (0: none)
	dport       uint16       // --dport P (0: none)
	synOnly     bool         // --tcp-flags SYN SYN
	icmpType    int          // --icmpv6-type T (-1: none)
	srcLocal    bool         // -m addrtype [!] --src-type LOCAL
	srcLocalNeg bool
	hasSocket   bool // -m owner --socket-exists
	hasUID      bool // -m owner [!] --uid-owner UID
	uidNeg      bool
	uid         uint32

	verdict nftVerdictKind
	chain   string // verdictJump: the target chain
	port    uint16 // verdictRedirect: --to-ports
}

// protocols are the -p names Plan writes (and the DNS guard's udp).
var protocols = map[string]int{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP, "icmp": unix.IPPROTO_ICMP, "ipv6-icmp": unix.IPPROTO_ICMPV6}

// parseRule translates one Plan rule of family f. jumpable are the chains a
// "-j NAME" may name. Every argument must be understood: an unknown option,
// module, target or value, a negation of anything but the owner match, the
// source address or the source address type, or a combination the
// nftables backend cannot express with the same meaning is an error naming
// the rule.
func parseRule(r Rule, f Family, jumpable []string) (nftRule, error) {
	out := nftRule{proto: -1, icmpType: -1}
	bad := func(format string, a ...any) (nftRule, error) {
		return nftRule{}, fmt.Errorf("nftables backend: rule %q: %s", r.String(), fmt.Sprintf(format, a...))
	}
	arg := func(i int) (string, bool) {
		if i < len(r) {
			return r[i], true
		}
		return "", false
	}
	seen := map[string]bool{}
	for i := 0; i < len(r); i++ {
		neg := false
		if r[i] == "!" {
			neg = true
			i++
		}
		opt, ok := arg(i)
		if !ok {
			return bad("ends with '!'")
		}
		if neg && opt != "--uid-owner" && opt != "-s" && opt != "--src-type" {
			return bad("negated %s is not supported", opt)
		}
		if seen[opt] && opt != "-m" {
			return bad("%s given twice", opt)
		}
		seen[opt] = true
		if opt == "--socket-exists" {
			out.hasSocket = true
			continue
		}
		val, ok := arg(i + 1)
		if !ok {
			return bad("%s without a value", opt)
		}
		switch opt {
		case "-o":
			if val != "lo" {
				return bad("output interface %q (only lo)", val)
			}
			out.outLo = true
			i++
		case "-s", "-d":
			p, err := netip.ParsePrefix(val)
			if err != nil || p.Addr().Is4() != (f == IPv4) || p.Bits() == 0 || p.Bits()%8 != 0 || p.Masked() != p {
				return bad("address %q is not a byte-aligned %s prefix of at least 8 bits", val, f)
			}
			if opt == "-s" {
				out.src, out.srcNeg = p, neg
			} else {
				out.dst = p
			}
			i++
		case "-p":
			n, known := protocols[val]
			if !known || (val == "icmp" && f == IPv6) || (val == "ipv6-icmp" && f == IPv4) {
				return bad("protocol %q", val)
			}
			out.proto = n
			i++
		case "-m":
			switch val {
			case "tcp", "udp", "icmp6", "owner", "addrtype":
			default:
				return bad("match module %q", val)
			}
			i++
		case "--uid-owner":
			n, err := strconv.ParseUint(val, 10, 32)
			if err != nil {
				return bad("uid %q", val)
			}
			out.hasUID, out.uidNeg, out.uid = true, neg, uint32(n)
			i++
		case "--sport", "--dport":
			n, err := strconv.ParseUint(val, 10, 16)
			if err != nil || n == 0 {
				return bad("port %q", val)
			}
			if opt == "--sport" {
				out.sport = uint16(n)
			} else {
				out.dport = uint16(n)
			}
			i++
		case "--tcp-flags":
			if v2, _ := arg(i + 2); val != "SYN" || v2 != "SYN" {
				return bad("tcp flags (only SYN SYN)")
			}
			out.synOnly = true
			i += 2
		case "--icmpv6-type":
			n, err := strconv.ParseUint(val, 10, 8)
			if err != nil {
				return bad("icmpv6 type %q", val)
			}
			out.icmpType = int(n)
			i++
		case "--src-type":
			if val != "LOCAL" {
				return bad("address type %q (only LOCAL)", val)
			}
			out.srcLocal, out.srcLocalNeg = true, neg
			i++
		case "-j":
			rest := r[i+2:]
			switch {
			case val == "RETURN" && len(rest) == 0:
				out.verdict = verdictReturn
			case val == "DROP" && len(rest) == 0:
				out.verdict = verdictDrop
			case val == "REDIRECT" && len(rest) == 2 && rest[0] == "--to-ports":
				n, err := strconv.ParseUint(rest[1], 10, 16)
				if err != nil || n == 0 {
					return bad("redirect port %q", rest[1])
				}
				out.verdict, out.port = verdictRedirect, uint16(n)
			case val == "REJECT" && len(rest) == 2 && rest[0] == "--reject-with":
				switch {
				case rest[1] == "tcp-reset":
					out.verdict = verdictRejectTCPReset
				case rest[1] == "icmp-port-unreachable" && f == IPv4, rest[1] == "icmp6-port-unreachable" && f == IPv6:
					out.verdict = verdictRejectPortUnreachable
				default:
					return bad("reject-with %q", rest[1])
				}
			case len(rest) == 0 && slices.Contains(jumpable, val):
				out.verdict, out.chain = verdictJump, val
			default:
				return bad("target %q", strings.Join(r[i+1:], " "))
			}
			return out.check(bad)
		default:
			return bad("option %q", opt)
		}
	}
	return bad("no target")
}

// check refuses combinations whose nftables form would not mean what the
// iptables rule means.
func (r nftRule) check(bad func(string, ...any) (nftRule, error)) (nftRule, error) {
	switch {
	case (r.sport != 0 || r.dport != 0) && r.proto != unix.IPPROTO_TCP && r.proto != unix.IPPROTO_UDP:
		return bad("ports without -p tcp or udp")
	case r.synOnly && r.proto != unix.IPPROTO_TCP:
		return bad("tcp flags without -p tcp")
	case r.icmpType >= 0 && r.proto != unix.IPPROTO_ICMPV6:
		return bad("icmpv6 type without -p ipv6-icmp")
	case r.verdict == verdictRedirect && r.proto != unix.IPPROTO_TCP && r.proto != unix.IPPROTO_UDP:
		return bad("REDIRECT without -p tcp or udp")
	case r.verdict == verdictRejectTCPReset && r.proto != unix.IPPROTO_TCP:
		return bad("tcp-reset without -p tcp")
	case r.hasUID && r.uidNeg && r.verdict != verdictDrop && r.verdict != verdictRedirect &&
		r.verdict != verdictRejectTCPReset && r.verdict != verdictRejectPortUnreachable:
		// negatedOwnerChain relies on the verdict ending the packet's walk.
		return bad("a negated owner match needs a terminal target (DROP, REJECT or REDIRECT)")
	}
	return r, nil
}

// nftChain is one chain of a BotBox table.
type nftChain struct {
	name  string
	base  string // "" for a regular chain; else "nat" or "filter" (hook output)
	rules []nftRule
}

// nftTable is BotBox's table of one family.
type nftTable struct {
	family Family
	chains []nftChain
}

// nftPlan translates the family's chains of rs: per Plan chain a regular
// chain with its rules, plus a base chain on the output hook (nat at
// priority -100, filter at 0, policy accept, as the built-in iptables
// tables) holding the Plan chain's Jump, the equivalent of the OUTPUT jump
// at position 1. A rule with a negated owner match becomes a jump to an
// auxiliary chain (negatedOwnerChain).
func nftPlan(rs Ruleset, f Family) (nftTable, error) {
	t := nftTable{family: f}
	chains := rs.Chains(f)
	var bases []nftChain
	for _, c := range chains {
		var base string
		switch c.Table {
		case TableNAT:
			base = nftNATBase
		case TableFilter:
			base = nftFilterBase
		default:
			return nftTable{}, fmt.Errorf("nftables backend: unknown table %q", c.Table)
		}
		main := nftChain{name: c.Name}
		var aux []nftChain
		for i, r := range c.Rules {
			nr, err := parseRule(r, f, nil)
			if err != nil {
				return nftTable{}, err
			}
			if nr.hasUID && nr.uidNeg {
				a := negatedOwnerChain(c.Name, i+1, nr)
				aux = append(aux, a)
				jump := nr
				jump.hasUID, jump.uidNeg, jump.uid = false, false, 0
				jump.verdict, jump.chain, jump.port = verdictJump, a.name, 0
				nr = jump
			}
			main.rules = append(main.rules, nr)
		}
		jr, err := parseRule(c.Jump, f, []string{c.Name})
		if err != nil {
			return nftTable{}, err
		}
		if jr.verdict != verdictJump || jr.chain != c.Name {
			return nftTable{}, fmt.Errorf("nftables backend: jump rule %q does not jump to %s", c.Jump.String(), c.Name)
		}
		if jr.hasUID && jr.uidNeg {
			return nftTable{}, fmt.Errorf("nftables backend: jump rule %q: negated owner match", c.Jump.String())
		}
		t.chains = append(t.chains, main)
		t.chains = append(t.chains, aux...)
		bases = append(bases, nftChain{name: base, base: c.Table, rules: []nftRule{jr}})
	}
	t.chains = append(t.chains, bases...)
	return t, nil
}

// negatedOwnerChain is the auxiliary chain that gives rule number n of chain
// (whose owner match is negated) the meaning of xt_owner's
// "! --uid-owner UID": true for a packet without a socket too. nftables'
// "meta skuid != UID" is false for a packet without a socket (the meta
// expression breaks), and such packets exist: a SYN-ACK sent as a SYN cookie
// carries no socket, so with "meta skuid != 1337" an app listening on a
// BotBox port with a full backlog would complete handshakes that iptables
// drops. The rule becomes "MATCHES jump CHAIN.N", and CHAIN.N holds
// "meta skuid UID return" then "MATCHES VERDICT": only a packet whose socket
// belongs to UID escapes the verdict, exactly as with iptables. The verdict
// is terminal (check refuses anything else), so returning from CHAIN.N never
// happens after the verdict applied.
func negatedOwnerChain(chain string, n int, r nftRule) nftChain {
	exempt := nftRule{proto: -1, icmpType: -1, hasUID: true, uid: r.uid, verdict: verdictReturn}
	rest := r
	rest.hasUID, rest.uidNeg, rest.uid = false, false, 0
	return nftChain{name: chain + "." + strconv.Itoa(n), rules: []nftRule{exempt, rest}}
}

// nftFamily is the table family of f.
func nftFamily(f Family) nftables.TableFamily {
	if f == IPv6 {
		return nftables.TableFamilyIPv6
	}
	return nftables.TableFamilyIPv4
}

// nftFamilyName is f's family keyword in nft syntax.
func nftFamilyName(f Family) string {
	if f == IPv6 {
		return "ip6"
	}
	return "ip"
}

// protoName is the nft name of an IP protocol number Plan uses.
func protoName(n int) string {
	for name, v := range protocols {
		if v == n {
			return name
		}
	}
	return strconv.Itoa(n)
}

// text is the rule in nft syntax, matches in a fixed order (they are a
// conjunction), written so that `nft -f` builds exactly the expressions of
// exprs (TestPrivilegedNFTPrintMatchesInstall compares the two).
func (r nftRule) text(f Family) string {
	var parts []string
	if r.outLo {
		parts = append(parts, `oifname "lo"`)
	}
	if r.src.IsValid() {
		op := ""
		if r.srcNeg {
			op = "!= "
		}
		parts = append(parts, nftFamilyName(f)+" saddr "+op+prefixText(r.src))
	}
	if r.dst.IsValid() {
		parts = append(parts, nftFamilyName(f)+" daddr "+prefixText(r.dst))
	}
	switch {
	case r.sport != 0 || r.dport != 0 || r.synOnly:
		p := protoName(r.proto)
		if r.sport != 0 {
			parts = append(parts, fmt.Sprintf("%s sport %d", p, r.sport))
		}
		if r.dport != 0 {
			parts = append(parts, fmt.Sprintf("%s dport %d", p, r.dport))
		}
		if r.synOnly {
			parts = append(parts, "tcp flags & syn == syn")
		}
	case r.icmpType >= 0:
		parts = append(parts, fmt.Sprintf("icmpv6 type %d", r.icmpType))
	case r.proto >= 0:
		parts = append(parts, "meta l4proto "+protoName(r.proto))
	}
	if r.srcLocal {
		op := ""
		if r.srcLocalNeg {
			op = "!= "
		}
		parts = append(parts, "fib saddr type "+op+"local")
	}
	if r.hasSocket {
		parts = append(parts, fmt.Sprintf("meta skuid != %d", uint32(noUID)))
	}
	if r.hasUID {
		op := ""
		if r.uidNeg {
			op = "!= "
		}
		parts = append(parts, fmt.Sprintf("meta skuid %s%d", op, r.uid))
	}
	switch r.verdict {
	case verdictReturn:
		parts = append(parts, "return")
	case verdictDrop:
		parts = append(parts, "drop")
	case verdictJump:
		parts = append(parts, "jump "+r.chain)
	case verdictRedirect:
		parts = append(parts, fmt.Sprintf("redirect to :%d", r.port))
	case verdictRejectTCPReset:
		parts = append(parts, "reject with tcp reset")
	case verdictRejectPortUnreachable:
		if f == IPv6 {
			parts = append(parts, "reject with icmpv6 type port-unreachable")
		} else {
			parts = append(parts, "reject with icmp type port-unreachable")
		}
	}
	return strings.Join(parts, " ")
}

func prefixText(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// exprs are the rule's netlink expressions, in the order nft 1.0 generates
// them for text(f): the protocol load precedes its transport-header
// matches, and a byte-aligned prefix compares only its leading bytes.
func (r nftRule) exprs(f Family) []expr.Any {
	var e []expr.Any
	cmp := func(data []byte) expr.Any { return &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data} }
	if r.outLo {
		name := make([]byte, unix.IFNAMSIZ)
		copy(name, "lo")
		e = append(e, &expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, cmp(name))
	}
	// addr loads the leading bytes of the source (off 12, IPv6 8) or
	// destination address (16, IPv6 24) and compares them with p's.
	addr := func(p netip.Prefix, off4, off6 uint32, neg bool) {
		off := off4
		if f == IPv6 {
			off = off6
		}
		n := uint32(p.Bits() / 8)
		c := &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Addr().AsSlice()[:n]}
		if neg {
			c.Op = expr.CmpOpNeq
		}
		e = append(e, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}, c)
	}
	if r.src.IsValid() {
		addr(r.src, 12, 8, r.srcNeg)
	}
	if r.dst.IsValid() {
		addr(r.dst, 16, 24, false)
	}
	if r.proto >= 0 {
		e = append(e, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, cmp([]byte{byte(r.proto)}))
	}
	th := func(off, n uint32) expr.Any {
		return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: n}
	}
	if r.sport != 0 {
		e = append(e, th(0, 2), cmp(binary.BigEndian.AppendUint16(nil, r.sport)))
	}
	if r.dport != 0 {
		e = append(e, th(2, 2), cmp(binary.BigEndian.AppendUint16(nil, r.dport)))
	}
	if r.synOnly {
		e = append(e, th(13, 1),
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x02}, Xor: []byte{0}},
			cmp([]byte{0x02}))
	}
	if r.icmpType >= 0 {
		e = append(e, th(0, 1), cmp([]byte{byte(r.icmpType)}))
	}
	if r.srcLocal {
		c := &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.NativeEndian.AppendUint32(nil, unix.RTN_LOCAL)}
		if r.srcLocalNeg {
			c.Op = expr.CmpOpNeq
		}
		e = append(e, &expr.Fib{Register: 1, FlagSADDR: true, ResultADDRTYPE: true}, c)
	}
	if r.hasSocket {
		e = append(e, &expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binary.NativeEndian.AppendUint32(nil, noUID)})
	}
	if r.hasUID {
		op := expr.CmpOpEq
		if r.uidNeg {
			op = expr.CmpOpNeq
		}
		e = append(e, &expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
			&expr.Cmp{Op: op, Register: 1, Data: binary.NativeEndian.AppendUint32(nil, r.uid)})
	}
	switch r.verdict {
	case verdictReturn:
		e = append(e, &expr.Verdict{Kind: expr.VerdictReturn})
	case verdictDrop:
		e = append(e, &expr.Verdict{Kind: expr.VerdictDrop})
	case verdictJump:
		e = append(e, &expr.Verdict{Kind: expr.VerdictJump, Chain: r.chain})
	case verdictRedirect:
		e = append(e,
			&expr.Immediate{Register: 1, Data: binary.BigEndian.AppendUint16(nil, r.port)},
			&expr.Redir{RegisterProtoMin: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED})
	case verdictRejectTCPReset:
		e = append(e, &expr.Reject{Type: unix.NFT_REJECT_TCP_RST})
	case verdictRejectPortUnreachable:
		code := uint8(3) // ICMP_PORT_UNREACH
		if f == IPv6 {
			code = 4 // ICMPV6_PORT_UNREACH
		}
		e = append(e, &expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: code})
	}
	return e
}

// nftText renders tables in nft syntax: for each, "table F botbox" and
// "delete table F botbox" (create it if missing, then delete it, so the
// definition that follows replaces whatever was there), then the table's
// definition. The output loaded with `nft -f` in one transaction does what
// InstallNFTables does over netlink.
func nftText(tables []nftTable) string {
	var b strings.Builder
	for _, t := range tables {
		fam := nftFamilyName(t.family)
		fmt.Fprintf(&b, "table %s %s\ndelete table %s %s\ntable %s %s {\n", fam, NFTTable, fam, NFTTable, fam, NFTTable)
		for i, c := range t.chains {
			if i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "\tchain %s {\n", c.name)
			switch c.base {
			case TableNAT:
				b.WriteString("\t\ttype nat hook output priority -100; policy accept;\n")
			case TableFilter:
				b.WriteString("\t\ttype filter hook output priority 0; policy accept;\n")
			}
			for _, r := range c.rules {
				fmt.Fprintf(&b, "\t\t%s\n", r.text(t.family))
			}
			b.WriteString("\t}\n")
		}
		b.WriteString("}\n")
	}
	return b.String()
}
