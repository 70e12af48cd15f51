package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/addrguard"
	"github.com/botbox/botbox/internal/testutil/eventually"
	"github.com/botbox/botbox/internal/testutil/testpki"
)

// rawOrigin is an HTTP/1.1 origin the test scripts byte by byte: serve is
// called for each accepted connection with the origin, the connection's
// index (0, 1, ...), the connection, and a reader of it. It speaks TLS (a leaf for 127.0.0.1
// from a CA made here) unless made cleartext.
type rawOrigin struct {
	ln       net.Listener
	url      string
	roots    *x509.CertPool
	accepted atomic.Int32
	requests atomic.Int32 // counted by readReq
	wg       sync.WaitGroup
}

func newRawOrigin(t *testing.T, useTLS bool, serve func(o *rawOrigin, i int, c net.Conn, br *bufio.Reader)) *rawOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &rawOrigin{ln: ln, url: "http://" + ln.Addr().String()}
	if useTLS {
		ca := testpki.NewCA(t, "sync-origin")
		o.roots = ca.Pool()
		o.ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, "127.0.0.1")}, NextProtos: []string{"http/1.1"}})
		o.url = "https://" + ln.Addr().String()
	}
	o.wg.Go(func() {
		for i := 0; ; i++ {
			c, err := o.ln.Accept()
			if err != nil {
				return
			}
			o.accepted.Add(1)
			o.wg.Go(func() {
				defer c.Close()
				serve(o, i, c, bufio.NewReader(c))
			})
		}
	})
	t.Cleanup(func() { _ = o.ln.Close(); o.wg.Wait() })
	return o
}

// readReq reads one request and its body; ok is false at EOF or on an
// error.
func (o *rawOrigin) readReq(br *bufio.Reader) (*http.Request, bool) {
	r, err := http.ReadRequest(br)
	if err != nil {
		return nil, false
	}
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		return nil, false
	}
	o.requests.Add(1)
	return r, true
}

const okResponse = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// keepAlive serves every request of a connection with resp.
func keepAlive(resp string) func(*rawOrigin, int, net.Conn, *bufio.Reader) {
	return func(o *rawOrigin, _ int, c net.Conn, br *bufio.Reader) {
		for {
			if _, ok := o.readReq(br); !ok {
				return
			}
			if _, err := io.WriteString(c, resp); err != nil {
				return
			}
		}
	}
}

// syncTransport returns the SyncTransport of a Transport made with o, the
// origin's roots added; its idle connections are closed at the end.
func syncTransport(t *testing.T, roots *x509.CertPool, o Options) (*Transport, *SyncTransport) {
	t.Helper()
	if o.RootCAs == nil {
		o.RootCAs = roots
	}
	tr, err := NewTransport(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	st, ok := tr.Sync().(*SyncTransport)
	if !ok || tr.Sync() != st {
		t.Fatal("Sync does not return one *SyncTransport")
	}
	return tr, st
}

// get sends a request without a body through rt and returns the response
// with its body read (and the read error).
func get(ctx context.Context, rt http.RoundTripper, method, url string, hdr http.Header) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, "", err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// idleConns returns how many idle connections st holds.
func idleConns(st *SyncTransport) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.idle.n
}

// TestSyncReuse: sequential requests share one connection, over TLS and
// cleartext, for every response framing that leaves the connection
// usable (length, chunked, HEAD, 204, 304); GotConn reports the reuse.
func TestSyncReuse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, method, resp, body string
	}{
		{"content-length", "GET", okResponse, "ok"},
		{"chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n3\r\n!!!\r\n0\r\nX-T: 1\r\n\r\n", "ok!!!"},
		{"HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", ""},
		{"204", "GET", "HTTP/1.1 204 No Content\r\n\r\n", ""},
		{"304", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 1000\r\n\r\n", ""},
		{"HTTP/1.0 keep-alive", "GET", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", "ok"},
	}
	for _, useTLS := range []bool{true, false} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("tls=%v/%s", useTLS, tt.name), func(t *testing.T) {
				t.Parallel()
				o := newRawOrigin(t, useTLS, keepAlive(tt.resp))
				_, st := syncTransport(t, o.roots, Options{})
				const n = 5
				for i := range n {
					var info httptrace.GotConnInfo
					ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { info = i }})
					resp, body, err := get(ctx, st, tt.method, o.url+"/", nil)
					if err != nil {
						t.Fatalf("request %d: %v", i, err)
					}
					if body != tt.body {
						t.Errorf("request %d: body %q, want %q", i, body, tt.body)
					}
					if useTLS != (resp.TLS != nil) {
						t.Errorf("resp.TLS = %v", resp.TLS)
					}
					if info.Conn == nil || info.Reused != (i > 0) || info.WasIdle != (i > 0) {
						t.Errorf("request %d: GotConn %+v, want reused and idle after the first", i, info)
					}
					if info.Conn != nil && info.Conn.RemoteAddr().String() != o.ln.Addr().String() {
						t.Errorf("GotConn remote %v, want %v", info.Conn.RemoteAddr(), o.ln.Addr())
					}
				}
				if got := o.accepted.Load(); got != 1 {
					t.Errorf("%d sequential requests used %d connections, want 1", n, got)
				}
			})
		}
	}
}

