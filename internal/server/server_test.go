package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/eventually"
	"github.com/botbox/botbox/internal/testutil/logcapture"
	"github.com/botbox/botbox/internal/testutil/testpki"
	"github.com/botbox/botbox/internal/testutil/wsecho"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const canary = "CANARY-c0ffee-42-never-log"

type harness struct {
	t         *testing.T
	srv       *Server
	addrs     Addrs
	logs      *logcapture.Buffer
	metrics   *telemetry.Metrics
	botboxCA  *testpki.CA
	originCA  *testpki.CA
	origin    *httptest.Server
	seen      chan http.Header
	secretDir string
	// probeKeyFile is where the server wrote its probe key.
	probeKeyFile string
	// yaml is the configuration the server started with; cfgPath, when
	// harnessOpts.configFile is set, the file it was loaded from.
	yaml, cfgPath string
	// uploadsSeen and uploadsComplete count the origin's /upload requests
	// and those whose body arrived complete.
	uploadsSeen, uploadsComplete atomic.Int64
	cancel                       context.CancelFunc
	done                         chan error
}

type harnessOpts struct {
	extraYAML      string // appended to the top level
	rules          string // egress_policy rules (list items) replacing the default two
	interception   string // https_interception block body ("" = disabled)
	maxConnections int
	writeSecret    bool
	configFile     bool // load from a Kubernetes-style ConfigMap dir (reload tests)
	logLevel       *slog.LevelVar
	shutdown       int // seconds
	// wrapListen, when set, wraps each bound listener; addr is the
	// configured address (port 18080, 18443 or 19090) before the ephemeral
	// port replaces it.
	wrapListen func(addr string, ln net.Listener) net.Listener
	// origin, when set, replaces the origin's handler (set before the
	// origin starts, so that no request races the change).
	origin http.Handler
	// strictGuard leaves address_guard at its defaults: the loopback
	// origin is then refused. Otherwise the harness opts in
	// (loopbackOptIn).
	strictGuard bool
}

// loopbackOptIn opens the harness's loopback origin to the address guard,
// which is on by default and refuses loopback.
const loopbackOptIn = "address_guard:\n  allowed_cidrs: [127.0.0.0/8, \"::1\"]\n"

// defaultRules is the harness's policy unless harnessOpts.rules is set.
const defaultRules = `    - host: api.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
    - host: other.example.test
      action: allow
    - host: blocked.example.test
      action: deny
`

func ephemeral(network, addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	return net.Listen(network, net.JoinHostPort(host, "0"))
}

