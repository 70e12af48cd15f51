package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/wsecho"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// connectTLS stands in for mitm's Interceptor.TLSConfig (package proxy does
// not import mitm): a leaf per SNI from the test CA, h2 then http/1.1 by
// ALPN. Every name the tests use as an SNI has a leaf, so a refused
// handshake is the tunnel's SNI pin, never a missing certificate.
func (e *testEnv) connectTLS() func() *tls.Config {
	leaves := map[string]*tls.Certificate{}
	for _, n := range []string{"api.example.test", "bare.example.test", "blocked.example.test", "query.example.test", "noscrub.example.test"} {
		c := e.ca.Leaf(e.t, n)
		leaves[n] = &c
	}
	return func() *tls.Config {
		return &tls.Config{
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"h2", "http/1.1"},
			GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
				if c, ok := leaves[hello.ServerName]; ok {
					return c, nil
				}
				return nil, errors.New("test: no leaf for this SNI")
			},
		}
	}
}

func protocols(h2 bool) *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(!h2)
	p.SetHTTP2(h2)
	return &p
}

// curlClient is an agent with HTTPS_PROXY=http://<plain listener>: Go's
// transport sends CONNECT, then TLS inside the tunnel (as curl, wget, git
// and grpc-go do), trusting the test CA.
func (e *testEnv) curlClient(h2 bool) *http.Client {
	pu, err := url.Parse(e.plain.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool()}, Protocols: protocols(h2)}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// rawConnect writes a CONNECT by hand, as Python's http.client does, and
// returns the connection and the response head.
func rawConnect(t *testing.T, addr, target string) (net.Conn, *http.Response) {
	t.Helper()
	c, resp, err := dialConnect(addr, target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, resp
}

// dialConnect is rawConnect for any goroutine (a transport's dialer must
// not call t.Fatal).
func dialConnect(addr, target string) (net.Conn, *http.Response, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, nil, err
	}
	// Python's http.client writes exactly this (HTTP/1.0, then Host).
	fmt.Fprintf(c, "CONNECT %s HTTP/1.0\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err == nil && br.Buffered() != 0 {
		err = fmt.Errorf("%d bytes after the CONNECT response head", br.Buffered())
	}
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("CONNECT %s: %w", target, err)
	}
	return c, resp, nil
}

// tunnelTLS connects to target through a hand-written CONNECT and
// completes TLS with serverName as SNI. Safe on any goroutine; the caller
// closes the connection.
func (e *testEnv) tunnelTLS(target, serverName string, alpn ...string) (*tls.Conn, error) {
	c, resp, err := dialConnect(e.plain.Listener.Addr().String(), target)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %s", target, resp.Status)
	}
	tc := tls.Client(c, &tls.Config{ServerName: serverName, RootCAs: e.ca.Pool(), NextProtos: alpn})
	if err := tc.Handshake(); err != nil {
		tc.Close()
		return nil, err
	}
	return tc, nil
}

