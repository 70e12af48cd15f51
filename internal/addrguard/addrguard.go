// Package addrguard is BotBox's address classifier (SPEC §5.3): it decides
// whether an IP address BotBox is about to dial, or a DNS answer is about to
// hand out, lies in a range no egress policy should reach by accident —
// the Pod itself, the node, the cloud metadata service, the cluster's
// private networks.
//
// # What is refused
//
// Refused judges an address by the first class below it belongs to; every
// class is refused unless an opt-in opens it:
//
//	class         ranges                                      opened by
//	unspecified   0.0.0.0, ::                                  a CIDR only
//	this_network  0.0.0.0/8                                    a CIDR only
//	loopback      127.0.0.0/8, ::1                             a CIDR only
//	metadata      169.254.169.254, fd00:ec2::254,              a CIDR only
//	              100.100.100.200
//	link_local    169.254.0.0/16, fe80::/10                    a CIDR only
//	multicast     224.0.0.0/4, ff00::/8                        a CIDR only
//	broadcast     255.255.255.255                              a CIDR only
//	reserved      240.0.0.0/4                                  a CIDR only
//	private       10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16    Opts.AllowPrivate or a CIDR
//	cgnat         100.64.0.0/10                                Opts.AllowPrivate or a CIDR
//	ula           fc00::/7                                     Opts.AllowPrivate or a CIDR
//	site_local    fec0::/10                                    Opts.AllowPrivate or a CIDR
//
// "A CIDR" is one of the guard's allowed prefixes (New, config
// address_guard.allowed_cidrs) or the request's own rule prefix
// (Opts.Rule, the host of an IP or CIDR allow rule) containing the address.
// The metadata addresses are classified before the ranges that contain
// them (100.100.100.200 lies in CGNAT, fd00:ec2::254 in ULA), so a rule's
// allow_private_addresses never opens a metadata service. Documentation
// ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32)
// and every other address are not refused.
//
// # IPv4 inside IPv6
//
// An IPv6 address that carries an IPv4 address is judged as that IPv4
// address, never more leniently (FuzzEmbeddedNeverMorePermissive):
// IPv4-mapped ::ffff:0:0/96, IPv4-compatible ::/96 (:: and ::1 excepted,
// which are unspecified and loopback), NAT64 64:ff9b::/96 (RFC 6052) and
// the local-use 64:ff9b:1::/48 (RFC 8215, the IPv4 in the /48 layout of
// RFC 6052), 6to4 2002::/16 (the IPv4 in bits 16–47) and Teredo 2001::/32
// (both the server IPv4 in bits 32–63 and the client IPv4, the last 32
// bits inverted; refused when either is). An opt-in must name the carried
// IPv4 address: an IPv6 prefix in allowed_cidrs or a rule never opens an
// embedded form whose IPv4 is refused.
//
// # Use
//
// A Guard is immutable and safe for concurrent use; Refused does not
// allocate for a plain address. The dial hook of package upstream
// (upstream.CheckAddress) asks it about every address actually dialled,
// with the request's exceptions. A DNS answer filter asks it about every
// address record, with the guard of the policy generation in force
// (generation.Generation.AddrGuard, unless AddrGuardOff) and the
// exceptions of the rule naming the queried name
// (generation.Generation.NameAddrOpts).
//
//	g := addrguard.New(cfg.AddressGuard.AllowedCIDRs)
//	if reason, refused := g.Refused(addr, addrguard.Opts{AllowPrivate: rule.AllowPrivateAddresses}); refused {
//		// 403 destination address not allowed; log reason
//	}
package addrguard

import (
	"net/netip"
	"slices"
	"strings"
)

// Opts are the exceptions of one request: what the policy rule that allowed
// it grants. The zero value grants none (the strictest judgement: use it
// when no rule is known, e.g. under default_action: allow). Opts is
// comparable, so it can key a connection pool.
type Opts struct {
	// AllowPrivate is the rule's allow_private_addresses: it opens the
	// private, cgnat, ula and site_local classes (never loopback,
	// link-local, metadata or the others).
	AllowPrivate bool
	// Rule is the prefix of the IP or CIDR allow rule that allowed the
	// request (an IP rule is a /32 or /128); the zero Prefix for a rule on
	// a name. An address it contains is not refused, whatever its class.
	Rule netip.Prefix
}

