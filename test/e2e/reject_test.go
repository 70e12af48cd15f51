package e2e

import (
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// With BOTBOX_REJECT=1 the app's direct connections to blocked ports are
// refused at once (ECONNREFUSED from the locally generated reset) instead
// of hanging until the client's own timeout, over IPv4 and IPv6, and still
// reach nothing; UDP still never arrives; the redirect to BotBox and the
// injection are unchanged. With the default the same connect gets no reset:
// it times out (issue 10 item 7). Error kinds are asserted, never durations.
func TestRejectFailsFast(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testRejectFailsFast)
}

func testRejectFailsFast(t *testing.T, backend string) {
	t.Run("BOTBOX_REJECT=1", func(t *testing.T) {
		p, key := apiKeyPod(t, podConfig{backend: backend, ipv6: true, installEnv: func(*pod) []string { return []string{"BOTBOX_REJECT=1"} }})
		for _, dst := range []netip.AddrPort{p.addr4(443), p.addr4(8443), p.addr4(22), p.addr6(443), p.addr6(8443)} {
			t.Run("tcp "+dst.String(), func(t *testing.T) {
				mark := p.mark(t)
				// The connect timeout is the suite's default: a refusal
				// must come from the reset, not from giving up.
				r := p.app(t, "tcp", "-addr", dst.String())
				if r.Connected || r.ErrorKind != wire.ErrRefused {
					t.Errorf("connect %s: connected=%v error %q (%s), want connection refused", dst, r.Connected, r.Error, r.ErrorKind)
				}
				p.assertNoTCP(t, mark, dst)
			})
		}
		for _, dst := range []netip.AddrPort{p.addr4(443), p.addr6(9999)} {
			t.Run("udp "+dst.String(), func(t *testing.T) {
				mark := p.mark(t)
				p.app(t, "udp", "-addr", dst.String(), "-payload", "exfil-"+randomHex(t, 4))
				p.assertNoUDP(t, mark, dst)
			})
		}
		t.Run("allowed traffic unchanged", func(t *testing.T) {
			mark := p.mark(t)
			if r := p.app(t, "http", "-url", "http://api.example.test/reject-on"); r.Status != http.StatusOK {
				t.Fatalf("GET http://api.example.test/reject-on: status %d error %q, want 200", r.Status, r.Error)
			}
			if ev := p.httpEvent(t, mark, "/reject-on"); !slices.Equal(ev.Header["Authorization"], []string{"Bearer " + key}) {
				t.Errorf("origin saw Authorization %q, want the injected key", ev.Header["Authorization"])
			}
		})
	})
	t.Run("default: dropped, no reset", func(t *testing.T) {
		p, _ := apiKeyPod(t, podConfig{backend: backend, ipv6: true})
		for _, dst := range []netip.AddrPort{p.addr4(8443), p.addr6(8443)} {
			mark := p.mark(t)
			r := p.app(t, "tcp", "-addr", dst.String(), "-connect-timeout", "300ms")
			if r.Connected || r.ErrorKind != wire.ErrTimeout {
				t.Errorf("connect %s: connected=%v error %q (%s), want a connect timeout (DROP, no reset)", dst, r.Connected, r.Error, r.ErrorKind)
			}
			p.assertNoTCP(t, mark, dst)
		}
	})
}

// BOTBOX_REJECT=1 never answers a packet whose source is not the Pod's: an
// unprivileged app can send IPv6 from a foreign address (IPV6_FREEBIND), and
// an ICMPv6 port-unreachable for it would carry the app's payload out to
// that address past the ICMP exemption. The app spoofs the origin's own
// address; the origin hears neither the datagram nor an ICMPv6 error
// quoting it. The barrier is an echo request from the exempt UID, recorded
// by the same ICMPv6 socket after anything sent before it.
func TestRejectRepliesStayInPod(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testRejectRepliesStayInPod)
}

func testRejectRepliesStayInPod(t *testing.T, backend string) {
	p, _ := apiKeyPod(t, podConfig{backend: backend, ipv6: true, icmp6: true, installEnv: func(*pod) []string { return []string{"BOTBOX_REJECT=1"} }})
	dst := p.addr6(9999)
	secret := "spoofed-" + randomHex(t, 6)
	mark := p.mark(t)
	p.app(t, "udp", "-addr", dst.String(), "-src", p.netIP6.String(), "-payload", secret)

	token := "barrier-" + randomHex(t, 6)
	if _, errOut, code := p.run(t, p.podNS, uidRoot, nil, "sh", "-c", "echo 0 2147483647 >/proc/sys/net/ipv4/ping_group_range"); code != 0 {
		t.Fatalf("setting net.ipv4.ping_group_range (for the barrier's ping socket): %s", errOut)
	}
	if r := p.client(t, uidBotBox, "ping", "-addr", p.netIP6.String(), "-payload", token); !r.Connected {
		t.Fatalf("barrier: UID 1337 ping %s: %s", p.netIP6, r.Error)
	}
	evs := p.waitEvents(t, mark, "the barrier echo request", func(evs []wire.Event) bool {
		return slices.ContainsFunc(evs, func(e wire.Event) bool { return e.Kind == wire.KindICMPv6 && e.Payload == "128 "+token })
	})
	for _, e := range evs {
		if e.Kind == wire.KindICMPv6 && strings.HasPrefix(e.Payload, "1 ") {
			t.Errorf("origin received an ICMPv6 destination unreachable from %s (#%d, quoting %q): a REJECT reply left the Pod", e.Remote, e.Seq, e.Payload[2:])
		}
	}
	p.assertNoUDP(t, mark, dst)
}
