package e2e

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// TestDNSGuardPortFromEnvironment: the init step redirects DNS to
// BOTBOX_DNS_GUARD_PORT and `botbox inject` puts the same variable in
// BotBox's environment; with a config that has no dns_guard block BotBox
// still serves the guard on that port (a WARN names dns_guard.enabled), so
// the app resolves allowed names and gets NXDOMAIN for the rest, none of
// which reaches the DNS server, instead of having no DNS at all while
// BotBox reports ready.
func TestDNSGuardPortFromEnvironment(t *testing.T) {
	t.Parallel()
	env := "BOTBOX_DNS_GUARD_PORT=" + strconv.Itoa(dnsGuardPort)
	p, _ := apiKeyPod(t, podConfig{ipv6: true, dnsServer: true, botboxEnv: []string{env},
		installEnv: func(*pod) []string { return []string{env} }})
	if r := p.client(t, uidRoot, "wait", "-timeout", "5s", "-addr", "127.0.0.1:"+strconv.Itoa(dnsGuardPort), "-addr", "[::1]:"+strconv.Itoa(dnsGuardPort)); !r.Connected {
		t.Fatalf("the DNS guard is not listening on %d: %s", dnsGuardPort, r.Error)
	}
	mark := p.mark(t)
	secret := "exfil-" + randomHex(t, 8) + ".exfil.test"
	for _, resolver := range []string{p.addr4(53).String(), p.addr6(53).String()} {
		if r := p.app(t, "dns", "-addr", resolver, "-name", secret, "-qtype", "TXT"); !r.Connected || r.Status != dns.RcodeNameError {
			t.Errorf("%s via %s: connected=%v rcode=%d %s, want NXDOMAIN from the guard", secret, resolver, r.Connected, r.Status, r.Error)
		}
		if r := p.app(t, "dns", "-addr", resolver, "-name", hostAPI, "-qtype", "A"); !r.Connected || r.Status != dns.RcodeSuccess || r.Body != p.netIP4.String() {
			t.Errorf("%s via %s: connected=%v rcode=%d answer %q %s, want %s", hostAPI, resolver, r.Connected, r.Status, r.Body, r.Error, p.netIP4)
		}
	}
	for _, e := range dnsEvents(p.events(t, mark)) {
		if strings.Contains(e.Payload, "exfil") {
			t.Errorf("the DNS server received %q", e.Payload)
		}
	}
	out, err := os.ReadFile(p.botbox.stdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"field":"dns_guard.enabled"`) || !strings.Contains(string(out), "BOTBOX_DNS_GUARD_PORT=8053 is set") {
		t.Errorf("no WARN naming dns_guard.enabled and the variable in BotBox's log:\n%s", tail(string(out), 20))
	}
}