// TestSyncConnectionNotReused: a response that ends its connection
// (Connection: close, HTTP/1.0, close-delimited body, a request with
// Connection: close) or leaves bytes nobody asked for after it (a second
// response smuggled behind the first) is never followed by another request
// on that connection.
func TestSyncConnectionNotReused(t *testing.T) {
	t.Parallel()
	const smuggled = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!"
	tests := []struct {
		name, resp string
		reqClose   bool
		body       string
	}{
		{"Connection: close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", false, "ok"},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false, "ok"},
		{"close-delimited", "HTTP/1.1 200 OK\r\n\r\nok", false, "ok"},
		{"request Connection: close", okResponse, true, "ok"},
		{"bytes after the response", okResponse + smuggled, false, "ok"},
	}
	for _, useTLS := range []bool{true, false} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("tls=%v/%s", useTLS, tt.name), func(t *testing.T) {
				t.Parallel()
				o := newRawOrigin(t, useTLS, func(o *rawOrigin, _ int, c net.Conn, br *bufio.Reader) {
					if _, ok := o.readReq(br); !ok {
						return
					}
					_, _ = io.WriteString(c, tt.resp)
					if strings.HasSuffix(tt.resp, "\r\n\r\nok") && !strings.Contains(tt.resp, "Length") {
						return // close-delimited: the close ends the body
					}
					// Keep the connection open: only the client may end it.
					_, _ = io.Copy(io.Discard, br)
				})
				_, st := syncTransport(t, o.roots, Options{})
				var hdr http.Header
				if tt.reqClose {
					hdr = http.Header{"Connection": {"close"}}
				}
				for i := range 3 {
					_, body, err := get(t.Context(), st, "GET", o.url+"/", hdr)
					if err != nil || body != tt.body {
						t.Fatalf("request %d: body %q, err %v; want %q", i, body, err, tt.body)
					}
				}
				if got := o.accepted.Load(); got != 3 {
					t.Errorf("3 requests used %d connections, want 3 (none reusable)", got)
				}
				if n := idleConns(st); n != 0 {
					t.Errorf("%d idle connections pooled, want 0", n)
				}
			})
		}
	}
}

// TestSyncLivenessCheck: an idle connection the origin closed is found
// dead before use: the next request, a POST with a body (never retried),
// dials a fresh connection and succeeds. So is one on which the origin
// sent bytes while it was idle.
func TestSyncLivenessCheck(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		after func(c net.Conn) // what the origin does once its answer is sent
	}{
		{"closed by the origin", func(c net.Conn) { _ = c.Close() }},
		{"unsolicited bytes", func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!")
			_, _ = io.Copy(io.Discard, c)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			poke := make(chan struct{}) // the first connection is idle in the pool
			o := newRawOrigin(t, false, func(o *rawOrigin, i int, c net.Conn, br *bufio.Reader) {
				if i > 0 {
					keepAlive(okResponse)(o, i, c, br)
					return
				}
				if _, ok := o.readReq(br); !ok {
					return
				}
				_, _ = io.WriteString(c, okResponse)
				<-poke
				tt.after(c)
			})
			_, st := syncTransport(t, nil, Options{})
			if _, _, err := get(t.Context(), st, "GET", o.url+"/", nil); err != nil {
				t.Fatal(err)
			}
			// Wait until the socket shows it: the check is what is tested.
			st.mu.Lock()
			c := st.idle.head
			st.mu.Unlock()
			if c == nil {
				t.Fatal("first connection not pooled")
			}
			close(poke)
			eventually.Eventually(t, 10*time.Second, func() bool { return !(&peeker{}).alive(c.rawConn) }, "the socket shows the origin's close or bytes")
			req, _ := http.NewRequestWithContext(t.Context(), "POST", o.url+"/", strings.NewReader("payload"))
			resp, err := st.RoundTrip(req)
			if err != nil {
				t.Fatalf("POST after the origin closed the idle connection: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "ok" {
				t.Errorf("body %q, want ok", b)
			}
			if got := o.accepted.Load(); got != 2 {
				t.Errorf("%d connections, want 2", got)
			}
		})
	}
}

