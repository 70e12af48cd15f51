package main

// The DNS guard cell (issue 12): latency of an allowed, cached name.

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/miekg/dns"
)

// Ports of the DNS guard cell.
const (
	dnsBotboxPort   = 18082 // the BotBox instance with dns_guard on (plain listener)
	dnsMetrics      = 19093
	dnsGuardPort    = 18053 // its dns_guard.listen_port
	dnsUpstreamPort = 18054 // the runner's own upstream resolver
	dnsFloorPort    = 38081 // the DNS floor's HTTP port (for waitPort)
	dnsFloorDNSPort = 38053 // the DNS floor: a bare miekg/dns server
	dnsName         = "api.bench.test."
)

// dnsGuard measures the DNS guard: a BotBox instance with dns_guard on
// (pinned to the proxy CPU like the others), an upstream resolver served by
// the runner that answers one name, and one UDP client in the runner (on
// the load CPU) asking for that allowed name back to back. After the first
// query every answer comes from the guard's cache, so the cell is the
// guard's own cost per query plus the loopback round trip: p50 and p99 of
// the client's round trip, queries/s and BotBox CPU per query. The same
// client against the floor (bench/floor -dns: a bare miekg/dns server
// answering from memory, pinned like BotBox), alternated per repeat, gives
// the round trip without the guard, so the difference is what the guard
// adds.
func (r *runner) dnsGuard() error {
	up, err := startDNSUpstream()
	if err != nil {
		return err
	}
	defer up.Shutdown()
	cfg := fmt.Sprintf(`listen_addr: 127.0.0.1
listen_port: %d
metrics_port: %d
secrets_dir: %s
egress_policy:
  rules:
    - host: api.bench.test
      action: allow
dns_guard:
  enabled: true
  listen_port: %d
  upstream: ["127.0.0.1:%d"]
`, dnsBotboxPort, dnsMetrics, r.path("secrets"), dnsGuardPort, dnsUpstreamPort)
	file := r.path("botbox-dns.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		return err
	}
	p, err := r.start("botbox-dns", proxyCPU, nil, dnsBotboxPort, filepath.Join(r.bin, "botbox"), "--config", file)
	if err != nil {
		return err
	}
	defer r.stop(p)
	floor, err := r.start("floor-dns", proxyCPU, nil, dnsFloorPort, filepath.Join(r.bin, "floor"),
		"-listen", fmt.Sprint("127.0.0.1:", dnsFloorPort), "-origin", fmt.Sprintf("https://127.0.0.1:%d", originPort),
		"-ca", r.path("ca.crt"), "-token", token, "-dns", fmt.Sprint("127.0.0.1:", dnsFloorDNSPort))
	if err != nil {
		return err
	}
	defer r.stop(floor)
	targets := map[string]struct {
		p    *proc
		addr string
	}{
		"botbox": {p, fmt.Sprint("127.0.0.1:", dnsGuardPort)},
		"floor":  {floor, fmt.Sprint("127.0.0.1:", dnsFloorDNSPort)},
	}
	for _, t := range targets {
		if _, err := dnsLoop(t.addr, 0, 1000); err != nil { // warm-up; fills the guard's cache
			return err
		}
	}
	for rep := range r.repeats {
		for _, name := range rotate([]string{"botbox", "floor"}, rep) {
			t := targets[name]
			c := cell{scenario: "dns-guard", target: name, conns: 1, rep: rep}
			m := r.begin(t.p)
			lat, err := dnsLoop(t.addr, r.dur, 0)
			if err != nil {
				c.bad = err.Error()
			}
			if len(lat) > 0 {
				slices.Sort(lat)
				c.requests = int64(len(lat))
				c.rps = float64(len(lat)) / r.dur.Seconds()
				c.p50 = float64(lat[len(lat)/2].Nanoseconds()) / 1e3
				c.p99 = float64(lat[len(lat)*99/100].Nanoseconds()) / 1e3
			}
			m.end(&c)
			r.record(c)
		}
	}
	return nil
}

// dnsLoop asks addr for dnsName (A) over one UDP socket, back to back,
// for dur or n queries, and returns each round trip. Any answer that is
// not one A record is an error.
func dnsLoop(addr string, dur time.Duration, n int) ([]time.Duration, error) {
	c, err := dns.Dial("udp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion(dnsName, dns.TypeA)
	var lat []time.Duration
	end := time.Now().Add(dur)
	for i := 0; (n > 0 && i < n) || (n == 0 && time.Now().Before(end)); i++ {
		start := time.Now()
		_ = c.SetDeadline(start.Add(2 * time.Second))
		if err := c.WriteMsg(m); err != nil {
			return lat, err
		}
		resp, err := c.ReadMsg()
		if err != nil {
			return lat, err
		}
		if resp.Id != m.Id || len(resp.Answer) != 1 {
			return lat, fmt.Errorf("unexpected answer %v", resp)
		}
		lat = append(lat, time.Since(start))
	}
	return lat, nil
}

// startDNSUpstream serves dnsName A 203.0.113.7 (TTL 3600; a documentation
// address the address guard passes, so the answer reaches the client) on
// 127.0.0.1:dnsUpstreamPort over UDP.
func startDNSUpstream() (*dns.Server, error) {
	pc, err := net.ListenPacket("udp", fmt.Sprint("127.0.0.1:", dnsUpstreamPort))
	if err != nil {
		return nil, fmt.Errorf("DNS upstream: %w", err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		if q.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 3600}, A: net.IPv4(203, 0, 113, 7)})
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	return srv, nil
}
