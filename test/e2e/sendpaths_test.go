package e2e

import (
	"net/netip"
	"strings"
	"testing"
)

// TestUnprivilegedSendPathsStayInPod walks the socket options an app
// without capabilities can set to steer a datagram (attack playbook
// classes 1 and 11): bound to loopback with SO_BINDTODEVICE (unprivileged
// since Linux 5.7; with no route through lo the kernel assumes the
// destination is on that link), bound to the Pod's own interface, and
// sent with an IPv6 segment routing header (IPV6_RTHDR type 4, no
// privilege needed) whose first hop is loopback or the Pod's own address
// and whose final segment is the attacker. None of them puts anything on
// the wire outside the Pod, on either backend: lo never leaves the net
// namespace, the Pod's interface meets the filter chain, and the Pod's
// own stack drops the segment routing header (seg6_enabled is off) rather
// than forward the packet to its final segment. Every row must have been
// sent (the kernel took the option), so a row cannot pass by failing
// early: each is either sent (the kernel took the option and the
// datagram) or refused with the error the row names (IPv6 has no on-link
// guess through lo; the filter chain's DROP is EPERM to the sender).
func TestUnprivilegedSendPathsStayInPod(t *testing.T) {
	forEachBackend(t, testUnprivilegedSendPathsStayInPod)
}

func testUnprivilegedSendPathsStayInPod(t *testing.T, backend string) {
	p := reflectPod(t, podConfig{backend: backend, ipv6: true, dnsServer: true, dnsGuard: true})
	podDev := "bbp" + p.id
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
}