func start(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	h := &harness{t: t, logs: &logcapture.Buffer{}, seen: make(chan http.Header, 256), done: make(chan error, 1)}
	h.botboxCA = testpki.NewCA(t, "botbox-test-interception-ca")
	h.originCA = testpki.NewCA(t, "origin-test-ca")
	h.origin = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case h.seen <- r.Header.Clone():
		default:
		}
		switch r.URL.Path {
		case "/upload":
			// Records what arrived and what arrived complete (a body read
			// to its end without error).
			h.uploadsSeen.Add(1)
			n, err := io.Copy(io.Discard, r.Body)
			if err == nil {
				h.uploadsComplete.Add(1)
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"bytes": n, "authorization": r.Header.Get("Authorization") != ""})
		case "/ws":
			wsecho.Handler(nil)(w, r)
		case "/stream":
			// gRPC-style bidirectional stream: echo each line as it arrives,
			// then a trailer.
			w.Header().Set("Trailer", "Grpc-Status")
			w.Header().Set("Content-Type", "application/grpc")
			rc := http.NewResponseController(w)
			_ = rc.EnableFullDuplex()
			br := bufio.NewReader(r.Body)
			for {
				line, err := br.ReadString('\n')
				if line != "" {
					fmt.Fprintf(w, "echo:%s", line)
					_ = rc.Flush()
				}
				if err != nil {
					break
				}
			}
			w.Header().Set("Grpc-Status", "0")
		case "/echo":
			// An origin reflecting the injected credential (issue 13): in
			// a header, a cookie and the body, raw and base64.
			auth := r.Header.Get("Authorization")
			w.Header().Set("X-Echo", auth)
			w.Header().Set("Set-Cookie", "t="+base64.StdEncoding.EncodeToString([]byte(auth)))
			_ = json.NewEncoder(w).Encode(map[string]any{"headers": r.Header, "b64": base64.StdEncoding.EncodeToString([]byte(auth))})
		default:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"proto": r.Proto, "host": r.Host, "authorization": r.Header.Get("Authorization") != ""})
		}
	}))
	if o.origin != nil {
		h.origin.Config.Handler = o.origin
	}
	h.origin.EnableHTTP2 = true
	h.origin.TLS = &tls.Config{Certificates: []tls.Certificate{h.originCA.Leaf(t, "api.example.test", "other.example.test")}}
	h.origin.StartTLS()
	t.Cleanup(h.origin.Close)

	dir := t.TempDir()
	h.secretDir = filepath.Join(dir, "secrets")
	if err := os.Mkdir(h.secretDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if o.writeSecret {
		h.writeSecret(canary)
	}
	maxConn := o.maxConnections
	if maxConn == 0 {
		maxConn = 64
	}
	shutdown := o.shutdown
	if shutdown == 0 {
		shutdown = 5
	}
	rules := o.rules
	if rules == "" {
		rules = defaultRules
	}
	yaml := fmt.Sprintf(`
listen_port: 18080
metrics_port: 19090
secrets_dir: %s
max_connections: %d
shutdown_timeout_seconds: %d
secrets_reload_debounce_ms: 50
%s
egress_policy:
  default_action: deny
  rules:
%s`, h.secretDir, maxConn, shutdown, o.extraYAML, rules)
	if o.interception != "" {
		certPath, keyPath := h.botboxCA.WriteFiles(t, dir)
		yaml += fmt.Sprintf("https_interception:\n  enabled: true\n  listen_port: 18443\n  ca_cert_path: %s\n  ca_key_path: %s\n%s", certPath, keyPath, o.interception)
	}
	if !o.strictGuard {
		yaml = loopbackOptIn + yaml
	}
	h.yaml = yaml
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yaml)
	}
	if o.configFile {
		h.cfgPath = filepath.Join(dir, "config", "config.yaml")
		h.writeConfig(yaml)
	}
	h.metrics = telemetry.NewMetrics()
	originAddr := h.origin.Listener.Addr().String()
	listen := ephemeral
	if o.wrapListen != nil {
		listen = func(network, addr string) (net.Listener, error) {
			ln, err := ephemeral(network, addr)
			if err != nil {
				return nil, err
			}
			return o.wrapListen(addr, ln), nil
		}
	}
	h.probeKeyFile = filepath.Join(dir, "probe.key")
	h.srv, err = New(cfg, Options{
		Logger:        telemetry.NewLogger(h.logs, nil),
		Metrics:       h.metrics,
		Listen:        listen,
		ProbeKeyFile:  h.probeKeyFile,
		ConfigPath:    h.cfgPath,
		LogLevel:      o.logLevel,
		UpstreamRoots: h.originCA.Pool(),
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, originAddr)
		},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.srv.Run(ctx) }()
	select {
	case <-h.srv.Bound():
	case err := <-h.done:
		t.Fatalf("Run: %v", err)
	}
	h.addrs, err = h.srv.Addrs()
	if err != nil {
		t.Fatalf("Addrs: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(15 * time.Second):
			t.Error("server did not stop")
		}
		for _, s := range []string{canary} {
			if strings.Contains(h.logs.String(), s) {
				t.Errorf("secret value found in logs")
			}
		}
	})
	return h
}

