package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/eventually"
)

// TestConnectToRoutedRule is review D1: an HTTPS_PROXY agent reaches a
// host whose rule has routes. With interception the CONNECT is decided on
// host and port only and every request inside the tunnel on its route; a
// route the rule does not allow is refused inside the tunnel, never
// forwarded. Without interception no CONNECT is served at all, so a rule's
// routes and rewrites can never be bypassed by an opaque tunnel. On
// ee87e5f the intercepted CONNECT was 405 ambiguous_path.
func TestConnectToRoutedRule(t *testing.T) {
	t.Run("interception", func(t *testing.T) {
		for _, h2 := range []bool{false, true} {
			t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
				e := newEnv(t, envOpts{connectTLS: true, http2Origin: true})
				e.usePolicy(routedRules)
				c := e.curlClient(h2)
				for _, tc := range []struct {
					method, path string
					status       int
					reason       string
				}{
					{"GET", "/user", http.StatusOK, "rule_allow"},
					{"GET", "/repos/acme/app", http.StatusOK, "rule_allow"},
					{"GET", "/repos/other/app", http.StatusForbidden, "no_route"},
					{"DELETE", "/repos/acme/app", http.StatusForbidden, "route_deny"},
				} {
					hits := e.hits.Load()
					req, _ := http.NewRequest(tc.method, "https://api.example.test"+tc.path, nil)
					resp, err := c.Do(req)
					if err != nil {
						t.Fatalf("%s %s through the CONNECT tunnel: %v", tc.method, tc.path, err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != tc.status || resp.Header.Get(HeaderReason) != reasonOrEmpty(tc.status, tc.reason) {
						t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get(HeaderReason), tc.status, tc.reason)
					}
					if reached := e.hits.Load() > hits; reached != (tc.status == http.StatusOK) {
						t.Errorf("%s %s: origin reached = %v", tc.method, tc.path, reached)
					}
					if tc.status != http.StatusOK {
						continue
					}
					if auth := e.lastSeen().Header.Get("Authorization"); !strings.HasPrefix(auth, "Bearer ") || auth == "Bearer " {
						t.Errorf("%s %s: credential not injected inside the tunnel (Authorization %q)", tc.method, tc.path, auth)
					}
				}
			})
		}
	})
	t.Run("no interception", func(t *testing.T) {
		e := newEnv(t, envOpts{})
		e.usePolicy(routedRules)
		resp, _ := e.raw("CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get(HeaderReason) != reasonConnect {
			t.Errorf("CONNECT without interception: %d %q, want 405 %q", resp.StatusCode, resp.Header.Get(HeaderReason), reasonConnect)
		}
		e.assertOriginUntouched()
	})
}

func reasonOrEmpty(status int, reason string) string {
	if status == http.StatusOK {
		return ""
	}
	return reason
}

