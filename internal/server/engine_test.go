package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/eventually"
	"github.com/botbox/botbox/internal/testutil/wsecho"
)

// TestEngineChoiceInDecisionLine is issue 24's per-connection choice,
// through the real listeners: keep-alive HTTP/1.1 on the plain and the
// interception listener is served by BotBox's engine (one connection
// for every request, the credential injected, engine "botbox" in each
// line); HTTP/2 with prior knowledge, HTTP/2 over TLS, a WebSocket
// upgrade and a CONNECT stay on net/http and say so; with
// http1_engine: net/http every request says net/http.
func TestEngineChoiceInDecisionLine(t *testing.T) {
	for _, engineKey := range []string{"", "http1_engine: net/http\n"} {
		name := "default"
		if engineKey != "" {
			name = "net-http"
		}
		t.Run(name, func(t *testing.T) {
			h := start(t, harnessOpts{writeSecret: true, extraYAML: engineKey,
				interception: "  deny_handshake_on_disallowed_sni: false\n  enforce_sni_host_match: true\n"})
			want := telemetry.EngineBotBox
			if engineKey != "" {
				want = telemetry.EngineNetHTTP
			}

			// Plain listener, keep-alive: three requests, one connection.
			conns := 0
			c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				conns++
				var d net.Dialer
				return d.DialContext(ctx, network, h.addrs.Proxy[0].String())
			}}}
			for i := range 3 {
				req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://api.example.test/v1/models?i=%d", i), nil)
				req.Header.Set("Authorization", "Bearer agent-own")
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if b := body(t, resp); resp.StatusCode != 200 {
					t.Fatalf("plain request %d: %d %s", i, resp.StatusCode, b)
				}
				if got := h.lastSeen().Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+canary {
					t.Fatalf("plain request %d: origin Authorization has %d values or the wrong one", i, len(got))
				}
			}
			if conns != 1 {
				t.Errorf("three keep-alive requests used %d connections, want 1", conns)
			}
			lines := h.decisionLines("api.example.test")
			if len(lines) != 3 {
				t.Fatalf("%d decision lines, want 3", len(lines))
			}
			for _, l := range lines {
				if l[telemetry.KeyEngine] != want {
					t.Errorf("plain keep-alive line engine = %v, want %s", l[telemetry.KeyEngine], want)
				}
			}

			check := func(what, host string, wantEngine string) {
				t.Helper()
				lines := h.decisionLines(host)
				if len(lines) == 0 {
					t.Fatalf("%s: no decision line for %s", what, host)
				}
				if got := lines[len(lines)-1][telemetry.KeyEngine]; got != wantEngine {
					t.Errorf("%s: engine = %v, want %s", what, got, wantEngine)
				}
			}

			// HTTP/2 with prior knowledge on the plain listener.
			req, _ := http.NewRequest(http.MethodGet, "http://other.example.test/h2c", nil)
			resp, err := h.priorKnowledgeClient(t).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = body(t, resp)
			if resp.ProtoMajor != 2 {
				t.Fatalf("prior knowledge answered over %s", resp.Proto)
			}
			_ = h.lastSeen()
			check("h2c", "other.example.test", telemetry.EngineNetHTTP)

			// Interception listener over HTTP/1.1 and over HTTP/2.
			for _, h2 := range []bool{false, true} {
				req, _ := http.NewRequest(http.MethodGet, "https://api.example.test/v1/intercepted", nil)
				resp, err := h.interceptClient("api.example.test", h2).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if b := body(t, resp); resp.StatusCode != 200 {
					t.Fatalf("intercepted h2=%v: %d %s", h2, resp.StatusCode, b)
				}
				if got := h.lastSeen().Get("Authorization"); got != "Bearer "+canary {
					t.Errorf("intercepted h2=%v: credential not injected", h2)
				}
				wantHere := want
				if h2 {
					wantHere = telemetry.EngineNetHTTP
				}
				check(fmt.Sprintf("intercepted h2=%v", h2), "api.example.test", wantHere)
			}

			// A WebSocket upgrade on the interception listener, after a
			// plain request on the same connection: handed over mid-way.
			tc, err := tls.Dial("tcp", h.addrs.Intercept[0].String(), &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: "api.example.test", NextProtos: []string{"http/1.1"}})
			if err != nil {
				t.Fatal(err)
			}
			defer tc.Close()
			fmt.Fprintf(tc, "GET /before-upgrade HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
			pre, err := http.ReadResponse(bufio.NewReader(tc), nil)
			if err != nil {
				t.Fatal(err)
			}
			_ = body(t, pre)
			_ = h.lastSeen()
			wsecho.RoundTrip(t, tc, "api.example.test", "/ws", "")
			if got := h.lastSeen().Get("Authorization"); got != "Bearer "+canary {
				t.Error("upgrade request after a handover not injected")
			}
			_ = tc.Close() // the tunnel's line is written when it ends
			var ws map[string]any
			eventually.Eventually(t, 5*time.Second, func() bool {
				for _, l := range h.decisionLines("api.example.test") {
					if l[telemetry.KeyPath] == "/ws" {
						ws = l
					}
				}
				return ws != nil
			}, "no decision line for the upgrade")
			if ws[telemetry.KeyEngine] != telemetry.EngineNetHTTP {
				t.Errorf("upgrade engine = %v, want net/http", ws[telemetry.KeyEngine])
			}
		})
	}
}
