package e2e

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// The reference's manual acceptance tests (reference §9.9), automated, with
// api.example.test standing for httpbin.org and other.example.test for
// example.com. The pod is the AT pod: one allow rule injecting
// "X-AT-Secret: {value}" from the secret at-secret, HTTP-only init rules
// with BOTBOX_ENABLE_IPV6=0, the app as UID 1000. Each test builds its own
// pod, so they run in any order.

const (
	atSecretRef   = "at-secret"
	atSecretValue = "at-secret-value-123"
)

const rulesAT = `
    - host: api.example.test
      action: allow
      header_rewrites:
        - name: X-AT-Secret
          value: "{value}"
          secret_ref: at-secret
`

// newATPod starts the AT pod, with the secret present or missing.
func newATPod(t *testing.T, withSecret bool) *pod {
	t.Helper()
	cfg := podConfig{rules: rulesAT}
	if withSecret {
		cfg.secrets = map[string]string{atSecretRef: atSecretValue}
	}
	return newPod(t, cfg)
}

// AT-001: /healthz is 503 "not ready" while the required secret is missing.
func TestAT001HealthzNotReadyWhileSecretMissing(t *testing.T) {
	t.Parallel()
	p := newATPod(t, false)
	assertStatus(t, "GET /healthz", p.healthz(t), http.StatusServiceUnavailable, "not ready")
	if out, errOut, code := p.probe(t); code == 0 || !strings.Contains(out, "503") {
		t.Errorf("botbox probe while not ready: exit %d, output %q %q, want failure reporting 503", code, out, errOut)
	}
}

// AT-002: a request needing the missing secret fails closed with 500 and is
// never forwarded without its credential.
func TestAT002MissingSecretFailsClosed(t *testing.T) {
	t.Parallel()
	p := newATPod(t, false)
	mark := p.mark(t)
	r := p.app(t, "http", "-url", "http://api.example.test/headers")
	assertStatus(t, "GET http://api.example.test/headers", r, http.StatusInternalServerError, "internal error: secret not available")
	p.assertNoTCP(t, mark, p.addr4(443))
}

// AT-003: adding the key to the Secret (an atomic ..data swap, as the
// kubelet does) makes /healthz 200 "ok" within the reload debounce, without
// a restart.
func TestAT003SecretAppearsHealthzReadyWithoutRestart(t *testing.T) {
	p := newATPod(t, false)
	assertStatus(t, "GET /healthz before the secret exists", p.healthz(t), http.StatusServiceUnavailable, "not ready")
	pid := p.botbox.cmd.Process.Pid

	p.secrets.write(t, map[string]string{atSecretRef: atSecretValue})
	r, took := p.waitHealthz(t, http.StatusOK, debounce+reloadMargin)
	assertStatus(t, "GET /healthz after the secret appeared", r, http.StatusOK, "ok")
	t.Logf("ready %v after the Secret update (debounce %v)", took.Round(time.Millisecond), debounce)
	if p.botbox.exited() || p.botbox.cmd.Process.Pid != pid {
		t.Errorf("botbox restarted or exited (%v)", p.botbox.waitErr)
	}
	r = p.app(t, "http", "-url", "http://api.example.test/headers")
	if r.Status != http.StatusOK || r.Echo == nil || r.Echo.Headers["X-At-Secret"] == nil {
		t.Errorf("after the secret appeared: status %d body %q, want 200 with X-At-Secret", r.Status, r.Body)
	}
}

// AT-004: the origin's echo shows the injected header — masked, since
// BotBox scrubs reflected secrets (issue 13; docs/differences.md): the
// origin receives the value, the app sees '*' of the same length. The
// rule's scrub_responses: false restores the reference's behaviour.
func TestAT004EchoShowsInjectedSecret(t *testing.T) {
	t.Parallel()
	for _, scrub := range []bool{true, false} {
		cfg := podConfig{rules: rulesAT, secrets: map[string]string{atSecretRef: atSecretValue}}
		want := strings.Repeat("*", len(atSecretValue))
		if !scrub {
			cfg.rules += "      scrub_responses: false\n"
			want = atSecretValue
		}
		p := newPod(t, cfg)
		mark := p.mark(t)
		r := p.app(t, "http", "-url", "http://api.example.test/headers")
		if r.Status != http.StatusOK || r.Echo == nil {
			t.Fatalf("scrub=%v: GET http://api.example.test/headers: status %d body %q error %q, want 200 echo", scrub, r.Status, r.Body, r.Error)
		}
		if got := r.Echo.Headers["X-At-Secret"]; len(got) != 1 || got[0] != want {
			t.Errorf("scrub=%v: echoed X-At-Secret = %q, want [%q]", scrub, got, want)
		}
		ev := p.httpEvent(t, mark, "/headers")
		if !ev.TLS || ev.Port != 443 || ev.Host != hostAPI {
			t.Errorf("origin saw tls=%v port=%d host=%q, want TLS on 443 for %s", ev.TLS, ev.Port, ev.Host, hostAPI)
		}
		if got := ev.Header["X-At-Secret"]; len(got) != 1 || got[0] != atSecretValue {
			t.Errorf("scrub=%v: origin received X-At-Secret %q, want the secret", scrub, got)
		}
	}
}

// AT-005: a host without a rule is denied with 403 "host not allowed".
func TestAT005UnlistedHostDenied(t *testing.T) {
	t.Parallel()
	p := newATPod(t, true)
	mark := p.mark(t)
	assertStatus(t, "GET http://other.example.test/", p.app(t, "http", "-url", "http://other.example.test/"),
		http.StatusForbidden, "host not allowed")
	p.assertNoTCP(t, mark, p.addr4(443))
}