// TestSyncRetry: the origin reads the second request on a kept-alive
// connection and closes it without an answer (the race the liveness check
// cannot see). An idempotent request without a body is sent again on a
// fresh connection; a POST, a request with a body, is not: its error is
// returned and the origin saw it once.
func TestSyncRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		method  string
		body    string
		hdr     http.Header
		retried bool
	}{
		{"GET", "GET", "", nil, true},
		{"HEAD", "HEAD", "", nil, true},
		{"POST without a body", "POST", "", nil, false},
		{"POST with Idempotency-Key", "POST", "", http.Header{"Idempotency-Key": {"k1"}}, true},
		{"POST with a body", "POST", "payload", nil, false},
		{"PUT with a body and Idempotency-Key", "PUT", "payload", http.Header{"Idempotency-Key": {"k1"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var second atomic.Int32 // how often the second request reached the origin
			o := newRawOrigin(t, true, func(o *rawOrigin, i int, c net.Conn, br *bufio.Reader) {
				if i > 0 {
					for {
						r, ok := o.readReq(br)
						if !ok {
							return
						}
						if r.URL.Path == "/second" {
							second.Add(1)
						}
						_, _ = io.WriteString(c, okResponse)
					}
				}
				if _, ok := o.readReq(br); !ok {
					return
				}
				_, _ = io.WriteString(c, okResponse)
				if _, ok := o.readReq(br); ok {
					second.Add(1)
				}
				// Closed without an answer.
			})
			_, st := syncTransport(t, o.roots, Options{})
			if _, _, err := get(t.Context(), st, "GET", o.url+"/first", nil); err != nil {
				t.Fatal(err)
			}
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			req, _ := http.NewRequestWithContext(t.Context(), tt.method, o.url+"/second", body)
			for k, v := range tt.hdr {
				req.Header[k] = v
			}
			resp, err := st.RoundTrip(req)
			if tt.retried {
				if err != nil {
					t.Fatalf("idempotent request on a connection the origin dropped: %v, want a retry", err)
				}
				resp.Body.Close()
				if n := second.Load(); n != 2 || o.accepted.Load() != 2 {
					t.Errorf("origin saw the request %d times on %d connections, want 2 on 2", n, o.accepted.Load())
				}
				return
			}
			if err == nil {
				resp.Body.Close()
				t.Fatal("non-idempotent request retried (or answered)")
			}
			if IsTimeout(err) || errors.Is(err, context.Canceled) {
				t.Errorf("error %v reads as a timeout or cancellation", err)
			}
			if n := second.Load(); n > 1 {
				t.Errorf("origin saw the request %d times, want at most 1", n)
			}
			if o.accepted.Load() != 1 {
				t.Errorf("%d connections, want 1 (no retry)", o.accepted.Load())
			}
		})
	}
}

// TestSyncPoolIsolatedByDialPolicy: as TestPooledConnNotReusedAcrossOptIns
// for the Transport: a connection dialled under one DialPolicy's key is
// reused under that key and never carries a request of another key, which
// the guard refuses before it reaches the origin.
func TestSyncPoolIsolatedByDialPolicy(t *testing.T) {
	t.Parallel()
	for _, tt := range optInCases() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newRawOrigin(t, true, keepAlive(okResponse))
			_, st := syncTransport(t, o.roots, Options{Guard: CheckAddress})
			do := func(p DialPolicy) error {
				_, _, err := get(WithDialPolicy(t.Context(), p), st, "GET", o.url+"/", nil)
				return err
			}
			for range 2 {
				if err := do(tt.admit); err != nil {
					t.Fatalf("admitted request: %v", err)
				}
			}
			if n := o.accepted.Load(); n != 1 {
				t.Errorf("two admitted requests used %d connections, want 1", n)
			}
			err := do(tt.other)
			if _, ok := errors.AsType[*AddrDeniedError](err); !ok {
				t.Fatalf("request the guard refuses: err = %v, want *AddrDeniedError", err)
			}
			if n := o.accepted.Load(); n != 1 {
				t.Errorf("origin saw %d connections, want 1: the refused request reached it", n)
			}
		})
	}
}

// TestSyncAddressGuard: a loopback dial without a DialPolicy (the
// strictest judgement) is refused with an *AddrDeniedError, for the
// default dialer and an injected one, and is not a timeout; a handshake
// that never completes is, within ConnectTimeout.
func TestSyncAddressGuard(t *testing.T) {
	t.Parallel()
	ln := listen(t, "127.0.0.1", 0)
	injected := func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, ln.Addr().String())
	}
	for _, tt := range []struct {
		name string
		dial DialFunc
		url  string
	}{
		{"default dialer", nil, "https://" + ln.Addr().String() + "/"},
		{"default dialer, cleartext", nil, "http://" + ln.Addr().String() + "/"},
		{"injected dialer", injected, "https://api.example.com/"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, st := syncTransport(t, x509.NewCertPool(), Options{Guard: CheckAddress, Dial: tt.dial})
			_, _, err := get(context.Background(), st, "GET", tt.url, nil)
			ge, ok := errors.AsType[*AddressGuardError](err)
			if _, denied := errors.AsType[*AddrDeniedError](err); !denied || !ok || ge.Class != addrguard.ClassLoopback {
				t.Fatalf("err = %v, want an *AddrDeniedError for loopback", err)
			}
			if IsTimeout(err) {
				t.Errorf("a refused dial reads as a timeout: %v", err)
			}
		})
	}
	t.Run("handshake timeout", func(t *testing.T) {
		t.Parallel()
		// ln never accepts: the TCP connect succeeds (backlog), the
		// handshake gets no answer.
		_, st := syncTransport(t, x509.NewCertPool(), Options{ConnectTimeout: 50 * time.Millisecond})
		_, _, err := get(context.Background(), st, "GET", "https://"+ln.Addr().String()+"/", nil)
		if err == nil || !IsTimeout(err) {
			t.Fatalf("err = %v, want a timeout", err)
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		t.Parallel()
		o := newRawOrigin(t, true, keepAlive(okResponse))
		_, st := syncTransport(t, x509.NewCertPool(), Options{})
		_, _, err := get(t.Context(), st, "GET", o.url+"/", nil)
		if _, ok := errors.AsType[*tls.CertificateVerificationError](err); !ok {
			t.Fatalf("err = %v, want a certificate verification error", err)
		}
		if o.requests.Load() != 0 {
			t.Error("request sent to an origin whose certificate failed")
		}
	})
}

