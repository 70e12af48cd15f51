package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/botbox/botbox/internal/addrguard"
	"github.com/botbox/botbox/internal/testutil/testpki"
)

// guardLog is a Guard that records every address it is asked about and
// refuses those in deny.
type guardLog struct {
	mu       sync.Mutex
	seen     []netip.AddrPort
	policies []DialPolicy
	deny     []netip.Prefix
}

var errLoopback = errors.New("loopback refused by the test guard")

func (g *guardLog) guard(ctx context.Context, addr netip.AddrPort) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seen = append(g.seen, addr)
	p, _ := DialPolicyFrom(ctx)
	g.policies = append(g.policies, p)
	for _, pfx := range g.deny {
		if pfx.Contains(addr.Addr()) {
			return errLoopback
		}
	}
	return nil
}

func (g *guardLog) addrs() []netip.AddrPort {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.seen)
}

var loopbacks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// dualStackName serves DNS on loopback UDP answering name with 127.0.0.1
// (A) and ::1 (AAAA), and returns a Resolver that asks it, so that a dial
// to name has two addresses to try (Happy Eyeballs primary and fallback)
// whatever /etc/hosts says.
func dualStackName(t *testing.T, name string) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go serveDNS(pc, name)
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", pc.LocalAddr().String())
		},
	}
}

func serveDNS(pc net.PacketConn, name string) {
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
		b.EnableCompression()
		_ = b.StartQuestions()
		_ = b.Question(q)
		_ = b.StartAnswers()
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}
		if q.Name.String() == name+"." {
			switch q.Type {
			case dnsmessage.TypeA:
				_ = b.AResource(rh, dnsmessage.AResource{A: [4]byte{127, 0, 0, 1}})
			case dnsmessage.TypeAAAA:
				_ = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: netip.IPv6Loopback().As16()})
			}
		}
		msg, err := b.Finish()
		if err != nil {
			continue
		}
		_, _ = pc.WriteTo(msg, from)
	}
}

// dualListener listens on 127.0.0.1 and ::1 on the same port and returns
// the port.
func dualListener(t *testing.T) uint16 {
	t.Helper()
	for range 20 {
		ln4, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln4.Addr().(*net.TCPAddr).Port
		ln6, err := net.Listen("tcp", net.JoinHostPort("::1", strconv.Itoa(port)))
		if err != nil {
			_ = ln4.Close()
			continue
		}
		t.Cleanup(func() { _ = ln4.Close(); _ = ln6.Close() })
		return uint16(port)
	}
	t.Fatal("no port free on both 127.0.0.1 and ::1")
	return 0
}

// TestGuardRefusesEveryAddressTried: a guard refusing loopback makes a dial
// to a name with an IPv4 and an IPv6 loopback address fail with
// *AddrDeniedError, after the guard was asked about both addresses (the
// Happy Eyeballs fallback included), and no connection was made.
func TestGuardRefusesEveryAddressTried(t *testing.T) {
	port := dualListener(t)
	g := &guardLog{deny: loopbacks}
	tr, err := NewTransport(Options{Guard: g.guard, Resolver: dualStackName(t, "dual.test")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := WithDialPolicy(context.Background(), DialPolicy{Host: "dual.test"})
	c, err := tr.base.DialContext(ctx, "tcp", net.JoinHostPort("dual.test", strconv.Itoa(int(port))))
	if err == nil {
		_ = c.Close()
		t.Fatal("dial to a loopback-only name succeeded through a guard refusing loopback")
	}
	denied, ok := errors.AsType[*AddrDeniedError](err)
	if !ok {
		t.Fatalf("dial error = %v (%T), want an *AddrDeniedError", err, err)
	}
	if !errors.Is(err, errLoopback) {
		t.Errorf("dial error = %v, want it to wrap the guard's reason", err)
	}
	if !slices.ContainsFunc(loopbacks, func(p netip.Prefix) bool { return p.Contains(denied.Addr.Addr()) }) || denied.Addr.Port() != port {
		t.Errorf("AddrDeniedError.Addr = %v, want a loopback address on port %d", denied.Addr, port)
	}
	want := []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), netip.AddrPortFrom(netip.IPv6Loopback(), port)}
	got := g.addrs()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("guard saw %v, want every address tried, including %v", got, w)
		}
	}
	for _, p := range g.policies {
		if p.Host != "dual.test" {
			t.Errorf("guard saw DialPolicy %+v, want the context's", p)
		}
	}
}

