package addrguard

import (
	"net/netip"
	"testing"
)

// TestRefusedRanges: every refused range, at its first and last address
// and a typical one, with no opt-in; and the addresses next to them, the
// documentation ranges and public addresses, which are not refused.
func TestRefusedRanges(t *testing.T) {
	tests := []struct {
		addr   string
		reason string // "" = not refused
	}{
		{"0.0.0.0", ClassUnspecified},
		{"0.0.0.1", ClassThisNetwork},
		{"0.255.255.255", ClassThisNetwork},
		{"127.0.0.1", ClassLoopback},
		{"127.0.0.0", ClassLoopback},
		{"127.255.255.255", ClassLoopback},
		{"169.254.169.254", ClassMetadata},
		{"100.100.100.200", ClassMetadata},
		{"169.254.0.0", ClassLinkLocal},
		{"169.254.169.253", ClassLinkLocal},
		{"169.254.255.255", ClassLinkLocal},
		{"224.0.0.1", ClassMulticast},
		{"239.255.255.255", ClassMulticast},
		{"255.255.255.255", ClassBroadcast},
		{"240.0.0.0", ClassReserved},
		{"255.255.255.254", ClassReserved},
		{"10.0.0.0", ClassPrivate},
		{"10.96.0.10", ClassPrivate},
		{"10.255.255.255", ClassPrivate},
		{"172.16.0.0", ClassPrivate},
		{"172.31.255.255", ClassPrivate},
		{"192.168.0.0", ClassPrivate},
		{"192.168.255.255", ClassPrivate},
		{"100.64.0.0", ClassCGNAT},
		{"100.127.255.255", ClassCGNAT},
		{"100.100.100.199", ClassCGNAT},
		{"::", ClassUnspecified},
		{"::1", ClassLoopback},
		{"fd00:ec2::254", ClassMetadata},
		{"fe80::1", ClassLinkLocal},
		{"fe80::1%eth0", ClassLinkLocal},
		{"febf:ffff::1", ClassLinkLocal},
		{"ff02::1", ClassMulticast},
		{"ff05::5345:4352:4554", ClassMulticast},
		{"fec0::1", ClassSiteLocal},
		{"feff:ffff::1", ClassSiteLocal},
		{"fc00::1", ClassULA},
		{"fd00:ec2::253", ClassULA},
		{"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassULA},

		// Neighbours and other addresses: not refused.
		{"1.0.0.0", ""},
		{"9.255.255.255", ""},
		{"11.0.0.0", ""},
		{"126.255.255.255", ""},
		{"128.0.0.0", ""},
		{"169.253.255.255", ""},
		{"169.255.0.0", ""},
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"192.167.255.255", ""},
		{"192.169.0.0", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"223.255.255.255", ""},
		{"8.8.8.8", ""},
		{"198.18.0.1", ""},
		{"fbff:ffff::1", ""},
		{"fe00::1", ""},
		{"2606:4700::1111", ""},
		{"::2:0:0:1", ""},
		// Documentation ranges are not refused.
		{"192.0.2.1", ""},
		{"198.51.100.7", ""},
		{"203.0.113.255", ""},
		{"2001:db8::1", ""},
	}
	g := New(nil)
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			reason, refused := g.Refused(netip.MustParseAddr(tt.addr), Opts{})
			if refused != (tt.reason != "") || reason != tt.reason {
				t.Errorf("Refused(%s) = %q, %v, want %q, %v", tt.addr, reason, refused, tt.reason, tt.reason != "")
			}
		})
	}
}