// TestSyncMaxConnsPerHost: 16 concurrent requests with MaxConnsPerHost 2:
// the origin never has more than 2 connections, the others wait (their
// number seen in the pool), every request completes; a waiter whose
// context ends gives up with the context's error and the bound still
// holds.
func TestSyncMaxConnsPerHost(t *testing.T) {
	t.Parallel()
	const capConns, requests = 2, 16
	var gauge connGauge
	var inflight atomic.Int32
	release := make(chan struct{})
	var releaseOnce sync.Once
	freeAll := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(freeAll) // a failed barrier must not leave the origin holding requests
	ca := testpki.NewCA(t, "sync-limits")
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			inflight.Add(1)
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	origin.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, "127.0.0.1")}}
	origin.Config.ConnState = gauge.hook
	origin.StartTLS()
	defer origin.Close()
	_, st := syncTransport(t, ca.Pool(), Options{MaxConnsPerHost: capConns})
	waiters := func() int {
		st.mu.Lock()
		defer st.mu.Unlock()
		n := 0
		for _, hp := range st.hosts {
			n += len(hp.waiters)
		}
		return n
	}
	var wg sync.WaitGroup
	errs := make(chan error, requests)
	for range requests {
		wg.Go(func() {
			if _, body, err := get(t.Context(), st, "GET", origin.URL+"/hold", nil); err != nil || body != "ok" {
				errs <- fmt.Errorf("body %q, err %w", body, err)
			}
		})
	}
	eventually.Eventually(t, 30*time.Second, func() bool {
		return inflight.Load() == capConns && waiters() == requests-capConns
	}, "the cap in flight and the rest waiting")
	// A waiter whose context ends.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, _, err := get(ctx, st, "GET", origin.URL+"/", nil); done <- err }()
	eventually.Eventually(t, 30*time.Second, func() bool { return waiters() == requests-capConns+1 }, "one more waiter")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled waiter: err = %v, want context.Canceled", err)
	}
	freeAll()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("request: %v", err)
	}
	if _, peak, _ := gauge.get(); peak > capConns {
		t.Errorf("origin saw %d connections at once, want at most %d", peak, capConns)
	}
	if n := inflight.Load(); n != requests {
		t.Errorf("origin served %d, want %d", n, requests)
	}
	st.mu.Lock()
	for _, hp := range st.hosts {
		if hp.conns > capConns || len(hp.idle) != hp.conns || len(hp.waiters) != 0 {
			t.Errorf("pool after the flood: %d conns, %d idle, %d waiters", hp.conns, len(hp.idle), len(hp.waiters))
		}
	}
	st.mu.Unlock()
}

// TestSyncIdleBounds: MaxIdleConnsPerHost keeps that many of a host's
// connections, MaxIdleConns that many across hosts (the least recently
// used closed), IdleConnTimeout expires them, CloseIdleConnections on the
// Transport closes them.
func TestSyncIdleBounds(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	var held atomic.Int32
	o := newRawOrigin(t, false, func(o *rawOrigin, i int, c net.Conn, br *bufio.Reader) {
		for {
			r, ok := o.readReq(br)
			if !ok {
				return
			}
			if r.URL.Path == "/hold" {
				held.Add(1)
				<-hold
			}
			_, _ = io.WriteString(c, okResponse)
		}
	})
	port := o.ln.Addr().(*net.TCPAddr).Port
	t.Run("per host", func(t *testing.T) {
		_, st := syncTransport(t, nil, Options{MaxIdleConnsPerHost: 1})
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() { _, _, _ = get(t.Context(), st, "GET", o.url+"/hold", nil) })
		}
		eventually.Eventually(t, 10*time.Second, func() bool { return held.Load() == 3 }, "3 held")
		close(hold)
		wg.Wait()
		if n := idleConns(st); n != 1 {
			t.Errorf("%d idle, want MaxIdleConnsPerHost 1", n)
		}
	})
	t.Run("across hosts", func(t *testing.T) {
		tr, st := syncTransport(t, nil, Options{MaxIdleConns: 1})
		for _, host := range []string{"127.0.0.1", "localhost"} {
			if _, _, err := get(t.Context(), st, "GET", fmt.Sprintf("http://%s:%d/", host, port), nil); err != nil {
				t.Fatal(err)
			}
		}
		st.mu.Lock()
		n, host := st.idle.n, ""
		if st.idle.head != nil {
			host = st.idle.head.hp.key.host
		}
		st.mu.Unlock()
		if n != 1 || host != "localhost" {
			t.Errorf("%d idle (first %q), want 1, the most recently used (localhost)", n, host)
		}
		tr.CloseIdleConnections()
		if n := idleConns(st); n != 0 {
			t.Errorf("%d idle after CloseIdleConnections", n)
		}
		st.mu.Lock()
		if len(st.hosts) != 0 {
			t.Errorf("%d host pools left with no connection", len(st.hosts))
		}
		st.mu.Unlock()
	})
	t.Run("idle timeout", func(t *testing.T) {
		_, st := syncTransport(t, nil, Options{IdleConnTimeout: time.Nanosecond})
		before := o.accepted.Load()
		for range 2 {
			if _, _, err := get(t.Context(), st, "GET", o.url+"/", nil); err != nil {
				t.Fatal(err)
			}
		}
		if n := o.accepted.Load() - before; n != 2 {
			t.Errorf("%d connections, want 2 (the idle one expired)", n)
		}
	})
}

