package e2e

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// TestUnprivilegedSendPathsStayInPod walks the socket options an app
// without capabilities can set to steer a datagram (attack playbook
// classes 1 and 11): bound to loopback with SO_BINDTODEVICE (unprivileged
// since Linux 5.7; with no route through lo the kernel assumes the
// destination is on that link), bound to the Pod's own interface, and
// sent with an IPv6 segment routing header (IPV6_RTHDR type 4, no
// privilege needed) whose first hop is loopback or the Pod's own address
// and whose final segment is the attacker; and to multicast and
// link-local destinations on the Pod's link (port 53 among them, which the
// DNS guard takes). None of them puts anything on
// the wire outside the Pod, on either backend: lo never leaves the net
// namespace, the Pod's interface meets the filter chain, and the Pod's
// own stack drops the segment routing header (seg6_enabled is off) rather
// than forward the packet to its final segment. Every row must have been
// sent (the kernel took the option), so a row cannot pass by failing
// early, and the capture is shown to see every kind of destination: each
// row is either sent (the kernel took the option and the
// datagram) or refused with the error the row names (IPv6 has no on-link
// guess through lo; the filter chain's DROP is EPERM to the sender).
func TestUnprivilegedSendPathsStayInPod(t *testing.T) {
	forEachBackend(t, testUnprivilegedSendPathsStayInPod)
}

func testUnprivilegedSendPathsStayInPod(t *testing.T, backend string) {
	groups := []netip.Addr{netip.MustParseAddr("ff02::1"), netip.MustParseAddr("ff02::fb"), netip.MustParseAddr("ff0e::1:5345"),
		netip.MustParseAddr("224.0.0.251"), netip.MustParseAddr("239.83.69.67"), netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fe80::66")}
	p := reflectPod(t, podConfig{backend: backend, ipv6: true, dnsServer: true, dnsGuard: true, capture: groups})
	podDev := "bbp" + p.id
	onLink := func(a string, port int) string { return "[" + a + "%" + podDev + "]:" + strconv.Itoa(port) }
	to6 := netip.AddrPortFrom(attacker6, 7).String()
	to4 := netip.AddrPortFrom(attacker4, 7).String()
	mark := p.mark(t)
	for _, row := range []struct {
		name    string
		args    []string
		refused string // "" = sent
	}{
		{"bound to lo, to the attacker over IPv6", []string{"-device", "lo", "-addr", to6}, "network is unreachable"},
		{"bound to lo, to the attacker over IPv4", []string{"-device", "lo", "-addr", to4}, ""},
		{"bound to lo, foreign source", []string{"-device", "lo", "-src", attacker6.String(), "-addr", to6}, "network is unreachable"},
		{"bound to the Pod's interface, IPv6", []string{"-device", podDev, "-addr", to6}, "operation not permitted"},
		{"bound to the Pod's interface, IPv4", []string{"-device", podDev, "-addr", to4}, "operation not permitted"},
		{"segment routing header, first hop ::1", []string{"-via", "::1", "-addr", to6}, ""},
		{"segment routing header, first hop the Pod's address", []string{"-via", p.podIP6.String(), "-addr", to6}, ""},
		{"segment routing header, first hop ::1, port 53", []string{"-via", "::1", "-addr", netip.AddrPortFrom(attacker6, 53).String()}, ""},
		{"segment routing header, bound to lo", []string{"-via", "::1", "-device", "lo", "-addr", to6}, ""},
		{"link-local multicast, all nodes", []string{"-addr", onLink("ff02::1", 7)}, "operation not permitted"},
		{"link-local multicast, mDNS over IPv6", []string{"-addr", onLink("ff02::fb", 5353)}, "operation not permitted"},
		{"link-local multicast, port 53", []string{"-addr", onLink("ff02::1", 53)}, ""},
		{"global multicast over IPv6", []string{"-addr", "[ff0e::1:5345]:7"}, "operation not permitted"},
		{"link-local multicast, mDNS over IPv4", []string{"-addr", "224.0.0.251:5353"}, "operation not permitted"},
		{"multicast over IPv4, port 53", []string{"-addr", "239.83.69.67:53"}, ""},
		{"link-local unicast, the metadata address", []string{"-addr", "169.254.169.254:80"}, "operation not permitted"},
		{"link-local unicast over IPv6, port 53", []string{"-addr", onLink("fe80::66", 53)}, ""},
	} {
		r := p.app(t, "udp", append(row.args, "-payload", "sendpath")...)
		switch {
		case row.refused == "" && !r.Connected:
			t.Errorf("%s: not sent (%s): the row tests nothing", row.name, r.Error)
		case row.refused != "" && (r.Connected || !strings.Contains(r.Error, row.refused)):
			t.Errorf("%s: sent %v, error %q; want refused with %q", row.name, r.Connected, r.Error, row.refused)
		}
	}
	p.assertNothingOnTheWire(t, mark)

	// Control: the capture sees these destinations. The exempt UID's
	// datagrams to them arrive in the net namespace.
	for _, dst := range []string{onLink("ff02::1", 7), "224.0.0.251:5353", "169.254.169.254:80"} {
		token := "control-" + randomHex(t, 6)
		if r := p.client(t, uidBotBox, "udp", "-addr", dst, "-payload", token); !r.Connected {
			t.Fatalf("control: UID 1337 could not send to %s: %s", dst, r.Error)
		}
		p.waitEvents(t, mark, "the control datagram to "+dst, func(evs []wire.Event) bool {
			return slices.ContainsFunc(evs, func(e wire.Event) bool { return e.Kind == wire.KindWire && e.Payload == "udp "+token })
		})
	}
}
