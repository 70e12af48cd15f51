package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/admin"
	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/eventually"
	"github.com/botbox/botbox/internal/testutil/wsecho"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
)

// faultyListener returns the queued errors from Accept before delegating.
type faultyListener struct {
	net.Listener
	mu   sync.Mutex
	errs []error
}

func (l *faultyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		l.mu.Unlock()
		return nil, err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

func onInterception(err error) func(string, net.Listener) net.Listener {
	return func(addr string, ln net.Listener) net.Listener {
		if strings.HasSuffix(addr, ":18443") && strings.HasPrefix(addr, "127.") {
			return &faultyListener{Listener: ln, errs: []error{err}}
		}
		return ln
	}
}

func (h *harness) proxyGet(host, path string) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+h.addrs.Proxy[0].String()+path, nil)
	req.Host = host
	return (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
}

// TestInterceptionSurvivesEMFILE is finding 4 / issue 9 §1 end to end: one
// EMFILE on the interception socket used to close it for good while
// /healthz stayed 200. Now the next TLS connection is served.
func TestInterceptionSurvivesEMFILE(t *testing.T) {
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	h := start(t, harnessOpts{writeSecret: true, interception: "  enforce_sni_host_match: true\n", wrapListen: onInterception(emfile)})
	h.waitHealth(200)
	c := h.interceptClient("api.example.test", false)
	resp, err := c.Get("https://api.example.test/v1/models")
	if err != nil {
		t.Fatalf("interception after one EMFILE: %v", err)
	}
	if b := body(t, resp); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	c.CloseIdleConnections()
}

// TestListenerPermanentFailureEndsRun: a listener that fails for good turns
// readiness off and makes Run return the error (the process exits).
func TestListenerPermanentFailureEndsRun(t *testing.T) {
	boom := errors.New("boom")
	h := start(t, harnessOpts{writeSecret: true, interception: "  enforce_sni_host_match: true\n", wrapListen: onInterception(boom)})
	select {
	case err := <-h.done:
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "https_interception") {
			t.Errorf("Run = %v, want the interception listener's error", err)
		}
		h.done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after a permanent listener failure")
	}
	if h.srv.Ready() {
		t.Error("still ready after a listener failed")
	}
}

// TestAddrsAfterBindFailure: Addrs returns the bind error instead of
// blocking forever.
func TestAddrsAfterBindFailure(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	cfg, err := config.Parse(fmt.Appendf(nil, "listen_addr: 127.0.0.1\nlisten_port: %d\nmetrics_port: %d\nsecrets_dir: %s\negress_policy:\n  rules: []\n", port+1, port, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Logger: telemetry.NewLogger(io.Discard, nil)})
	if err != nil {
		t.Fatal(err)
	}
	runErr := s.Run(context.Background())
	if runErr == nil {
		t.Fatal("Run succeeded on a busy port")
	}
	got := make(chan error, 1)
	go func() { _, err := s.Addrs(); got <- err }()
	select {
	case err := <-got:
		if err == nil || err.Error() != runErr.Error() {
			t.Errorf("Addrs error = %v, want %v", err, runErr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Addrs blocked after a bind failure")
	}
}

// TestShutdownClosesHijackedAtDeadline: a WebSocket tunnel that never ends
// is closed at the drain deadline, and Run returns.
func TestShutdownClosesHijackedAtDeadline(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, shutdown: 1})
	next := h.origin.Config.Handler
	h.origin.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/tunnel" {
			next.ServeHTTP(w, r)
			return
		}
		// A tunnel that echoes lines until the peer goes away.
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			_, _ = brw.Write(wsecho.Frame("echo: " + line))
			_ = brw.Flush()
		}
	})
	c, err := net.Dial("tcp", h.addrs.Proxy[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wsecho.RoundTrip(t, c, "api.example.test", "/tunnel", "")
	_ = c.SetDeadline(time.Time{})
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		h.done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("WebSocket tunnel still open after the drain deadline: %v", err)
	}
	if len(h.logs.Find("drain timeout reached, closing hijacked connections")) != 1 {
		t.Error("no line about the hijacked connections closed at the deadline")
	}
}