func (h *harness) writeSecret(v string) {
	h.t.Helper()
	tmp := filepath.Join(h.secretDir, ".api-key.tmp")
	if err := os.WriteFile(tmp, []byte(v+"\n"), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(h.secretDir, "api-key")); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) health() (int, string) {
	h.t.Helper()
	resp, err := http.Get("http://" + h.addrs.Metrics.String() + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (h *harness) waitHealth(want int) {
	h.t.Helper()
	eventually.Eventually(h.t, 10*time.Second, func() bool { code, _ := h.health(); return code == want }, fmt.Sprintf("/healthz answers %d", want))
}

// interceptClient connects to the interception listener as an app whose
// connection to host:443 was redirected there, trusting the BotBox CA.
func (h *harness) interceptClient(serverName string, h2 bool) *http.Client {
	addr := h.addrs.Intercept[0].String()
	tlsCfg := &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: serverName}
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(!h2)
	protocols.SetHTTP2(h2)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, DialContext: dial, Protocols: &protocols}}
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (h *harness) lastSeen() http.Header {
	h.t.Helper()
	select {
	case hd := <-h.seen:
		return hd
	case <-time.After(5 * time.Second):
		h.t.Fatal("origin saw nothing")
		return nil
	}
}

func TestInterceptionInjectsOverHTTP1AndHTTP2(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, interception: "  deny_handshake_on_disallowed_sni: false\n"})
	for _, h2 := range []bool{false, true} {
		c := h.interceptClient("api.example.test", h2)
		req, _ := http.NewRequest(http.MethodGet, "https://api.example.test/v1/models", nil)
		req.Header.Set("Authorization", "Bearer agent-own")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("h2=%v: %v", h2, err)
		}
		b := body(t, resp)
		if resp.StatusCode != 200 {
			t.Fatalf("h2=%v: %d %s", h2, resp.StatusCode, b)
		}
		wantProto := "HTTP/1.1"
		if h2 {
			wantProto = "HTTP/2.0"
		}
		if resp.Proto != wantProto {
			t.Errorf("client proto = %s, want %s", resp.Proto, wantProto)
		}
		if got := h.lastSeen().Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+canary {
			t.Errorf("h2=%v: origin Authorization = %d values", h2, len(got))
		}
		if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 || resp.TLS.PeerCertificates[0].DNSNames[0] != "api.example.test" {
			t.Errorf("unexpected leaf")
		}
	}
	if got := testutil.ToFloat64(h.metrics.TLSHandshakes.WithLabelValues("ok")); got != 2 {
		t.Errorf("tls_handshakes{ok} = %v, want 2 (one per connection)", got)
	}
	if got := testutil.ToFloat64(h.metrics.CertIssued.WithLabelValues("issued")); got != 1 {
		t.Errorf("cert_issued{issued} = %v, want 1 (second connection hits the cache)", got)
	}
}

func TestInterceptionGRPCStyleStreamingOverH2(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, interception: "  enforce_sni_host_match: true\n"})
	c := h.interceptClient("api.example.test", true)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, "https://api.example.test/stream", pr)
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	respCh := make(chan *http.Response, 1)
	errCh := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			errCh <- err
			return
		}
		respCh <- resp
	}()
	fmt.Fprint(pw, "msg-0\n")
	var resp *http.Response
	select {
	case resp = <-respCh:
	case err := <-errCh:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("no response head while the request stream is open")
	}
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("echo:msg-%d\n", i) {
			t.Fatalf("message %d: %q %v", i, line, err)
		}
		if i < 2 {
			fmt.Fprintf(pw, "msg-%d\n", i+1)
		}
	}
	pw.Close()
	_, _ = io.Copy(io.Discard, br)
	resp.Body.Close()
	if resp.Trailer.Get("Grpc-Status") != "0" {
		t.Errorf("trailer Grpc-Status = %q, want 0", resp.Trailer.Get("Grpc-Status"))
	}
	if got := h.lastSeen().Get("Authorization"); got != "Bearer "+canary {
		t.Error("streaming request not injected")
	}
}

