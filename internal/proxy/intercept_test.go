package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/logcapture"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// recordingTransport answers every request with 200 in memory and records
// the upstream authority of each: what would have left the Pod.
type recordingTransport struct {
	mu   sync.Mutex
	sent []string // req.URL.Host of each round trip
}

func (rt *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	rt.sent = append(rt.sent, req.URL.Host)
	rt.mu.Unlock()
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Length": {"2"}}, ContentLength: 2,
		Body: io.NopCloser(strings.NewReader("ok")), Request: req,
	}, nil
}

func (rt *recordingTransport) take() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	s := rt.sent
	rt.sent = nil
	return s
}

const unitConfig = `
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
    - host: ports.example.test
      action: allow
      allowed_ports: [443, 8443]
    - host: blocked.example.test
      action: deny
https_interception:
  enabled: true
  ca_cert_path: unused.pem
  ca_key_path: unused.key
  enforce_sni_host_match: %t
`

// unitHandler is a Handler over a recording transport, for tests that call
// its http.Handlers directly.
type unitHandler struct {
	*Handler
	rt      *recordingTransport
	metrics *telemetry.Metrics
	logs    *logcapture.Buffer
}

func newUnitHandler(tb testing.TB, enforceSNI bool) *unitHandler {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api-key"), []byte("sk-unit\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	cfg, err := config.Parse(fmt.Appendf(nil, unitConfig, dir, enforceSNI))
	if err != nil {
		tb.Fatal(err)
	}
	u := &unitHandler{rt: &recordingTransport{}, metrics: telemetry.NewMetrics(), logs: &logcapture.Buffer{}}
	var out io.Writer = u.logs
	if _, fuzzing := tb.(*testing.F); fuzzing {
		out = io.Discard // millions of lines; the fuzz target reads none
	}
	logger := telemetry.NewLogger(out, nil)
	store, err := secrets.Open(secrets.Options{Dir: dir, Required: cfg.RequiredSecretRefs(), Logger: logger})
	if err != nil {
		tb.Fatal(err)
	}
	u.Handler, err = New(Options{Config: cfg, Secrets: store, Transport: u.rt, Metrics: u.metrics, Logger: logger})
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// TestInterceptedHandler is the interception listener's handler in its own
// package (review §4.3.1): requests as they arrive on a terminated TLS
// connection, with r.TLS carrying the SNI.
func TestInterceptedHandler(t *testing.T) {
	tests := []struct {
		name       string
		enforceSNI bool
		method     string
		target     string // request target as sent
		host       string // Host header
		sni        string // "" = no SNI; "-" = r.TLS nil
		status     int
		reason     string
		sent       string // upstream authority, "" = nothing forwarded
	}{
		{"origin-form", true, "GET", "/v1", "api.example.test", "api.example.test", 200, "rule_allow", "api.example.test"},
		{"explicit 443", true, "GET", "/v1", "api.example.test:443", "api.example.test", 200, "rule_allow", "api.example.test"},
		{"host case and dot", true, "GET", "/v1", "API.Example.Test.", "api.example.test", 200, "rule_allow", "api.example.test"},
		{"absolute-form", true, "GET", "https://api.example.test/v1", "api.example.test", "api.example.test", 400, "absolute_form", ""},
		{"absolute-form other host", true, "GET", "http://evil.test/", "api.example.test", "api.example.test", 400, "absolute_form", ""},
		{"connect", true, "CONNECT", "evil.test:443", "evil.test:443", "api.example.test", 400, "absolute_form", ""},
		{"host port not 443", true, "GET", "/", "ports.example.test:8443", "ports.example.test", 403, "intercept_port", ""},
		{"sni mismatch", true, "GET", "/", "api.example.test", "ports.example.test", 400, "sni_host_mismatch", ""},
		{"no sni", true, "GET", "/", "api.example.test", "", 400, "sni_host_mismatch", ""},
		{"no tls state", true, "GET", "/", "api.example.test", "-", 400, "sni_host_mismatch", ""},
		{"sni denied host", true, "GET", "/", "evil.test", "evil.test", 403, "default_deny", ""},
		{"deny rule", true, "GET", "/", "blocked.example.test", "blocked.example.test", 403, "rule_deny", ""},
		{"missing host", true, "GET", "/", "", "api.example.test", 400, "missing_host", ""},
		{"invalid host", true, "GET", "/", "a..b", "api.example.test", 400, "missing_host", ""},
		{"enforcement off: sni mismatch forwarded by Host", false, "GET", "/", "ports.example.test", "api.example.test", 200, "rule_allow", "ports.example.test"},
		{"enforcement off: Host still decides", false, "GET", "/", "evil.test", "api.example.test", 403, "default_deny", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUnitHandler(t, tt.enforceSNI)
			r := httptest.NewRequest(tt.method, "/", nil)
			r.RequestURI = tt.target
			if tt.method == http.MethodConnect || !strings.HasPrefix(tt.target, "/") {
				rr, err := http.ReadRequest(bufio.NewReader(strings.NewReader(tt.method + " " + tt.target + " HTTP/1.1\r\nHost: " + tt.host + "\r\n\r\n")))
				if err != nil {
					t.Fatal(err)
				}
				r = rr
			}
			r.Host = tt.host
			switch tt.sni {
			case "-":
				r.TLS = nil
			default:
				r.TLS = &tls.ConnectionState{ServerName: tt.sni, HandshakeComplete: true}
			}
			w := httptest.NewRecorder()
			u.Intercepted().ServeHTTP(w, r)
			if w.Code != tt.status {
				t.Errorf("status %d %q, want %d", w.Code, w.Body.String(), tt.status)
			}
			if tt.status != 200 {
				if got := w.Header().Get(HeaderReason); got != tt.reason {
					t.Errorf("%s = %q, want %q", HeaderReason, got, tt.reason)
				}
			}
			recs := u.logs.Find(msgDecision)
			if len(recs) != 1 || recs[0]["reason"] != tt.reason || recs[0]["listener"] != ListenerHTTPS {
				t.Errorf("decision lines %v, want one with reason %s", recs, tt.reason)
			}
			sent := u.rt.take()
			switch {
			case tt.sent == "" && len(sent) != 0:
				t.Errorf("forwarded to %v, want nothing", sent)
			case tt.sent != "" && (len(sent) != 1 || sent[0] != tt.sent):
				t.Errorf("forwarded to %v, want [%s]", sent, tt.sent)
			}
			wantMismatch := 0.0
			if tt.reason == "sni_host_mismatch" {
				wantMismatch = 1
			}
			if got := testutil.ToFloat64(u.metrics.HostMismatch); got != wantMismatch {
				t.Errorf("host_mismatch_total = %v, want %v", got, wantMismatch)
			}
		})
	}
}

