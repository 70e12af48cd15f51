package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/botbox/botbox/internal/addrguard"
	"github.com/botbox/botbox/internal/testutil/testpki"
)

// rebindingDNS serves DNS on loopback UDP: the first A query for name is
// answered first, every later one second (a rebinding name); other
// queries get an empty answer. It returns a Resolver that asks it and a
// counter of the A queries for name.
func rebindingDNS(t *testing.T, name string, first, second netip.Addr) (*net.Resolver, *atomic.Int32) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	var queries atomic.Int32
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
			_ = b.StartQuestions()
			_ = b.Question(q)
			_ = b.StartAnswers()
			if q.Name.String() == name+"." && q.Type == dnsmessage.TypeA {
				a := second
				if queries.Add(1) == 1 {
					a = first
				}
				_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}, dnsmessage.AResource{A: a.As4()})
			}
			msg, err := b.Finish()
			if err != nil {
				continue
			}
			_, _ = pc.WriteTo(msg, from)
		}
	}()
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", pc.LocalAddr().String())
		},
	}, &queries
}

// listen listens on addr:port (port 0: any) without accepting: what
// connects waits in the accept queue, in order (onlyBarrier).
func listen(t *testing.T, addr string, port int) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// queued connects to ln from the test (a barrier) and returns how many
// connections were queued before it: the accept queue is FIFO, so every
// connection made to ln before the barrier is accepted before it.
func queued(t *testing.T, ln net.Listener) int {
	t.Helper()
	b, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for n := 0; ; n++ {
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		from := c.RemoteAddr().String()
		_ = c.Close()
		if from == b.LocalAddr().String() {
			return n
		}
	}
}

// TestResolveOnceDial: the address the guard checks is the address
// connected to. The name's first DNS answer is 127.0.0.2 (admitted by the
// guard), every later answer 127.0.0.3 (refused). The first dial connects
// to 127.0.0.2 and nowhere else, after exactly one A query: a check that
// looked the name up and a dial that looked it up again would have
// connected to 127.0.0.3. The next dial gets 127.0.0.3 and is refused
// before any connection: 127.0.0.3 never sees a SYN.
func TestResolveOnceDial(t *testing.T) {
	good := listen(t, "127.0.0.2", 0)
	port := good.Addr().(*net.TCPAddr).Port
	bad := listen(t, "127.0.0.3", port)
	res, queries := rebindingDNS(t, "rebind.test", netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3"))
	g := &guardLog{deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.3/32")}}
	tr, err := NewTransport(Options{Guard: g.guard, Resolver: res})
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort("rebind.test", strconv.Itoa(port))

	c, err := tr.base.DialContext(context.Background(), "tcp", target)
	if err != nil {
		t.Fatalf("first dial: %v", err)
	}
	remote := c.RemoteAddr().(*net.TCPAddr).AddrPort()
	_ = c.Close()
	want := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), uint16(port))
	if remote != want {
		t.Errorf("connected to %v, want the checked %v", remote, want)
	}
	if got := g.addrs(); len(got) != 1 || got[0] != want {
		t.Errorf("guard checked %v, want exactly [%v]", got, want)
	}
	if n := queries.Load(); n != 1 {
		t.Errorf("%d A queries for one dial, want 1 (resolve once)", n)
	}

	_, err = tr.base.DialContext(context.Background(), "tcp", target)
	if _, ok := errors.AsType[*AddrDeniedError](err); !ok {
		t.Fatalf("second dial (rebound to 127.0.0.3): err = %v, want *AddrDeniedError", err)
	}
	if n := queued(t, good); n != 1 {
		t.Errorf("127.0.0.2 got %d connections, want 1", n)
	}
	if n := queued(t, bad); n != 0 {
		t.Errorf("127.0.0.3 got %d connections, want 0: the rebound address was dialled", n)
	}
}

