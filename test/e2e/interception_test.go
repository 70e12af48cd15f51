package e2e

import (
	"net/http"
	"slices"
	"testing"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// HTTPS interception: in-config enabled plus BOTBOX_ENABLE_HTTPS_INTERCEPTION=1,
// the CA made by `botbox ca new`, the app trusting that CA only. Transparent
// https:// works with injection, over IPv4 and IPv6; the interception
// listener's refusals hold and never reach the origin.
func TestHTTPSInterception(t *testing.T) {
	t.Parallel()
	p, key := apiKeyPod(t, podConfig{ipv6: true, interception: true})
	injected := []string{"Bearer " + key}

	t.Run("transparent https with injection", func(t *testing.T) {
		mark := p.mark(t)
		r := p.app(t, "http", "-url", "https://api.example.test/secure", "-cacert", p.botboxCA, "-H", "Authorization: Bearer app-own")
		if r.Status != http.StatusOK {
			t.Fatalf("GET https://api.example.test/secure: status %d body %q error %q, want 200", r.Status, r.Body, r.Error)
		}
		ev := p.httpEvent(t, mark, "/secure")
		if !ev.TLS || ev.Port != 443 || ev.SNI != hostAPI || !slices.Equal(ev.Header["Authorization"], injected) {
			t.Errorf("origin saw tls=%v port=%d sni=%q Authorization=%q, want TLS 443 %s with the injected key only", ev.TLS, ev.Port, ev.SNI, ev.Header["Authorization"], hostAPI)
		}
	})
	t.Run("transparent https over IPv6", func(t *testing.T) {
		mark := p.mark(t)
		r := p.app(t, "http", "-url", "https://v6.example.test/secure6", "-cacert", p.botboxCA)
		if r.Status != http.StatusOK {
			t.Fatalf("GET https://v6.example.test/secure6: status %d body %q error %q, want 200", r.Status, r.Body, r.Error)
		}
		if ev := p.httpEvent(t, mark, "/secure6"); !ev.IPv6 || !slices.Equal(ev.Header["Authorization"], injected) {
			t.Errorf("origin saw ipv6=%v Authorization=%q, want IPv6 with the injected key", ev.IPv6, ev.Header["Authorization"])
		}
	})
	t.Run("BotBox terminates TLS: the origin's own CA does not verify", func(t *testing.T) {
		r := p.app(t, "http", "-url", "https://api.example.test/", "-cacert", p.originCA)
		if !r.Connected || r.Status != 0 || r.ErrorKind != wire.ErrTLS {
			t.Errorf("app trusting only the origin CA: connected=%v status=%d error %q (%s), want a TLS verification failure", r.Connected, r.Status, r.Error, r.ErrorKind)
		}
	})
	t.Run("plain http still goes through the proxy", func(t *testing.T) {
		mark := p.mark(t)
		if r := p.app(t, "http", "-url", "http://api.example.test/plain"); r.Status != http.StatusOK {
			t.Fatalf("GET http://api.example.test/plain: %d %q", r.Status, r.Error)
		}
		if ev := p.httpEvent(t, mark, "/plain"); !ev.TLS || !slices.Equal(ev.Header["Authorization"], injected) {
			t.Errorf("origin saw tls=%v Authorization=%q", ev.TLS, ev.Header["Authorization"])
		}
	})

	refusals := []struct {
		name, status, body string
		code               int
		args               []string
	}{
		{
			name: "SNI/Host mismatch",
			args: []string{"-url", "https://api.example.test/fronted", "-host", hostOther},
			code: http.StatusBadRequest, body: "SNI/Host header mismatch",
		},
		{
			name: "disallowed SNI",
			args: []string{"-url", "https://other.example.test/exfil"},
			code: http.StatusForbidden, body: "host not allowed",
		},
		{
			name: "explicitly denied SNI",
			args: []string{"-url", "https://blocked.example.test/exfil"},
			code: http.StatusForbidden, body: "host not allowed",
		},
		{
			name: "Host with a port other than 443",
			args: []string{"-url", "https://api.example.test/port", "-host", "api.example.test:8443"},
			code: http.StatusForbidden, body: "HTTPS interception listener only accepts port 443 traffic",
		},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			mark := p.mark(t)
			r := p.app(t, "http", append(tt.args, "-cacert", p.botboxCA)...)
			assertStatus(t, tt.name, r, tt.code, tt.body)
			p.assertNoTCP(t, mark, p.addr4(443))
		})
	}
	t.Run("absolute-form request", func(t *testing.T) {
		mark := p.mark(t)
		r := p.app(t, "raw", "-addr", p.addr4(443).String(), "-tls", "-sni", hostAPI, "-cacert", p.botboxCA,
			"-data", "GET https://other.example.test/exfil HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n")
		assertStatus(t, "absolute-form", r, http.StatusBadRequest, "absolute-form request not allowed on HTTPS interception listener")
		p.assertNoTCP(t, mark, p.addr4(443))
	})
	t.Run("direct TCP to other ports and UDP 443 still dropped", func(t *testing.T) {
		for _, dst := range []string{p.addr4(8443).String(), p.addr6(8443).String()} {
			mark := p.mark(t)
			assertNoConnection(t, "connect "+dst, p.app(t, "tcp", "-addr", dst))
			p.assertNoTCP(t, mark, p.addr4(8443))
			p.assertNoTCP(t, mark, p.addr6(8443))
		}
		mark := p.mark(t)
		p.app(t, "udp", "-addr", p.addr4(443).String(), "-payload", "quic")
		p.assertNoUDP(t, mark, p.addr4(443))
	})
}

// With deny_handshake_on_disallowed_sni: true, a disallowed SNI gets no
// certificate: the TLS handshake is refused and the origin sees nothing.
func TestHTTPSInterceptionDeniesHandshakeForDisallowedSNI(t *testing.T) {
	t.Parallel()
	p, _ := apiKeyPod(t, podConfig{ipv6: true, interception: true, denyHandshake: true})
	for _, host := range []string{hostOther, hostBlocked} {
		t.Run(host, func(t *testing.T) {
			mark := p.mark(t)
			r := p.app(t, "http", "-url", "https://"+host+"/exfil", "-cacert", p.botboxCA)
			if !r.Connected || r.Status != 0 || (r.ErrorKind != wire.ErrTLS && r.ErrorKind != wire.ErrReset) {
				t.Errorf("GET https://%s/: connected=%v status=%d error %q (%s), want the TLS handshake refused", host, r.Connected, r.Status, r.Error, r.ErrorKind)
			}
			p.assertNoTCP(t, mark, p.addr4(443))
		})
	}
	if r := p.app(t, "http", "-url", "https://api.example.test/ok", "-cacert", p.botboxCA); r.Status != http.StatusOK {
		t.Errorf("allowed SNI with handshake denial on: status %d error %q, want 200", r.Status, r.Error)
	}
}