// naiveAllowed is the fuzz oracle: the policy of unitConfig written the
// dumbest way, on an upstream authority as the transport saw it.
func naiveAllowed(authority string) bool {
	host, port := authority, 443
	if h, p, err := net.SplitHostPort(authority); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil {
			return false
		}
		host, port = h, n
	}
	switch host {
	case "api.example.test":
		return port == 443
	case "ports.example.test":
		return port == 443 || port == 8443
	}
	return false
}

// FuzzHandlerTarget sends arbitrary request lines, Host headers and SNIs
// through both handlers with a recording transport. Invariants: nothing
// reaches the transport unless the naive oracle allows its authority (and,
// on the interception listener, the authority is the SNI's host on 443);
// the only 5xx is none at all (the transport always answers 200 and the
// secret is present); every generated response names its reason.
func FuzzHandlerTarget(f *testing.F) {
	seeds := []struct {
		line, host, sni string
		intercepted     bool
	}{
		{"GET / HTTP/1.1", "api.example.test", "", false},
		{"GET http://api.example.test/a HTTP/1.1", "evil.test", "", false},
		{"GET http://evil.test@api.example.test/ HTTP/1.1", "api.example.test", "", false},
		{"GET / HTTP/1.1", "blocked.example.test.", "", false},
		{"GET / HTTP/1.1", "ports.example.test:8443", "", false},
		{"GET / HTTP/1.1", "api.example.test:8443", "", false},
		{"CONNECT api.example.test:443 HTTP/1.1", "api.example.test:443", "", false},
		{"OPTIONS * HTTP/1.1", "api.example.test", "", false},
		{"GET / HTTP/1.1", "127.1", "", false},
		{"GET / HTTP/1.1", "[::1]:443", "", false},
		{"GET / HTTP/1.1", "api.example.test", "api.example.test", true},
		{"GET / HTTP/1.1", "API.EXAMPLE.TEST.:443", "api.example.test", true},
		{"GET / HTTP/1.1", "api.example.test", "ports.example.test", true},
		{"GET https://api.example.test/ HTTP/1.1", "api.example.test", "api.example.test", true},
		{"GET //evil.test/ HTTP/1.1", "api.example.test", "api.example.test", true},
		{"GET / HTTP/1.1", "ports.example.test:8443", "ports.example.test", true},
	}
	for _, s := range seeds {
		f.Add(s.line, s.host, s.sni, s.intercepted)
	}
	u := newUnitHandler(f, true)
	f.Fuzz(func(t *testing.T, line, host, sni string, intercepted bool) {
		raw := line + "\r\nHost: " + host + "\r\n\r\n"
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return // net/http refuses it before any handler
		}
		h := u.Plain()
		if intercepted {
			r.TLS = &tls.ConnectionState{ServerName: sni, HandshakeComplete: true}
			h = u.Intercepted()
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		for _, authority := range u.rt.take() {
			if !naiveAllowed(authority) {
				t.Fatalf("%q with Host %q, SNI %q reached the transport as %q", line, host, sni, authority)
			}
			if intercepted && authority != strings.TrimSuffix(strings.ToLower(sni), ".") {
				t.Fatalf("intercepted %q with Host %q went to %q, not the SNI %q", line, host, authority, sni)
			}
		}
		if w.Code >= 500 {
			t.Fatalf("%q with Host %q, SNI %q: status %d %q", line, host, sni, w.Code, w.Body.String())
		}
		if w.Code != http.StatusOK && w.Header().Get(HeaderReason) == "" {
			t.Fatalf("%q with Host %q: status %d without %s", line, host, w.Code, HeaderReason)
		}
	})
}
