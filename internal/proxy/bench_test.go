package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/engine"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/policy"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/testpki"
	"github.com/botbox/botbox/internal/upstream"
)

// The benchmarks of this file are the hot path of docs/performance.md. They
// run in CI once (-benchtime 1x); the loopback one binds 127.0.0.1 only.

const benchConfig = `
secrets_dir: %s
egress_policy:
  default_action: deny
  rules:
    - host: api.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
    - host: 127.0.0.1
      action: allow
      allowed_ports: [%d]
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
%s`

const (
	benchSecret = "sk-bench-0123456789"
	benchBody   = `{"id":"bench-0001","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}`
	benchReq    = "GET /v1/chat HTTP/1.1\r\nHost: %s\r\nUser-Agent: agent/1.0\r\nAccept: */*\r\nAuthorization: Bearer client-junk\r\n\r\n"
)

func newBenchHandler(b *testing.B, tr http.RoundTripper, port int, extra string) *Handler {
	b.Helper()
	return newBenchHandlerLog(b, tr, port, extra, telemetry.NewLogger(io.Discard, nil))
}

func newBenchHandlerLog(b *testing.B, tr http.RoundTripper, port int, extra string, base *slog.Logger) *Handler {
	b.Helper()
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api-key"), []byte(benchSecret+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg, err := config.Parse(fmt.Appendf(nil, benchConfig, dir, port, extra))
	if err != nil {
		b.Fatal(err)
	}
	logger := telemetry.WithTarget(base, telemetry.TargetProxy)
	store, err := secrets.Open(secrets.Options{Dir: dir, Required: cfg.RequiredSecretRefs(), Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{Config: cfg, Secrets: store, Transport: tr, Metrics: telemetry.NewMetrics(), Logger: logger}
	if ut, ok := tr.(*upstream.Transport); ok {
		opts.EngineTransport = ut.Sync() // as package server wires it
	}
	h, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// cannedTransport answers every request in memory with the same small JSON
// response. It refuses a request whose credential was not injected, so a
// broken pipeline cannot look fast. Its own cost (the Response, its header
// map and body: 4 allocations) is part of every result.
type cannedTransport struct{}

type cannedBody struct{ strings.Reader }

func (*cannedBody) Close() error { return nil }

var errNotInjected = errors.New("credential not injected")

func (cannedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if v := req.Header["Authorization"]; len(v) != 1 || v[0] != "Bearer "+benchSecret {
		return nil, errNotInjected
	}
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	body := &cannedBody{}
	body.Reset(benchBody)
	return &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(benchBody))}},
		Body:          body,
		ContentLength: int64(len(benchBody)),
		Request:       req,
	}, nil
}

// discardWriter is a reusable http.ResponseWriter (and Flusher).
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}
func (w *discardWriter) Flush() {}

func (w *discardWriter) reset() {
	clear(w.h)
	w.status, w.n = 0, 0
}

// parsedRequest parses raw as net/http's server would and gives it a
// cancellable context, as the server does.
func parsedRequest(b *testing.B, raw string) *http.Request {
	b.Helper()
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		b.Fatal(err)
	}
	req.RemoteAddr = "127.0.0.1:40000"
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	return req.WithContext(ctx)
}

func serveLoop(b *testing.B, h http.Handler, req *http.Request) {
	b.Helper()
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		w.reset()
		h.ServeHTTP(w, req)
		if w.status != http.StatusOK || w.n != len(benchBody) {
			b.Fatalf("status %d, %d bytes", w.status, w.n)
		}
	}
}

// BenchmarkServePlain pushes one allowed request with a credential rewrite
// through the plain listener's handler (host canonicalisation, policy,
// rewrite, ReverseProxy, metrics, the canonical log line as JSON into
// io.Discard) to an in-memory transport.
func BenchmarkServePlain(b *testing.B) {
	h := newBenchHandler(b, cannedTransport{}, 8443, "")
	serveLoop(b, h.Plain(), parsedRequest(b, fmt.Sprintf(benchReq, "api.example.test")))
}