// TestGuardRefusalThroughTransport: a refused dial reaches the caller of
// RoundTrip as an *AddrDeniedError (errors.As), for "localhost" and for
// both loopback literals.
func TestGuardRefusalThroughTransport(t *testing.T) {
	port := dualListener(t)
	for _, host := range []string{"localhost", "127.0.0.1", "[::1]"} {
		t.Run(host, func(t *testing.T) {
			g := &guardLog{deny: loopbacks}
			tr, err := NewTransport(Options{Guard: g.guard})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Get("https://" + host + ":" + strconv.Itoa(int(port)) + "/")
			if err == nil {
				resp.Body.Close()
				t.Fatal("request succeeded through a guard refusing loopback")
			}
			if _, ok := errors.AsType[*AddrDeniedError](err); !ok {
				t.Fatalf("RoundTrip error = %v, want an *AddrDeniedError", err)
			}
			if IsTimeout(err) {
				t.Errorf("a refused dial reads as a timeout: %v", err)
			}
			if len(g.addrs()) == 0 {
				t.Error("guard never called")
			}
		})
	}
}

// TestGuardSeesDialledAddress: an allowing guard is asked about the actual
// IP and port of the connection, with the request's DialPolicy, and the
// request succeeds; also for an injected dialer, which dials an address of
// its own choosing: the guard sees where the connection really goes.
func TestGuardSeesDialledAddress(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2], func(t *testing.T) {
			testGuardSeesDialledAddress(t, h2)
		})
	}
}

func testGuardSeesDialledAddress(t *testing.T, h2 bool) {
	ca := testpki.NewCA(t, "guard")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if want := map[bool]int{false: 1, true: 2}[h2]; r.ProtoMajor != want {
			t.Errorf("origin got %s, want HTTP/%d", r.Proto, want)
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, "127.0.0.1", "origin.test")}}
	srv.EnableHTTP2 = h2
	srv.StartTLS()
	defer srv.Close()
	originAddr := srv.Listener.Addr().(*net.TCPAddr).AddrPort()

	injected := func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, originAddr.String())
	}
	tests := []struct {
		name string
		url  string
		dial DialFunc
	}{
		{"default dialer", srv.URL, nil},
		{"injected dialer", "https://origin.test/", injected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &guardLog{}
			tr, err := NewTransport(Options{RootCAs: ca.Pool(), Guard: g.guard, Dial: tt.dial})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequestWithContext(WithDialPolicy(context.Background(), DialPolicy{Host: "origin.test", Opts: addrguard.Opts{AllowPrivate: true}}), http.MethodGet, tt.url, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := g.addrs(); len(got) != 1 || got[0] != originAddr {
				t.Errorf("guard saw %v, want exactly the dialled %v", got, originAddr)
			}
			if len(g.policies) != 1 || g.policies[0] != (DialPolicy{Host: "origin.test", Opts: addrguard.Opts{AllowPrivate: true}}) {
				t.Errorf("guard saw policies %+v, want the request's", g.policies)
			}
		})
	}
}

// TestGuardAppliesToInjectedDialer: a test dialer that routes every request
// to a loopback origin does not bypass a guard refusing loopback; the
// connection it made is closed.
func TestGuardAppliesToInjectedDialer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var conns []net.Conn
	injected := func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, ln.Addr().String())
		if err == nil {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		return c, err
	}
	g := &guardLog{deny: loopbacks}
	tr, err := NewTransport(Options{Guard: g.guard, Dial: injected})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	_, err = tr.RoundTrip(httptest.NewRequest(http.MethodGet, "https://api.example.com/", nil).WithContext(context.Background()))
	denied, ok := errors.AsType[*AddrDeniedError](err)
	if !ok {
		t.Fatalf("RoundTrip error = %v, want an *AddrDeniedError", err)
	}
	if denied.Addr != ln.Addr().(*net.TCPAddr).AddrPort() {
		t.Errorf("refused %v, want the injected dialer's real peer %v", denied.Addr, ln.Addr())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) == 0 {
		t.Fatal("injected dialer never called")
	}
	for _, c := range conns {
		if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Errorf("refused connection still open (write error %v)", err)
		}
	}
}

// TestGuardNilAllowsAll: without a guard, dials are not checked (the
// default until the address guard lands).
func TestGuardNilAllowsAll(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tr, err := NewTransport(Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tr.base.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial without a guard: %v", err)
	}
	c.Close()
}

func TestDialPolicyFrom(t *testing.T) {
	if p, ok := DialPolicyFrom(context.Background()); ok || p != (DialPolicy{}) {
		t.Errorf("DialPolicyFrom(empty) = %+v, %v, want zero, false", p, ok)
	}
	want := DialPolicy{Host: "a.example", Opts: addrguard.Opts{AllowPrivate: true}}
	if p, ok := DialPolicyFrom(WithDialPolicy(context.Background(), want)); !ok || p != want {
		t.Errorf("DialPolicyFrom = %+v, %v, want %+v, true", p, ok, want)
	}
}

func TestAddrDeniedErrorText(t *testing.T) {
	e := &AddrDeniedError{Addr: netip.MustParseAddrPort("169.254.169.254:443"), Err: errors.New("link-local")}
	if got, want := e.Error(), "upstream address 169.254.169.254:443 refused by the dial guard: link-local"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
