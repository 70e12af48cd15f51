package dnsguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/policy"
	"github.com/botbox/botbox/internal/testutil/eventually"
)

// TestAllowDeny: allowed names (an allow rule's host, names under an
// allowed wildcard) are forwarded; everything else gets NXDOMAIN built
// locally and never reaches the upstream, over UDP and TCP.
func TestAllowDeny(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	tests := []struct {
		name    string
		forward bool
	}{
		{"api.example.test.", true},
		{"API.Example.TEST.", true},
		{"x.allowed.test.", true},
		{"a.b.allowed.test.", true},
		{"allowed.test.", false},            // a wildcard never covers its suffix
		{"deny.allowed.test.", false},       // a deny rule beats the wildcard
		{"secret-bytes.exfil.test.", false}, // no rule
		{"x.api.example.test.", false},      // under an exact host, not allowed
		// Kubernetes search-domain expansions are simply other names.
		{"api.example.test.default.svc.cluster.local.", false},
		{"api.example.test.svc.cluster.local.", false},
		{"203.0.113.7.", false},              // IP literal
		{`api\.example.test.`, false},        // escaped dot: not the allowed name
		{`api\000.example.test.`, false},     // escaped byte
		{".", false},                         // root
		{"xn--nxasmq6b.allowed.test.", true}, // punycode label is a plain name
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, tt := range tests {
			before, denied := h.up.count(), h.counter("denied")
			r := h.ask(t, network, tt.name, dns.TypeA)
			// Forwarded once; later queries may come from the cache.
			forwarded := h.up.count() > before || len(r.Answer) > 0
			if !tt.forward && (h.up.count() != before || h.counter("denied") != denied+1) {
				t.Errorf("%s %s: not counted as denied once, or forwarded", network, tt.name)
			}
			if forwarded != tt.forward {
				t.Errorf("%s %s: forwarded = %v, want %v", network, tt.name, forwarded, tt.forward)
			}
			wantRcode := "NXDOMAIN"
			if tt.forward {
				wantRcode = "NOERROR"
			}
			if rcode(r) != wantRcode {
				t.Errorf("%s %s: rcode %s, want %s", network, tt.name, rcode(r), wantRcode)
			}
			if !tt.forward && (len(r.Answer) != 0 || len(r.Ns) != 0) {
				t.Errorf("%s %s: local NXDOMAIN carries records: %v", network, tt.name, r)
			}
		}
	}
	for _, n := range h.up.names() {
		if !strings.HasSuffix(n, "api.example.test.") && !strings.HasSuffix(n, ".allowed.test.") {
			t.Errorf("upstream saw %q", n)
		}
	}
	if got := h.counter("denied"); got != 2*10 {
		t.Errorf("denied counter = %v, want 20", got)
	}
}

// TestDefaultAllow: under default_action: allow every name a rule does not
// deny is forwarded, search-domain expansions included.
func TestDefaultAllow(t *testing.T) {
	h := newHarness(t, harnessOpts{policy: `
egress_policy:
  default_action: allow
  rules:
    - host: blocked.example.test
      action: deny
    - host: 192.0.2.0/24
      action: allow
`})
	for name, fwd := range map[string]bool{
		"anything.example.":                true,
		"api.x.default.svc.cluster.local.": true,
		"blocked.example.test.":            false,
		"BLOCKED.example.test.":            false,
		// An IP literal is never a name to resolve, even when allowed.
		"203.0.113.7.": false,
		"192.0.2.1.":   false,
	} {
		before := h.up.count()
		h.ask(t, "udp", name, dns.TypeAAAA)
		if got := h.up.count() > before; got != fwd {
			t.Errorf("%s: forwarded = %v, want %v", name, got, fwd)
		}
	}
}