// TestAdminPortFloodBounded is finding 2: idle connections on the admin
// port beyond its budget are closed (oldest first), /healthz still answers
// at once, the proxy is unaffected, and the drops are counted.
func TestAdminPortFloodBounded(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true})
	h.waitHealth(200)
	const flood = 4 * adminMaxConnections
	conns := make([]net.Conn, 0, flood)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range flood {
		c, err := net.Dial("tcp", h.addrs.Metrics.String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	dropped := h.metrics.Registry
	_ = dropped
	drops := func() float64 {
		return testutil.ToFloat64(h.srv.sm.ConnectionsDropped.WithLabelValues(telemetry.ListenerAdmin))
	}
	eventually.Eventually(t, 10*time.Second, func() bool { return drops() >= flood-adminMaxConnections }, "admin connections beyond the budget dropped")
	// The newest idle connections are the ones still open: a fresh probe
	// evicts the oldest of them and is answered.
	req, _ := http.NewRequest(http.MethodGet, "http://"+h.addrs.Metrics.String()+"/healthz", nil)
	req.Header.Set(admin.ProbeNonceHeader, "n")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatalf("/healthz during the flood: %v", err)
	}
	body(t, resp)
	key, err := admin.ReadProbeKey(h.probeKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !admin.VerifyProbe(key, "n", "/healthz", 200, resp.Header.Get(admin.ProbeAuthHeader)) {
		t.Errorf("/healthz during the flood: %d, authenticated %v", resp.StatusCode, resp.Header.Get(admin.ProbeAuthHeader) != "")
	}
	resp, err = h.proxyGet("api.example.test", "/")
	if err != nil {
		t.Fatalf("proxy during the admin flood: %v", err)
	}
	if b := body(t, resp); resp.StatusCode != 200 {
		t.Errorf("proxy during the admin flood: %d %s", resp.StatusCode, b)
	}
	// At most the budget is open on the server side: the oldest flood
	// connections were closed by BotBox.
	closed := 0
	for _, c := range conns[:flood-adminMaxConnections] {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++
		}
	}
	if closed != flood-adminMaxConnections {
		t.Errorf("%d of the %d oldest flood connections closed by BotBox", closed, flood-adminMaxConnections)
	}
	if n := len(h.logs.Find("admin port connection budget full, closing the longest-idle connection")); n == 0 || n > 3 {
		t.Errorf("%d drop lines for %v drops, want a sampled few", n, drops())
	}
}

// originGauge counts concurrent requests at the origin and holds each until
// released.
type originGauge struct {
	cur, peak atomic.Int64
	release   chan struct{}
}

func (g *originGauge) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/hold" {
			next.ServeHTTP(w, r)
			return
		}
		n := g.cur.Add(1)
		for {
			p := g.peak.Load()
			if n <= p || g.peak.CompareAndSwap(p, n) {
				break
			}
		}
		defer g.cur.Add(-1)
		select {
		case <-g.release:
		case <-r.Context().Done():
		}
		fmt.Fprint(w, "released")
	})
}

// advertisedStreams opens an HTTP/2 connection to the interception
// listener and returns the SETTINGS_MAX_CONCURRENT_STREAMS BotBox announces.
func (h *harness) advertisedStreams(t *testing.T) uint32 {
	t.Helper()
	c, err := tls.Dial("tcp", h.addrs.Intercept[0].String(), &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: "api.example.test", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			v, ok := sf.Value(http2.SettingMaxConcurrentStreams)
			if !ok {
				t.Fatal("no SETTINGS_MAX_CONCURRENT_STREAMS announced")
			}
			return v
		}
	}
}