// pythonClient is an agent whose every connection is a hand-written
// CONNECT followed by its own TLS handshake.
func (e *testEnv) pythonClient(h2 bool) *http.Client {
	alpn := "http/1.1"
	if h2 {
		alpn = "h2"
	}
	tr := &http.Transport{
		DialTLSContext: func(_ context.Context, _, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			return e.tunnelTLS(addr, host, alpn)
		},
		Protocols: protocols(h2),
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// decisionsBy returns the decision lines of one listener.
func decisionsBy(recs []map[string]any, listener string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["listener"] == listener {
			out = append(out, r)
		}
	}
	return out
}

// TestConnectTunnelInjects is issue 10 item 5: an agent with HTTPS_PROXY
// set (curl-style: Go's transport; Python-style: CONNECT written by hand)
// gets its https:// request through, over HTTP/1.1 and h2, with the
// credential injected; the request and the CONNECT each get their line.
// Before the fix every CONNECT was answered 405.
func TestConnectTunnelInjects(t *testing.T) {
	for _, style := range []string{"curl", "python"} {
		for _, h2 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/h2=%v", style, h2), func(t *testing.T) {
				e := newEnv(t, envOpts{connectTLS: true, http2Origin: true})
				c := e.curlClient(h2)
				if style == "python" {
					c = e.pythonClient(h2)
				}
				req, _ := http.NewRequest(http.MethodGet, "https://api.example.test/v1/models?x=1", nil)
				req.Header.Set("Authorization", "Bearer agent-own")
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || string(b) != `{"path":"/v1/models"}` {
					t.Fatalf("got %d %q", resp.StatusCode, b)
				}
				if wantMajor := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != wantMajor {
					t.Errorf("agent protocol %s, want HTTP/%d", resp.Proto, wantMajor)
				}
				if resp.TLS == nil || resp.TLS.PeerCertificates[0].DNSNames[0] != "api.example.test" {
					t.Error("the tunnel did not present the leaf for the CONNECT host")
				}
				seen := e.lastSeen()
				if got := seen.Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer sk-test-12345" {
					t.Errorf("origin Authorization = %q, want the injected value only", got)
				}
				if seen.Path != "/v1/models?x=1" {
					t.Errorf("origin path %q", seen.Path)
				}
				c.CloseIdleConnections() // ends the tunnel: its line is written
				recs := e.waitDecisions(2)
				inner, outer := decisionsBy(recs, ListenerConnect), decisionsBy(recs, ListenerHTTP)
				if len(inner) != 1 || inner[0]["decision"] != "allow" || inner[0]["host"] != "api.example.test" || inner[0]["port"] != float64(443) || inner[0]["status"] != float64(200) || inner[0]["rule"] != "api.example.test" {
					t.Errorf("request line = %v", inner)
				}
				if len(outer) != 1 || outer[0]["method"] != "CONNECT" || outer[0]["decision"] != "allow" || outer[0]["reason"] != "connect_tunnel" ||
					outer[0]["host"] != "api.example.test" || outer[0]["port"] != float64(443) || outer[0]["status"] != float64(200) || outer[0]["level"] != "INFO" {
					t.Errorf("CONNECT line = %v", outer)
				}
				if n, _ := outer[0]["bytes_out"].(float64); n == 0 {
					t.Error("CONNECT line counts no tunnel bytes")
				}
				if got := testutil.ToFloat64(e.metrics.TLSHandshakes.WithLabelValues(telemetry.HandshakeOK)); got != 1 {
					t.Errorf("tls_handshakes{ok} = %v, want 1", got)
				}
				if got := testutil.ToFloat64(e.metrics.Requests.WithLabelValues("api.example.test", "allow")); got != 1 {
					t.Errorf("requests_total{api.example.test,allow} = %v, want 1 (the request, not the CONNECT)", got)
				}
			})
		}
	}
}

// TestConnectTunnelJudgesEachRequest: requests on one tunnel are judged one
// by one with the interception listener's checks; the Host must name the
// CONNECT host (enforced in tunnels whatever enforce_sni_host_match says).
func TestConnectTunnelJudgesEachRequest(t *testing.T) {
	for _, enforce := range []bool{true, false} {
		t.Run(fmt.Sprintf("enforce_sni_host_match=%v", enforce), func(t *testing.T) {
			testConnectTunnelJudgesEachRequest(t, enforce)
		})
	}
}