// TestTypes: only A, AAAA, CNAME, HTTPS and SVCB are forwarded for an
// allowed name; other types get an empty NOERROR locally; a denied name
// gets NXDOMAIN whatever the type.
func TestTypes(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypeHTTPS, dns.TypeSVCB} {
		before := h.up.count()
		if r := h.ask(t, "udp", "api.example.test.", qt); rcode(r) != "NOERROR" || h.up.count() != before+1 {
			t.Errorf("%s: rcode %s, forwarded %d, want NOERROR and 1", dns.TypeToString[qt], rcode(r), h.up.count()-before)
		}
	}
	for _, qt := range []uint16{dns.TypeTXT, dns.TypeMX, dns.TypeNULL, dns.TypeANY, dns.TypePTR, dns.TypeNS, dns.TypeSRV, dns.TypeCAA} {
		before := h.up.count()
		r := h.ask(t, "tcp", "api.example.test.", qt)
		if rcode(r) != "NOERROR" || len(r.Answer) != 0 || h.up.count() != before {
			t.Errorf("%s for an allowed name: rcode %s, %d answers, forwarded %v; want empty NOERROR, not forwarded",
				dns.TypeToString[qt], rcode(r), len(r.Answer), h.up.count() != before)
		}
		if r := h.ask(t, "udp", "data.exfil.test.", qt); rcode(r) != "NXDOMAIN" || h.up.count() != before {
			t.Errorf("%s for a denied name: rcode %s, want NXDOMAIN, not forwarded", dns.TypeToString[qt], rcode(r))
		}
	}
	m := new(dns.Msg)
	m.SetQuestion("api.example.test.", dns.TypeA)
	m.Question[0].Qclass = dns.ClassCHAOS
	if r := h.exchange(t, "udp", m); rcode(r) != "REFUSED" {
		t.Errorf("class CH: rcode %s, want REFUSED", rcode(r))
	}
	if n := h.up.count(); n != 5 {
		t.Errorf("upstream saw %d queries, want 5", n)
	}
}

// TestCase0x20: the answer echoes the client's question exactly (case
// included) and the client's ID; owner names equal to the question are in
// the client's case; the upstream gets the lower-case name and its own ID.
func TestCase0x20(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	for _, network := range []string{"udp", "tcp"} {
		m := new(dns.Msg)
		m.SetQuestion("aPi.ExAmPlE.tEsT.", dns.TypeA)
		m.Id = 0x2020
		r := h.exchange(t, network, m)
		if r.Id != 0x2020 || r.Question[0].Name != "aPi.ExAmPlE.tEsT." {
			t.Errorf("%s: reply ID %#x question %q, want 0x2020 and the client's case", network, r.Id, r.Question[0].Name)
		}
		if len(r.Answer) != 1 || r.Answer[0].Header().Name != "aPi.ExAmPlE.tEsT." {
			t.Errorf("%s: answer %v, want one record owned by the client's spelling", network, r.Answer)
		}
		// The second query is a cache hit: still the client's case.
		m.Question[0].Name = "API.example.TEST."
		if r := h.exchange(t, network, m); r.Question[0].Name != "API.example.TEST." || r.Answer[0].Header().Name != "API.example.TEST." {
			t.Errorf("%s cached: question %q answer %v", network, r.Question[0].Name, r.Answer)
		}
	}
	if n := h.up.count(); n != 1 {
		t.Fatalf("upstream saw %d queries, want 1 (the rest from the cache)", n)
	}
	q := h.up.last()
	if q.Question[0].Name != "api.example.test." {
		t.Errorf("upstream question %q, want the lower-case name", q.Question[0].Name)
	}
	if q.Id == 0x2020 {
		t.Errorf("upstream query reuses the client's ID")
	}
}