// TestSyncResponseHeaderTimeout: the request's own timeout, else the
// default, bounds the wait for the head; a body silent after its head is
// never cut. The slow origin's default is shortTimeout.
func TestSyncResponseHeaderTimeout(t *testing.T) {
	t.Parallel()
	do := func(o *slowOrigin, path string, d time.Duration) (*http.Response, error) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		t.Cleanup(cancel)
		if d != 0 {
			ctx = WithResponseHeaderTimeout(ctx, d)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, o.URL+path, nil)
		return o.transport().Sync().RoundTrip(req)
	}
	t.Run("default", func(t *testing.T) {
		t.Parallel()
		o := newSlowOrigin(t, false)
		_, err := do(o, "/slow-head", 0)
		wantTimeout(t, err, shortTimeout)
	})
	t.Run("per request, shorter", func(t *testing.T) {
		t.Parallel()
		o := newSlowOrigin(t, false)
		o.transport().syncRT.headerTimeout = longTimeout
		_, err := do(o, "/slow-head", shortTimeout)
		wantTimeout(t, err, shortTimeout)
	})
	t.Run("per request, longer", func(t *testing.T) {
		t.Parallel()
		o := newSlowOrigin(t, false)
		type result struct {
			resp *http.Response
			err  error
		}
		done := make(chan result, 1)
		go func() { r, err := do(o, "/slow-head", longTimeout); done <- result{r, err} }()
		<-o.arrived
		_, err := do(o, "/slow-head", 0) // the default expires meanwhile
		wantTimeout(t, err, shortTimeout)
		<-o.arrived
		close(o.release)
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		if got := readAll(t, r.resp); got != "done" {
			t.Errorf("body %q", got)
		}
	})
	t.Run("slow body not cut", func(t *testing.T) {
		t.Parallel()
		// Half a second rather than shortTimeout: the head must beat it
		// on a loaded machine.
		const d = 500 * time.Millisecond
		o := newSlowOrigin(t, false)
		resp, err := do(o, "/slow-body", d)
		if err != nil {
			t.Fatal(err)
		}
		<-o.arrived
		_, err = do(o, "/slow-head", d) // the body is silent for longer than the timeout
		wantTimeout(t, err, d)
		<-o.arrived
		close(o.release)
		if got := readAll(t, resp); got != "head;done" {
			t.Errorf("body = %q, want head;done", got)
		}
	})
}

// TestSyncCancel: the request's context ending while the head is awaited
// or while the body is read closes the connection and the error wraps
// context.Canceled.
func TestSyncCancel(t *testing.T) {
	t.Parallel()
	t.Run("awaiting the head", func(t *testing.T) {
		t.Parallel()
		o := newSlowOrigin(t, false)
		o.transport().syncRT.headerTimeout = longTimeout
		ctx, cancel := context.WithCancel(t.Context())
		go func() { <-o.arrived; cancel() }()
		req, _ := http.NewRequestWithContext(ctx, "GET", o.URL+"/slow-head", nil)
		_, err := o.transport().Sync().RoundTrip(req)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})
	t.Run("reading the body", func(t *testing.T) {
		t.Parallel()
		o := newSlowOrigin(t, false)
		o.transport().syncRT.headerTimeout = longTimeout
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", o.URL+"/slow-body", nil)
		resp, err := o.transport().Sync().RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		head := make([]byte, len("head;"))
		if _, err := io.ReadFull(resp.Body, head); err != nil {
			t.Fatal(err)
		}
		go func() { cancel() }()
		_, err = io.ReadAll(resp.Body)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("body err = %v, want context.Canceled", err)
		}
		if n := idleConns(o.transport().syncRT); n != 0 {
			t.Errorf("%d idle: the cancelled connection was pooled", n)
		}
	})
	t.Run("Close during a blocked Read", func(t *testing.T) {
		t.Parallel()
		o := newSlowOrigin(t, false)
		o.transport().syncRT.headerTimeout = longTimeout
		req, _ := http.NewRequestWithContext(t.Context(), "GET", o.URL+"/slow-body", nil)
		resp, err := o.transport().Sync().RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, len("head;"))
		if _, err := io.ReadFull(resp.Body, head); err != nil {
			t.Fatal(err)
		}
		<-o.arrived
		go func() {
			// Close once the Read is blocked (the origin holds the body).
			eventually.Eventually(t, 10*time.Second, func() bool {
				b := resp.Body.(*syncBody)
				b.mu.Lock()
				defer b.mu.Unlock()
				return b.reading
			}, "a Read blocked")
			resp.Body.Close()
		}()
		if _, err := io.ReadAll(resp.Body); !errors.Is(err, errBodyClosed) {
			t.Errorf("Read under Close: %v, want errBodyClosed", err)
		}
		if n := idleConns(o.transport().syncRT); n != 0 {
			t.Errorf("%d idle after an early Close", n)
		}
	})
}

