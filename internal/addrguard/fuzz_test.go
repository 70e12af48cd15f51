package addrguard

import (
	"net/netip"
	"testing"
)

// FuzzEmbeddedNeverMorePermissive: for any IPv4 address a, any opt-ins, and
// every IPv6 form that can carry a, Refused never panics, and the form is
// refused whenever a is (an embedded form is never more permissive than
// the IPv4 it carries). Refused is also total on arbitrary 16-byte
// addresses.
func FuzzEmbeddedNeverMorePermissive(f *testing.F) {
	f.Add([]byte{127, 0, 0, 1}, []byte{}, false, uint8(0), []byte{}, uint8(0))
	f.Add([]byte{169, 254, 169, 254}, []byte{10, 0, 0, 0}, true, uint8(8), []byte{127, 0, 0, 1}, uint8(32))
	f.Add([]byte{8, 8, 8, 8}, []byte{0x20, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, false, uint8(16), []byte{}, uint8(0))
	f.Add([]byte{0x20, 0x01, 0, 0, 0x41, 0x36, 0xe3, 0x78, 0x80, 0, 0x63, 0xbf, 0x80, 0xff, 0xff, 0xfe}, []byte{}, true, uint8(0), []byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, raw, allowedRaw []byte, private bool, allowedBits uint8, ruleRaw []byte, ruleBits uint8) {
		var allowed []netip.Prefix
		if a, ok := netip.AddrFromSlice(allowedRaw); ok {
			if p, err := a.Prefix(int(allowedBits) % (a.BitLen() + 1)); err == nil {
				allowed = append(allowed, p)
			}
		}
		opt := Opts{AllowPrivate: private}
		if a, ok := netip.AddrFromSlice(ruleRaw); ok {
			if p, err := a.Prefix(int(ruleBits) % (a.BitLen() + 1)); err == nil {
				opt.Rule = p
			}
		}
		g := New(allowed)
		addr, ok := netip.AddrFromSlice(raw)
		if !ok {
			return
		}
		r, refused := g.Refused(addr, opt)
		if refused == (r == "") {
			t.Fatalf("Refused(%s) = %q, %v: reason and verdict disagree", addr, r, refused)
		}
		if !addr.Is4() {
			return
		}
		if !refused {
			return
		}
		b := addr.As4()
		inv := [4]byte{^b[0], ^b[1], ^b[2], ^b[3]}
		forms := []netip.Addr{
			netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}),
			netip.AddrFrom16([16]byte{0: 0x00, 1: 0x64, 2: 0xff, 3: 0x9b, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}),
			netip.AddrFrom16([16]byte{0: 0x00, 1: 0x64, 2: 0xff, 3: 0x9b, 4: 0, 5: 1, 6: b[0], 7: b[1], 9: b[2], 10: b[3]}),
			netip.AddrFrom16([16]byte{0: 0x20, 1: 0x02, 2: b[0], 3: b[1], 4: b[2], 5: b[3], 15: 1}),
			netip.AddrFrom16([16]byte{0: 0x20, 1: 0x01, 4: 65, 5: 54, 6: 227, 7: 120, 12: inv[0], 13: inv[1], 14: inv[2], 15: inv[3]}),
			netip.AddrFrom16([16]byte{0: 0x20, 1: 0x01, 4: b[0], 5: b[1], 6: b[2], 7: b[3], 12: 0xf7, 13: 0xf7, 14: 0xf7, 15: 0xf7}),
		}
		if b != [4]byte{0, 0, 0, 0} && b != [4]byte{0, 0, 0, 1} {
			forms = append(forms, netip.AddrFrom16([16]byte{12: b[0], 13: b[1], 14: b[2], 15: b[3]}))
		}
		for _, f := range forms {
			if fr, frefused := g.Refused(f, opt); !frefused {
				t.Errorf("%s refused (%s) but its embedded form %s is not (%q)", addr, r, f, fr)
			}
		}
	})
}