// TestEDNS0: the client's EDNS0 DO bit goes upstream, its options do not;
// a client with EDNS0 gets an OPT record back, one without does not.
func TestEDNS0(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	m := new(dns.Msg)
	m.SetQuestion("api.example.test.", dns.TypeAAAA)
	m.SetEdns0(4096, true)
	opt := m.IsEdns0()
	opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: 65001, Data: []byte("exfiltrated-bytes")},
		&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"})
	r := h.exchange(t, "udp", m)
	ropt := r.IsEdns0()
	if ropt == nil || !ropt.Do() || len(ropt.Option) != 0 {
		t.Errorf("reply OPT = %v, want one with DO and no options", ropt)
	}
	q := h.up.last()
	qopt := q.IsEdns0()
	if qopt == nil || !qopt.Do() || len(qopt.Option) != 0 || qopt.UDPSize() != clientUDPSize {
		t.Errorf("upstream OPT = %v, want DO, no options, size %d", qopt, clientUDPSize)
	}
	if len(q.Extra) != 1 {
		t.Errorf("upstream query additional section %v, want only the OPT", q.Extra)
	}
	// No EDNS0 from the client: none back (also on a local answer).
	if r := h.ask(t, "udp", "api.example.test.", dns.TypeA); r.IsEdns0() != nil {
		t.Errorf("reply to a query without EDNS0 has OPT %v", r.IsEdns0())
	}
	if r := h.ask(t, "udp", "x.exfil.test.", dns.TypeA); r.IsEdns0() != nil {
		t.Errorf("local reply to a query without EDNS0 has OPT")
	}
	// A denied name with EDNS0 gets an OPT on the local NXDOMAIN.
	d := new(dns.Msg)
	d.SetQuestion("x.exfil.test.", dns.TypeA)
	d.SetEdns0(1232, false)
	if r := h.exchange(t, "tcp", d); r.IsEdns0() == nil || rcode(r) != "NXDOMAIN" {
		t.Errorf("local NXDOMAIN to an EDNS0 client: %v", r)
	}
	// EDNS version 1 gets BADVERS and is not forwarded.
	before := h.up.count()
	b := new(dns.Msg)
	b.SetQuestion("api.example.test.", dns.TypeA)
	b.SetEdns0(1232, false)
	b.IsEdns0().SetVersion(1)
	if r := h.exchange(t, "udp", b); r.Rcode != dns.RcodeBadVers || h.up.count() != before {
		t.Errorf("EDNS version 1: rcode %d, forwarded %v; want BADVERS, not forwarded", r.Rcode, h.up.count() != before)
	}
}

// TestCacheTTL: TTLs are capped at MaxTTL, the answer is cached, its TTLs
// count down, and it is asked again once expired.
func TestCacheTTL(t *testing.T) {
	h := newHarness(t, harnessOpts{maxTTL: 60 * time.Second})
	r := h.ask(t, "udp", "api.example.test.", dns.TypeA)
	if len(r.Answer) != 1 || r.Answer[0].Header().Ttl != 60 {
		t.Fatalf("answer %v, want one record with TTL 60 (3600 capped)", r.Answer)
	}
	h.clock.Advance(25 * time.Second)
	r = h.ask(t, "tcp", "api.example.test.", dns.TypeA)
	if got := r.Answer[0].Header().Ttl; got != 35 || h.up.count() != 1 {
		t.Errorf("after 25 s: TTL %d, upstream queries %d; want 35 from the cache, 1", got, h.up.count())
	}
	h.clock.Advance(35 * time.Second)
	r = h.ask(t, "udp", "api.example.test.", dns.TypeA)
	if got := r.Answer[0].Header().Ttl; got != 60 || h.up.count() != 2 {
		t.Errorf("after expiry: TTL %d, upstream queries %d; want 60 and 2", got, h.up.count())
	}
	// A TTL below the cap is kept, and is what the entry lives.
	h.up.mu.Lock()
	h.up.answer = func(q *dns.Msg) *dns.Msg {
		m := defaultAnswer(q)
		m.Answer[0].Header().Ttl = 5
		return m
	}
	h.up.mu.Unlock()
	if r := h.ask(t, "udp", "x.allowed.test.", dns.TypeA); r.Answer[0].Header().Ttl != 5 {
		t.Errorf("TTL %d, want 5", r.Answer[0].Header().Ttl)
	}
	h.clock.Advance(5 * time.Second)
	h.ask(t, "udp", "x.allowed.test.", dns.TypeA)
	if h.up.count() != 4 {
		t.Errorf("upstream queries %d, want 4 (the 5 s entry expired)", h.up.count())
	}
	// Negative answers are cached by their SOA, capped too.
	h.up.mu.Lock()
	h.up.answer = func(q *dns.Msg) *dns.Msg {
		m := new(dns.Msg)
		m.SetRcode(q, dns.RcodeNameError)
		m.Ns = []dns.RR{mustRR("allowed.test. 3600 IN SOA ns.allowed.test. h.allowed.test. 1 7200 900 1209600 300")}
		return m
	}
	h.up.mu.Unlock()
	r = h.ask(t, "udp", "gone.allowed.test.", dns.TypeA)
	if rcode(r) != "NXDOMAIN" || len(r.Ns) != 1 || r.Ns[0].Header().Ttl != 60 {
		t.Errorf("upstream NXDOMAIN: %v", r)
	}
	h.ask(t, "udp", "gone.allowed.test.", dns.TypeA)
	if h.up.count() != 5 {
		t.Errorf("upstream queries %d, want 5 (negative answer cached)", h.up.count())
	}
}