// TestSyncAbandonedBody: a body neither read nor closed gives its
// connection back (closed) when the request's context ends, and a later
// Read reports the context's error.
func TestSyncAbandonedBody(t *testing.T) {
	t.Parallel()
	o := newRawOrigin(t, true, keepAlive("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"))
	_, st := syncTransport(t, o.roots, Options{MaxConnsPerHost: 1})
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "GET", o.url+"/", nil)
	resp, err := st.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	eventually.Eventually(t, 10*time.Second, func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return len(st.hosts) == 0
	}, "the slot released")
	if _, err := resp.Body.Read(make([]byte, 10)); !errors.Is(err, context.Canceled) {
		t.Errorf("Read after the context ended: %v, want context.Canceled", err)
	}
	resp.Body.Close()
}

// TestSyncEarlyClose: a body closed before EOF keeps its connection when
// the rest is already buffered, and closes it (without reading on) when
// it is not.
func TestSyncEarlyClose(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		size  int
		conns int32
	}{
		{"small remainder buffered", 1000, 1},
		{"large remainder", 4 << 20, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", tt.size, strings.Repeat("x", tt.size))
			o := newRawOrigin(t, true, keepAlive(resp))
			_, st := syncTransport(t, o.roots, Options{})
			for range 2 {
				req, _ := http.NewRequestWithContext(t.Context(), "GET", o.url+"/", nil)
				r, err := st.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(r.Body, make([]byte, 10)); err != nil {
					t.Fatal(err)
				}
				// Let the small response arrive whole in the buffer.
				if tt.size < maxSyncDrain {
					eventually.Eventually(t, 10*time.Second, func() bool {
						_, err := r.Body.(*syncBody).c.br.Peek(tt.size - 10)
						return err == nil
					}, "the rest buffered")
				}
				r.Body.Close()
			}
			if got := o.accepted.Load(); got != tt.conns {
				t.Errorf("%d connections, want %d", got, tt.conns)
			}
		})
	}
}

// TestSyncInformational: 1xx responses reach Got1xxResponse in order
// before the final response; more than 5 and a 101 are errors.
func TestSyncInformational(t *testing.T) {
	t.Parallel()
	const early = "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
	tests := []struct {
		name, resp string
		want       []int
		wantErr    string
	}{
		{"103 and 100", early + "HTTP/1.1 100 Continue\r\n\r\n" + okResponse, []int{103, 100}, ""},
		{"too many", strings.Repeat(early, 6) + okResponse, []int{103, 103, 103, 103, 103}, "informational"},
		{"101", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", nil, "101"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newRawOrigin(t, true, keepAlive(tt.resp))
			_, st := syncTransport(t, o.roots, Options{})
			var got []int
			var links []string
			ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				got = append(got, code)
				links = append(links, h.Get("Link"))
				return nil
			}})
			resp, body, err := get(ctx, st, "GET", o.url+"/", nil)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("Got1xxResponse saw %v, want %v", got, tt.want)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one about %s", err, tt.wantErr)
				}
				return
			}
			if err != nil || resp.StatusCode != 200 || body != "ok" {
				t.Fatalf("final response %v %q, err %v", resp, body, err)
			}
			if links[0] != "</style.css>; rel=preload" {
				t.Errorf("103 Link = %q", links[0])
			}
		})
	}
}

