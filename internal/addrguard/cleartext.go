package addrguard

import "net/netip"

// ClassPublic names an address in no refused range: the public Internet
// (CleartextAllowed's reason).
const ClassPublic = "public"

// CleartextAllowed reports whether plain HTTP (a rule's upstream_tls:
// false) may go to addr, and otherwise addr's class for the message: only
// loopback (127.0.0.0/8, ::1), RFC 1918 private and IPv6 ULA addresses,
// which never leave the host or the site. Metadata addresses (even inside
// the ULA range), CGNAT (shared with a carrier), link-local, every other
// refused class, IPv4 carried in IPv6 other than IPv4-mapped (judged as
// its IPv4), and public addresses are not (TestCleartextAllowed,
// FuzzCleartextAllowed). It does not consult a Guard's opt-ins: it is
// the extra condition of a cleartext dial, on top of Refused.
func CleartextAllowed(addr netip.Addr) (class string, ok bool) {
	if !addr.IsValid() {
		return ClassInvalid, false
	}
	addr = addr.WithZone("").Unmap()
	rs := ranges4
	if addr.Is6() {
		if form, _ := Embedded(addr); form != "" {
			return "ipv4 embedded in ipv6 (" + form + ")", false
		}
		rs = ranges6
	}
	c, found := classify(rs, addr)
	if !found {
		return ClassPublic, false
	}
	switch c.class {
	case ClassLoopback, ClassPrivate, ClassULA:
		return c.class, true
	}
	return c.class, false
}

// CleartextPrefixAllowed reports whether every address of p is one
// CleartextAllowed accepts (its first and last address are: the allowed
// ranges are themselves prefixes, so a prefix whose ends lie in them lies
// in one of them), and otherwise the class of the end that is not.
func CleartextPrefixAllowed(p netip.Prefix) (class string, ok bool) {
	p = p.Masked()
	first := p.Addr()
	b := first.AsSlice()
	for i := p.Bits(); i < first.BitLen(); i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	last, _ := netip.AddrFromSlice(b)
	if c, ok := CleartextAllowed(first); !ok {
		return c, false
	}
	return CleartextAllowed(last)
}