// TestMaxTTLZero: max_ttl_seconds 0 serves TTL 0 and caches nothing.
func TestMaxTTLZero(t *testing.T) {
	h := newHarness(t, harnessOpts{noCache: true})
	for range 2 {
		if r := h.ask(t, "udp", "api.example.test.", dns.TypeA); len(r.Answer) != 1 || r.Answer[0].Header().Ttl != 0 {
			t.Errorf("answer %v, want TTL 0", r.Answer)
		}
	}
	if h.up.count() != 2 {
		t.Errorf("upstream queries %d, want 2 (nothing cached)", h.up.count())
	}
}

// TestUpstreamTimeout: a silent upstream gets SERVFAIL (after Timeout),
// counted as error; the guard keeps answering.
func TestUpstreamTimeout(t *testing.T) {
	h := newHarness(t, harnessOpts{timeout: 50 * time.Millisecond})
	h.up.mu.Lock()
	h.up.silent = true
	h.up.mu.Unlock()
	for _, network := range []string{"udp", "tcp"} {
		if r := h.ask(t, network, "api.example.test.", dns.TypeA); rcode(r) != "SERVFAIL" {
			t.Errorf("%s: rcode %s, want SERVFAIL", network, rcode(r))
		}
	}
	if got := h.counter("error"); got != 2 {
		t.Errorf("error counter %v, want 2", got)
	}
	// SERVFAIL is not cached.
	h.up.mu.Lock()
	h.up.silent = false
	h.up.mu.Unlock()
	if r := h.ask(t, "udp", "api.example.test.", dns.TypeA); rcode(r) != "NOERROR" {
		t.Errorf("after recovery: %s", rcode(r))
	}
}

// TestPendingBounded: with the pending budget full (here 1, a query
// waiting on a silent upstream), a query for another uncached allowed name
// gets SERVFAIL at once: the first is still waiting when the second is
// answered, and both have the same timeout, so the second cannot have
// timed out. Cached and locally refused names are still answered.
func TestPendingBounded(t *testing.T) {
	h := newHarness(t, harnessOpts{pending: 1, timeout: time.Minute})
	h.ask(t, "udp", "cached.allowed.test.", dns.TypeA)
	h.up.mu.Lock()
	h.up.silent = true
	h.up.mu.Unlock()
	first := make(chan *dns.Msg, 1)
	go func() {
		m := new(dns.Msg)
		m.SetQuestion("slow.allowed.test.", dns.TypeA)
		c := dns.Client{Net: "tcp", Timeout: 2 * time.Minute}
		r, _, _ := c.Exchange(m, h.tcp)
		first <- r
	}()
	eventually.Eventually(t, 10*time.Second, func() bool { return h.up.count() == 2 }, "the first query waits on the upstream")
	if r := h.ask(t, "udp", "other.allowed.test.", dns.TypeA); rcode(r) != "SERVFAIL" {
		t.Errorf("second uncached name: %s, want SERVFAIL", rcode(r))
	}
	if r := h.ask(t, "udp", "cached.allowed.test.", dns.TypeA); rcode(r) != "NOERROR" || len(r.Answer) != 1 {
		t.Errorf("cached name: %v", r)
	}
	if r := h.ask(t, "udp", "x.exfil.test.", dns.TypeA); rcode(r) != "NXDOMAIN" {
		t.Errorf("denied name: %s", rcode(r))
	}
	select {
	case r := <-first:
		t.Fatalf("the first query was answered (%v) before the check", r)
	default:
	}
	if h.up.count() != 2 {
		t.Errorf("upstream saw %d queries, want 2 (the refused one not sent)", h.up.count())
	}
	h.g.Close() // ends the first query's wait (SERVFAIL)
	if r := <-first; r == nil || rcode(r) != "SERVFAIL" {
		t.Errorf("first query after Close: %v", r)
	}
}