// TestSyncRequestWriting: what the origin receives: no User-Agent when
// the header holds an empty value (the proxy's way of not adding one);
// bodies of known and unknown length, a GET's chunked without a probe;
// and requests whose fields could forge a header are refused before any
// dial, without quoting the value.
func TestSyncRequestWriting(t *testing.T) {
	t.Parallel()
	type seen struct {
		ua    []string
		te    []string
		cl    int64
		body  string
		trail string
	}
	got := make(chan seen, 1)
	ca := testpki.NewCA(t, "sync-write")
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Header.Values("User-Agent"), r.TransferEncoding, r.ContentLength, string(b), r.Trailer.Get("X-Sum")}
	}))
	origin.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, "127.0.0.1")}}
	origin.StartTLS()
	defer origin.Close()
	_, st := syncTransport(t, ca.Pool(), Options{})

	type pipeBody struct{ io.Reader }
	tests := []struct {
		name   string
		method string
		ua     []string // nil: not set
		body   io.Reader
		length int64
		want   seen
	}{
		{"empty User-Agent not written", "GET", []string{""}, nil, 0, seen{}},
		{"User-Agent kept", "GET", []string{"agent/1"}, nil, 0, seen{ua: []string{"agent/1"}}},
		{"known length", "POST", []string{""}, strings.NewReader("hello"), 5, seen{cl: 5, body: "hello"}},
		{"unknown length chunked", "POST", []string{""}, pipeBody{strings.NewReader("hello")}, -1, seen{te: []string{"chunked"}, cl: -1, body: "hello"}},
		{"GET with a body, length 0 given", "GET", []string{""}, pipeBody{strings.NewReader("x")}, 0, seen{te: []string{"chunked"}, cl: -1, body: "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), tt.method, origin.URL+"/", nil)
			if tt.body != nil {
				req.Body = io.NopCloser(tt.body)
				req.ContentLength = tt.length
			}
			if tt.ua != nil {
				req.Header["User-Agent"] = tt.ua
			}
			resp, err := st.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			s := <-got
			if fmt.Sprint(s) != fmt.Sprint(tt.want) {
				t.Errorf("origin saw %+v, want %+v", s, tt.want)
			}
		})
	}

	const secret = "sk-secret-value"
	for _, tt := range []struct {
		name string
		mod  func(*http.Request)
	}{
		{"header value with a line break", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+secret+"\r\nX-Evil: 1") }},
		{"header name with a colon", func(r *http.Request) { r.Header["X-A: b"] = []string{secret} }},
		{"method with a space", func(r *http.Request) { r.Method = "GET / HTTP/1.1\r\n" }},
		{"scheme", func(r *http.Request) { r.URL.Scheme = "ftp" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), "GET", origin.URL+"/", nil)
			tt.mod(req)
			_, err := st.RoundTrip(req)
			if err == nil {
				t.Fatal("request sent")
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error quotes the value: %v", err)
			}
		})
	}
	select {
	case s := <-got:
		t.Errorf("a refused request reached the origin: %+v", s)
	default:
	}
}

// TestSyncRequestBodyError: a request body that fails is reported as its
// own error (what the proxy maps to the client's fault), not as the
// origin's.
func TestSyncRequestBodyError(t *testing.T) {
	t.Parallel()
	o := newRawOrigin(t, true, keepAlive(okResponse))
	_, st := syncTransport(t, o.roots, Options{})
	bodyErr := errors.New("client went away")
	req, _ := http.NewRequestWithContext(t.Context(), "POST", o.url+"/", io.MultiReader(strings.NewReader("part"), iotestErr{bodyErr}))
	req.ContentLength = -1
	_, err := st.RoundTrip(req)
	if !errors.Is(err, bodyErr) {
		t.Fatalf("err = %v, want the body's error", err)
	}
}