func testConnectTunnelJudgesEachRequest(t *testing.T, enforce bool) {
	extra := fmt.Sprintf("https_interception:\n  enabled: false\n  enforce_sni_host_match: %v\n", enforce)
	e := newEnv(t, envOpts{connectTLS: true, extraConfig: extra})
	tc, err := e.tunnelTLS("api.example.test:443", "api.example.test", "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	br := bufio.NewReader(tc)
	steps := []struct {
		req    string
		status int
		reason string
	}{
		{"GET /ok HTTP/1.1\r\nHost: api.example.test\r\n\r\n", 200, "rule_allow"},
		{"GET /port HTTP/1.1\r\nHost: api.example.test:8443\r\n\r\n", 403, reasonInterceptPort},
		{"GET /other HTTP/1.1\r\nHost: bare.example.test\r\n\r\n", 400, reasonSNIHostMismatch},
		{"GET https://bare.example.test/abs HTTP/1.1\r\nHost: bare.example.test\r\n\r\n", 400, reasonAbsoluteForm},
		{"GET /again HTTP/1.1\r\nHost: API.example.test.\r\n\r\n", 200, "rule_allow"},
		{"CONNECT bare.example.test:443 HTTP/1.1\r\nHost: bare.example.test:443\r\n\r\n", 400, reasonAbsoluteForm},
	}
	for _, s := range steps {
		if _, err := io.WriteString(tc, s.req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: %v", s.req, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != s.status {
			t.Errorf("%q: %d, want %d", s.req, resp.StatusCode, s.status)
		}
		if s.status != 200 && resp.Header.Get(HeaderReason) != s.reason {
			t.Errorf("%q: reason %q, want %q", s.req, resp.Header.Get(HeaderReason), s.reason)
		}
	}
	if n := e.hits.Load(); n != 2 {
		t.Errorf("origin got %d requests, want the 2 allowed", n)
	}
	tc.Close()
	recs := e.waitDecisions(len(steps) + 1)
	inner := decisionsBy(recs, ListenerConnect)
	if len(inner) != len(steps) {
		t.Fatalf("%d lines with listener connect, want %d", len(inner), len(steps))
	}
	for i, s := range steps {
		if inner[i]["status"] != float64(s.status) || inner[i]["reason"] != s.reason {
			t.Errorf("line %d = %v, want status %d reason %s", i, inner[i], s.status, s.reason)
		}
	}
	if got := testutil.ToFloat64(e.metrics.HostMismatch); got != 1 {
		t.Errorf("host_mismatch_total = %v, want 1", got)
	}
}

// TestConnectRefusals: with interception on, CONNECT to a denied host or to
// a port other than 443 stays 405 with a body saying why, and its line
// names the target; nothing reaches an origin.
func TestConnectRefusals(t *testing.T) {
	e := newEnv(t, envOpts{connectTLS: true})
	cases := []struct {
		target, host string
		port         float64
		hint, reason string
	}{
		{"blocked.example.test:443", "blocked.example.test", 443, hintConnectDenied, "rule_deny"},
		{"Evil.Test:443", "evil.test", 443, hintConnectDenied, "default_deny"},
		{"ports.example.test:8443", "ports.example.test", 8443, hintConnectPort, reasonConnectPort},
		{"api.example.test:80", "api.example.test", 80, hintConnectPort, reasonConnectPort},
		{"api.example.test", "api.example.test", 443, hintConnectPort, reasonConnectPort},
	}
	for i, c := range cases {
		resp, body := e.raw(fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", c.target, c.target))
		if want := bodyConnect + "\n" + c.hint + "\n"; resp.StatusCode != http.StatusMethodNotAllowed || body != want {
			t.Errorf("%s: got %d %q, want 405 %q", c.target, resp.StatusCode, body, want)
		}
		if got := resp.Header.Get(HeaderReason); got != c.reason {
			t.Errorf("%s: %s = %q, want %q", c.target, HeaderReason, got, c.reason)
		}
		// curl shows a refused CONNECT's headers (-v), never its body.
		if got := resp.Header.Get(HeaderHint); got != c.hint {
			t.Errorf("%s: %s = %q, want %q", c.target, HeaderHint, got, c.hint)
		}
		recs := e.waitDecisions(i + 1)
		l := recs[i]
		if l["method"] != "CONNECT" || l["host"] != c.host || l["port"] != c.port || l["decision"] != "denied_connect" || l["reason"] != c.reason {
			t.Errorf("%s: line = %v", c.target, l)
		}
	}
	e.assertOriginUntouched()
}

// TestConnectSNIMismatchRefused: the leaf is issued only for the CONNECT
// host; another SNI (one BotBox would issue a leaf for) or none is refused
// with a TLS alert, and the CONNECT line says why.
func TestConnectSNIMismatchRefused(t *testing.T) {
	e := newEnv(t, envOpts{connectTLS: true})
	if tc, err := e.tunnelTLS("api.example.test:443", "bare.example.test", "http/1.1"); err == nil {
		tc.Close()
		t.Fatal("handshake with SNI bare.example.test in a tunnel to api.example.test succeeded")
	}
	c, resp := rawConnect(t, e.plain.Listener.Addr().String(), "api.example.test:443")
	if resp.StatusCode != http.StatusOK {
		t.Fatal(resp.Status)
	}
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true}) // no SNI
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake without SNI succeeded")
	}
	e.assertOriginUntouched()
	recs := e.waitDecisions(2)
	for i, want := range []string{reasonSNIHostMismatch, reasonSNIHostMismatch} {
		if recs[i]["method"] != "CONNECT" || recs[i]["reason"] != want || recs[i]["decision"] != "denied_host_mismatch" || recs[i]["level"] != "WARN" || !strings.Contains(fmt.Sprint(recs[i]["error"]), "SNI") {
			t.Errorf("line %d = %v, want reason %s", i, recs[i], want)
		}
	}
	if got := testutil.ToFloat64(e.metrics.TLSHandshakes.WithLabelValues(telemetry.HandshakeIOError)); got != 2 {
		t.Errorf("tls_handshakes{io_error} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(e.metrics.HostMismatch); got != 2 {
		t.Errorf("host_mismatch_total = %v, want 2", got)
	}
	if got := testutil.ToFloat64(e.metrics.Requests.WithLabelValues("unknown", "denied_host_mismatch")); got != 2 {
		t.Errorf("requests_total{unknown,denied_host_mismatch} = %v, want 2 (one per refusal line)", got)
	}
}

