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
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/engine"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/eventually"
	"github.com/botbox/botbox/internal/testutil/logcapture"
	"github.com/botbox/botbox/internal/testutil/testpki"
	"github.com/botbox/botbox/internal/testutil/wsecho"
	"github.com/botbox/botbox/internal/upstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const testConfig = `
secrets_dir: %s
%s
egress_policy:
  default_action: %s
  rules:
    - host: api.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
        - name: X-Static
          value: static-value
    - host: ports.example.test
      action: allow
      allowed_ports: [443, 8443]
    - host: bare.example.test
      action: allow
    - host: nosecret.example.test
      action: allow
      header_rewrites:
        - name: X-Api-Key
          value: "{value}"
          secret_ref: absent-key
    - host: blocked.example.test
      action: deny
    - host: noscrub.example.test
      action: allow
      scrub_responses: false
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
    - host: query.example.test
      action: allow
      query_rewrites:
        - name: key
          value: "{value}"
          secret_ref: api-key
      header_rewrites:
        - name: Authorization
          value: "{basic:x-access-token}"
          secret_ref: api-key
      remove_headers: [X-Api-Key]
`

// originRecord is what the test origin saw of one request.
type originRecord struct {
	Host   string
	Proto  string
	Header http.Header
	Path   string
}

type testEnv struct {
	t         *testing.T
	ca        *testpki.CA
	origin    *httptest.Server
	originMux *http.ServeMux
	seen      chan originRecord
	hits      atomic.Int64
	handler   *Handler
	plain     *httptest.Server
	logs      *logcapture.Buffer
	metrics   *telemetry.Metrics
	secretDir string
	store     *secrets.Store
	dialAddr  atomic.Pointer[string]
}

type envOpts struct {
	defaultAction  string
	responseHeader time.Duration
	http2Origin    bool
	plainOrigin    bool
	extraConfig    string            // top-level YAML lines added to testConfig
	now            func() time.Time  // the handler's clock (default time.Now)
	guard          upstream.Guard    // the transport's dial guard (default none)
	connectTLS     bool              // serve CONNECT with leaves from the test CA (connect_test.go)
	placeholders   PlaceholderSource // Options.Placeholders (tripwire_test.go)
	// peer, when valid, is the remote address the upstream connections
	// report (the dial still goes to the origin): the address guard judges
	// it (addrguard_test.go).
	peer netip.AddrPort
	// rules, when set, replaces testConfig's rules (YAML list items
	// indented for egress_policy.rules); names are extra DNS names of the
	// origin's certificate (credential_test.go).
	rules string
	names []string
	// credentials builds a credential broker from the config's
	// credentials (credential_test.go), reaching token endpoints with
	// tokenClient.
	credentials bool
	tokenClient *http.Client
}

func newEnv(t *testing.T, o envOpts) *testEnv {
	t.Helper()
	if o.defaultAction == "" {
		o.defaultAction = "deny"
	}
	e := &testEnv{t: t, ca: testpki.NewCA(t, "botbox-test-ca"), seen: make(chan originRecord, 1024), logs: &logcapture.Buffer{}}
	e.originMux = http.NewServeMux()
	e.originMux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
	})
	e.origin = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hits.Add(1)
		select {
		case e.seen <- originRecord{Host: r.Host, Proto: r.Proto, Header: r.Header.Clone(), Path: r.URL.RequestURI()}:
		default:
		}
		e.originMux.ServeHTTP(w, r)
	}))
	if o.plainOrigin {
		e.origin.Start()
	} else {
		e.origin.EnableHTTP2 = o.http2Origin
		names := append([]string{"api.example.test", "ports.example.test", "bare.example.test", "nosecret.example.test", "blocked.example.test", "noscrub.example.test", "query.example.test", "127.0.0.1"}, o.names...)
		e.origin.TLS = &tls.Config{Certificates: []tls.Certificate{e.ca.Leaf(t, names...)}}
		e.origin.StartTLS()
	}
	t.Cleanup(e.origin.Close)
	addr := e.origin.Listener.Addr().String()
	e.dialAddr.Store(&addr)

	e.secretDir = t.TempDir()
	e.writeSecret("api-key", "sk-test-12345\n")
	text := fmt.Sprintf(testConfig, e.secretDir, o.extraConfig, o.defaultAction)
	if o.rules != "" {
		text = fmt.Sprintf("secrets_dir: %s\n%s\negress_policy:\n  default_action: %s\n  rules:\n%s", e.secretDir, o.extraConfig, o.defaultAction, o.rules)
	}
	cfg, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	logger := telemetry.NewLogger(e.logs, nil)
	e.store, err = secrets.Open(secrets.Options{Dir: e.secretDir, Required: cfg.ReadySecretRefs(), Debounce: 20 * time.Millisecond, Resync: time.Hour, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.store.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	rht := o.responseHeader
	if rht == 0 {
		rht = 5 * time.Second
	}
	tr, err := upstream.NewTransport(upstream.Options{
		RootCAs:               e.ca.Pool(),
		ResponseHeaderTimeout: rht,
		ConnectTimeout:        2 * time.Second,
		Guard:                 o.guard,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, *e.dialAddr.Load())
			if err == nil && o.peer.IsValid() {
				c = peerConn{Conn: c, peer: net.TCPAddrFromAddrPort(o.peer)}
			}
			return c, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	e.metrics = telemetry.NewMetrics()
	opts := Options{Config: cfg, Secrets: e.store, Transport: tr, EngineTransport: tr.Sync(), Metrics: e.metrics, Logger: logger, Now: o.now, Placeholders: o.placeholders}
	if o.connectTLS {
		opts.ConnectTLS = e.connectTLS()
	}
	if o.credentials {
		opts.Credentials = e.newBroker(cfg, o.tokenClient)
	}
	e.handler, err = New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.plain = serveHTTP1(t, e.handler.Plain())
	return e
}

// testEngineEnv names the variable that picks the server of the tests'
// plain listener: unset or "botbox", BotBox's HTTP/1.1 engine (package
// engine, the default of http1_engine), which hands HTTP/2, CONNECT and
// upgrades to net/http; "net/http", net/http alone. .ci/run runs this
// package under both, so every test holds on each.
const testEngineEnv = "BOTBOX_TEST_HTTP1_ENGINE"

// serveHTTP1 serves h on a loopback listener as package server's plain
// listener does, with the engine testEngineEnv picks. The returned
// server's URL and Listener are set; use client, not its Client.
func serveHTTP1(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	return serveWith(t, h, os.Getenv(testEngineEnv))
}

// serveWith is serveHTTP1 with the engine named ("net/http", or "" and
// "botbox" for BotBox's).
func serveWith(t *testing.T, h http.Handler, engineName string) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.DisableGeneralOptionsHandler = true // as package server configures it
	srv.Config.Protocols = new(http.Protocols)     // and HTTP/2 with prior knowledge
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	switch v := engineName; v {
	case "net/http":
		srv.Start()
		t.Cleanup(srv.Close)
		return srv
	case "", "botbox":
	default:
		t.Fatalf("%s=%q: want botbox or net/http", testEngineEnv, v)
	}
	eng, err := engine.New(engine.Options{Handler: h, Fallback: srv.Config, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv.URL = "http://" + srv.Listener.Addr().String()
	done := make(chan struct{})
	go func() { defer close(done); _ = eng.Serve(srv.Listener) }()
	t.Cleanup(func() { _ = eng.Close(); <-done })
	return srv
}

// h2cClient is an HTTP/2 client with prior knowledge for the plain
// listener: its requests are served by net/http on either engine (the
// engine hands such a connection over), so they reach the HTTP/2
// upstream path.
func (e *testEnv) h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// onEngine reports whether the tests' plain listener is BotBox's engine
// (testEngineEnv), whose HTTP/1.1 requests go to the origin over the
// synchronous HTTP/1.1 pool.
func onEngine() bool { return os.Getenv(testEngineEnv) != "net/http" }

// client is an HTTP client for the plain listener (httptest's Client is
// nil for a server the engine serves).
func (e *testEnv) client() *http.Client {
	return &http.Client{Transport: &http.Transport{}}
}

func (e *testEnv) writeSecret(name, value string) {
	e.t.Helper()
	tmp := filepath.Join(e.secretDir, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(value), 0o600); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(e.secretDir, name)); err != nil {
		e.t.Fatal(err)
	}
}

// raw sends a literal request on a new connection to the plain listener and
// returns the response with its body read.
func (e *testEnv) raw(req string) (*http.Response, string) {
	e.t.Helper()
	return rawTo(e.t, e.plain.Listener.Addr().String(), req)
}

func rawTo(t *testing.T, addr, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading response to %q: %v", req, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// get sends a transparent-mode request (origin-form, Host header) with extra headers.
func (e *testEnv) get(host, path string, hdr http.Header) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.plain.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Host = host
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := e.client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func (e *testEnv) lastSeen() originRecord {
	e.t.Helper()
	select {
	case r := <-e.seen:
		return r
	case <-time.After(5 * time.Second):
		e.t.Fatal("origin saw no request")
		return originRecord{}
	}
}

func (e *testEnv) assertOriginUntouched() {
	e.t.Helper()
	if n := e.hits.Load(); n != 0 {
		e.t.Fatalf("origin received %d requests, want 0", n)
	}
}

func TestDeniedHostReturns403(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp, body := e.raw("GET http://evil.com/exfil HTTP/1.1\r\nHost: evil.com\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden || body != bodyDenied {
		t.Fatalf("got %d %q, want 403 %q", resp.StatusCode, body, bodyDenied)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain" {
		t.Errorf("content-type = %q, want text/plain", ct)
	}
	e.assertOriginUntouched()
	if got := testutil.ToFloat64(e.metrics.Requests.WithLabelValues("_denied", "deny")); got != 1 {
		t.Errorf("requests_total{_denied,deny} = %v, want 1", got)
	}
}

func TestConnectMethodReturns405(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp, body := e.raw("CONNECT API.example.test:443 HTTP/1.1\r\nHost: API.example.test:443\r\n\r\n")
	// The reference body first, then the hint on its own line.
	if want := bodyConnect + "\n" + hintConnect + "\n"; resp.StatusCode != http.StatusMethodNotAllowed || body != want {
		t.Fatalf("got %d %q, want 405 %q", resp.StatusCode, body, want)
	}
	if got := resp.Header.Get(HeaderReason); got != "connect" {
		t.Errorf("%s = %q, want connect", HeaderReason, got)
	}
	e.assertOriginUntouched()
	if got := testutil.ToFloat64(e.metrics.Requests.WithLabelValues("unknown", "denied_connect")); got != 1 {
		t.Errorf("requests_total{unknown,denied_connect} = %v, want 1", got)
	}
	// The line names the CONNECT target, canonicalised.
	recs := e.logs.Find("proxy decision")
	if len(recs) != 1 || recs[0]["host"] != "api.example.test" || recs[0]["port"] != float64(443) || recs[0]["decision"] != "denied_connect" {
		t.Errorf("decision line = %v", recs)
	}
}

func TestMissingHostReturns400(t *testing.T) {
	e := newEnv(t, envOpts{})
	// HTTP/1.0 may omit Host: BotBox answers with the reference body.
	resp, body := e.raw("GET / HTTP/1.0\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest || body != bodyMissingHost {
		t.Fatalf("HTTP/1.0: got %d %q", resp.StatusCode, body)
	}
	// HTTP/1.1 without Host is refused by Go's strict parser before the handler.
	resp, _ = e.raw("GET / HTTP/1.1\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("HTTP/1.1: got %d, want 400", resp.StatusCode)
	}
	e.assertOriginUntouched()
}

func TestAllowedHostForwardsWithHeaderInjection(t *testing.T) {
	e := newEnv(t, envOpts{})
	hdr := http.Header{}
	hdr.Add("Authorization", "Bearer agent-own-1")
	hdr.Add("authorization", "Bearer agent-own-2")
	hdr.Set("X-Static", "agent-value")
	hdr.Set("X-Other", "kept")
	resp, body := e.get("api.example.test", "/v1/models?limit=2", hdr)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	got := e.lastSeen()
	if v := got.Header.Values("Authorization"); len(v) != 1 || v[0] != "Bearer sk-test-12345" {
		t.Errorf("origin Authorization = %q, want exactly [Bearer sk-test-12345]", v)
	}
	if v := got.Header.Values("X-Static"); len(v) != 1 || v[0] != "static-value" {
		t.Errorf("origin X-Static = %q", v)
	}
	if got.Header.Get("X-Other") != "kept" {
		t.Errorf("X-Other lost")
	}
	for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Via"} {
		if got.Header.Get(h) != "" {
			t.Errorf("origin saw %s = %q; BotBox adds no forwarding headers", h, got.Header.Get(h))
		}
	}
	if got.Host != "api.example.test" || got.Path != "/v1/models?limit=2" {
		t.Errorf("origin saw Host %q path %q", got.Host, got.Path)
	}
	if got := testutil.ToFloat64(e.metrics.HeaderRewrites.WithLabelValues("api.example.test")); got != 1 {
		t.Errorf("header_rewrites_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.metrics.Requests.WithLabelValues("api.example.test", "allow")); got != 1 {
		t.Errorf("requests_total{api.example.test,allow} = %v, want 1", got)
	}
}

func TestAbsoluteFormExplicitProxy(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, target := range []string{"http://api.example.test/a", "https://api.example.test/a", "http://API.Example.Test./a"} {
		resp, body := e.raw("GET " + target + " HTTP/1.1\r\nHost: something-else.test\r\n\r\n")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %q", target, resp.StatusCode, body)
		}
		if got := e.lastSeen(); got.Host != "api.example.test" || got.Header.Get("Authorization") != "Bearer sk-test-12345" {
			t.Errorf("%s: origin saw host %q auth %q", target, got.Host, got.Header.Get("Authorization"))
		}
	}
}

func TestMissingSecretReturns500AndForwardsNothing(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp, body := e.get("nosecret.example.test", "/", nil)
	if resp.StatusCode != http.StatusInternalServerError || body != bodySecretMissing {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	e.assertOriginUntouched()
	recs := e.logs.Find("proxy decision")
	if len(recs) != 1 || fmt.Sprint(recs[0]["secret_ref"]) != "[absent-key]" || recs[0]["reason"] != "secret_missing" || recs[0]["level"] != "ERROR" {
		t.Errorf("decision log = %v", recs)
	}
	if got := resp.Header.Get(HeaderReason); got != "secret_missing" {
		t.Errorf("%s = %q, want secret_missing", HeaderReason, got)
	}
}

func TestUpstreamTLSOnly(t *testing.T) {
	// A plain-HTTP origin cannot be reached: BotBox always speaks TLS upstream.
	e := newEnv(t, envOpts{plainOrigin: true})
	resp, body := e.get("bare.example.test", "/", nil)
	if resp.StatusCode != http.StatusBadGateway || body != bodyUpstreamFailed {
		t.Fatalf("got %d %q, want 502", resp.StatusCode, body)
	}
	if got := testutil.ToFloat64(e.metrics.UpstreamErrors.WithLabelValues("bare.example.test", "connection_error")); got != 1 {
		t.Errorf("upstream_errors{connection_error} = %v", got)
	}
}

func TestUpstreamUnreachableReturns502(t *testing.T) {
	e := newEnv(t, envOpts{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	e.dialAddr.Store(&dead)
	resp, body := e.get("bare.example.test", "/", nil)
	if resp.StatusCode != http.StatusBadGateway || body != bodyUpstreamFailed {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

// TestDialGuardRefusalReturns403: an address the dial guard refuses ends
// the request with 403 and reason address_guard, nothing reaches the
// origin, and the guard is told which host the dial is for.
func TestDialGuardRefusalReturns403(t *testing.T) {
	var sawHost atomic.Pointer[string]
	e := newEnv(t, envOpts{guard: func(ctx context.Context, addr netip.AddrPort) error {
		if p, ok := upstream.DialPolicyFrom(ctx); ok {
			sawHost.Store(&p.Host)
		}
		return errors.New("test guard refuses every address")
	}})
	resp, body := e.get("bare.example.test", "/", nil)
	if resp.StatusCode != http.StatusForbidden || body != bodyAddrDenied {
		t.Fatalf("got %d %q, want 403 %q", resp.StatusCode, body, bodyAddrDenied)
	}
	if got := resp.Header.Get(HeaderReason); got != reasonAddrDenied {
		t.Errorf("%s = %q, want %q", HeaderReason, got, reasonAddrDenied)
	}
	if h := sawHost.Load(); h == nil || *h != "bare.example.test" {
		t.Errorf("guard saw DialPolicy host %v, want bare.example.test", h)
	}
	e.assertOriginUntouched()
	if got := testutil.ToFloat64(e.metrics.UpstreamErrors.WithLabelValues("bare.example.test", telemetry.UpstreamAddrDenied)); got != 1 {
		t.Errorf("upstream_errors{%s} = %v, want 1", telemetry.UpstreamAddrDenied, got)
	}
}

func TestTimeoutReturns504(t *testing.T) {
	e := newEnv(t, envOpts{responseHeader: 100 * time.Millisecond})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	e.originMux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	resp, body := e.get("bare.example.test", "/slow", nil)
	if resp.StatusCode != http.StatusGatewayTimeout || body != bodyGatewayTimeout {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if got := testutil.ToFloat64(e.metrics.UpstreamErrors.WithLabelValues("bare.example.test", "timeout")); got != 1 {
		t.Errorf("upstream_errors{timeout} = %v", got)
	}
}

func TestUpstreamErrorStatusCounted(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.originMux.HandleFunc("/unauth", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusUnauthorized) })
	resp, _ := e.get("bare.example.test", "/unauth", nil)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := testutil.ToFloat64(e.metrics.UpstreamErrors.WithLabelValues("bare.example.test", "401")); got != 1 {
		t.Errorf("upstream_errors{401} = %v", got)
	}
}

func TestPortRules(t *testing.T) {
	e := newEnv(t, envOpts{})
	tests := []struct {
		host string
		want int
	}{
		{"api.example.test", 200},
		{"api.example.test:443", 200},
		{"api.example.test:8443", 403},
		{"api.example.test:80", 200}, // an explicit :80 is the default port (plainDefaultPort)
		{"ports.example.test:8443", 200},
		{"ports.example.test", 200},
		{"ports.example.test:9999", 403},
	}
	for _, tt := range tests {
		resp, body := e.get(tt.host, "/", nil)
		if resp.StatusCode != tt.want {
			t.Errorf("Host %q: %d %q, want %d", tt.host, resp.StatusCode, body, tt.want)
		}
	}
	// The port is kept in the upstream authority when it is not 443.
	e.get("ports.example.test:8443", "/", nil)
	for {
		r := e.lastSeen()
		if strings.HasPrefix(r.Host, "ports.example.test:8443") {
			break
		}
	}
}

// TestHostTricksNeverReachDeniedHost is the §10.3 #3 regression: under
// default allow, variants of a denied host must not be forwarded.
func TestHostTricksNeverReachDeniedHost(t *testing.T) {
	e := newEnv(t, envOpts{defaultAction: "allow"})
	tricks := []struct {
		host string
		want int
	}{
		{"blocked.example.test", 403},
		{"blocked.example.test.", 403},
		{"BLOCKED.example.TEST", 403},
		{"blocked.example.test:443", 403},
		{"x@blocked.example.test", 400},
		{"blocked.example.test..", 400},
		{"blocked.example.test:443:443", 400},
		{"blocked.example.test#x", 400},
		{"blocked.example.test%2e", 400},
		{"bl\u043eocked.example.test", 400}, // not valid in a Host header
		{"127.1", 400},
		{"0x7f.0.0.1", 400},
		{"[::1", 400},
	}
	for _, tt := range tricks {
		resp, body := e.raw("GET / HTTP/1.1\r\nHost: " + tt.host + "\r\n\r\n")
		if resp.StatusCode != tt.want {
			t.Errorf("Host %q: %d %q, want %d", tt.host, resp.StatusCode, body, tt.want)
		}
	}
	e.assertOriginUntouched()
}

func TestDuplicateHostHeaderReturns400(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp, _ := e.raw("GET / HTTP/1.1\r\nHost: api.example.test\r\nHost: evil.test\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("got %d, want 400", resp.StatusCode)
	}
	e.assertOriginUntouched()
}

func TestAsteriskFormReturns400(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp, body := e.raw("OPTIONS * HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("got %d %q, want 400 (the reference answered 500)", resp.StatusCode, body)
	}
	e.assertOriginUntouched()
}

func TestHopByHopStripping(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.originMux.HandleFunc("/hop", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "X-Resp-Hop")
		w.Header().Set("X-Resp-Hop", "secret-ish")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Resp-Kept", "yes")
	})
	resp, body := e.raw("GET /hop HTTP/1.1\r\nHost: api.example.test\r\n" +
		"Connection: keep-alive, X-Custom-Hop, Authorization, X-Static\r\n" +
		"X-Custom-Hop: drop-me\r\nKeep-Alive: 300\r\nProxy-Authorization: Basic Zm9v\r\n" +
		"Proxy-Connection: keep-alive\r\nTE: gzip\r\nX-Kept: yes\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	got := e.lastSeen()
	for _, h := range []string{"X-Custom-Hop", "Keep-Alive", "Proxy-Authorization", "Proxy-Connection", "Te", "Connection"} {
		if v := got.Header.Values(h); len(v) != 0 {
			t.Errorf("origin saw hop-by-hop %s = %q", h, v)
		}
	}
	// Naming the injected headers in Connection must not remove them.
	if got.Header.Get("Authorization") != "Bearer sk-test-12345" || got.Header.Get("X-Static") != "static-value" {
		t.Errorf("injected headers removed via Connection: %v", got.Header)
	}
	if got.Header.Get("X-Kept") != "yes" {
		t.Error("end-to-end header dropped")
	}
	if resp.Header.Get("X-Resp-Hop") != "" || resp.Header.Get("Keep-Alive") != "" {
		t.Errorf("response hop-by-hop headers passed back: %v", resp.Header)
	}
	if resp.Header.Get("X-Resp-Kept") != "yes" {
		t.Error("response end-to-end header dropped")
	}
}

// TestHTTP2Upstream: an origin that offers HTTP/2 gets it from net/http's
// path (an agent on HTTP/2 on either engine, an agent on HTTP/1.1 when
// net/http serves it); an HTTP/1.1 agent on BotBox's engine goes out over
// the synchronous HTTP/1.1 pool (issue 24's trade-off, docs/performance.md).
func TestHTTP2Upstream(t *testing.T) {
	e := newEnv(t, envOpts{http2Origin: true})
	resp, body := e.get("api.example.test", "/h2", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	got := e.lastSeen()
	want := "HTTP/2.0"
	if onEngine() {
		want = "HTTP/1.1"
	}
	if got.Proto != want {
		t.Errorf("HTTP/1.1 agent: origin proto = %s, want %s", got.Proto, want)
	}
	if got.Header.Get("Authorization") != "Bearer sk-test-12345" {
		t.Errorf("no injection: %v", got.Header)
	}
	req, _ := http.NewRequest(http.MethodGet, e.plain.URL+"/h2", nil)
	req.Host = "api.example.test"
	resp, err := e.h2cClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	got = e.lastSeen()
	if got.Proto != "HTTP/2.0" {
		t.Errorf("HTTP/2 agent: origin proto = %s, want HTTP/2.0", got.Proto)
	}
	if got.Header.Get("Authorization") != "Bearer sk-test-12345" {
		t.Errorf("no injection over h2: %v", got.Header)
	}
}

func TestSSEStreamsUnbuffered(t *testing.T) {
	e := newEnv(t, envOpts{})
	next := make(chan struct{})
	e.originMux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range 3 {
			fmt.Fprintf(w, "data: event-%d\n\n", i)
			_ = rc.Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	})
	req, _ := http.NewRequest(http.MethodGet, e.plain.URL+"/events", nil)
	req.Host = "api.example.test"
	resp, err := e.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		// The origin does not send event i+1 until the client has read event i:
		// a buffering proxy would deadlock here.
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if want := fmt.Sprintf("data: event-%d\n", i); line != want {
			t.Fatalf("got %q, want %q", line, want)
		}
		_, _ = br.ReadString('\n')
		next <- struct{}{}
	}
}

func TestWebSocketPassThrough(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.originMux.HandleFunc("/ws", wsecho.Handler(func(r *http.Request) string {
		if r.Header.Get("Authorization") != "Bearer sk-test-12345" {
			return "credential not injected into the upgrade request"
		}
		return ""
	}))
	c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wsecho.RoundTrip(t, c, "api.example.test", "/ws", "Authorization: Bearer agent\r\n")
}

// TestLargeBodyStreamsWithFlatMemory streams 256 MiB through the proxy and
// samples the heap: a buffering proxy would need at least the body size.
func TestLargeBodyStreamsWithFlatMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("256 MiB stream skipped in -short mode")
	}
	const size = 256 << 20
	e := newEnv(t, envOpts{})
	chunk := make([]byte, 64<<10)
	e.originMux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	req, _ := http.NewRequest(http.MethodGet, e.plain.URL+"/big", nil)
	req.Host = "api.example.test"
	resp, err := e.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	close(stop)
	wg.Wait()
	if err != nil || n != size {
		t.Fatalf("read %d bytes, %v; want %d", n, err, size)
	}
	if p := peak.Load(); p > 64<<20 {
		t.Errorf("peak heap in use %d MiB while streaming 256 MiB; want < 64 MiB", p>>20)
	}
}

func TestRotationUnderConcurrentRequests(t *testing.T) {
	e := newEnv(t, envOpts{})
	var wg sync.WaitGroup
	var failures, sawNew atomic.Int64
	stop := make(chan struct{})
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodGet, e.plain.URL+"/", nil)
				req.Host = "api.example.test"
				resp, err := client.Do(req)
				if err != nil {
					failures.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failures.Add(1)
				}
			}
		}()
	}
	drain := func() {
		for {
			select {
			case r := <-e.seen:
				switch r.Header.Get("Authorization") {
				case "Bearer sk-test-12345":
				case "Bearer sk-rotated-67890":
					sawNew.Add(1)
				default:
					failures.Add(1)
				}
			default:
				return
			}
		}
	}
	e.writeSecret("api-key", "sk-rotated-67890\n")
	eventually.Eventually(t, 10*time.Second, func() bool {
		drain()
		return sawNew.Load() > 0
	}, "the rotated secret is used")
	close(stop)
	wg.Wait()
	drain()
	if failures.Load() != 0 {
		t.Errorf("%d requests failed or carried a wrong credential during rotation", failures.Load())
	}
	if sawNew.Load() == 0 {
		t.Error("rotated secret never used")
	}
}

// TestCanarySecretNeverLeaks runs allowed, failing and denied requests with a
// canary secret and searches everything an agent or operator can see.
func TestCanarySecretNeverLeaks(t *testing.T) {
	e := newEnv(t, envOpts{})
	const canary = "CANARY-7f3b9c2d-do-not-leak"
	e.writeSecret("api-key", canary+"\n")
	eventually.Eventually(t, 5*time.Second, func() bool {
		v, ok := e.store.Snapshot().Lookup("api-key")
		return ok && string(v.Reveal()) == canary
	}, "canary secret loaded")
	e.originMux.HandleFunc("/echo-error", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "upstream says no", 500) })
	// Origins that reflect the injected header (scrub_test.go): the
	// responses must not show it either (issue 13).
	echoOrigin(e)
	var seenByAgent strings.Builder
	for _, host := range []string{"api.example.test", "nosecret.example.test", "blocked.example.test", "evil.test"} {
		for _, path := range []string{"/", "/echo-error", "/echo/json", "/echo/b64", "/echo/redirect", "/echo/trailer", "/echo/encoded/gzip"} {
			resp, body := e.get(host, path, http.Header{"Authorization": {"Bearer agent"}})
			fmt.Fprintf(&seenByAgent, "%d %v %s %v\n", resp.StatusCode, resp.Header, body, resp.Trailer)
		}
	}
	dead := "127.0.0.1:1"
	e.dialAddr.Store(&dead)
	resp, body := e.get("api.example.test", "/", nil)
	fmt.Fprintf(&seenByAgent, "%d %v %s\n", resp.StatusCode, resp.Header, body)

	var metrics strings.Builder
	mfs, err := e.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		fmt.Fprintln(&metrics, mf.String())
	}
	for name, text := range map[string]string{"logs": e.logs.String(), "agent responses": seenByAgent.String(), "metrics": metrics.String()} {
		if strings.Contains(text, canary) || strings.Contains(text, "7f3b9c2d") || reveals(text, canary) {
			t.Errorf("canary secret found in %s", name)
		}
	}
	if !strings.Contains(e.logs.String(), "proxy decision") {
		t.Error("no decision lines captured; the search above proves nothing")
	}
}

func TestDecisionLogLine(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.get("api.example.test", "/v1/chat?api_key=query-secret", nil)
	e.get("evil.test", "/x", nil)
	recs := e.logs.Find("proxy decision")
	if len(recs) != 2 {
		t.Fatalf("got %d decision lines, want 2: %s", len(recs), e.logs.String())
	}
	allow, deny := recs[0], recs[1]
	for _, k := range []string{"request_id", "listener", "host", "port", "method", "path", "decision", "rule", "reason", "status", "upstream_status", "duration_ms", "bytes_in", "bytes_out", "header_rewritten", "secret_ref"} {
		if _, ok := allow[k]; !ok {
			t.Errorf("allow line lacks %q: %v", k, allow)
		}
	}
	if allow["decision"] != "allow" || allow["host"] != "api.example.test" || allow["path"] != "/v1/chat" || allow["status"] != float64(200) || allow["rule"] != "api.example.test" {
		t.Errorf("allow line = %v", allow)
	}
	if deny["decision"] != "deny" || deny["status"] != float64(403) || deny["level"] != "WARN" {
		t.Errorf("deny line = %v", deny)
	}
	if strings.Contains(e.logs.String(), "query-secret") {
		t.Error("query string logged")
	}
}

// TestMetricLabelsAreClosedSet is the §10.3 #4 regression: under default
// allow, hosts that no rule names never become label values.
func TestMetricLabelsAreClosedSet(t *testing.T) {
	e := newEnv(t, envOpts{defaultAction: "allow"})
	e.originMux.HandleFunc("/err", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(502) })
	for i := range 5 {
		e.get(fmt.Sprintf("attacker-%d.example.test", i), "/err", nil)
	}
	e.get("evil.test:8443", "/", nil) // denied (port)
	mfs, err := e.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"_default_allow": true, "_denied": true, "unknown": true}
	for _, r := range []string{"api.example.test", "ports.example.test", "bare.example.test", "nosecret.example.test", "blocked.example.test"} {
		allowed[r] = true
	}
	seen := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "host" {
					seen++
					if !allowed[l.GetValue()] {
						t.Errorf("%s has host label %q, not from the closed set", mf.GetName(), l.GetValue())
					}
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no host labels gathered; the check proves nothing")
	}
	// The origin's certificate does not cover these names: each is a TLS
	// failure, counted under _default_allow, never under the host.
	if got := testutil.ToFloat64(e.metrics.UpstreamErrors.WithLabelValues("_default_allow", "connection_error")); got != 5 {
		t.Errorf("upstream_errors{_default_allow,connection_error} = %v, want 5", got)
	}
}

// TestGenerationSwapTakesEffect: the handler reads the generation in force
// per request, so a Store on the shared generation.Current (what a policy
// reload will do) changes the next decision without a new Handler.
func TestGenerationSwapTakesEffect(t *testing.T) {
	e := newEnv(t, envOpts{})
	if resp, _ := e.get("bare.example.test", "/", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("before the swap: %d, want 200", resp.StatusCode)
	}
	<-e.seen
	cfg, err := config.Parse([]byte(fmt.Sprintf("secrets_dir: %s\negress_policy:\n  default_action: deny\n  rules:\n    - host: bare.example.test\n      action: deny\n", e.secretDir)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.handler.gen.Store(cfg); err != nil {
		t.Fatal(err)
	}
	resp, body := e.get("bare.example.test", "/", nil)
	if resp.StatusCode != http.StatusForbidden || body != bodyDenied {
		t.Fatalf("after the swap: %d %q, want 403 %q", resp.StatusCode, body, bodyDenied)
	}
	if n := e.hits.Load(); n != 1 {
		t.Fatalf("origin received %d requests, want only the one before the swap", n)
	}
}