// AT-006: explicit-proxy mode to an allowed host on a port outside its
// allowed_ports (default 443 only) is denied.
func TestAT006ExplicitProxyNon443PortDenied(t *testing.T) {
	t.Parallel()
	p := newATPod(t, true)
	mark := p.mark(t)
	r := p.app(t, "http", "-proxy", "http://127.0.0.1:8080", "-url", "http://api.example.test:8443/headers")
	assertStatus(t, "GET http://api.example.test:8443/headers via -x 127.0.0.1:8080", r, http.StatusForbidden, "host not allowed\nthe host is allowed, but not on this port (add it to the rule's allowed_ports)")
	p.assertNoTCP(t, mark, p.addr4(8443))
}

// AT-007: in HTTP-only mode, direct HTTPS (TCP 443) gets no connection.
func TestAT007DirectHTTPSDroppedInHTTPOnlyMode(t *testing.T) {
	t.Parallel()
	p := newATPod(t, true)
	mark := p.mark(t)
	assertNoConnection(t, "GET https://api.example.test/ (direct)", p.app(t, "http", "-url", "https://api.example.test/", "-cacert", p.originCA))
	p.assertNoTCP(t, mark, p.addr4(443))
}

// AT-008: UDP to 443 (HTTP/3, QUIC) never arrives.
func TestAT008QUICDropped(t *testing.T) {
	t.Parallel()
	p := newATPod(t, true)
	mark := p.mark(t)
	p.app(t, "udp", "-addr", p.addr4(443).String(), "-payload", "quic-initial")
	p.assertNoUDP(t, mark, p.addr4(443))
}

// AT-009: /metrics exposes botbox_ metrics; unknown paths are 404.
func TestAT009MetricsAndUnknownPath(t *testing.T) {
	t.Parallel()
	p := newATPod(t, true)
	p.app(t, "http", "-url", "http://api.example.test/headers") // so request counters exist
	r := p.app(t, "http", "-url", "http://127.0.0.1:9090/metrics")
	if r.Status != http.StatusOK || !strings.Contains(r.Body, "# HELP botbox_") {
		t.Errorf("GET /metrics: status %d, body without \"# HELP botbox_\":\n%s", r.Status, tail(r.Body, 20))
	}
	for _, want := range []string{"botbox_requests_total", `host="api.example.test"`} {
		if !strings.Contains(r.Body, want) {
			t.Errorf("GET /metrics: no %q", want)
		}
	}
	assertStatus(t, "GET /unknown on the metrics port", p.app(t, "http", "-url", "http://127.0.0.1:9090/unknown"), http.StatusNotFound, "not found")
}

// AT-010: BotBox's log never contains the secret value — across a missing
// secret, its appearance, allowed, denied and explicit-proxy requests, a
// rotation, and debug logging. The metrics exposition neither.
func TestAT010LogNeverContainsSecret(t *testing.T) {
	p := newPod(t, podConfig{rules: rulesAT, botboxEnv: []string{"BOTBOX_LOG_LEVEL=debug"}})
	canary1 := "CANARY-" + randomHex(t, 12)
	canary2 := "CANARY-" + randomHex(t, 12)

	p.app(t, "http", "-url", "http://api.example.test/headers") // 500, secret missing
	p.secrets.write(t, map[string]string{atSecretRef: canary1})
	if r, _ := p.waitHealthz(t, http.StatusOK, debounce+reloadMargin); r.Status != http.StatusOK {
		t.Fatalf("not ready after the secret appeared: %d %q", r.Status, r.Body)
	}
	requests := [][]string{
		{"-url", "http://api.example.test/headers", "-H", "X-AT-Secret: app-supplied"},
		{"-url", "http://api.example.test/headers?token=x", "-method", "POST", "-data", "payload"},
		{"-url", "http://other.example.test/"},
		{"-proxy", "http://127.0.0.1:8080", "-url", "http://api.example.test:8443/headers"},
		{"-proxy", "http://127.0.0.1:8080", "-url", "http://api.example.test/headers"},
	}
	for _, args := range requests {
		p.app(t, "http", args...)
	}
	// The origin's record, not the echo (which BotBox masks), proves the
	// injection.
	injected := func(canary string) bool {
		mark := p.mark(t)
		p.app(t, "http", "-url", "http://api.example.test/headers")
		got := p.httpEvent(t, mark, "/headers").Header["X-At-Secret"]
		return len(got) == 1 && got[0] == canary
	}
	if !injected(canary1) {
		t.Fatalf("the canary was not injected: the test would prove nothing")
	}
	p.secrets.write(t, map[string]string{atSecretRef: canary2})
	deadline := time.Now().Add(debounce + reloadMargin)
	for {
		if injected(canary2) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotated canary not injected within %v", debounce+reloadMargin)
		}
		time.Sleep(50 * time.Millisecond)
	}
	metrics := p.app(t, "http", "-url", "http://127.0.0.1:9090/metrics").Body

	if !p.botbox.stop(10 * time.Second) {
		t.Errorf("botbox did not stop within 10s of SIGTERM")
	}
	stdout, err := os.ReadFile(p.botbox.stdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.ReadFile(p.botbox.stderrPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(stdout) == 0 {
		t.Fatal("botbox wrote no log: the test would prove nothing")
	}
	for name, text := range map[string]string{"stdout (log)": string(stdout), "stderr": string(stderr), "/metrics": metrics} {
		for _, canary := range []string{canary1, canary2} {
			if strings.Contains(text, canary) {
				t.Errorf("botbox %s contains the secret value %q", name, canary)
			}
		}
	}
	t.Logf("checked %d bytes of log", len(stdout)+len(stderr))
}
