package addrguard

import (
	"net/netip"
	"testing"
)

func TestCleartextAllowed(t *testing.T) {
	for _, tc := range []struct {
		addr  string
		ok    bool
		class string
	}{
		{"127.0.0.1", true, ClassLoopback},
		{"127.255.0.9", true, ClassLoopback},
		{"::1", true, ClassLoopback},
		{"::ffff:127.0.0.1", true, ClassLoopback},
		{"10.1.2.3", true, ClassPrivate},
		{"172.16.0.1", true, ClassPrivate},
		{"192.168.1.1", true, ClassPrivate},
		{"fd12:3456::1", true, ClassULA},
		{"fe80::1%eth0", false, ClassLinkLocal},
		{"8.8.8.8", false, ClassPublic},
		{"2001:4860:4860::8888", false, ClassPublic},
		{"192.0.2.1", false, ClassPublic}, // documentation: not refused by the guard, still not private
		{"100.64.0.1", false, ClassCGNAT},
		{"169.254.169.254", false, ClassMetadata},
		{"fd00:ec2::254", false, ClassMetadata},
		{"100.100.100.200", false, ClassMetadata},
		{"169.254.1.1", false, ClassLinkLocal},
		{"0.0.0.0", false, ClassUnspecified},
		{"::", false, ClassUnspecified},
		{"224.0.0.1", false, ClassMulticast},
		{"64:ff9b::a00:1", false, "ipv4 embedded in ipv6 (nat64)"},
		{"2002:a00:1::", false, ""}, // 6to4 of 10.0.0.1: any embedding is refused
	} {
		class, ok := CleartextAllowed(netip.MustParseAddr(tc.addr))
		if ok != tc.ok || tc.class != "" && class != tc.class {
			t.Errorf("CleartextAllowed(%s) = %q, %v; want %q, %v", tc.addr, class, ok, tc.class, tc.ok)
		}
	}
	if _, ok := CleartextAllowed(netip.Addr{}); ok {
		t.Error("the zero address is allowed")
	}
}

func TestCleartextPrefixAllowed(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"127.0.0.1/32", true},
		{"127.0.0.0/8", true},
		{"10.0.0.0/8", true},
		{"10.0.0.0/7", false}, // 11/8 is public
		{"192.168.0.0/16", true},
		{"192.168.0.0/15", false},
		{"172.16.0.0/12", true},
		{"172.16.0.0/11", false},
		{"fd00::/8", true},
		{"fc00::/7", true},
		{"8.8.8.0/24", false},
		{"169.254.169.254/32", false},
		{"::1/128", true},
	} {
		if _, ok := CleartextPrefixAllowed(netip.MustParsePrefix(tc.prefix)); ok != tc.ok {
			t.Errorf("CleartextPrefixAllowed(%s) = %v, want %v", tc.prefix, ok, tc.ok)
		}
	}
}

// FuzzCleartextAllowed: an address CleartextAllowed accepts is loopback or
// private by the standard library's own definition, and never a metadata
// address; a prefix it accepts has only such addresses at both ends.
func FuzzCleartextAllowed(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "10.0.0.1", "fd00:ec2::254", "::ffff:10.0.0.1", "64:ff9b::a00:1", "8.8.8.8"} {
		f.Add(netip.MustParseAddr(s).AsSlice(), uint8(24))
	}
	f.Fuzz(func(t *testing.T, b []byte, bits uint8) {
		a, ok := netip.AddrFromSlice(b)
		if !ok {
			return
		}
		if _, allowed := CleartextAllowed(a); allowed {
			u := a.Unmap()
			if !u.IsLoopback() && !u.IsPrivate() {
				t.Fatalf("%s allowed for cleartext but neither loopback nor private", a)
			}
			for _, m := range MetadataAddrs() {
				if u == m {
					t.Fatalf("metadata address %s allowed for cleartext", a)
				}
			}
		}
		p, err := a.Unmap().Prefix(int(bits) % (a.Unmap().BitLen() + 1))
		if err != nil {
			return
		}
		if _, allowed := CleartextPrefixAllowed(p); allowed {
			if _, ok := CleartextAllowed(p.Addr()); !ok {
				t.Fatalf("prefix %s allowed but its first address is not", p)
			}
		}
	})
}
