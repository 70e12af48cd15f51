package proxy_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/proxy"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/testpki"
	"github.com/botbox/botbox/internal/upstream"
)

// These tests drive the real handler (proxy.New, its ReverseProxy and the
// upstream transport) through its public API only, towards a TLS origin on
// loopback.

// shortHeaderTimeout is the transport default of clientEnv; no test waits
// for anything longer, and none asserts elapsed time.
const shortHeaderTimeout = 20 * time.Millisecond

type staticSecrets struct{ s *secrets.Snapshot }

func (s staticSecrets) Snapshot() *secrets.Snapshot { return s.s }

// clientEnv is a handler for cfgYAML in front of an origin that records the
// headers it got (on seen) and answers /slow only after release.
type clientEnv struct {
	h       *proxy.Handler
	seen    chan http.Header
	arrived chan string
	release chan struct{}
}

func newClientEnv(t *testing.T, cfgYAML string, secretValues map[string]string) *clientEnv {
	t.Helper()
	e := &clientEnv{seen: make(chan http.Header, 16), arrived: make(chan string, 16), release: make(chan struct{})}
	ca := testpki.NewCA(t, "clients-test-ca")
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.arrived <- r.URL.Path
		e.seen <- r.Header.Clone()
		if r.URL.Path == "/slow" {
			select {
			case <-e.release:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	origin.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, "llm.example.test", "strip.example.test")}}
	origin.EnableHTTP2 = true
	origin.StartTLS()
	t.Cleanup(origin.Close)
	t.Cleanup(func() {
		select {
		case <-e.release:
		default:
			close(e.release)
		}
	})

	cfg, err := config.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	tr, err := upstream.NewTransport(upstream.Options{
		RootCAs:               ca.Pool(),
		ResponseHeaderTimeout: shortHeaderTimeout,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, origin.Listener.Addr().String())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	vals := map[string]secrets.Value{}
	for k, v := range secretValues {
		vals[k] = secrets.NewValue([]byte(v))
	}
	e.h, err = proxy.New(proxy.Options{
		Config:    cfg,
		Secrets:   staticSecrets{secrets.NewSnapshot(vals)},
		Transport: tr,
		Metrics:   telemetry.NewMetrics(),
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// serve sends one request through the plain listener's handler; ctx may
// carry values for the pipeline.
func (e *clientEnv) serve(ctx context.Context, method, url string, hdr http.Header) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(ctx, method, url, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	e.h.Plain().ServeHTTP(rec, req)
	return rec
}

const timeoutConfig = `
egress_policy:
  rules:
    - host: llm.example.test
      action: allow
`

// TestResponseHeaderTimeoutThroughHandler: the upstream transport's
// response-header timeout reaches the agent as 504 "gateway timeout"
// through the real handler, and a request's own longer timeout
// (upstream.WithResponseHeaderTimeout in its context) lets it wait past the
// default and succeed.
func TestResponseHeaderTimeoutThroughHandler(t *testing.T) {
	e := newClientEnv(t, timeoutConfig, nil)
	type result struct{ rec *httptest.ResponseRecorder }
	done := make(chan result, 1)
	go func() {
		ctx := upstream.WithResponseHeaderTimeout(context.Background(), time.Hour)
		done <- result{e.serve(ctx, http.MethodGet, "http://llm.example.test/slow", nil)}
	}()
	<-e.arrived // the long request waits for its head...
	<-e.seen
	rec := e.serve(t.Context(), http.MethodGet, "http://llm.example.test/slow", nil) // ...past the default, which expires here...
	if rec.Code != http.StatusGatewayTimeout || rec.Body.String() != "gateway timeout" {
		t.Fatalf("request under the default timeout: %d %q, want 504 gateway timeout", rec.Code, rec.Body.String())
	}
	<-e.arrived
	<-e.seen
	close(e.release) // ...and then gets it.
	r := <-done
	if r.rec.Code != http.StatusOK || r.rec.Body.String() != "ok" {
		t.Errorf("request with a longer own timeout: %d %q, want 200 ok", r.rec.Code, r.rec.Body.String())
	}
}

const clientsConfig = `
egress_policy:
  rules:
    - host: llm.example.test
      action: allow
      header_rewrites:
        - name: x-api-key
          value: "{value}"
          secret_ref: llm-key
      remove_headers: [Authorization, api-key]
      response_header_timeout_ms: 3600000
    - host: strip.example.test
      action: allow
      remove_headers: [authorization]
`

// TestRemoveHeadersThroughHandler: a rule's remove_headers are deleted
// from the forwarded request (every value, any spelling) and never added,
// next to its injected credential; a rule that only removes works too; and
// the SDK's own headers (anthropic-version) pass untouched.
func TestRemoveHeadersThroughHandler(t *testing.T) {
	e := newClientEnv(t, clientsConfig, map[string]string{"llm-key": "sk-real"})
	close(e.release)
	sdk := http.Header{
		"Authorization":     {"Bearer sk-dummy-not-a-key"},
		"authorization":     {"Bearer smuggled"},
		"Api-Key":           {"placeholder", "again"},
		"X-Api-Key":         {"placeholder"},
		"Anthropic-Version": {"2026-10-21"},
	}
	tests := []struct {
		url     string
		want    http.Header // exactly these of the sdk headers reach the origin
		wantOut []string    // header keys that must be absent
	}{
		{"http://llm.example.test/v1/messages",
			http.Header{"X-Api-Key": {"sk-real"}, "Anthropic-Version": {"2026-10-21"}},
			[]string{"Authorization", "Api-Key"}},
		{"http://strip.example.test/",
			http.Header{"Api-Key": {"placeholder", "again"}, "X-Api-Key": {"placeholder"}, "Anthropic-Version": {"2026-10-21"}},
			[]string{"Authorization"}},
	}
	for _, tt := range tests {
		rec := e.serve(t.Context(), http.MethodPost, tt.url, sdk)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %q, want 200", tt.url, rec.Code, rec.Body.String())
		}
		<-e.arrived
		got := <-e.seen
		for k, v := range tt.want {
			if g := got.Values(k); strings.Join(g, ",") != strings.Join(v, ",") {
				t.Errorf("%s: origin got %s = %q, want %q", tt.url, k, g, v)
			}
		}
		for _, k := range tt.wantOut {
			if v := got.Values(k); len(v) > 0 {
				t.Errorf("%s: origin got %s = %q, want none (remove_headers)", tt.url, k, v)
			}
		}
	}
}

// TestRuleResponseHeaderTimeoutThroughHandler: a rule's
// response_header_timeout_ms replaces the transport default for the
// requests it allows: the request waits past the default (which a request
// to another rule's host hits meanwhile) and succeeds.
func TestRuleResponseHeaderTimeoutThroughHandler(t *testing.T) {
	e := newClientEnv(t, clientsConfig, map[string]string{"llm-key": "sk-real"})
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- e.serve(t.Context(), http.MethodPost, "http://llm.example.test/slow", nil) }()
	<-e.arrived
	<-e.seen
	rec := e.serve(t.Context(), http.MethodGet, "http://strip.example.test/slow", nil)
	if rec.Code != http.StatusGatewayTimeout {
		t.Fatalf("rule without response_header_timeout_ms: %d %q, want 504 under the default", rec.Code, rec.Body.String())
	}
	<-e.arrived
	<-e.seen
	close(e.release)
	if rec := <-done; rec.Code != http.StatusOK || rec.Body.String() != "ok" {
		t.Errorf("rule with response_header_timeout_ms: %d %q, want 200 ok", rec.Code, rec.Body.String())
	}
}