// Guard classifies addresses against the refused ranges and its allowed
// prefixes. Make one with New; the zero value refuses as New(nil) does.
type Guard struct {
	allowed []netip.Prefix
	key     string
}

// New returns a Guard whose allowed prefixes (config
// address_guard.allowed_cidrs) are never refused. Prefixes are masked;
// invalid ones are ignored (config validation refuses them first).
// allowed is copied.
func New(allowed []netip.Prefix) *Guard {
	g := &Guard{}
	for _, p := range allowed {
		if !p.IsValid() {
			continue
		}
		g.allowed = append(g.allowed, p.Masked())
	}
	slices.SortFunc(g.allowed, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr())*256 + (a.Bits() - b.Bits()) })
	g.allowed = slices.Compact(g.allowed)
	var b strings.Builder
	for i, p := range g.allowed {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.String())
	}
	g.key = b.String()
	return g
}

// Key identifies what the guard refuses: two guards with equal keys give
// the same verdict for every address and Opts. Package upstream keys its
// connection pools by it, so that a pooled connection is only reused under
// a guard that would have admitted its dial.
func (g *Guard) Key() string { return g.key }

// Allowed returns a copy of the guard's allowed prefixes, masked, sorted
// and without duplicates.
func (g *Guard) Allowed() []netip.Prefix { return slices.Clone(g.allowed) }

// Class names of the refused ranges: the reason Refused returns, a log
// value. An embedded IPv4 form returns the IPv4 address's class followed by
// " via " and the form (EmbeddedForm names), e.g. "loopback via 6to4".
const (
	ClassUnspecified = "unspecified"
	ClassThisNetwork = "this_network"
	ClassLoopback    = "loopback"
	ClassMetadata    = "metadata"
	ClassLinkLocal   = "link_local"
	ClassMulticast   = "multicast"
	ClassBroadcast   = "broadcast"
	ClassReserved    = "reserved"
	ClassPrivate     = "private"
	ClassCGNAT       = "cgnat"
	ClassULA         = "ula"
	ClassSiteLocal   = "site_local"
	// ClassInvalid is the reason for the zero netip.Addr, refused always.
	ClassInvalid = "invalid"
)

// Names of the IPv6 forms that carry an IPv4 address (the part after "via"
// in a reason).
const (
	FormMapped     = "ipv4_mapped"
	FormCompatible = "ipv4_compatible"
	FormNAT64      = "nat64"
	FormNAT64Local = "nat64_local"
	Form6to4       = "6to4"
	FormTeredo     = "teredo"
)

type classRange struct {
	prefix netip.Prefix
	class  string
	// private: opened by Opts.AllowPrivate.
	private bool
}