// BenchmarkServePlainScrubOff is BenchmarkServePlain on a rule with
// scrub_responses: false: the difference is the per-request cost of
// response scrubbing (docs/performance.md, issue 13's ≤ +10% budget).
func BenchmarkServePlainScrubOff(b *testing.B) {
	h := newBenchHandler(b, cannedTransport{}, 8443, `    - host: noscrub.example.test
      action: allow
      scrub_responses: false
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
`)
	serveLoop(b, h.Plain(), parsedRequest(b, fmt.Sprintf(benchReq, "noscrub.example.test")))
}

// BenchmarkServePlainPOST is BenchmarkServePlain with a 1 KiB JSON body,
// an agent's usual call; the transport reads the body. Resetting the body
// costs the benchmark 2 allocations per request.
func BenchmarkServePlainPOST(b *testing.B) {
	h := newBenchHandler(b, cannedTransport{}, 8443, "")
	body := []byte(`{"model":"bench","messages":[{"role":"user","content":"` + strings.Repeat("x", 950) + `"}]}`)
	req := parsedRequest(b, fmt.Sprintf("POST /v1/chat HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nAuthorization: Bearer client-junk\r\n\r\n", "api.example.test", len(body)))
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		w.reset()
		req.Body = io.NopCloser(bytes.NewReader(body))
		h.Plain().ServeHTTP(w, req)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
}

// slogJSONLogger is the alternative to telemetry.NewLogger in the A/B of
// BenchmarkServePlainLogHandler: slog's own JSON handler with the same key
// renames (what NewLogger wrapped before its fast path).
func slogJSONLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) != 0 {
			return a
		}
		switch a.Key {
		case slog.TimeKey:
			return slog.Time(telemetry.KeyTimestamp, a.Value.Time().UTC())
		case slog.LevelKey:
			return slog.String(telemetry.KeyLevel, a.Value.String())
		case slog.MessageKey:
			a.Key = telemetry.KeyMessage
		}
		return a
	}}))
}

// BenchmarkServePlainLogHandler is BenchmarkServePlain with each JSON log
// handler in the same run (docs/performance.md, "Decision line"): whether
// telemetry's own encoder earns its keep per request.
func BenchmarkServePlainLogHandler(b *testing.B) {
	for _, v := range []struct {
		name   string
		logger *slog.Logger
	}{
		{"log=telemetry", telemetry.NewLogger(io.Discard, nil)},
		{"log=slog", slogJSONLogger(io.Discard)},
	} {
		b.Run(v.name, func(b *testing.B) {
			h := newBenchHandlerLog(b, cannedTransport{}, 8443, "", v.logger)
			serveLoop(b, h.Plain(), parsedRequest(b, fmt.Sprintf(benchReq, "api.example.test")))
		})
	}
}

// BenchmarkServeIntercepted is BenchmarkServePlain on the interception
// listener's handler (SNI/Host check included).
func BenchmarkServeIntercepted(b *testing.B) {
	h := newBenchHandler(b, cannedTransport{}, 8443, "https_interception:\n  enabled: true\n  ca_cert_path: x\n  ca_key_path: y\n")
	req := parsedRequest(b, fmt.Sprintf(benchReq, "api.example.test"))
	req.TLS = &tls.ConnectionState{ServerName: "api.example.test", HandshakeComplete: true}
	serveLoop(b, h.Intercepted(), req)
}

// BenchmarkServeDenied is a request refused by policy (403, no upstream).
func BenchmarkServeDenied(b *testing.B) {
	h := newBenchHandler(b, cannedTransport{}, 8443, "")
	req := parsedRequest(b, fmt.Sprintf(benchReq, "denied.example.test"))
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		w.reset()
		h.Plain().ServeHTTP(w, req)
		if w.status != http.StatusForbidden {
			b.Fatalf("status %d", w.status)
		}
	}
}