func rawTLS(t *testing.T, addr string, cfg *tls.Config, req string) (*http.Response, string) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestInterceptionRejections covers reference §3.2 step 4 and §9.7's
// integration cases; unlike the reference, each is logged and counted.
func TestInterceptionRejections(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, interception: "  enforce_sni_host_match: true\n"})
	addr := h.addrs.Intercept[0].String()
	cfg := func(sni string) *tls.Config {
		return &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: sni, NextProtos: []string{"http/1.1"}}
	}
	tests := []struct {
		name, sni, req string
		status         int
		body, decision string
	}{
		{"absolute-form", "api.example.test", "GET http://api.example.test:9999/bypass HTTP/1.1\r\nHost: api.example.test\r\n\r\n", 400, "absolute-form request not allowed on HTTPS interception listener", "denied_absolute_form"},
		{"absolute-form matching", "api.example.test", "GET https://api.example.test:443/safe HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n", 400, "absolute-form request not allowed on HTTPS interception listener", "denied_absolute_form"},
		{"connect", "api.example.test", "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n", 400, "absolute-form request not allowed on HTTPS interception listener", "denied_absolute_form"},
		{"missing host", "api.example.test", "GET / HTTP/1.0\r\n\r\n", 400, "missing Host header", "denied_no_host"},
		{"non-443 host port", "api.example.test", "GET / HTTP/1.1\r\nHost: api.example.test:8443\r\n\r\n", 403, "HTTPS interception listener only accepts port 443 traffic", "denied_port"},
		{"sni host mismatch", "api.example.test", "GET / HTTP/1.1\r\nHost: other.example.test\r\n\r\n", 400, "SNI/Host header mismatch", "denied_host_mismatch"},
		{"disallowed sni gets 403", "evil.example.test", "GET / HTTP/1.1\r\nHost: evil.example.test\r\n\r\n", 403, "host not allowed", "deny"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, b := rawTLS(t, addr, cfg(tt.sni), tt.req)
			if resp.StatusCode != tt.status || b != tt.body {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, b, tt.status, tt.body)
			}
			found := false
			for _, r := range h.logs.Find("proxy decision") {
				if r["decision"] == tt.decision && r["listener"] == "https" {
					found = true
				}
			}
			if !found {
				t.Errorf("no decision line with decision=%s", tt.decision)
			}
		})
	}
	if got := testutil.ToFloat64(h.metrics.HostMismatch); got != 1 {
		t.Errorf("host_mismatch_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.metrics.Requests.WithLabelValues("unknown", "denied_absolute_form")); got != 3 {
		t.Errorf("requests_total{unknown,denied_absolute_form} = %v, want 3", got)
	}
	select {
	case <-h.seen:
		t.Error("origin received a rejected request")
	default:
	}
}