// TestEmbeddedForms: every IPv6 form that carries an IPv4 address is judged
// as that IPv4 address: refused with the IPv4 class for a refused IPv4,
// allowed for a public one.
func TestEmbeddedForms(t *testing.T) {
	tests := []struct {
		addr   string
		reason string
	}{
		{"::ffff:127.0.0.1", "loopback via ipv4_mapped"},
		{"::ffff:169.254.169.254", "metadata via ipv4_mapped"},
		{"::ffff:10.1.2.3", "private via ipv4_mapped"},
		{"::ffff:0.0.0.0", "unspecified via ipv4_mapped"},
		{"::ffff:8.8.8.8", ""},
		{"::127.0.0.1", "loopback via ipv4_compatible"},
		{"::169.254.169.254", "metadata via ipv4_compatible"},
		{"::0.0.0.2", "this_network via ipv4_compatible"},
		{"::192.168.1.1", "private via ipv4_compatible"},
		{"::8.8.8.8", ""},
		{"64:ff9b::127.0.0.1", "loopback via nat64"},
		{"64:ff9b::a9fe:a9fe", "metadata via nat64"},
		{"64:ff9b::100.100.100.200", "metadata via nat64"},
		{"64:ff9b::100.64.0.1", "cgnat via nat64"},
		{"64:ff9b::224.0.0.1", "multicast via nat64"},
		{"64:ff9b::8.8.8.8", ""},
		// 64:ff9b:1::/48 layout: 7f00 in bytes 6-7, u octet, 0001 in 9-10.
		{"64:ff9b:1:7f00:0:100::", "loopback via nat64_local"},
		{"64:ff9b:1:a9fe:a9:fe00::", "metadata via nat64_local"},
		{"64:ff9b:1:808:8:800::", ""},
		{"2002:7f00:1::", "loopback via 6to4"},
		{"2002:a9fe:a9fe::1", "metadata via 6to4"},
		{"2002:ac10:0001:1::1", "private via 6to4"},
		{"2002:0808:0808::1", ""},
		// Teredo: server 65.54.227.120 (public), client = ^last 32 bits.
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback via teredo"}, // ^80fffffe = 127.0.0.1
		{"2001:0:4136:e378:8000:63bf:5601:5601", "metadata via teredo"}, // ^56015601 = 169.254.169.254
		{"2001:0:4136:e378:8000:63bf:f5fe:fffe", "private via teredo"},  // ^f5fefffe = 10.1.0.1
		{"2001:0:4136:e378:8000:63bf:3f57:fefd", "private via teredo"},  // ^3f57fefd = 192.168.1.2
		{"2001:0:7f00:1:8000:63bf:f7f7:f7f7", "loopback via teredo"},    // server 127.0.0.1
		{"2001:0:4136:e378:8000:63bf:f7f7:f7f7", ""},                    // client 8.8.8.8
	}
	g := New(nil)
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			reason, refused := g.Refused(netip.MustParseAddr(tt.addr), Opts{})
			if refused != (tt.reason != "") || reason != tt.reason {
				t.Errorf("Refused(%s) = %q, %v, want %q, %v", tt.addr, reason, refused, tt.reason, tt.reason != "")
			}
		})
	}
}

// TestEmbeddedExtraction checks the IPv4 each form yields, so the table
// above cannot pass by accident of a wrong extraction that happens to land
// in the same class.
func TestEmbeddedExtraction(t *testing.T) {
	tests := []struct {
		addr, form, v4a, v4b string
	}{
		{"::ffff:1.2.3.4", FormMapped, "1.2.3.4", ""},
		{"::1.2.3.4", FormCompatible, "1.2.3.4", ""},
		{"64:ff9b::1.2.3.4", FormNAT64, "1.2.3.4", ""},
		{"64:ff9b:1:102:3:400::", FormNAT64Local, "1.2.3.4", ""},
		{"2002:102:304::", Form6to4, "1.2.3.4", ""},
		{"2001:0:4136:e378:8000:63bf:fefd:fcfb", FormTeredo, "65.54.227.120", "1.2.3.4"},
		{"::", "", "", ""},
		{"::1", "", "", ""},
		{"2001:db8::1", "", "", ""},
		{"1.2.3.4", "", "", ""},
	}
	for _, tt := range tests {
		form, v4 := Embedded(netip.MustParseAddr(tt.addr))
		want := [2]netip.Addr{}
		if tt.v4a != "" {
			want[0] = netip.MustParseAddr(tt.v4a)
		}
		if tt.v4b != "" {
			want[1] = netip.MustParseAddr(tt.v4b)
		}
		if form != tt.form || v4 != want {
			t.Errorf("Embedded(%s) = %q, %v, want %q, %v", tt.addr, form, v4, tt.form, want)
		}
	}
}

