package e2e

import (
	"net/http"
	"net/netip"
	"slices"
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
	t.Run("BOTBOX_REJECT=1", func(t *testing.T) {
		p, key := apiKeyPod(t, podConfig{ipv6: true, installEnv: func(*pod) []string { return []string{"BOTBOX_REJECT=1"} }})
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
		p, _ := apiKeyPod(t, podConfig{ipv6: true})
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