func TestInterceptionHandshakeRefusals(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, interception: "  deny_handshake_on_disallowed_sni: true\n"})
	addr := h.addrs.Intercept[0].String()
	// Disallowed SNI: handshake refused.
	_, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: "evil.example.test"})
	if err == nil {
		t.Error("handshake for a disallowed SNI succeeded")
	}
	// No SNI (an IP literal target): refused.
	_, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err == nil {
		t.Error("handshake without SNI succeeded")
	}
	// Allowed SNI: fine.
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: "api.example.test"})
	if err != nil {
		t.Fatalf("allowed SNI: %v", err)
	}
	c.Close()
	eventually.Eventually(t, 5*time.Second, func() bool {
		return testutil.ToFloat64(h.metrics.TLSHandshakes.WithLabelValues("io_error")) >= 2 && testutil.ToFloat64(h.metrics.TLSHandshakes.WithLabelValues("ok")) >= 1
	}, "three handshakes counted")
	if got := testutil.ToFloat64(h.metrics.TLSHandshakes.WithLabelValues("io_error")); got != 2 {
		t.Errorf("tls_handshakes{io_error} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(h.metrics.TLSHandshakes.WithLabelValues("ok")); got != 1 {
		t.Errorf("tls_handshakes{ok} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.metrics.CertIssued.WithLabelValues("denied")); got != 1 {
		t.Errorf("cert_issued{denied} = %v, want 1", got)
	}
}

func TestInterceptionHandshakeTimeout(t *testing.T) {
	h := start(t, harnessOpts{interception: "  handshake_timeout_ms: 100\n"})
	c, err := net.Dial("tcp", h.addrs.Intercept[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Send nothing: the server must give up after the handshake timeout.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection not closed by the server: %v", err)
	}
	eventually.Eventually(t, 5*time.Second, func() bool {
		return testutil.ToFloat64(h.metrics.TLSHandshakes.WithLabelValues("timeout")) >= 1
	}, "handshake timeout counted")
	if got := testutil.ToFloat64(h.metrics.TLSHandshakes.WithLabelValues("timeout")); got != 1 {
		t.Errorf("tls_handshakes{timeout} = %v, want 1 (io_error %v)", got, testutil.ToFloat64(h.metrics.TLSHandshakes.WithLabelValues("io_error")))
	}
}

// TestConnectionLimitSharedAcrossListeners: with max_connections 1, a held
// plain connection makes a TLS connection fail, and vice versa.
func TestConnectionLimitSharedAcrossListeners(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, maxConnections: 1, interception: "  enforce_sni_host_match: true\n"})
	held, err := net.Dial("tcp", h.addrs.Proxy[0].String())
	if err != nil {
		t.Fatal(err)
	}
	// Make sure the held connection has been accepted (and took the permit).
	fmt.Fprint(held, "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
	if _, err := http.ReadResponse(bufio.NewReader(held), nil); err != nil {
		t.Fatal(err)
	}
	_, err = tls.Dial("tcp", h.addrs.Intercept[0].String(), &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: "api.example.test"})
	if err == nil {
		t.Fatal("second connection succeeded beyond max_connections")
	}
	held.Close()
	eventually.Eventually(t, 5*time.Second, func() bool {
		c, err := tls.Dial("tcp", h.addrs.Intercept[0].String(), &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: "api.example.test"})
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "permit returned after close")
}

// TestReadinessFollowsSecretsByEvent is AT-001/AT-003 in process: 503 while
// the secret is missing, 200 shortly after it appears, without restart.
func TestReadinessFollowsSecretsByEvent(t *testing.T) {
	h := start(t, harnessOpts{})
	if code, b := h.health(); code != 503 || b != "not ready" {
		t.Fatalf("/healthz = %d %q, want 503 not ready", code, b)
	}
	resp, err := http.Get("http://" + h.addrs.Proxy[0].String() + "/")
	if err == nil {
		resp.Body.Close()
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+h.addrs.Proxy[0].String()+"/", nil)
	req.Host = "api.example.test"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); resp.StatusCode != 500 || b != "internal error: secret not available" {
		t.Errorf("got %d %q", resp.StatusCode, b)
	}
	h.writeSecret(canary)
	h.waitHealth(200)
	if code, b := h.health(); b != "ok" {
		t.Errorf("/healthz = %d %q", code, b)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true})
	req, _ := http.NewRequest(http.MethodGet, "http://"+h.addrs.Proxy[0].String()+"/", nil)
	req.Host = "api.example.test"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body(t, resp)
	resp, err = http.Get("http://" + h.addrs.Metrics.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text := body(t, resp)
	for _, want := range []string{"# HELP botbox_requests_total", `botbox_requests_total{decision="allow",host="api.example.test"} 1`, "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(text, canary) {
		t.Error("secret in metrics")
	}
	resp, err = http.Get("http://" + h.addrs.Metrics.String() + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); resp.StatusCode != 404 || b != "not found" {
		t.Errorf("unknown path: %d %q", resp.StatusCode, b)
	}
}