// TestH2StreamFloodBounded is finding 3: BotBox announces
// http2_max_concurrent_streams per connection, and a flood of streams over
// as many connections as the client likes never has more than
// max_concurrent_requests in flight at the origin: the rest is answered
// 503 at once, counted and sampled in the log, while the admin port keeps
// answering and the next client is served when the flood ends.
func TestH2StreamFloodBounded(t *testing.T) {
	const streams, budget = 5, 12
	h := start(t, harnessOpts{writeSecret: true, interception: "  enforce_sni_host_match: true\n",
		extraYAML: fmt.Sprintf("http2_max_concurrent_streams: %d\nmax_concurrent_requests: %d\n", streams, budget)})
	if got := h.advertisedStreams(t); got != streams {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want %d", got, streams)
	}
	g := &originGauge{release: make(chan struct{})}
	h.origin.Config.Handler = g.handler(h.origin.Config.Handler)

	c := h.interceptClient("api.example.test", true)
	var wg sync.WaitGroup
	var shed atomic.Int64
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Get("https://api.example.test/hold")
			if err != nil {
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				if resp.Header.Get("Retry-After") == "" || string(b) != bodyOverloaded {
					t.Errorf("503 without Retry-After or with body %q", b)
				}
				shed.Add(1)
			}
		}()
	}
	shedMetric := func() float64 {
		return testutil.ToFloat64(h.srv.sm.RequestsShed.WithLabelValues(telemetry.ListenerHTTPS))
	}
	eventually.Eventually(t, 10*time.Second, func() bool { return g.cur.Load() == budget && shedMetric() > 0 }, "budget full and requests shed")
	if code, _ := h.health(); code != 200 {
		t.Errorf("/healthz during the flood: %d", code)
	}
	close(g.release)
	wg.Wait()
	c.CloseIdleConnections()
	if p := g.peak.Load(); p > budget {
		t.Errorf("origin saw %d concurrent requests, budget %d", p, budget)
	}
	if shed.Load() == 0 || float64(shed.Load()) != shedMetric() {
		t.Errorf("clients saw %d 503s, metric %v", shed.Load(), shedMetric())
	}
	if n := len(h.logs.Find("concurrent request budget exhausted, answering 503")); n == 0 || int64(n) >= shed.Load() && shed.Load() > 1 {
		t.Errorf("%d shed lines for %d sheds, want a sampled few", n, shed.Load())
	}
	resp, err := h.proxyGet("api.example.test", "/")
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); resp.StatusCode != 200 {
		t.Errorf("next client after the flood: %d %s", resp.StatusCode, b)
	}
}

// TestStalledReaderIsCut is finding 3's stalled stream: a client that
// stops reading an endless response is cut after the write timeout, on
// HTTP/1 and on an HTTP/2 stream; the cut is counted.
func TestStalledReaderIsCut(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, interception: "  enforce_sni_host_match: true\n", extraYAML: "downstream_write_timeout_seconds: 1\n"})
	originDone := make(chan error, 2)
	next := h.origin.Config.Handler
	h.origin.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/endless" {
			next.ServeHTTP(w, r)
			return
		}
		chunk := make([]byte, 32<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				originDone <- err
				return
			}
		}
	})
	timeouts := func(l string) float64 { return testutil.ToFloat64(h.srv.sm.WriteTimeouts.WithLabelValues(l)) }

	// HTTP/1 on the plain listener: read the head, never the body.
	c, err := net.Dial("tcp", h.addrs.Proxy[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	fmt.Fprint(c, "GET /endless HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	eventually.Eventually(t, 30*time.Second, func() bool { return timeouts(telemetry.ListenerHTTP) == 1 }, "HTTP/1 write timeout counted")
	<-originDone // the upstream exchange was abandoned too

	// HTTP/2 stream on the interception listener: never read the body, so
	// the stream's flow-control window closes.
	hc := h.interceptClient("api.example.test", true)
	resp, err := hc.Get("https://api.example.test/endless")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	eventually.Eventually(t, 30*time.Second, func() bool { return timeouts(telemetry.ListenerHTTPS) == 1 }, "HTTP/2 stream write timeout counted")
	<-originDone
	// The cut stream does not poison the connection: the next request works.
	resp2, err := hc.Get("https://api.example.test/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp2); resp2.StatusCode != 200 {
		t.Errorf("next stream: %d %s", resp2.StatusCode, b)
	}
	resp.Body.Close()
	hc.CloseIdleConnections()
}

// TestSilentStreamNotCut: a streaming response silent for longer than the
// write timeout, on an HTTP/2 stream, is not cut (the deadline covers
// writes in progress, not the gaps between them).
func TestSilentStreamNotCut(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, interception: "  enforce_sni_host_match: true\n", extraYAML: "downstream_write_timeout_seconds: 1\n"})
	gap := make(chan struct{})
	next := h.origin.Config.Handler
	h.origin.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/events" {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: one\n\n")
		_ = http.NewResponseController(w).Flush()
		<-gap
		fmt.Fprint(w, "data: two\n\n")
	})
	for _, h2 := range []bool{false, true} {
		hc := h.interceptClient("api.example.test", h2)
		resp, err := hc.Get("https://api.example.test/events")
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		if line, err := br.ReadString('\n'); err != nil || line != "data: one\n" {
			t.Fatalf("h2=%v first event: %q %v", h2, line, err)
		}
		// Silence longer than the write timeout (1 s) between two events.
		time.Sleep(1500 * time.Millisecond)
		gap <- struct{}{}
		rest, err := io.ReadAll(br)
		if err != nil || !strings.Contains(string(rest), "data: two") {
			t.Errorf("h2=%v: stream cut during a silence: %q %v", h2, rest, err)
		}
		resp.Body.Close()
		hc.CloseIdleConnections()
	}
	if got := testutil.ToFloat64(h.srv.sm.WriteTimeouts.WithLabelValues(telemetry.ListenerHTTPS)); got != 0 {
		t.Errorf("write timeouts = %v, want 0", got)
	}
}

