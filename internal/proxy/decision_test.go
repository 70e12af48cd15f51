package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/botbox/botbox/internal/testutil/eventually"
)

// waitDecisions waits until at least n decision lines were written (lines
// of requests whose handler is still running, such as tunnels, come late).
func (e *testEnv) waitDecisions(n int) []map[string]any {
	e.t.Helper()
	var recs []map[string]any
	eventually.Eventually(e.t, 10*time.Second, func() bool {
		recs = e.logs.Find(msgDecision)
		return len(recs) >= n
	}, fmt.Sprintf("%d decision lines written", n))
	return recs
}

// TestTruncatedBodyLoggedAsError is the proven defect of issue 9 §2: an
// origin that promises 100 bytes, sends 10 and drops the connection was
// logged as a clean 200 at INFO with no error.
func TestTruncatedBodyLoggedAsError(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.originMux.HandleFunc("/cut", func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nContent-Type: text/plain\r\n\r\n0123456789")
		_ = brw.Flush()
	})
	req, _ := http.NewRequest(http.MethodGet, e.plain.URL+"/cut", nil)
	req.Host = "bare.example.test"
	// The agent sees an error: on the head if the proxy had not flushed
	// it yet, else on the body.
	if resp, err := e.client().Do(req); err == nil {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("client read the cut body without error (%d bytes)", len(b))
		}
	}
	line := e.waitDecisions(1)[0]
	if line["reason"] != "upstream_body_error" || line["level"] != "WARN" || line["error"] == nil || line["error"] == "" {
		t.Errorf("decision line = %v, want reason upstream_body_error, WARN, an error", line)
	}
	if line["bytes_out"] != float64(10) || line["status"] != float64(200) || line["upstream_status"] != float64(200) {
		t.Errorf("decision line = %v, want the 200 head and the 10 bytes the origin sent", line)
	}
	if got := testutil.ToFloat64(e.metrics.Aborted.WithLabelValues("bare.example.test", "upstream_body_error")); got != 1 {
		t.Errorf("requests_aborted_total{bare.example.test,upstream_body_error} = %v, want 1", got)
	}
}

// TestClientClosedMidBody: the agent goes away while the body streams; the
// line says client_closed at WARN, and the metric counts it.
func TestClientClosedMidBody(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.originMux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done() // until BotBox cancels the upstream request
	})
	c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(c, "GET /stream HTTP/1.1\r\nHost: bare.example.test\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "data: first\n" {
		t.Fatalf("first event %q, %v", line, err)
	}
	c.Close()
	line := e.waitDecisions(1)[0]
	if line["reason"] != "client_closed" || line["level"] != "WARN" || line["error"] == nil {
		t.Errorf("decision line = %v, want reason client_closed at WARN with an error", line)
	}
	if got := testutil.ToFloat64(e.metrics.Aborted.WithLabelValues("bare.example.test", "client_closed")); got != 1 {
		t.Errorf("requests_aborted_total{bare.example.test,client_closed} = %v, want 1", got)
	}
}

// TestUpstreamAddrLogged: the line names the address actually dialled, for
// a new and for a reused upstream connection.
func TestUpstreamAddrLogged(t *testing.T) {
	e := newEnv(t, envOpts{})
	want := e.origin.Listener.Addr().String()
	e.get("bare.example.test", "/one", nil)
	e.get("bare.example.test", "/two", nil) // reuses the pooled connection
	for i, line := range e.waitDecisions(2) {
		if line["upstream_addr"] != want {
			t.Errorf("line %d: upstream_addr = %v, want %s", i, line["upstream_addr"], want)
		}
	}
	// A denied request dialled nothing.
	e.get("evil.test", "/", nil)
	if line := e.waitDecisions(3)[2]; line["upstream_addr"] != "" {
		t.Errorf("denied line: upstream_addr = %v, want empty", line["upstream_addr"])
	}
}

// TestHeaderRewriteMetricMatchesLog ties botbox_header_rewrites_total to
// the decision line's header_rewritten: it stayed 0 when the upstream then
// failed, while the line said the header was rewritten.
func TestHeaderRewriteMetricMatchesLog(t *testing.T) {
	e := newEnv(t, envOpts{})
	dead := "127.0.0.1:1"
	e.dialAddr.Store(&dead)
	resp, _ := e.get("api.example.test", "/", nil)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
	line := e.waitDecisions(1)[0]
	rewritten, _ := line["header_rewritten"].([]any)
	if len(rewritten) == 0 {
		t.Fatalf("line has no header_rewritten: %v", line)
	}
	if got := testutil.ToFloat64(e.metrics.HeaderRewrites.WithLabelValues("api.example.test")); got != 1 {
		t.Errorf("header_rewrites_total = %v while the log says %v was rewritten", got, rewritten)
	}
	if line["level"] != "WARN" || line["reason"] != "upstream_error" {
		t.Errorf("502 line = %v, want WARN upstream_error", line)
	}
}