// TestPooledConnNotReusedAcrossOptIns: a connection dialled for a request
// whose exceptions admitted a loopback origin is never reused by a request
// the guard would refuse there: without an exception, under a stricter
// guard (a reload that dropped allowed_cidrs), or after the guard was off.
// A request with the same exceptions reuses it (pooling still works).
// HTTP/1.1 and HTTP/2.
func TestPooledConnNotReusedAcrossOptIns(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2], func(t *testing.T) {
			testPooledConnNotReused(t, h2)
		})
	}
}

// optInCase is a DialPolicy that admits a loopback origin and one that must
// not reuse the connection it dialled.
type optInCase struct {
	name  string
	admit DialPolicy // dials and pools a connection
	other DialPolicy // must not reuse it
}

// optInCases are the pool-isolation cases of both transports
// (TestPooledConnNotReusedAcrossOptIns, TestSyncPoolIsolatedByDialPolicy).
func optInCases() []optInCase {
	lo := netip.MustParsePrefix("127.0.0.1/32")
	strict := addrguard.New(nil)
	lenient := addrguard.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	return []optInCase{
		{"rule prefix then none", DialPolicy{Guard: strict, Opts: addrguard.Opts{Rule: lo}}, DialPolicy{Guard: strict}},
		{"allowed_cidrs then stricter guard", DialPolicy{Guard: lenient}, DialPolicy{Guard: strict}},
		{"guard off then on", DialPolicy{Unguarded: true}, DialPolicy{Guard: strict}},
		{"guard off then no policy", DialPolicy{Unguarded: true}, DialPolicy{}},
	}
}

func testPooledConnNotReused(t *testing.T, h2 bool) {
	ca := testpki.NewCA(t, "pool")
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, "127.0.0.1")}}
	srv.EnableHTTP2 = h2
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	strict := addrguard.New(nil)
	for _, tt := range optInCases() {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := NewTransport(Options{RootCAs: ca.Pool(), Guard: CheckAddress})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.CloseIdleConnections()
			do := func(p DialPolicy) error {
				req, _ := http.NewRequestWithContext(WithDialPolicy(context.Background(), p), http.MethodGet, srv.URL, nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					return err
				}
				if want := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != want {
					t.Errorf("got %s, want HTTP/%d", resp.Proto, want)
				}
				return resp.Body.Close()
			}
			before := conns.Load()
			if err := do(tt.admit); err != nil {
				t.Fatalf("admitted request: %v", err)
			}
			if err := do(tt.admit); err != nil {
				t.Fatalf("admitted request again: %v", err)
			}
			if n := conns.Load() - before; n != 1 {
				t.Errorf("two admitted requests used %d connections, want 1 (pooled)", n)
			}
			err = do(tt.other)
			if _, ok := errors.AsType[*AddrDeniedError](err); !ok {
				t.Fatalf("request the guard refuses: err = %v, want *AddrDeniedError (a pooled connection was reused)", err)
			}
			if n := conns.Load() - before; n != 1 {
				t.Errorf("origin saw %d connections, want 1: the refused request reached it", n)
			}
			// A third key gets a cloned pool: a new connection, same
			// protocol (do checks HTTP/2) and trust.
			if err := do(DialPolicy{Guard: strict, Opts: addrguard.Opts{Rule: netip.MustParsePrefix("127.0.0.0/8")}}); err != nil {
				t.Fatalf("request in a cloned pool: %v", err)
			}
			if n := conns.Load() - before; n != 2 {
				t.Errorf("origin saw %d connections, want 2 (the cloned pool dials its own)", n)
			}
		})
	}
}

