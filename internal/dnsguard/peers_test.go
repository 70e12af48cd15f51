package dnsguard

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/botbox/botbox/internal/telemetry"
)

// peerSet is a Peers that knows exactly the given addresses.
type peerSet map[netip.Addr]bool

func (p peerSet) Local(a netip.Addr) bool { return p[a] }

// TestForeignPeerGetsNoAnswer: a query whose source is not an address of
// the Pod gets no answer at all, over UDP and TCP, whatever its name
// (allowed or refused): nothing is sent back, nothing upstream, the drop is
// counted in botbox_dns_foreign_peer_queries_total and logged without the
// name; the same queries from an address of the Pod are answered (issue 18
// §1: the guard answered spoofed IPv6 sources, carrying the name out). The
// sockets are real: the harness's peers leave out 127.0.0.1, the address
// the queries come from.
func TestForeignPeerGetsNoAnswer(t *testing.T) {
	foreign := newHarness(t, harnessOpts{peers: peerSet{netip.IPv6Loopback(): true}})
	for _, tc := range []struct {
		network, name string
	}{
		{"udp", "exfil-0123456789abcdef.evil.test."},
		{"tcp", "exfil-fedcba9876543210.evil.test."},
		{"udp", "api.example.com."},
		{"tcp", "api.example.com."},
	} {
		m := new(dns.Msg)
		m.SetQuestion(tc.name, dns.TypeA)
		addr := foreign.udp
		if tc.network == "tcp" {
			addr = foreign.tcp
		}
		c := dns.Client{Net: tc.network, Timeout: 300 * time.Millisecond}
		r, _, err := c.Exchange(m, addr)
		if err == nil {
			t.Errorf("%s %s from a foreign peer: answered %s, want no answer", tc.network, tc.name, rcode(r))
			continue
		}
		var ne net.Error
		if tc.network == "udp" && !(errors.As(err, &ne) && ne.Timeout()) {
			t.Errorf("%s %s: %v, want a timeout (no answer)", tc.network, tc.name, err)
		}
	}
	if got := testutil.ToFloat64(foreign.metrics.ForeignPeer); got != 4 {
		t.Errorf("botbox_dns_foreign_peer_queries_total = %v, want 4", got)
	}
	for _, result := range []string{telemetry.DNSForwarded, telemetry.DNSDenied, telemetry.DNSError} {
		if n := foreign.counter(result); n != 0 {
			t.Errorf("botbox_dns_queries_total{result=%q} = %v, want 0", result, n)
		}
	}
	if n := foreign.up.count(); n != 0 {
		t.Errorf("the upstream received %d queries, want 0", n)
	}
	lines := foreign.linesWith("dns query from a source outside the Pod dropped")
	if len(lines) != 4 {
		t.Fatalf("%d foreign-peer lines, want 4: %v", len(lines), foreign.logs.Records())
	}
	for _, l := range lines {
		if l[telemetry.KeyReason] != telemetry.DNSReasonForeignPeer || l[telemetry.KeyPeer] != "127.0.0.1" {
			t.Errorf("line %v: want reason %s and peer 127.0.0.1", l, telemetry.DNSReasonForeignPeer)
		}
	}
	if raw := foreign.logs.String(); strings.Contains(raw, "exfil-") || strings.Contains(raw, "api.example.com") {
		t.Errorf("a foreign-peer line carries the query name: %s", raw)
	}

	local := newHarness(t, harnessOpts{peers: peerSet{netip.MustParseAddr("127.0.0.1"): true}})
	for _, network := range []string{"udp", "tcp"} {
		if r := local.ask(t, network, "exfil-0123456789abcdef.evil.test.", dns.TypeA); r.Rcode != dns.RcodeNameError {
			t.Errorf("%s from an address of the Pod: %s, want NXDOMAIN", network, rcode(r))
		}
	}
	if got := testutil.ToFloat64(local.metrics.ForeignPeer); got != 0 {
		t.Errorf("botbox_dns_foreign_peer_queries_total = %v for local peers, want 0", got)
	}
}

// TestForeignPeerLinesRateLimited: a flood of foreign sources writes at
// most the log budget of decision lines, every drop still counted.
func TestForeignPeerLinesRateLimited(t *testing.T) {
	h := newHarness(t, harnessOpts{peers: peerSet{}})
	udp := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}
	for range logBurst + 20 {
		w := &fakeWriter{local: udp}
		m := new(dns.Msg)
		m.SetQuestion("x.evil.test.", dns.TypeA)
		h.g.ServeDNS(w, m)
		if w.msg != nil {
			t.Fatal("a foreign peer was answered")
		}
	}
	if got := testutil.ToFloat64(h.metrics.ForeignPeer); got != logBurst+20 {
		t.Errorf("counted %v, want %d", got, logBurst+20)
	}
	if n := len(h.linesWith("dns query from a source outside the Pod dropped")); n != logBurst {
		t.Errorf("%d lines, want the burst of %d", n, logBurst)
	}
}