// TestReportModeConnectDenied is review D2: report mode opens the tunnel
// of a CONNECT enforce mode would refuse, and reports it: the CONNECT's
// line says report_deny with the policy's reason, the requests inside are
// forwarded as report_deny without header rewrites. A CONNECT to a port
// other than 443 is still refused (BotBox speaks only TLS to port 443 in a
// tunnel). On ee87e5f the CONNECT was refused with 405 rule_deny.
func TestReportModeConnectDenied(t *testing.T) {
	e := newEnv(t, envOpts{connectTLS: true})
	e.usePolicyMode("report")
	client := e.curlClient(false)
	resp, err := client.Get("https://blocked.example.test/report")
	if err != nil {
		t.Fatalf("report mode refused the CONNECT: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("request inside the reported tunnel: %d", resp.StatusCode)
	}
	if got := e.lastSeen(); got.Path != "/report" || got.Header.Get("Authorization") != "" {
		t.Errorf("origin saw %+v, want /report without rewrites", got)
	}
	client.Transport.(*http.Transport).CloseIdleConnections()
	if r, _ := e.raw("CONNECT blocked.example.test:8443 HTTP/1.1\r\nHost: blocked.example.test:8443\r\n\r\n"); r.StatusCode != http.StatusMethodNotAllowed || r.Header.Get(HeaderReason) != reasonConnectPort {
		t.Errorf("report mode CONNECT to port 8443: %d %q, want 405 %s", r.StatusCode, r.Header.Get(HeaderReason), reasonConnectPort)
	}
	recs := e.waitDecisions(3)
	inner, outer := decisionsBy(recs, ListenerConnect), decisionsBy(recs, ListenerHTTP)
	if len(inner) != 1 || inner[0]["decision"] != telemetry.DecisionReportDeny || inner[0]["reason"] != "rule_deny" {
		t.Errorf("request line = %v, want report_deny rule_deny", inner)
	}
	var connectLine map[string]any
	for _, l := range outer {
		if l["port"] == float64(443) {
			connectLine = l
		}
	}
	if connectLine == nil || connectLine["decision"] != telemetry.DecisionReportDeny || connectLine["reason"] != "rule_deny" {
		t.Errorf("CONNECT line = %v, want report_deny rule_deny", connectLine)
	}
	// One request forwarded in report mode: counted once, the tunnel's own
	// line is not a request of its own.
	if got := testutil.ToFloat64(e.metrics.Requests.WithLabelValues(telemetry.HostReport, telemetry.DecisionReportDeny)); got != 1 {
		t.Errorf("requests{_report,report_deny} = %v, want 1", got)
	}
}

// TestStreamedRefusalCountedOnce is review D4: a request refused while its
// body streams is counted once, as the refusal; an allowed request once,
// as allow. On ee87e5f the streamed refusal was counted under allow and
// denied_body_too_large.
func TestStreamedRefusalCountedOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.originMux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })
	e.withBareRule("      max_request_body_bytes: 1024\n")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, size := range []int{4096, 10} {
		req, _ := http.NewRequest(http.MethodPost, e.plain.URL+"/upload", io.MultiReader(bytes.NewReader(make([]byte, size))))
		req.Host = "bare.example.test"
		req.ContentLength = -1
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	e.waitDecisions(2)
	allow := testutil.ToFloat64(e.metrics.Requests.WithLabelValues("bare.example.test", telemetry.DecisionAllow))
	denied := testutil.ToFloat64(e.metrics.Requests.WithLabelValues("bare.example.test", telemetry.DecisionDeniedBodyTooLarge))
	if allow != 1 || denied != 1 {
		t.Errorf("two requests counted allow=%v denied_body_too_large=%v, want 1 and 1", allow, denied)
	}
}

// withBareRuleMode installs, as the generation in force, testConfig with
// keys added to the bare.example.test rule and egress_policy.mode set
// ("": the default).
func (e *testEnv) withBareRuleMode(keys, mode string) {
	e.t.Helper()
	y := fmt.Sprintf(testConfig, e.secretDir, "", "deny")
	const bare = "    - host: bare.example.test\n      action: allow\n"
	y = strings.Replace(y, bare, bare+keys, 1)
	if mode != "" {
		y = strings.Replace(y, "  default_action: deny\n", "  default_action: deny\n  mode: "+mode+"\n", 1)
	}
	e.storeYAML(y)
}

// storeYAML parses y and makes it the generation in force.
func (e *testEnv) storeYAML(y string) {
	e.t.Helper()
	cfg, err := config.Parse([]byte(y))
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.handler.gen.Store(cfg); err != nil {
		e.t.Fatal(err)
	}
}

// wsOrigin is an upgrade origin that answers 101 and counts what the agent
// sends through the tunnel; closed is closed when its connection ends.
type wsOrigin struct {
	got    atomic.Int64
	frames chan struct{} // one per read
	closed chan struct{} // one per connection that ended
}

