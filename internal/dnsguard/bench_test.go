package dnsguard

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// BenchmarkCachedAllowed measures one UDP query for an allowed, cached
// name through the guard on loopback, client round trip included, and
// reports the median as p50-µs (docs/performance.md, target ≤ 100 µs).
func BenchmarkCachedAllowed(b *testing.B) {
	h := newHarness(b, harnessOpts{})
	h.ask(b, "udp", "api.example.test.", dns.TypeA) // warm the cache
	c, err := dns.Dial("udp", h.udp)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion("api.example.test.", dns.TypeA)
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if err := c.WriteMsg(m); err != nil {
			b.Fatal(err)
		}
		r, err := c.ReadMsg()
		if err != nil || len(r.Answer) != 1 {
			b.Fatalf("%v %v", r, err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	if h.up.count() != 1 {
		b.Fatalf("upstream asked %d times, want 1 (every query from the cache)", h.up.count())
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkServeDNSCached is the guard's own work for an allowed, cached
// name, without sockets: checks, policy, cache lookup and the answer's
// copies (the packing and the write are the server's).
func BenchmarkServeDNSCached(b *testing.B) {
	h := newHarness(b, harnessOpts{})
	h.ask(b, "udp", "api.example.test.", dns.TypeA)
	m := new(dns.Msg)
	m.SetQuestion("api.example.test.", dns.TypeA)
	w := &fakeWriter{local: &net.UDPAddr{}}
	b.ReportAllocs()
	for b.Loop() {
		h.g.ServeDNS(w, m)
	}
	if len(w.msg.Answer) != 1 {
		b.Fatalf("answer %v", w.msg)
	}
}

// BenchmarkServeDNSDenied is a denied name: NXDOMAIN built locally, its
// decision line rate-limited away after the first logBurst.
func BenchmarkServeDNSDenied(b *testing.B) {
	h := newHarness(b, harnessOpts{})
	m := new(dns.Msg)
	m.SetQuestion("secret-bytes.exfil.test.", dns.TypeTXT)
	w := &fakeWriter{local: &net.UDPAddr{}}
	b.ReportAllocs()
	for b.Loop() {
		h.g.ServeDNS(w, m)
	}
	if w.msg.Rcode != dns.RcodeNameError {
		b.Fatalf("answer %v", w.msg)
	}
}