// TestUpstreamMismatch: an upstream reply whose question is not the one
// asked, or whose rcode is SERVFAIL, is not passed on.
func TestUpstreamMismatch(t *testing.T) {
	h := newHarness(t, harnessOpts{timeout: 200 * time.Millisecond})
	h.up.mu.Lock()
	h.up.answer = func(q *dns.Msg) *dns.Msg {
		m := defaultAnswer(q)
		m.Question[0].Name = "other.example."
		return m
	}
	h.up.mu.Unlock()
	if r := h.ask(t, "udp", "api.example.test.", dns.TypeA); rcode(r) != "SERVFAIL" || len(r.Answer) != 0 {
		t.Errorf("mismatched question: %v, want SERVFAIL without records", r)
	}
	h.up.mu.Lock()
	h.up.answer = func(q *dns.Msg) *dns.Msg {
		m := new(dns.Msg)
		m.SetRcode(q, dns.RcodeServerFailure)
		return m
	}
	h.up.mu.Unlock()
	if r := h.ask(t, "udp", "x.allowed.test.", dns.TypeA); rcode(r) != "SERVFAIL" {
		t.Errorf("upstream SERVFAIL: %s", rcode(r))
	}
}

// TestSanitize: records of other types and the additional section of the
// upstream's answer do not reach the client; a truncated UDP answer is
// asked again over TCP.
func TestSanitize(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.up.mu.Lock()
	h.up.answer = func(q *dns.Msg) *dns.Msg {
		m := defaultAnswer(q)
		m.Answer = append(m.Answer, mustRR(q.Question[0].Name+" 60 IN TXT \"smuggled\""))
		m.Ns = append(m.Ns, mustRR("example.test. 60 IN NS ns.evil."))
		m.Extra = append(m.Extra, mustRR("ns.evil. 60 IN A 10.0.0.1"))
		return m
	}
	h.up.mu.Unlock()
	r := h.ask(t, "udp", "api.example.test.", dns.TypeA)
	if len(r.Answer) != 1 || len(r.Ns) != 0 || len(r.Extra) != 0 {
		t.Errorf("reply carries %v / %v / %v, want only the A record", r.Answer, r.Ns, r.Extra)
	}
	// Truncated over UDP: the guard retries over TCP.
	h.up.mu.Lock()
	h.up.answer = func(q *dns.Msg) *dns.Msg {
		m := defaultAnswer(q)
		m.Truncated = true
		return m
	}
	h.up.mu.Unlock()
	before := h.up.count()
	h.ask(t, "udp", "t.allowed.test.", dns.TypeA)
	if h.up.count() != before+2 {
		t.Errorf("truncated answer: %d upstream queries, want 2 (UDP then TCP)", h.up.count()-before)
	}
}

// TestAddrFilter: A and AAAA records the filter refuses are removed, and
// refused addresses leave the ipv4hint and ipv6hint of HTTPS records; the
// filter is told which rule allowed the name.
func TestAddrFilter(t *testing.T) {
	var mu sync.Mutex
	var rules []string
	refuse := func(a netip.Addr, r *policy.Rule) bool {
		mu.Lock()
		defer mu.Unlock()
		host := "<nil>"
		if r != nil {
			host = r.Host
		}
		rules = append(rules, host)
		return a.IsPrivate() || a.IsLoopback()
	}
	h := newHarness(t, harnessOpts{filter: AddrFilterFunc(refuse)})
	h.up.mu.Lock()
	h.up.answer = func(q *dns.Msg) *dns.Msg {
		m := new(dns.Msg)
		m.SetReply(q)
		n := q.Question[0].Name
		switch q.Question[0].Qtype {
		case dns.TypeA:
			m.Answer = []dns.RR{mustRR(n + " 60 IN A 10.1.2.3"), mustRR(n + " 60 IN A 203.0.113.9"), mustRR(n + " 60 IN A 127.0.0.1")}
		case dns.TypeAAAA:
			m.Answer = []dns.RR{mustRR(n + " 60 IN AAAA fd00::1"), mustRR(n + " 60 IN AAAA 2001:db8::9")}
		case dns.TypeHTTPS:
			m.Answer = []dns.RR{mustRR(n + ` 60 IN HTTPS 1 . alpn="h2" ipv4hint="10.0.0.1,203.0.113.9" ipv6hint="fd00::2"`)}
		}
		return m
	}
	h.up.mu.Unlock()
	r := h.ask(t, "udp", "x.allowed.test.", dns.TypeA)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "203.0.113.9" {
		t.Errorf("A answer %v, want only 203.0.113.9", r.Answer)
	}
	r = h.ask(t, "tcp", "x.allowed.test.", dns.TypeAAAA)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.AAAA).AAAA.String() != "2001:db8::9" {
		t.Errorf("AAAA answer %v, want only 2001:db8::9", r.Answer)
	}
	r = h.ask(t, "udp", "x.allowed.test.", dns.TypeHTTPS)
	if len(r.Answer) != 1 {
		t.Fatalf("HTTPS answer %v", r.Answer)
	}
	got := r.Answer[0].(*dns.HTTPS).String()
	if !strings.Contains(got, `ipv4hint="203.0.113.9"`) || strings.Contains(got, "10.0.0.1") || strings.Contains(got, "ipv6hint") {
		t.Errorf("HTTPS record %s, want ipv4hint 203.0.113.9 only and no ipv6hint", got)
	}
	// The cached, unfiltered answer is filtered again on each hit.
	r = h.ask(t, "udp", "x.allowed.test.", dns.TypeA)
	if len(r.Answer) != 1 || h.up.count() != 3 {
		t.Errorf("cached A answer %v (upstream %d), want the filtered one from the cache", r.Answer, h.up.count())
	}
	mu.Lock()
	defer mu.Unlock()
	for _, host := range rules {
		if host != "*.allowed.test" {
			t.Errorf("filter asked with rule %q, want *.allowed.test", host)
		}
	}
}