func newWSOrigin(e *testEnv, path string) *wsOrigin {
	o := &wsOrigin{frames: make(chan struct{}, 1024), closed: make(chan struct{}, 16)}
	e.originMux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { o.closed <- struct{}{} }()
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		buf := make([]byte, 4096)
		for {
			n, err := brw.Read(buf)
			if n > 0 {
				o.got.Add(int64(n))
				o.frames <- struct{}{}
			}
			if err != nil {
				return
			}
		}
	})
	return o
}

// clientFrame is payload as one masked binary frame, as an agent sends it.
func clientFrame(payload []byte) []byte {
	mask := [4]byte{1, 2, 3, 4}
	var f []byte
	switch {
	case len(payload) < 126:
		f = []byte{0x82, 0x80 | byte(len(payload))}
	default:
		f = []byte{0x82, 0x80 | 126, byte(len(payload) >> 8), byte(len(payload))}
	}
	f = append(f, mask[:]...)
	for i, b := range payload {
		f = append(f, b^mask[i%4])
	}
	return f
}

// openWS upgrades a raw connection to host's path through the plain
// listener (or over c when given) and returns it after the 101.
func openWS(t *testing.T, e *testEnv, c net.Conn, host, path string) net.Conn {
	t.Helper()
	if c == nil {
		var err error
		if c, err = net.Dial("tcp", e.plain.Listener.Addr().String()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", path, host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade of %s%s: %d", host, path, resp.StatusCode)
	}
	return c
}

// TestWebSocketTunnelBodyLimit (redteam §8): max_request_body_bytes bounds
// what the agent sends through an upgrade tunnel, frame headers included:
// the read that crosses it is dropped and the tunnel closed, logged and
// counted once as denied_body_too_large. In report mode everything passes
// and the line says report_deny. On ee87e5f 60 kB crossed a 1000-byte limit.
func TestWebSocketTunnelBodyLimit(t *testing.T) {
	for _, mode := range []string{"enforce", "report"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			o := newWSOrigin(e, "/ws")
			e.withBareRuleMode("      max_request_body_bytes: 1000\n", mode)
			c := openWS(t, e, nil, "bare.example.test", "/ws")
			frame := clientFrame(bytes.Repeat([]byte("x"), 500)) // 508 bytes
			var sent int
			for range 10 {
				if _, err := c.Write(frame); err != nil {
					break
				}
				sent += len(frame)
				time.Sleep(5 * time.Millisecond) // one read per frame at the proxy
			}
			if mode == "enforce" {
				<-o.closed
				if got := o.got.Load(); got > 1000 {
					t.Errorf("origin received %d bytes through a tunnel limited to 1000", got)
				}
			} else {
				eventually.Eventually(t, 10*time.Second, func() bool { return o.got.Load() == int64(sent) }, "every byte reaches the origin in report mode")
				c.Close()
			}
			line := e.waitDecisions(1)[0]
			wantDecision := telemetry.DecisionDeniedBodyTooLarge
			if mode == "report" {
				wantDecision = telemetry.DecisionReportDeny
			}
			if line["decision"] != wantDecision || line["reason"] != reasonBodyTooLarge {
				t.Errorf("tunnel line = %v, want %s %s", line, wantDecision, reasonBodyTooLarge)
			}
			label := "bare.example.test"
			if mode == "report" {
				label = telemetry.HostReport
			}
			if got := testutil.ToFloat64(e.metrics.Requests.WithLabelValues(label, wantDecision)); got != 1 {
				t.Errorf("requests{%s,%s} = %v, want 1", label, wantDecision, got)
			}
			if got := testutil.ToFloat64(e.metrics.Requests.WithLabelValues("bare.example.test", telemetry.DecisionAllow)); got != 0 {
				t.Errorf("requests{allow} = %v, want 0 (counted once, as its final decision)", got)
			}
		})
	}
}

// manualClock is a handler clock the test moves.
type manualClock struct{ ns atomic.Int64 }