// TestEarlyErrorsLoggedAndCounted is finding 8: requests net/http refuses
// before the handler are counted per status and leave a decision-style line.
func TestEarlyErrorsLoggedAndCounted(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, interception: "  enforce_sni_host_match: true\n"})
	tests := []struct {
		name, req string
		status    int
	}{
		{"duplicate Host", "GET / HTTP/1.1\r\nHost: api.example.test\r\nHost: evil.test\r\n\r\n", 400},
		{"userinfo in Host", "GET / HTTP/1.1\r\nHost: x@api.example.test\r\n\r\n", 400},
		{"HTTP/1.1 without Host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"bad Transfer-Encoding", "POST / HTTP/1.1\r\nHost: api.example.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
		// At least 14 bytes: net/http waits for that many to tell the
		// HTTP/2 preface from HTTP/1 (no valid HTTP/1 request is shorter).
		{"malformed request line", "GARBAGE-REQUEST-LINE\r\n\r\n", 400},
		{"unsupported version", "GET / HTTP/9.9\r\nHost: api.example.test\r\n\r\n", 505},
		{"oversized head", "GET / HTTP/1.1\r\nHost: api.example.test\r\nX-Big: " + strings.Repeat("a", 80<<10) + "\r\n\r\n", 431},
	}
	want := map[int]float64{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", h.addrs.Proxy[0].String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			go fmt.Fprint(c, tt.req) // the 431 is written while the head is still arriving
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
		})
		want[tt.status]++
	}
	// The same hook sees HTTP/1 inside TLS on the interception listener.
	resp, _ := rawTLS(t, h.addrs.Intercept[0].String(), &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: "api.example.test", NextProtos: []string{"http/1.1"}},
		"GET / HTTP/1.1\r\nHost: api.example.test\r\nHost: evil.test\r\n\r\n")
	if resp.StatusCode != 400 {
		t.Fatalf("interception duplicate Host: %d", resp.StatusCode)
	}
	for status, n := range want {
		if got := testutil.ToFloat64(h.srv.sm.MalformedRequests.WithLabelValues(telemetry.ListenerHTTP, telemetry.StatusCodeLabel(status))); got != n {
			t.Errorf("malformed_requests{http,%d} = %v, want %v", status, got, n)
		}
	}
	if got := testutil.ToFloat64(h.srv.sm.MalformedRequests.WithLabelValues(telemetry.ListenerHTTPS, "400")); got != 1 {
		t.Errorf("malformed_requests{https,400} = %v, want 1", got)
	}
	var lines int
	for _, r := range h.logs.Find("proxy decision") {
		if r[telemetry.KeyDecision] == telemetry.DecisionDeniedMalformed {
			lines++
			if r[telemetry.KeyReason] != telemetry.ReasonMalformedRequest || r[telemetry.KeyStatus] == nil || r[telemetry.KeyPeer] == nil {
				t.Errorf("decision line lacks fields: %v", r)
			}
		}
	}
	// Sampled: at least one line, at most one per second per listener.
	if lines == 0 || lines > len(tests)+1 {
		t.Errorf("%d denied_malformed lines", lines)
	}
	// A well-formed request on the same listener is not counted.
	r2, err := h.proxyGet("api.example.test", "/")
	if err != nil {
		t.Fatal(err)
	}
	body(t, r2)
	if got := testutil.ToFloat64(h.srv.sm.MalformedRequests.WithLabelValues(telemetry.ListenerHTTP, "400")); got != want[400] {
		t.Errorf("a well-formed request was counted as malformed")
	}
}