// TestNameInspector: a name the inspector refuses gets NXDOMAIN and never
// leaves, even when the policy allows it; the
// decision line does not contain the name.
func TestNameInspector(t *testing.T) {
	insp := func(name string) bool { return strings.Contains(strings.ToLower(name), "placeholder-token") }
	h := newHarness(t, harnessOpts{inspector: insp})
	r := h.ask(t, "udp", "botbox-placeholder-token-1234.allowed.test.", dns.TypeA)
	if rcode(r) != "NXDOMAIN" || h.up.count() != 0 {
		t.Errorf("rcode %s, upstream %d; want NXDOMAIN, 0", rcode(r), h.up.count())
	}
	if strings.Contains(h.logs.String(), "placeholder-token") {
		t.Errorf("log contains the refused name:\n%s", h.logs.String())
	}
	lines := h.linesWith("dns decision")
	if len(lines) != 1 || lines[0]["reason"] != "name_refused_by_inspector" {
		t.Errorf("decision lines %v", lines)
	}
	if r := h.ask(t, "udp", "api.example.test.", dns.TypeA); rcode(r) != "NOERROR" {
		t.Errorf("a clean name: %s", rcode(r))
	}
}

// TestMalformed: messages that are not one plain query are answered
// locally (FORMERR, NOTIMP) or dropped (responses), never forwarded.
func TestMalformed(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	two := new(dns.Msg)
	two.SetQuestion("api.example.test.", dns.TypeA)
	two.Question = append(two.Question, dns.Question{Name: "x.allowed.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	withAnswer := new(dns.Msg)
	withAnswer.SetQuestion("api.example.test.", dns.TypeA)
	withAnswer.Answer = []dns.RR{mustRR("api.example.test. 60 IN A 192.0.2.1")}
	notify := new(dns.Msg)
	notify.SetNotify("api.example.test.")
	update := new(dns.Msg)
	update.SetUpdate("example.test.")
	extra := new(dns.Msg)
	extra.SetQuestion("api.example.test.", dns.TypeA)
	extra.Extra = []dns.RR{mustRR("data.exfil.test. 60 IN TXT \"x\"")}
	for name, tt := range map[string]struct {
		m    *dns.Msg
		want int
	}{
		"two questions":      {two, dns.RcodeFormatError},
		"answer record":      {withAnswer, dns.RcodeFormatError},
		"notify":             {notify, dns.RcodeNotImplemented},
		"update":             {update, dns.RcodeNotImplemented},
		"non-OPT additional": {extra, dns.RcodeFormatError},
	} {
		for _, network := range []string{"udp", "tcp"} {
			r := h.exchange(t, network, tt.m)
			if r.Rcode != tt.want {
				t.Errorf("%s over %s: rcode %s, want %s", name, network, rcode(r), dns.RcodeToString[tt.want])
			}
		}
		// The handler refuses the same without the server's accept check.
		w := &fakeWriter{local: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}}
		h.g.ServeDNS(w, tt.m)
		if w.msg == nil || w.msg.Rcode != tt.want {
			t.Errorf("%s through ServeDNS: %v", name, w.msg)
		}
	}
	resp := new(dns.Msg)
	resp.SetQuestion("api.example.test.", dns.TypeA)
	resp.Response = true
	w := &fakeWriter{local: &net.UDPAddr{}}
	h.g.ServeDNS(w, resp)
	if w.msg != nil {
		t.Errorf("a response was answered: %v", w.msg)
	}
	if n := h.up.count(); n != 0 {
		t.Errorf("upstream saw %d queries: %v", n, h.up.names())
	}
}

// TestReload: the guard follows the policy generation in force.
func TestReload(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	if r := h.ask(t, "udp", "new.example.test.", dns.TypeA); rcode(r) != "NXDOMAIN" {
		t.Fatalf("before reload: %s", rcode(r))
	}
	cfg, err := config.Parse([]byte(testPolicy + "    - host: new.example.test\n      action: allow\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.gen.Store(cfg); err != nil {
		t.Fatal(err)
	}
	if r := h.ask(t, "udp", "new.example.test.", dns.TypeA); rcode(r) != "NOERROR" || h.up.count() != 1 {
		t.Errorf("after reload: %s, upstream %d", rcode(r), h.up.count())
	}
}

// TestReportMode: mode report forwards a denied name and logs report_deny.
func TestReportMode(t *testing.T) {
	h := newHarness(t, harnessOpts{policy: testPolicy + "  mode: report\n"})
	if r := h.ask(t, "udp", "other.example.", dns.TypeA); rcode(r) != "NOERROR" || h.up.count() != 1 {
		t.Errorf("report mode: %s, upstream %d", rcode(r), h.up.count())
	}
	if l := h.linesWith("dns decision"); len(l) != 1 || l[0]["decision"] != "report_deny" {
		t.Errorf("decision lines %v", l)
	}
}

// TestDecisionLogRateLimited: a flood of denied queries writes at most
// logBurst decision lines while the clock stands still, then one summary
// line counting the rest once a line may be written again, and Close
// writes the summary of what is still pending.
func TestDecisionLogRateLimited(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	const flood = 5000
	w := &fakeWriter{local: &net.UDPAddr{}}
	for i := range flood {
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("%d.exfil.test.", i), dns.TypeTXT)
		h.g.ServeDNS(w, m)
	}
	if got := len(h.linesWith("dns decision")); got != logBurst {
		t.Fatalf("%d decision lines for %d denials, want %d", got, flood, logBurst)
	}
	if got := h.counter("denied"); got != flood {
		t.Errorf("denied counter %v, want %d (every query counted)", got, flood)
	}
	h.clock.Advance(time.Second)
	for i := range 20 {
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("late%d.exfil.test.", i), dns.TypeA)
		h.g.ServeDNS(w, m)
	}
	sum := h.linesWith("dns decision lines suppressed by the log rate limit")
	if len(sum) != 1 || sum[0]["suppressed"] != float64(flood-logBurst) {
		t.Fatalf("summary lines %v, want one with suppressed=%d", sum, flood-logBurst)
	}
	if got := len(h.linesWith("dns decision")); got != logBurst+logPerSecond {
		t.Errorf("%d decision lines after 1 s, want %d", got, logBurst+logPerSecond)
	}
	h.g.Close()
	sum = h.linesWith("dns decision lines suppressed by the log rate limit")
	if len(sum) != 2 || sum[1]["suppressed"] != float64(20-logPerSecond) {
		t.Errorf("after Close: summary lines %v, want a second with suppressed=%d", sum, 20-logPerSecond)
	}
	if n := len(strings.Split(h.logs.String(), "\n")); n > logBurst+logPerSecond+3 {
		t.Errorf("%d log lines for %d queries", n, flood+20)
	}
}