func (c *manualClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) add(d time.Duration) { c.ns.Add(int64(d)) }

// TestWebSocketTunnelRateLimit: each frame the agent sends takes a token
// of the rule's bucket; with the bucket empty the frame waits (the tunnel
// is slowed, never corrupted) until the clock refills it. In report mode
// nothing waits and the line says report_deny rate_limited.
func TestWebSocketTunnelRateLimit(t *testing.T) {
	for _, mode := range []string{"enforce", "report"} {
		t.Run(mode, func(t *testing.T) {
			clk := &manualClock{}
			clk.ns.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano())
			e := newEnv(t, envOpts{now: clk.now})
			o := newWSOrigin(e, "/ws")
			e.withBareRuleMode("      rate_limit: { requests_per_second: 20, burst: 2 }\n", mode)
			c := openWS(t, e, nil, "bare.example.test", "/ws") // the upgrade takes a token
			frame := clientFrame([]byte("hello"))
			if _, err := c.Write(frame); err != nil { // the last token
				t.Fatal(err)
			}
			<-o.frames
			if _, err := c.Write(frame); err != nil { // none left
				t.Fatal(err)
			}
			if mode == "enforce" {
				select {
				case <-o.frames:
					t.Fatal("a frame passed with the bucket empty and the clock still")
				case <-time.After(300 * time.Millisecond):
				}
				clk.add(time.Second)
			}
			select {
			case <-o.frames:
			case <-time.After(10 * time.Second):
				t.Fatal("the frame never passed")
			}
			c.Close()
			line := e.waitDecisions(1)[0]
			wantDecision, wantReason := telemetry.DecisionAllow, "rule_allow"
			if mode == "report" {
				wantDecision, wantReason = telemetry.DecisionReportDeny, reasonRateLimited
			}
			if line["decision"] != wantDecision || line["reason"] != wantReason {
				t.Errorf("tunnel line = %v, want %s %s", line, wantDecision, wantReason)
			}
		})
	}
}