// TestSecretRefAlwaysArray: secret_ref has one JSON type in every line.
func TestSecretRefAlwaysArray(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.get("api.example.test", "/", nil)      // rewritten
	e.get("nosecret.example.test", "/", nil) // secret missing
	for _, line := range e.waitDecisions(2) {
		if _, ok := line["secret_ref"].([]any); !ok {
			t.Errorf("secret_ref is %T in %v, want an array", line["secret_ref"], line)
		}
	}
}

// TestGeneratedResponsesNameTheirReason: every response BotBox writes
// itself carries X-Botbox-Reason, the same reason as its decision line,
// and its level follows the outcome.
func TestGeneratedResponsesNameTheirReason(t *testing.T) {
	e := newEnv(t, envOpts{})
	tests := []struct {
		name, req  string
		status     int
		reason     string
		level      string
		bodyPrefix string
	}{
		{"port denied", "GET / HTTP/1.1\r\nHost: ports.example.test:9999\r\n\r\n", 403, "port_not_allowed", "WARN", bodyDenied},
		{"port denied on a rule host", "GET / HTTP/1.1\r\nHost: api.example.test:8443\r\n\r\n", 403, "port_not_allowed", "WARN", bodyDenied},
		{"default deny", "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n", 403, "default_deny", "WARN", bodyDenied},
		{"rule deny", "GET / HTTP/1.1\r\nHost: blocked.example.test\r\n\r\n", 403, "rule_deny", "WARN", bodyDenied},
		{"connect", "CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n", 405, "connect", "WARN", bodyConnect},
		{"invalid host", "GET / HTTP/1.1\r\nHost: a..b\r\n\r\n", 400, "invalid_host", "WARN", bodyInvalidHost},
		{"missing host", "GET / HTTP/1.0\r\n\r\n", 400, "missing_host", "WARN", bodyMissingHost},
		{"asterisk", "OPTIONS * HTTP/1.1\r\nHost: api.example.test\r\n\r\n", 400, "invalid_target", "WARN", bodyInvalidTarget},
		{"secret missing", "GET / HTTP/1.1\r\nHost: nosecret.example.test\r\n\r\n", 500, "secret_missing", "ERROR", bodySecretMissing},
		{"upgrade refused", "GET / HTTP/1.1\r\nHost: api.example.test\r\nConnection: Upgrade\r\nUpgrade: foo/1\r\n\r\n", 400, "upgrade_not_allowed", "WARN", bodyUpgrade},
	}
	for i, tt := range tests {
		resp, body := e.raw(tt.req)
		if resp.StatusCode != tt.status || !strings.HasPrefix(body, tt.bodyPrefix) {
			t.Errorf("%s: %d %q, want %d %q", tt.name, resp.StatusCode, body, tt.status, tt.bodyPrefix)
		}
		if got := resp.Header.Get(HeaderReason); got != tt.reason {
			t.Errorf("%s: %s = %q, want %q", tt.name, HeaderReason, got, tt.reason)
		}
		line := e.waitDecisions(i + 1)[i]
		if line["reason"] != tt.reason || line["level"] != tt.level {
			t.Errorf("%s: line reason %v level %v, want %s %s", tt.name, line["reason"], line["level"], tt.reason, tt.level)
		}
	}
	e.assertOriginUntouched()

	// Failures of the upstream: 502 and 504, WARN.
	dead := "127.0.0.1:1"
	e.dialAddr.Store(&dead)
	resp, _ := e.get("bare.example.test", "/", nil)
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(HeaderReason) != "upstream_error" {
		t.Errorf("502: %d %s=%q", resp.StatusCode, HeaderReason, resp.Header.Get(HeaderReason))
	}
	if line := e.waitDecisions(len(tests) + 1)[len(tests)]; line["level"] != "WARN" {
		t.Errorf("502 line level %v, want WARN", line["level"])
	}
}

func TestTimeoutLineIsWarn(t *testing.T) {
	e := newEnv(t, envOpts{responseHeader: 100 * time.Millisecond})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	e.originMux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	resp, _ := e.get("bare.example.test", "/slow", nil)
	if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get(HeaderReason) != "upstream_timeout" {
		t.Fatalf("got %d %s=%q", resp.StatusCode, HeaderReason, resp.Header.Get(HeaderReason))
	}
	if line := e.waitDecisions(1)[0]; line["level"] != "WARN" || line["reason"] != "upstream_timeout" {
		t.Errorf("504 line = %v, want WARN upstream_timeout", line)
	}
}