func mp(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// ranges4 and ranges6 are searched in order: the first containing prefix
// gives the class, so the single metadata addresses come before the ranges
// that contain them. Nothing writes to them after package initialisation.
var (
	ranges4 = []classRange{
		{mp("0.0.0.0/32"), ClassUnspecified, false},
		{mp("0.0.0.0/8"), ClassThisNetwork, false},
		{mp("127.0.0.0/8"), ClassLoopback, false},
		{mp("169.254.169.254/32"), ClassMetadata, false},
		{mp("100.100.100.200/32"), ClassMetadata, false},
		{mp("169.254.0.0/16"), ClassLinkLocal, false},
		{mp("224.0.0.0/4"), ClassMulticast, false},
		{mp("255.255.255.255/32"), ClassBroadcast, false},
		{mp("240.0.0.0/4"), ClassReserved, false},
		{mp("10.0.0.0/8"), ClassPrivate, true},
		{mp("172.16.0.0/12"), ClassPrivate, true},
		{mp("192.168.0.0/16"), ClassPrivate, true},
		{mp("100.64.0.0/10"), ClassCGNAT, true},
	}
	ranges6 = []classRange{
		{mp("::/128"), ClassUnspecified, false},
		{mp("::1/128"), ClassLoopback, false},
		{mp("fd00:ec2::254/128"), ClassMetadata, false},
		{mp("fe80::/10"), ClassLinkLocal, false},
		{mp("ff00::/8"), ClassMulticast, false},
		{mp("fec0::/10"), ClassSiteLocal, true},
		{mp("fc00::/7"), ClassULA, true},
	}
)

// MetadataAddrs returns the cloud metadata addresses (class metadata), for
// callers that warn when a configured range contains one.
func MetadataAddrs() []netip.Addr {
	var out []netip.Addr
	for _, rs := range [][]classRange{ranges4, ranges6} {
		for _, r := range rs {
			if r.class == ClassMetadata {
				out = append(out, r.prefix.Addr())
			}
		}
	}
	return out
}

var (
	pfxMapped     = mp("::ffff:0:0/96")
	pfxCompatible = mp("::/96")
	pfxNAT64      = mp("64:ff9b::/96")
	pfxNAT64Local = mp("64:ff9b:1::/48")
	pfx6to4       = mp("2002::/16")
	pfxTeredo     = mp("2001::/32")
)

// Refused reports whether a connection to (or a DNS answer of) addr must be
// refused for a request with the exceptions opt, and why (a Class name,
// with " via " and the form for an IPv4 carried in IPv6). A zero addr is
// refused (ClassInvalid). It does not allocate for a refused plain address;
// an embedded form's reason is one small string.
func (g *Guard) Refused(addr netip.Addr, opt Opts) (reason string, refused bool) {
	if !addr.IsValid() {
		return ClassInvalid, true
	}
	addr = addr.WithZone("")
	if addr.Is4() {
		return g.refused4(addr, opt)
	}
	if form, v4s := Embedded(addr); form != "" {
		for _, v4 := range v4s {
			if v4.IsValid() {
				if r, bad := g.refused4(v4, opt); bad {
					return r + " via " + form, true
				}
			}
		}
		return "", false
	}
	c, ok := classify(ranges6, addr)
	if !ok || g.opened(addr, c, opt) {
		return "", false
	}
	return c.class, true
}

func (g *Guard) refused4(addr netip.Addr, opt Opts) (string, bool) {
	c, ok := classify(ranges4, addr)
	if !ok || g.opened(addr, c, opt) {
		return "", false
	}
	return c.class, true
}

// opened reports whether an opt-in opens addr of class c.
func (g *Guard) opened(addr netip.Addr, c classRange, opt Opts) bool {
	if c.private && opt.AllowPrivate {
		return true
	}
	if opt.Rule.IsValid() && opt.Rule.Contains(addr) {
		return true
	}
	for _, p := range g.allowed {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

func classify(rs []classRange, addr netip.Addr) (classRange, bool) {
	for _, r := range rs {
		if r.prefix.Contains(addr) {
			return r, true
		}
	}
	return classRange{}, false
}

// Embedded returns the IPv4 addresses an IPv6 address carries and the name
// of the form (Form… constants): one address for every form but Teredo,
// which carries its server's and its client's (in that order). It returns
// "" and nil for an IPv4 address, a plain IPv6 address, and for :: and ::1
// (which are unspecified and loopback, not IPv4-compatible forms).
func Embedded(addr netip.Addr) (form string, v4 [2]netip.Addr) {
	if !addr.Is6() {
		return "", v4
	}
	addr = addr.WithZone("")
	b := addr.As16()
	last := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	switch {
	case pfxMapped.Contains(addr):
		v4[0] = last
		return FormMapped, v4
	case pfxCompatible.Contains(addr):
		if addr == netip.IPv6Unspecified() || addr == netip.IPv6Loopback() {
			return "", v4
		}
		v4[0] = last
		return FormCompatible, v4
	case pfxNAT64.Contains(addr):
		v4[0] = last
		return FormNAT64, v4
	case pfxNAT64Local.Contains(addr):
		// RFC 6052 §2.2, /48 prefix: IPv4 octets 1–2 in bytes 6–7, byte 8
		// is the reserved u octet, octets 3–4 in bytes 9–10.
		v4[0] = netip.AddrFrom4([4]byte{b[6], b[7], b[9], b[10]})
		return FormNAT64Local, v4
	case pfx6to4.Contains(addr):
		v4[0] = netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
		return Form6to4, v4
	case pfxTeredo.Contains(addr):
		v4[0] = netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]})
		v4[1] = netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
		return FormTeredo, v4
	}
	return "", v4
}