// TestReloadClosesRevokedTunnels (redteam §8): a reload re-decides every
// open tunnel. An upgrade tunnel whose host, port or route the new policy
// no longer allows, and a CONNECT tunnel whose host it no longer allows,
// are closed with a decision line, reason policy_reloaded; a tunnel still
// allowed stays open and carries data; report mode closes nothing. On
// ee87e5f a revoked WebSocket kept carrying data after the reload.
func TestReloadClosesRevokedTunnels(t *testing.T) {
	const (
		apiRule  = "    - host: api.example.test\n      action: allow\n"
		bareRule = "    - host: bare.example.test\n      action: allow\n"
	)
	cases := []struct {
		name       string
		rules      string // the reloaded policy
		mode       string
		wantClosed bool
	}{
		{"host denied", apiRule + "    - host: bare.example.test\n      action: deny\n", "", true},
		{"host dropped", apiRule, "", true},
		{"port dropped", apiRule + bareRule + "      allowed_ports: [8443]\n", "", true},
		{"route dropped", apiRule + bareRule + "      routes:\n        - paths: [\"/other/**\"]\n", "", true},
		{"route kept", apiRule + bareRule + "      routes:\n        - methods: [GET]\n          paths: [\"/ws\"]\n", "", false},
		{"still allowed", apiRule + bareRule, "", false},
		{"report mode", apiRule, "report", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{connectTLS: true})
			o := newWSOrigin(e, "/ws")
			ws := openWS(t, e, nil, "bare.example.test", "/ws")
			// The same host through a CONNECT tunnel (intercepted), with a
			// WebSocket inside it.
			tc1, err := e.tunnelTLS("bare.example.test:443", "bare.example.test", "http/1.1")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tc1.Close() })
			inner := openWS(t, e, tc1, "bare.example.test", "/ws")

			y := fmt.Sprintf("secrets_dir: %s\negress_policy:\n  default_action: deny\n", e.secretDir)
			if tc.mode != "" {
				y += "  mode: " + tc.mode + "\n"
			}
			cfg, err := config.Parse([]byte(y + "  rules:\n" + tc.rules))
			if err != nil {
				t.Fatal(err)
			}
			g, err := e.handler.gen.Store(cfg)
			if err != nil {
				t.Fatal(err)
			}
			closed := e.handler.CloseRevokedTunnels(g)
			// The WebSocket, the CONNECT tunnel, the WebSocket inside it;
			// a CONNECT is decided on host and port, so a route change
			// revokes only the WebSockets (closing the inner one ends its
			// CONNECT's connection all the same).
			wantN := 0
			switch {
			case tc.wantClosed && tc.name == "route dropped":
				wantN = 2
			case tc.wantClosed:
				wantN = 3
			}
			if closed != wantN {
				t.Errorf("CloseRevokedTunnels closed %d tunnels, want %d", closed, wantN)
			}
			for name, c := range map[string]net.Conn{"websocket": ws, "websocket in CONNECT": inner} {
				before := o.got.Load()
				_, _ = c.Write(clientFrame([]byte("after the reload")))
				_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
				_, rerr := c.Read(make([]byte, 1))
				gone := rerr != nil && !isTimeout(rerr)
				if gone != tc.wantClosed {
					t.Errorf("%s: closed = %v (%v), want %v", name, gone, rerr, tc.wantClosed)
				}
				if !tc.wantClosed {
					eventually.Eventually(t, 5*time.Second, func() bool { return o.got.Load() > before }, name+" still carries data")
				}
			}
			if tc.wantClosed {
				for _, l := range e.waitDecisions(3) {
					want := reasonPolicyReloaded
					if l["method"] == http.MethodConnect && wantN == 2 {
						want = reasonConnectTunnel
					}
					if l["reason"] != want {
						t.Errorf("%s %s line (listener %s): reason %v, want %s", l["method"], l["path"], l["listener"], l["reason"], want)
					}
				}
			}
		})
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return err != nil && strings.Contains(err.Error(), "timeout") || (asNetError(err, &ne) && ne.Timeout())
}

func asNetError(err error, target *net.Error) bool {
	ne, ok := err.(net.Error)
	if ok {
		*target = ne
	}
	return ok
}

// TestTunnelOpenedAcrossReload: an upgrade decided before a reload whose
// 101 arrives after it (so the reload's CloseRevokedTunnels ran before the
// tunnel existed) is re-decided as it opens, and closed with reason
// policy_reloaded when the new policy no longer allows it.
func TestTunnelOpenedAcrossReload(t *testing.T) {
	e := newEnv(t, envOpts{})
	reached, release := make(chan struct{}), make(chan struct{})
	e.originMux.HandleFunc("/ws-slow", func(w http.ResponseWriter, r *http.Request) {
		close(reached)
		<-release
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.Copy(io.Discard, brw)
	})
	c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "GET /ws-slow HTTP/1.1\r\nHost: bare.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	<-reached
	// The reload: bare.example.test is no longer allowed. Its
	// CloseRevokedTunnels finds no tunnel yet.
	e.usePolicy("    - host: api.example.test\n      action: allow\n")
	if n := e.handler.CloseRevokedTunnels(e.handler.gen.Load()); n != 0 {
		t.Fatalf("CloseRevokedTunnels closed %d tunnels before any was open", n)
	}
	close(release)
	// Closed as it opens: before ReverseProxy writes the 101 to the agent.
	if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
		t.Fatalf("the tunnel opened after the reload: agent read %q, %v; want the connection closed", b, err)
	}
	line := e.waitDecisions(1)[0]
	if line["reason"] != reasonPolicyReloaded || line["upstream_status"] != float64(http.StatusSwitchingProtocols) {
		t.Errorf("line = %v, want upstream_status 101, reason policy_reloaded", line)
	}
}