// TestGracefulShutdown: readiness drops at once, an in-flight request
// completes, new connections are refused, Run returns before the deadline.
func TestGracefulShutdown(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, shutdown: 10})
	h.waitHealth(200)
	release, reached := make(chan struct{}), make(chan struct{})
	var reachedOnce sync.Once
	h.origin.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reachedOnce.Do(func() { close(reached) })
		<-release
		fmt.Fprint(w, "finished")
	})
	// An idle keep-alive connection that must be closed by the drain.
	idle, err := net.Dial("tcp", h.addrs.Proxy[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprint(idle, "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
	idleBR := bufio.NewReader(idle)
	if r, err := http.ReadResponse(idleBR, nil); err != nil {
		t.Fatal(err)
	} else {
		_, _ = io.Copy(io.Discard, r.Body)
	}

	var wg sync.WaitGroup
	wg.Add(1)
	var inflightStatus int
	var inflightBody string
	go func() {
		defer wg.Done()
		req, _ := http.NewRequest(http.MethodGet, "http://"+h.addrs.Proxy[0].String()+"/slow", nil)
		req.Host = "api.example.test"
		resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
		if err != nil {
			inflightBody = err.Error()
			return
		}
		inflightStatus = resp.StatusCode
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		inflightBody = string(b)
	}()
	// The request is in flight once the origin has it (it is counted in
	// requests_total only when it ends).
	select {
	case <-reached:
	case <-time.After(5 * time.Second):
		t.Fatal("in-flight request did not reach the origin")
	}
	started := time.Now()
	h.cancel()
	eventually.Eventually(t, 5*time.Second, h.srv.draining.Load, "server draining")
	if h.srv.Ready() {
		t.Error("still ready while draining")
	}
	// The idle keep-alive connection is closed by the server.
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idleBR.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("idle keep-alive connection not closed during drain: %v", err)
	}
	// New connections are refused.
	if c, err := net.DialTimeout("tcp", h.addrs.Proxy[0].String(), time.Second); err == nil {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
		if _, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			t.Error("a new connection was served during the drain")
		}
		c.Close()
	}
	close(release)
	wg.Wait()
	if inflightStatus != 200 || inflightBody != "finished" {
		t.Errorf("in-flight request: %d %q", inflightStatus, inflightBody)
	}
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		h.done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if d := time.Since(started); d > 9*time.Second {
		t.Errorf("drain took %v, beyond the deadline", d)
	}
}

func TestBindFailureIsFatal(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	cfg, err := config.Parse([]byte(fmt.Sprintf("listen_port: %d\nmetrics_port: %d\nsecrets_dir: %s\negress_policy:\n  rules: []\n", port, port+1, t.TempDir())))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Logger: telemetry.NewLogger(io.Discard, nil)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Run(ctx); err == nil || !strings.Contains(err.Error(), "binding") {
		t.Fatalf("Run = %v, want a bind error", err)
	}
}

// TestIPv6ListenAddr is the §10.3 #1 regression: "::1" binds and serves.
func TestIPv6ListenAddr(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback on this machine: %v", err)
	}
	ln.Close()
	h := start(t, harnessOpts{extraYAML: "listen_addr: \"::1\"\n", writeSecret: true})
	if len(h.addrs.Proxy) != 1 || !strings.HasPrefix(h.addrs.Proxy[0].String(), "[::1]:") {
		t.Fatalf("proxy addrs = %v, want exactly [::1]", h.addrs.Proxy)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+h.addrs.Proxy[0].String()+"/", nil)
	req.Host = "api.example.test"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// TestDefaultListenAddrIsDualStack: with listen_addr omitted, BotBox also
// listens on ::1, where ip6tables REDIRECT delivers IPv6 traffic (§10.3 #2).
func TestDefaultListenAddrIsDualStack(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback on this machine: %v", err)
	}
	ln.Close()
	h := start(t, harnessOpts{writeSecret: true, interception: "  enforce_sni_host_match: true\n"})
	if len(h.addrs.Proxy) != 2 || len(h.addrs.Intercept) != 2 {
		t.Fatalf("addrs = %+v, want IPv4 and IPv6 loopback for both listeners", h.addrs)
	}
	for _, a := range h.addrs.Proxy {
		req, _ := http.NewRequest(http.MethodGet, "http://"+a.String()+"/", nil)
		req.Host = "api.example.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		if b := body(t, resp); resp.StatusCode != 200 {
			t.Errorf("%s: %d %s", a, resp.StatusCode, b)
		}
	}
}