// TestOptIns: which opt-in opens which class. allow_private_addresses opens
// only private, cgnat, ula and site_local (never a metadata address inside
// them); an allowed CIDR or the rule's prefix opens exactly what it
// contains; an embedded form opens only when its IPv4 is opened.
func TestOptIns(t *testing.T) {
	priv := Opts{AllowPrivate: true}
	tests := []struct {
		name    string
		allowed []string
		opt     Opts
		addr    string
		refused bool
	}{
		{"private opens 10/8", nil, priv, "10.1.2.3", false},
		{"private opens 172.16/12", nil, priv, "172.20.0.1", false},
		{"private opens 192.168/16", nil, priv, "192.168.1.1", false},
		{"private opens cgnat", nil, priv, "100.64.1.1", false},
		{"private opens ula", nil, priv, "fd12::1", false},
		{"private opens site-local", nil, priv, "fec0::1", false},
		{"private opens mapped private", nil, priv, "::ffff:10.0.0.1", false},
		{"private keeps loopback", nil, priv, "127.0.0.1", true},
		{"private keeps ::1", nil, priv, "::1", true},
		{"private keeps link-local", nil, priv, "169.254.1.1", true},
		{"private keeps metadata", nil, priv, "169.254.169.254", true},
		{"private keeps alibaba metadata in cgnat", nil, priv, "100.100.100.200", true},
		{"private keeps aws ipv6 metadata in ula", nil, priv, "fd00:ec2::254", true},
		{"private keeps mapped loopback", nil, priv, "::ffff:127.0.0.1", true},
		{"private keeps multicast", nil, priv, "224.0.0.1", true},
		{"private keeps unspecified", nil, priv, "0.0.0.0", true},

		{"allowed cidr opens loopback", []string{"127.0.0.0/8"}, Opts{}, "127.0.0.1", false},
		{"allowed cidr opens only what it contains", []string{"127.0.0.1/32"}, Opts{}, "127.0.0.2", true},
		{"allowed cidr opens mapped form", []string{"127.0.0.0/8"}, Opts{}, "::ffff:127.0.0.1", false},
		{"allowed cidr opens 6to4 of its IPv4", []string{"10.0.0.0/8"}, Opts{}, "2002:a00:1::", false},
		{"allowed v6 cidr never opens embedded loopback", []string{"2002::/16"}, Opts{}, "2002:7f00:1::", true},
		{"allowed mapped cidr never opens loopback", []string{"::ffff:0:0/96"}, Opts{}, "::ffff:127.0.0.1", true},
		{"allowed cidr opens metadata explicitly", []string{"169.254.169.254/32"}, Opts{}, "169.254.169.254", false},
		{"allowed v6 cidr", []string{"::1/128"}, Opts{}, "::1", false},
		{"allowed unmasked cidr is masked", []string{"10.1.2.3/8"}, Opts{}, "10.200.0.1", false},
		{"allowed other cidr", []string{"192.168.0.0/16"}, Opts{}, "10.0.0.1", true},

		{"rule prefix opens its ip", nil, Opts{Rule: netip.MustParsePrefix("127.0.0.1/32")}, "127.0.0.1", false},
		{"rule prefix opens its cidr", nil, Opts{Rule: netip.MustParsePrefix("10.0.0.0/8")}, "10.9.9.9", false},
		{"rule prefix opens nothing else private", nil, Opts{Rule: netip.MustParsePrefix("10.0.0.0/8")}, "192.168.1.1", true},
		{"rule prefix keeps others", nil, Opts{Rule: netip.MustParsePrefix("10.0.0.0/8")}, "169.254.169.254", true},
		{"rule prefix opens mapped form of its ip", nil, Opts{Rule: netip.MustParsePrefix("127.0.0.1/32")}, "::ffff:127.0.0.1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pfx []netip.Prefix
			for _, s := range tt.allowed {
				pfx = append(pfx, netip.MustParsePrefix(s))
			}
			g := New(pfx)
			reason, refused := g.Refused(netip.MustParseAddr(tt.addr), tt.opt)
			if refused != tt.refused {
				t.Errorf("Refused(%s, %+v) with allowed %v = %q, %v, want refused %v", tt.addr, tt.opt, tt.allowed, reason, refused, tt.refused)
			}
			if refused == (reason == "") {
				t.Errorf("reason %q inconsistent with refused %v", reason, refused)
			}
		})
	}
}

func TestInvalidRefused(t *testing.T) {
	if reason, refused := New(nil).Refused(netip.Addr{}, Opts{AllowPrivate: true}); !refused || reason != ClassInvalid {
		t.Errorf("Refused(zero) = %q, %v, want %q, true", reason, refused, ClassInvalid)
	}
	var zero Guard
	if _, refused := zero.Refused(netip.MustParseAddr("127.0.0.1"), Opts{}); !refused {
		t.Error("the zero Guard admits loopback")
	}
}

func TestKey(t *testing.T) {
	a := New([]netip.Prefix{netip.MustParsePrefix("10.1.2.3/8"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("10.0.0.0/8")})
	b := New([]netip.Prefix{netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("10.0.0.0/8")})
	if a.Key() != b.Key() {
		t.Errorf("equal sets: keys %q and %q differ", a.Key(), b.Key())
	}
	if a.Key() != "10.0.0.0/8,::1/128" {
		t.Errorf("Key() = %q", a.Key())
	}
	if c := New(nil); c.Key() == a.Key() {
		t.Error("different sets share a key")
	}
	if got := a.Allowed(); len(got) != 2 {
		t.Errorf("Allowed() = %v, want 2 prefixes", got)
	}
}

func BenchmarkRefused(b *testing.B) {
	g := New([]netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")})
	addrs := []netip.Addr{netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("2606:4700::1111"), netip.MustParseAddr("10.0.0.1")}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		g.Refused(addrs[i%len(addrs)], Opts{})
	}
}