// TestConnectTunnelNotTLS: anything but TLS in the tunnel is refused (the
// handshake fails) and the connection closed.
func TestConnectTunnelNotTLS(t *testing.T) {
	e := newEnv(t, envOpts{connectTLS: true})
	c, resp := rawConnect(t, e.plain.Listener.Addr().String(), "api.example.test:443")
	if resp.StatusCode != http.StatusOK {
		t.Fatal(resp.Status)
	}
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	_, _ = io.Copy(io.Discard, c) // returns once BotBox closes
	e.assertOriginUntouched()
	if l := e.waitDecisions(1)[0]; l["reason"] != reasonConnectHandshake || l["error"] == nil {
		t.Errorf("line = %v", l)
	}
}

// TestConnectHandshakeBounded: a client that opens a tunnel and never
// starts TLS is closed after the interception handshake timeout, counted
// as a timeout. (The test only waits for the close; it asserts no duration.)
func TestConnectHandshakeBounded(t *testing.T) {
	e := newEnv(t, envOpts{connectTLS: true})
	e.handler.connect.handshake = 50 * time.Millisecond
	c, resp := rawConnect(t, e.plain.Listener.Addr().String(), "api.example.test:443")
	if resp.StatusCode != http.StatusOK {
		t.Fatal(resp.Status)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from a tunnel that never started TLS")
	}
	if l := e.waitDecisions(1)[0]; l["reason"] != reasonConnectHandshake {
		t.Errorf("line = %v", l)
	}
	if got := testutil.ToFloat64(e.metrics.TLSHandshakes.WithLabelValues(telemetry.HandshakeTimeout)); got != 1 {
		t.Errorf("tls_handshakes{timeout} = %v, want 1", got)
	}
}

// TestConnectTunnelClosedByCloseTunnels: an open CONNECT tunnel is in the
// registry the server closes at its shutdown deadline.
func TestConnectTunnelClosedByCloseTunnels(t *testing.T) {
	e := newEnv(t, envOpts{connectTLS: true})
	tc, err := e.tunnelTLS("api.example.test:443", "api.example.test", "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if e.handler.openTunnels() != 1 {
		t.Fatalf("%d open tunnels, want 1", e.handler.openTunnels())
	}
	e.handler.CloseTunnels()
	if _, err := tc.Read(make([]byte, 1)); err == nil {
		t.Fatal("tunnel still open after CloseTunnels")
	}
	if l := e.waitDecisions(1)[0]; l["method"] != "CONNECT" || l["reason"] != reasonTunnelShutdown {
		t.Errorf("line = %v", l)
	}
	if n := e.handler.openTunnels(); n != 0 {
		t.Errorf("%d tunnels still registered", n)
	}
}