// TestLocalAddrs: loopback and the interfaces' addresses are local,
// compared without zone and unmapped; anything else, the unspecified and
// multicast addresses included, is not; a source not in the set re-reads
// the interfaces at most once a second, a set older than 30 s is re-read,
// and a failure to list them leaves only loopback local.
func TestLocalAddrs(t *testing.T) {
	clock := newFakeClock()
	ifaddrs := []net.Addr{
		&net.IPNet{IP: net.ParseIP("10.0.0.2"), Mask: net.CIDRMask(24, 32)},
		&net.IPNet{IP: net.ParseIP("fd00::2"), Mask: net.CIDRMask(64, 128)},
		&net.IPNet{IP: net.ParseIP("fe80::1"), Mask: net.CIDRMask(64, 128)},
		&net.IPAddr{IP: net.ParseIP("192.0.2.9")},
	}
	var listErr error
	lists := 0
	l := NewLocalAddrs(func() ([]net.Addr, error) { lists++; return ifaddrs, listErr }, clock.Now)
	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1", true}, {"127.1.2.3", true}, {"::1", true}, {"::ffff:127.0.0.1", true},
		{"10.0.0.2", true}, {"::ffff:10.0.0.2", true}, {"fd00::2", true}, {"fe80::1%eth0", true}, {"192.0.2.9", true},
		{"10.0.0.3", false}, {"2001:db8:66::1", false}, {"fd00::3", false}, {"::", false}, {"0.0.0.0", false},
		{"ff02::1", false}, {"224.0.0.1", false},
	} {
		if got := l.Local(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("Local(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
	if l.Local(netip.Addr{}) {
		t.Error("the invalid address is local")
	}
	if lists != 1 {
		t.Errorf("interfaces listed %d times within a second, want 1", lists)
	}

	// A new address is seen after a second, not before.
	ifaddrs = append(ifaddrs, &net.IPNet{IP: net.ParseIP("fd00::77"), Mask: net.CIDRMask(64, 128)})
	if l.Local(netip.MustParseAddr("fd00::77")) {
		t.Error("fd00::77 local before the refresh interval")
	}
	clock.Advance(localAddrsMinRefresh)
	if !l.Local(netip.MustParseAddr("fd00::77")) {
		t.Error("fd00::77 not local after the refresh interval")
	}
	// A lost address stops counting once the set is too old.
	ifaddrs = ifaddrs[:1]
	clock.Advance(localAddrsMaxAge - time.Millisecond)
	if !l.Local(netip.MustParseAddr("fd00::2")) {
		t.Error("fd00::2 dropped before the set expired")
	}
	clock.Advance(time.Millisecond)
	if l.Local(netip.MustParseAddr("fd00::2")) {
		t.Error("fd00::2 still local after it left the interfaces and the set expired")
	}
	// Failing to list: fail closed, loopback stays local.
	listErr = errors.New("netlink: permission denied")
	clock.Advance(localAddrsMaxAge)
	if l.Local(netip.MustParseAddr("10.0.0.2")) || !l.Local(netip.MustParseAddr("127.0.0.1")) {
		t.Error("with the interfaces unreadable, want only loopback local")
	}
}

// TestLocalAddrsOfThisHost: the default Peers, on the real interfaces of
// the test's network namespace, counts each of their addresses and
// loopback as local and a documentation address as foreign.
func TestLocalAddrsOfThisHost(t *testing.T) {
	l := NewLocalAddrs(nil, nil)
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		if !l.Local(p.Addr()) {
			t.Errorf("interface address %s not local", p.Addr())
		}
	}
	for _, a := range []string{"127.0.0.1", "::1"} {
		if !l.Local(netip.MustParseAddr(a)) {
			t.Errorf("%s not local", a)
		}
	}
	if l.Local(netip.MustParseAddr("2001:db8:66::1")) {
		t.Error("2001:db8:66::1 local")
	}
}

// FuzzLocalAddrs: for any address, Local is true exactly for loopback and
// the interfaces' addresses (unmapped, without zone), never for the
// unspecified or a multicast address.
func FuzzLocalAddrs(f *testing.F) {
	ifaddrs := []net.Addr{
		&net.IPNet{IP: net.ParseIP("10.0.0.2"), Mask: net.CIDRMask(24, 32)},
		&net.IPNet{IP: net.ParseIP("fd00::2"), Mask: net.CIDRMask(64, 128)},
	}
	for _, s := range []string{"10.0.0.2", "::ffff:10.0.0.2", "fd00::2", "127.0.0.9", "::1", "::", "ff02::1", "10.0.0.3"} {
		f.Add(netip.MustParseAddr(s).AsSlice(), "")
	}
	f.Add(netip.MustParseAddr("fd00::2").AsSlice(), "eth0")
	f.Fuzz(func(t *testing.T, b []byte, zone string) {
		a, ok := netip.AddrFromSlice(b)
		if !ok {
			return
		}
		if a.Is6() && zone != "" {
			a = a.WithZone(zone)
		}
		l := NewLocalAddrs(func() ([]net.Addr, error) { return ifaddrs, nil }, newFakeClock().Now)
		u := a.Unmap().WithZone("")
		want := u.IsLoopback() || u == netip.MustParseAddr("10.0.0.2") || u == netip.MustParseAddr("fd00::2")
		if got := l.Local(a); got != want {
			t.Fatalf("Local(%s) = %v, want %v", a, got, want)
		}
	})
}