// TestCheckAddress: the DialPolicy in the context decides; none is the
// strictest judgement, Unguarded admits everything, the guard's allowed
// prefixes and the rule's exceptions open what they name, and the refusal
// names the class.
func TestCheckAddress(t *testing.T) {
	lo := netip.MustParseAddrPort("127.0.0.1:443")
	meta := netip.MustParseAddrPort("169.254.169.254:80")
	priv := netip.MustParseAddrPort("10.1.2.3:443")
	pub := netip.MustParseAddrPort("203.0.113.9:443")
	tests := []struct {
		name  string
		ctx   context.Context
		addr  netip.AddrPort
		class string // "" = admitted
	}{
		{"no policy refuses loopback", context.Background(), lo, addrguard.ClassLoopback},
		{"no policy refuses private", context.Background(), priv, addrguard.ClassPrivate},
		{"no policy admits public", context.Background(), pub, ""},
		{"zero policy refuses metadata", WithDialPolicy(context.Background(), DialPolicy{}), meta, addrguard.ClassMetadata},
		{"unguarded admits metadata", WithDialPolicy(context.Background(), DialPolicy{Unguarded: true}), meta, ""},
		{"allowed cidr", WithDialPolicy(context.Background(), DialPolicy{Guard: addrguard.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})}), lo, ""},
		{"allow private", WithDialPolicy(context.Background(), DialPolicy{Opts: addrguard.Opts{AllowPrivate: true}}), priv, ""},
		{"allow private keeps metadata", WithDialPolicy(context.Background(), DialPolicy{Opts: addrguard.Opts{AllowPrivate: true}}), meta, addrguard.ClassMetadata},
		{"cleartext refuses public, even unguarded", WithDialPolicy(context.Background(), DialPolicy{Cleartext: true, Unguarded: true}), pub, addrguard.ClassPublic},
		{"cleartext refuses metadata, even unguarded", WithDialPolicy(context.Background(), DialPolicy{Cleartext: true, Unguarded: true}), meta, addrguard.ClassMetadata},
		{"cleartext refuses cgnat despite allow private", WithDialPolicy(context.Background(), DialPolicy{Cleartext: true, Opts: addrguard.Opts{AllowPrivate: true}}), netip.MustParseAddrPort("100.64.1.1:80"), addrguard.ClassCGNAT},
		{"cleartext refuses public under an allowed cidr", WithDialPolicy(context.Background(), DialPolicy{Cleartext: true, Guard: addrguard.New([]netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")})}), pub, addrguard.ClassPublic},
		{"cleartext admits private with allow private", WithDialPolicy(context.Background(), DialPolicy{Cleartext: true, Opts: addrguard.Opts{AllowPrivate: true}}), priv, ""},
		{"cleartext keeps the guard: loopback still needs a cidr", WithDialPolicy(context.Background(), DialPolicy{Cleartext: true}), lo, addrguard.ClassLoopback},
		{"cleartext loopback with a cidr", WithDialPolicy(context.Background(), DialPolicy{Cleartext: true, Guard: addrguard.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})}), lo, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckAddress(tt.ctx, tt.addr)
			if tt.class == "" {
				if err != nil {
					t.Errorf("CheckAddress(%v) = %v, want nil", tt.addr, err)
				}
				return
			}
			ge, ok := errors.AsType[*AddressGuardError](err)
			if !ok || ge.Class != tt.class {
				t.Errorf("CheckAddress(%v) = %v, want an *AddressGuardError of class %s", tt.addr, err, tt.class)
			}
		})
	}
}

// TestPoolsBounded: distinct exceptions get distinct pools, equal ones
// share, and at most maxPools are kept (the least recently used one is
// dropped, never the first).
func TestPoolsBounded(t *testing.T) {
	tr, err := NewTransport(Options{Guard: CheckAddress})
	if err != nil {
		t.Fatal(err)
	}
	g := addrguard.New(nil)
	first := tr.poolFor(DialPolicy{Guard: g})
	if first != tr.base {
		t.Error("the first key did not get the base pool")
	}
	if tr.poolFor(DialPolicy{Guard: addrguard.New(nil), Host: "other"}) != first {
		t.Error("an equal key (another Guard with the same allowed set, another host) got another pool")
	}
	priv := tr.poolFor(DialPolicy{Guard: g, Opts: addrguard.Opts{AllowPrivate: true}})
	if priv == first {
		t.Error("allow_private shares the strict pool")
	}
	for i := range 2 * maxPools {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16)
		tr.poolFor(DialPolicy{Guard: g, Opts: addrguard.Opts{Rule: p}})
		tr.poolFor(DialPolicy{Guard: g}) // keep the base pool recently used
	}
	tr.pools.mu.Lock()
	n := len(tr.pools.m)
	_, hasBase := tr.pools.m[keyOf(DialPolicy{Guard: g})]
	tr.pools.mu.Unlock()
	if n > maxPools || !hasBase {
		t.Errorf("%d pools (base kept: %v), want at most %d with the base", n, hasBase, maxPools)
	}
}