var reBytes = regexp.MustCompile(`"bytes_(in|out)":[0-9]+`)

// TestConnectDecisionLinesGolden holds the log contract of the CONNECT
// path (docs/troubleshooting.md): the refusals, a tunnel's request lines
// and its own line, the handshake failures. A CONNECT line's byte counts
// include TLS records, whose size varies, so they are normalised. Run with
// -update after an intended change and review the diff.
func TestConnectDecisionLinesGolden(t *testing.T) {
	e := newEnv(t, envOpts{connectTLS: true})
	lines := 0
	step := func(n int, do func()) {
		t.Helper()
		do()
		lines += n
		e.waitDecisions(lines)
	}
	step(1, func() { e.raw("CONNECT blocked.example.test:443 HTTP/1.1\r\nHost: blocked.example.test:443\r\n\r\n") })
	step(1, func() { e.raw("CONNECT ports.example.test:8443 HTTP/1.1\r\nHost: ports.example.test:8443\r\n\r\n") })
	step(3, func() {
		tc, err := e.tunnelTLS("api.example.test:443", "api.example.test", "http/1.1")
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		br := bufio.NewReader(tc)
		for _, req := range []string{
			"GET /v1/chat?key=not-logged HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
			"GET /x HTTP/1.1\r\nHost: bare.example.test\r\n\r\n",
		} {
			io.WriteString(tc, req)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	step(1, func() {
		if tc, err := e.tunnelTLS("api.example.test:443", "bare.example.test", "http/1.1"); err == nil {
			tc.Close()
		}
	})
	step(1, func() {
		c, _ := rawConnect(t, e.plain.Listener.Addr().String(), "api.example.test:443")
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
		_, _ = io.Copy(io.Discard, c)
	})

	var got strings.Builder
	for line := range strings.Lines(e.logs.String()) {
		if strings.Contains(line, `"message":"proxy decision"`) {
			line = normaliseDecision(line)
			if strings.Contains(line, `"method":"CONNECT"`) {
				line = reBytes.ReplaceAllString(line, `"bytes_$1":"<N>"`)
			}
			got.WriteString(line)
		}
	}
	path := filepath.Join("testdata", "connect.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s (run go test -update to create it): %v", path, err)
	}
	if d := cmp.Diff(string(want), got.String()); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, d)
	}
}

// TestConnectTunnelCarriesWebSocket: a WebSocket upgrade inside a CONNECT
// tunnel (wss:// with HTTPS_PROXY) is judged and tunnelled like one on the
// interception listener, and both tunnels are logged when they end.
func TestConnectTunnelCarriesWebSocket(t *testing.T) {
	e := newEnv(t, envOpts{connectTLS: true})
	e.originMux.HandleFunc("/ws", wsecho.Handler(nil))
	tc, err := e.tunnelTLS("api.example.test:443", "api.example.test", "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	wsecho.RoundTrip(t, tc, "api.example.test", "/ws", "")
	tc.Close()
	recs := e.waitDecisions(2)
	inner, outer := decisionsBy(recs, ListenerConnect), decisionsBy(recs, ListenerHTTP)
	if len(inner) != 1 || inner[0]["status"] != float64(http.StatusSwitchingProtocols) || inner[0]["decision"] != "allow" {
		t.Errorf("WebSocket line = %v", inner)
	}
	if len(outer) != 1 || outer[0]["reason"] != reasonConnectTunnel {
		t.Errorf("CONNECT line = %v", outer)
	}
	if n := e.handler.openTunnels(); n != 0 {
		t.Errorf("%d tunnels still registered", n)
	}
}