// TestCanarySecretOnInterceptionListener extends the canary test to the TLS
// listener: allowed, mismatched, denied and failing requests, and an
// origin that echoes the injected credential (masked since issue 13), then
// a search of responses (raw and base64), metrics and logs.
func TestCanarySecretOnInterceptionListener(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, interception: "  enforce_sni_host_match: true\n"})
	var seen strings.Builder
	for _, tc := range []struct{ sni, host string }{
		{"api.example.test", "api.example.test"},
		{"api.example.test", "other.example.test"},
		{"evil.example.test", "evil.example.test"},
	} {
		for _, h2 := range []bool{false, true} {
			for _, path := range []string{"/", "/echo"} {
				c := h.interceptClient(tc.sni, h2)
				req, _ := http.NewRequest(http.MethodGet, "https://"+tc.host+path, nil)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("%+v h2=%v: %v", tc, h2, err)
				}
				fmt.Fprintf(&seen, "%d %v %s\n", resp.StatusCode, resp.Header, body(t, resp))
			}
		}
	}
	if !strings.Contains(seen.String(), "*****") {
		t.Error("no masked echo in the responses; the search below proves less")
	}
	resp, err := http.Get("http://" + h.addrs.Metrics.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics := body(t, resp)
	for name, text := range map[string]string{"responses": seen.String(), "metrics": metrics, "logs": h.logs.String()} {
		b64 := base64.StdEncoding.EncodeToString([]byte("Bearer " + canary))
		if strings.Contains(text, canary) || strings.Contains(text, "c0ffee-42") || strings.Contains(text, b64[4:len(b64)-4]) {
			t.Errorf("canary secret found in %s", name)
		}
	}
	if n := len(h.logs.Find("proxy decision")); n != 12 {
		t.Errorf("%d decision lines, want 12", n)
	}
}

// TestSlowlorisCannotPinSlots is the §10.3 #8 regression: with one slot, a
// client that never finishes its request head is cut off by
// read_header_timeout_ms and the slot serves the next client.
func TestSlowlorisCannotPinSlots(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, maxConnections: 1, extraYAML: "read_header_timeout_ms: 200\nidle_timeout_seconds: 1\n"})
	slow, err := net.Dial("tcp", h.addrs.Proxy[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprint(slow, "GET / HTTP/1.1\r\nHost: api.exa") // never finished
	_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(slow); err != nil {
		t.Fatalf("slow client not disconnected: %v", err)
	}
	eventually.Eventually(t, 10*time.Second, func() bool {
		req, _ := http.NewRequest(http.MethodGet, "http://"+h.addrs.Proxy[0].String()+"/", nil)
		req.Host = "api.example.test"
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			return false
		}
		if b := body(t, resp); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		return true
	}, "slot freed for the next client")
}

// TestMetricsBindFailureIsFatal is the §10.3 #7 regression.
func TestMetricsBindFailureIsFatal(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freePort := free.Addr().(*net.TCPAddr).Port
	free.Close()
	cfg, err := config.Parse([]byte(fmt.Sprintf("listen_addr: 127.0.0.1\nlisten_port: %d\nmetrics_port: %d\nsecrets_dir: %s\negress_policy:\n  rules: []\n", freePort, port, t.TempDir())))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Logger: telemetry.NewLogger(io.Discard, nil)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Run(ctx); err == nil || !strings.Contains(err.Error(), "metrics") {
		t.Fatalf("Run = %v, want a metrics bind error", err)
	}
}

func TestInterceptionWebSocketUpgrade(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, interception: "  enforce_sni_host_match: true\n"})
	c, err := tls.Dial("tcp", h.addrs.Intercept[0].String(), &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: "api.example.test", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wsecho.RoundTrip(t, c, "api.example.test", "/ws", "")
	if got := h.lastSeen().Get("Authorization"); got != "Bearer "+canary {
		t.Error("upgrade request not injected")
	}
}