// TestTCPLimits: connections beyond maxTCPConns are closed at once; the
// ones admitted are served.
func TestTCPLimits(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	var conns []*dns.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := range maxTCPConns {
		c, err := dns.Dial("tcp", h.tcp)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("%d.exfil.test.", i), dns.TypeA)
		if err := c.WriteMsg(m); err != nil {
			t.Fatal(err)
		}
		// The answer proves the connection holds a permit.
		if r, err := c.ReadMsg(); err != nil || rcode(r) != "NXDOMAIN" {
			t.Fatalf("connection %d: %v %v", i, r, err)
		}
	}
	c, err := dns.Dial("tcp", h.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion("over.exfil.test.", dns.TypeA)
	_ = c.WriteMsg(m)
	if r, err := c.ReadMsg(); err == nil {
		t.Errorf("connection %d over the limit was served: %v", maxTCPConns+1, r)
	}
	// Closing one admits a new one.
	_ = conns[0].Close()
	conns = conns[1:]
	eventually.Eventually(t, 10*time.Second, func() bool {
		c2, err := dns.Dial("tcp", h.tcp)
		if err != nil {
			return false
		}
		defer c2.Close()
		_ = c2.WriteMsg(m)
		r, err := c2.ReadMsg()
		return err == nil && rcode(r) == "NXDOMAIN"
	}, "a connection is admitted once one closed")
}