// BenchmarkHostCanonicalisation is hostport.Parse on the Host values of a
// transparent request (it runs once per request, before the policy).
func BenchmarkHostCanonicalisation(b *testing.B) {
	for _, host := range []string{"api.openai.com", "API.OpenAI.com.", "127.0.0.1:18443", "[::1]:8443", "bücher.example"} {
		b.Run(host, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := hostport.Parse(host); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRequestID is the exchange record with its UUID v4 request id
// (crypto/rand).
func BenchmarkRequestID(b *testing.B) {
	h := &Handler{now: time.Now}
	req := parsedRequest(b, fmt.Sprintf(benchReq, "api.example.test"))
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		_ = h.newExchange(ListenerHTTP, w, req)
	}
}

// BenchmarkProxyLoopback is the whole request path on loopback, in one
// process: a keep-alive client connection writes a request to a real
// http.Server running the plain handler, which forwards it over the real
// upstream transport (TLS 1.3, HTTP/2 or HTTP/1.1) to a local origin. The
// CPU of the client and the origin is included; use it with -cpuprofile to
// see the proxy's share (docs/performance.md).
func BenchmarkProxyLoopback(b *testing.B) {
	for _, proto := range []string{"h2", "h1", "h1-engine"} {
		b.Run(proto, func(b *testing.B) {
			withEngine := proto == "h1-engine"
			ca := testpki.NewCA(b, "bench-ca")
			origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if v := r.Header["Authorization"]; len(v) != 1 || v[0] != "Bearer "+benchSecret {
					http.Error(w, "no credential", http.StatusUnauthorized)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, benchBody)
			}))
			origin.EnableHTTP2 = proto == "h2"
			origin.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(b, "127.0.0.1")}, MinVersion: tls.VersionTLS13}
			origin.StartTLS()
			b.Cleanup(origin.Close)
			port := origin.Listener.Addr().(*net.TCPAddr).Port

			tr, err := upstream.NewTransport(upstream.Options{RootCAs: ca.Pool()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(tr.CloseIdleConnections)
			h := newBenchHandler(b, tr, port, "")
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &http.Server{Handler: h.Plain(), ReadHeaderTimeout: 10 * time.Second}
			var serve interface {
				Serve(net.Listener) error
				Close() error
			} = srv
			if withEngine {
				if serve, err = engine.New(engine.Options{Handler: h.Plain(), Fallback: srv, ReadHeaderTimeout: 10 * time.Second}); err != nil {
					b.Fatal(err)
				}
			}
			go func() { _ = serve.Serve(ln) }()
			b.Cleanup(func() { _ = serve.Close() })

			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Close() })
			br := bufio.NewReader(c)
			req := []byte(fmt.Sprintf(benchReq, "127.0.0.1:"+strconv.Itoa(port)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK || n != int64(len(benchBody)) {
					b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
				}
			}
		})
	}
}

// BenchmarkLogDecision is the canonical "proxy decision" line of an allowed,
// rewritten request, as JSON into io.Discard.
func BenchmarkLogDecision(b *testing.B) {
	h := newBenchHandler(b, cannedTransport{}, 8443, "")
	req := parsedRequest(b, fmt.Sprintf(benchReq, "api.example.test"))
	g := h.gen.Load()
	hp, err := hostport.Parse("api.example.test")
	if err != nil {
		b.Fatal(err)
	}
	set := g.Rewrites(g.Policy.Decide(policy.Target{Host: hp, Method: http.MethodGet, Path: "/"}))
	if set == nil {
		b.Fatal("the bench rule has no rewrites")
	}
	x := h.newExchange(ListenerHTTP, &discardWriter{h: http.Header{}}, req)
	x.host, x.port, x.hostLabel, x.decision, x.reason, x.rule = "api.example.test", 443, "api.example.test", telemetry.DecisionAllow, "rule_allow", "api.example.test"
	x.rewrites, x.rewritten, x.upstreamCode, x.upstreamAddr = set, []string{"Authorization"}, 200, "127.0.0.1:443"
	x.cw.status, x.cw.n = 200, int64(len(benchBody))
	b.ReportAllocs()
	for b.Loop() {
		h.logDecision(req, x)
	}
}