// TestSyncEarlyResponse: an origin that answers an upload without reading
// it and closes has its answer returned, not the write error.
func TestSyncEarlyResponse(t *testing.T) {
	t.Parallel()
	for _, useTLS := range []bool{true, false} {
		o := newRawOrigin(t, useTLS, func(o *rawOrigin, _ int, c net.Conn, br *bufio.Reader) {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 413 Content Too Large\r\nConnection: close\r\nContent-Length: 8\r\n\r\ntoo big!")
		})
		_, st := syncTransport(t, o.roots, Options{})
		req, _ := http.NewRequestWithContext(t.Context(), "PUT", o.url+"/upload", strings.NewReader(strings.Repeat("x", 16<<20)))
		resp, err := st.RoundTrip(req)
		if err != nil {
			t.Fatalf("tls=%v: err = %v, want the origin's 413", useTLS, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || string(b) != "too big!" {
			t.Errorf("tls=%v: %d %q", useTLS, resp.StatusCode, b)
		}
	}
}

type iotestErr struct{ err error }

func (e iotestErr) Read([]byte) (int, error) { return 0, e.err }

// TestSyncHeadTooLarge: an origin that sends an endless head is cut at
// the bound (maxSyncHeadBytes; 256 KiB here) so memory stays bounded, and
// the error says so.
func TestSyncHeadTooLarge(t *testing.T) {
	t.Parallel()
	o := newRawOrigin(t, false, func(o *rawOrigin, _ int, c net.Conn, br *bufio.Reader) {
		if _, ok := o.readReq(br); !ok {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := []byte("X-Filler: " + strings.Repeat("a", 4000) + "\r\n")
		for {
			if _, err := c.Write(line); err != nil {
				return
			}
		}
	})
	_, st := syncTransport(t, nil, Options{})
	st.maxHeadBytes = 256 << 10 // the bound's logic, at a test's cost
	_, _, err := get(t.Context(), st, "GET", o.url+"/", nil)
	if !errors.Is(err, errHeadTooLarge) {
		t.Fatalf("err = %v, want errHeadTooLarge", err)
	}
}

// TestSyncTruncatedBody: a body cut short by the origin (chunked or with a
// length) is an error, and its connection is not pooled.
func TestSyncTruncatedBody(t *testing.T) {
	t.Parallel()
	for _, resp := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nshort\r\n",
	} {
		o := newRawOrigin(t, true, func(o *rawOrigin, _ int, c net.Conn, br *bufio.Reader) {
			if _, ok := o.readReq(br); ok {
				_, _ = io.WriteString(c, resp)
			}
		})
		_, st := syncTransport(t, o.roots, Options{})
		_, _, err := get(t.Context(), st, "GET", o.url+"/", nil)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%q: err = %v, want io.ErrUnexpectedEOF", resp, err)
		}
		if n := idleConns(st); n != 0 {
			t.Errorf("%d idle after a truncated body", n)
		}
	}
}

// TestSyncNoGoroutinePerConnection: while the pool holds idle connections
// and while a response body is open, no goroutine runs for them (the
// Transport's http.Transport would run two per connection), and none is
// left after.
func TestSyncNoGoroutinePerConnection(t *testing.T) {
	o := newRawOrigin(t, true, keepAlive("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody"))
	_, st := syncTransport(t, o.roots, Options{})
	before := runtime.NumGoroutine()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(t.Context()) // AfterFunc registered
			defer cancel()
			if _, _, err := get(ctx, st, "GET", o.url+"/", nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", o.url+"/", nil)
	resp, err := st.RoundTrip(req) // a body left open
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, fn := range []string{"upstream.(*SyncTransport)", "upstream.(*syncConn)", "upstream.(*syncBody)", "net/http.(*persistConn)"} {
		if strings.Contains(stacks, fn) {
			t.Errorf("a goroutine runs %s with the pool idle", fn)
		}
	}
	if idleConns(st) == 0 {
		t.Fatal("no idle connection: nothing tested")
	}
	// The origin's goroutines (one per connection) are the only ones the
	// pooled connections cost.
	if after := runtime.NumGoroutine(); after > before+int(o.accepted.Load()) {
		t.Errorf("%d goroutines, %d before and %d origin connections", after, before, o.accepted.Load())
	}
}

// TestSyncStress: 8 goroutines share 2 connections (MaxConnsPerHost) for
// 160 requests, each ending one of four ways: read to EOF, closed early,
// cancelled mid-body, cancelled before sending. Every request gets a
// response or its context's error, the origin never sees more than 2
// connections at once, and the pool ends consistent: every connection
// idle, no waiter, no slot leaked.
func TestSyncStress(t *testing.T) {
	t.Parallel()
	const capConns, workers, perWorker = 2, 8, 20
	// Sockets open as the client sees them (the origin sees a close
	// later): counted by the dialer, uncounted by Close.
	var open, peak atomic.Int32
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		for n := open.Add(1); ; {
			if p := peak.Load(); n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		return &countedConn{TCPConn: c.(*net.TCPConn), open: &open}, nil
	}
	ca := testpki.NewCA(t, "sync-stress")
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("x", 8<<10))
	}))
	origin.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, "127.0.0.1")}}
	origin.StartTLS()
	defer origin.Close()
	_, st := syncTransport(t, ca.Pool(), Options{MaxConnsPerHost: capConns, Dial: dial})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				ctx, cancel := context.WithCancel(t.Context())
				mode := (w + i) % 4
				if mode == 3 {
					cancel()
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", origin.URL+"/", nil)
				resp, err := st.RoundTrip(req)
				if err != nil {
					if mode != 3 || !errors.Is(err, context.Canceled) {
						t.Errorf("mode %d: %v", mode, err)
					}
					cancel()
					continue
				}
				switch mode {
				case 0, 3: // mode 3: sent before the cancel was seen
					if _, err := io.Copy(io.Discard, resp.Body); err != nil && mode == 0 {
						t.Errorf("reading: %v", err)
					}
				case 1:
					_, _ = resp.Body.Read(make([]byte, 100))
				case 2:
					_, _ = resp.Body.Read(make([]byte, 100))
					cancel()
					_, _ = io.Copy(io.Discard, resp.Body)
				}
				resp.Body.Close()
				cancel()
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > capConns {
		t.Errorf("%d sockets open at once, want at most %d", p, capConns)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, hp := range st.hosts {
		if hp.conns > capConns || hp.conns != len(hp.idle) || len(hp.waiters) != 0 {
			t.Errorf("pool after the stress: %d conns, %d idle, %d waiters", hp.conns, len(hp.idle), len(hp.waiters))
		}
	}
	if n := 0; st.idle.n != func() int {
		for _, hp := range st.hosts {
			n += len(hp.idle)
		}
		return n
	}() {
		t.Errorf("idle list holds %d, the host pools %d", st.idle.n, n)
	}
}

// countedConn decrements open when first closed.
type countedConn struct {
	*net.TCPConn
	open   *atomic.Int32
	closed atomic.Bool
}

func (c *countedConn) Close() error {
	if !c.closed.Swap(true) {
		c.open.Add(-1)
	}
	return c.TCPConn.Close()
}

// TestSyncIPv6Literal: an IPv6 literal authority ([::1]:port) is dialled
// as such and pooled (brackets off in the key, back on for the dial).
func TestSyncIPv6Literal(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no IPv6 loopback in CI: %v", err)
		}
		t.Skipf("no IPv6 loopback on this machine: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "v6") })}
	var accepted atomic.Int32
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	_, st := syncTransport(t, nil, Options{})
	for range 3 {
		if _, body, err := get(t.Context(), st, "GET", "http://"+ln.Addr().String()+"/", nil); err != nil || body != "v6" {
			t.Fatalf("body %q, err %v", body, err)
		}
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}