// TestTCPIdleClosed: a TCP connection that sends nothing is closed by the
// guard (after tcpIdle, shortened here; the test waits for the close, it
// does not time it), and so is one that goes idle after a query.
func TestTCPIdleClosed(t *testing.T) {
	h := newHarness(t, harnessOpts{tcpIdle: 50 * time.Millisecond})
	for _, query := range []bool{false, true} {
		c, err := net.Dial("tcp", h.tcp)
		if err != nil {
			t.Fatal(err)
		}
		dc := &dns.Conn{Conn: c}
		if query {
			m := new(dns.Msg)
			m.SetQuestion("x.exfil.test.", dns.TypeA)
			if err := dc.WriteMsg(m); err != nil {
				t.Fatal(err)
			}
			if r, err := dc.ReadMsg(); err != nil || rcode(r) != "NXDOMAIN" {
				t.Fatalf("query: %v %v", r, err)
			}
		}
		// A safety net against a hang, not the property: the server must
		// close long before.
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		var b [1]byte
		if _, err := c.Read(b[:]); !errors.Is(err, io.EOF) {
			t.Errorf("idle connection (after a query: %v): read %v, want EOF (closed by the guard)", query, err)
		}
		_ = c.Close()
	}
}

// TestConcurrentQueries runs allowed, denied and cached queries over UDP
// and TCP from many goroutines while the policy is reloaded, for the race
// detector: every answer is still the right one for its name (the reload
// only adds a rule for a name nobody asks).
func TestConcurrentQueries(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			network := []string{"udp", "tcp"}[g%2]
			c := dns.Client{Net: network, Timeout: 30 * time.Second}
			addr := map[string]string{"udp": h.udp, "tcp": h.tcp}[network]
			for i := range 40 {
				name, want := fmt.Sprintf("n%d.allowed.test.", i%5), dns.RcodeSuccess
				if i%3 == 0 {
					name, want = fmt.Sprintf("g%d-%d.exfil.test.", g, i), dns.RcodeNameError
				}
				m := new(dns.Msg)
				m.SetQuestion(name, dns.TypeA)
				r, _, err := c.Exchange(m, addr)
				if err != nil || r.Rcode != want {
					select {
					case errs <- fmt.Sprintf("%s %s: %v %v", network, name, r, err):
					default:
					}
				}
			}
		}()
	}
	for i := range 20 {
		cfg, err := config.Parse([]byte(testPolicy + fmt.Sprintf("    - host: reload%d.example.test\n      action: allow\n", i)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.gen.Store(cfg); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for _, n := range h.up.names() {
		if !strings.HasSuffix(n, ".allowed.test.") {
			t.Errorf("upstream saw %q", n)
		}
	}
}

// fakeWriter is a dns.ResponseWriter that keeps the message written.
type fakeWriter struct {
	local net.Addr
	msg   *dns.Msg
}

func (w *fakeWriter) LocalAddr() net.Addr { return w.local }
func (w *fakeWriter) RemoteAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
}
func (w *fakeWriter) WriteMsg(m *dns.Msg) error   { w.msg = m; return nil }
func (w *fakeWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *fakeWriter) Close() error                { return nil }
func (w *fakeWriter) TsigStatus() error           { return nil }
func (w *fakeWriter) TsigTimersOnly(bool)         {}
func (w *fakeWriter) Hijack()                     {}

// TestServeCancelledAtOnce: Serve cancelled before (or while) its servers
// start still returns, every time. A dns.Server shut down before it has
// started ignores the shutdown and serves forever, so without the start
// barrier this test hangs until the test binary's timeout.
func TestServeCancelledAtOnce(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	for range 50 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := h.g.Serve(ctx, []net.PacketConn{pc}, []net.Listener{ln}); err != nil {
			t.Fatalf("Serve: %v", err)
		}
	}
}