// BenchmarkPoolFor is what the address guard adds to a request on a
// pooled connection: finding its pool.
func BenchmarkPoolFor(b *testing.B) {
	tr, err := NewTransport(Options{Guard: CheckAddress})
	if err != nil {
		b.Fatal(err)
	}
	p := DialPolicy{Host: "api.example.com", Guard: addrguard.New([]netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")})}
	b.ReportAllocs()
	for b.Loop() {
		tr.poolFor(p)
	}
}

// TestCleartextDialRefusesPublicAddress: a plain-HTTP request (a rule's
// upstream_tls: false) is judged at connect time on the address dialled:
// its name first resolves to the loopback origin (served, over plain
// HTTP), then to a public address, which is refused before connect(2)
// even with address_guard disabled, so nothing is sent in the clear.
func TestCleartextDialRefusesPublicAddress(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Header.Get("Authorization"))
	}))
	defer origin.Close()
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	const name = "plain.test"
	res, queries := rebindingDNS(t, name, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("203.0.113.9"))
	tr, err := NewTransport(Options{Guard: CheckAddress, Resolver: res, RootCAs: x509.NewCertPool()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	get := func() (*http.Response, error) {
		ctx := WithDialPolicy(context.Background(), DialPolicy{Host: name, Cleartext: true, Unguarded: true})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s:%d/", name, port), nil)
		req.Header.Set("Authorization", "Bearer sk-test")
		return tr.RoundTrip(req)
	}
	resp, err := get()
	if err != nil {
		t.Fatalf("loopback origin: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "Bearer sk-test" {
		t.Errorf("origin saw %q", body)
	}
	tr.CloseIdleConnections()
	resp, err = get()
	if err == nil {
		resp.Body.Close()
		t.Fatal("a plain-HTTP request was sent to a public address")
	}
	ge, ok := errors.AsType[*AddressGuardError](err)
	if !ok || !ge.Cleartext || ge.Class != addrguard.ClassPublic || !strings.Contains(err.Error(), "203.0.113.9") {
		t.Errorf("error %v, want the cleartext refusal of 203.0.113.9", err)
	}
	if queries.Load() < 2 {
		t.Errorf("%d A queries: the second request did not resolve again", queries.Load())
	}
}

// TestAddressGuardHint: the refusal offers allow_private_addresses only
// for the classes it opens (on ee87e5f every class was offered it).
func TestAddressGuardHint(t *testing.T) {
	for class, offers := range map[string]bool{
		addrguard.ClassLoopback: false, addrguard.ClassMetadata: false, addrguard.ClassLinkLocal: false,
		addrguard.ClassMetadata + " via nat64": false, addrguard.ClassPrivate: true, addrguard.ClassCGNAT: true,
		addrguard.ClassULA: true, addrguard.ClassPrivate + " via ipv4_compatible": true,
	} {
		msg := (&AddressGuardError{Class: class}).Error()
		if strings.Contains(msg, "allow_private_addresses") != offers || !strings.Contains(msg, "allowed_cidrs") {
			t.Errorf("%s: %q", class, msg)
		}
	}
	if msg := (&AddressGuardError{Class: addrguard.ClassPublic, Cleartext: true}).Error(); !strings.Contains(msg, "upstream_tls: false") {
		t.Errorf("cleartext: %q", msg)
	}
}
