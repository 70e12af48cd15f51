package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/botbox/botbox/internal/testutil/wsecho"
)

// holdOpen is an origin upgrade handler that answers 101, echoes every line
// (in a WebSocket frame, as wsecho) and keeps the tunnel open until the
// other side closes it.
func holdOpen(w http.ResponseWriter, r *http.Request) {
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	_ = brw.Flush()
	for {
		line, err := brw.ReadString('\n')
		if err != nil {
			return
		}
		_, _ = brw.Write(wsecho.Frame("echo: " + line))
		_ = brw.Flush()
	}
}

// TestWebSocketTunnelCounted: the decision line of a tunnel is written when
// it closes, with status 101 and the bytes of both directions (it said
// status 0, 0 bytes).
func TestWebSocketTunnelCounted(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.originMux.HandleFunc("/ws", wsecho.Handler(nil)) // echoes one line, then closes
	c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wsecho.RoundTrip(t, c, "api.example.test", "/ws", "")
	// The origin closed its side (the agent reads EOF); the tunnel ends
	// when the agent closes too.
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the origin closed: read %d, %v; want EOF", n, err)
	}
	if n := e.handler.openTunnels(); n != 1 {
		t.Errorf("%d open tunnels while the agent's side is open, want 1", n)
	}
	c.Close()
	line := e.waitDecisions(1)[0]
	// in: "ping\n" from the agent; out: "echo: ping\n" to it in a frame.
	if line["status"] != float64(101) || line["upstream_status"] != float64(101) || line["bytes_in"] != float64(5) || line["bytes_out"] != float64(13) {
		t.Errorf("tunnel line = %v, want status 101, bytes_in 5, bytes_out 13", line)
	}
	if line["reason"] != "rule_allow" || line["level"] != "INFO" {
		t.Errorf("tunnel line = %v, want rule_allow at INFO", line)
	}
}

// TestTunnelKeepsBytesSentWithTheUpgrade: bytes the agent sends in the same
// write as the upgrade request (read ahead by the HTTP server) reach the
// origin through the tunnel; ReverseProxy alone dropped them.
func TestTunnelKeepsBytesSentWithTheUpgrade(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.originMux.HandleFunc("/ws", wsecho.Handler(nil))
	c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: api.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nping\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v, %v", resp, err)
	}
	if line, err := wsecho.ReadFrame(br); err != nil || line != "echo: ping\n" {
		t.Fatalf("after the upgrade got %q, %v; want the echo of the pipelined line", line, err)
	}
	c.Close()
	if line := e.waitDecisions(1)[0]; line["bytes_in"] != float64(5) {
		t.Errorf("bytes_in = %v, want 5", line["bytes_in"])
	}
}

// TestCloseTunnels: CloseTunnels ends every open tunnel; each line then
// says shutdown.
func TestCloseTunnels(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.originMux.HandleFunc("/ws", holdOpen)
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wsecho.RoundTrip(t, c, "api.example.test", "/ws", "")
		conns = append(conns, c)
	}
	if n := e.handler.openTunnels(); n != 3 {
		t.Fatalf("%d open tunnels registered, want 3", n)
	}
	e.handler.CloseTunnels()
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("tunnel %d still open after CloseTunnels (read %d bytes)", i, n)
		}
	}
	for _, line := range e.waitDecisions(3) {
		if line["reason"] != "shutdown" || line["status"] != float64(101) {
			t.Errorf("line = %v, want reason shutdown, status 101", line)
		}
	}
	if n := e.handler.openTunnels(); n != 0 {
		t.Errorf("%d tunnels still registered", n)
	}
}

// TestTunnelIdleTimeoutThroughProxy: with tunnel_idle_timeout_seconds: 1, a
// silent tunnel is closed by BotBox (no timing is asserted: the test waits
// for the close).
func TestTunnelIdleTimeoutThroughProxy(t *testing.T) {
	e := newEnv(t, envOpts{extraConfig: "tunnel_idle_timeout_seconds: 1"})
	e.originMux.HandleFunc("/ws", holdOpen)
	c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wsecho.RoundTrip(t, c, "api.example.test", "/ws", "")
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from an idle tunnel")
	}
	if line := e.waitDecisions(1)[0]; line["reason"] != "tunnel_idle_timeout" {
		t.Errorf("line = %v, want reason tunnel_idle_timeout", line)
	}
}

// TestTunnelIdleTimer holds the idle rule on fake time: traffic in either
// direction restarts the period; silence in both for the full period closes.
func TestTunnelIdleTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 10 * time.Second
		agent, proxySide := net.Pipe()
		defer agent.Close()
		var set tunnelSet
		tc := set.open(proxySide, idle, tunnelTarget{}, nil, time.Now)
		go func() { _, _ = io.Copy(io.Discard, agent) }()

		time.Sleep(8 * time.Second)
		if _, err := tc.Write([]byte("x")); err != nil { // out: origin to agent
			t.Fatal(err)
		}
		time.Sleep(8 * time.Second) // 16 s since open, 8 s silent
		synctest.Wait()
		if tc.closedBy() != "" || set.len() != 1 {
			t.Fatalf("closed after 8 s of silence (%q)", tc.closedBy())
		}
		go func() { _, _ = agent.Write([]byte("y")) }() // in: agent to origin
		if _, err := tc.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(idle - time.Second)
		synctest.Wait()
		if tc.closedBy() != "" {
			t.Fatal("closed although the agent sent a byte within the period")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if tc.closedBy() != reasonTunnelIdle || set.len() != 0 {
			t.Fatalf("after %s of silence: closedBy %q, %d registered", idle+time.Second, tc.closedBy(), set.len())
		}
		if tc.in.Load() != 1 || tc.out.Load() != 1 {
			t.Errorf("counted in %d out %d, want 1 and 1", tc.in.Load(), tc.out.Load())
		}
	})
}

// TestUpgradeH2CDropped: an h2c offer (Java's HttpClient sends one on every
// http:// request) is removed and the request served as HTTP/1.1; the
// origin never sees it.
func TestUpgradeH2CDropped(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp, body := e.raw("GET /v1 HTTP/1.1\r\nHost: api.example.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAEAAEAAAAIAAAABAAMAAABkAAQBAAAAAAUAAEAA\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %q, want 200", resp.StatusCode, body)
	}
	got := e.lastSeen()
	for _, h := range []string{"Upgrade", "Http2-Settings", "Connection"} {
		if v := got.Header.Values(h); len(v) != 0 {
			t.Errorf("origin saw %s: %q", h, v)
		}
	}
	if got.Proto != "HTTP/1.1" {
		t.Errorf("origin proto %s", got.Proto)
	}
}

// TestUpgradeOtherTokenRefused: any upgrade but websocket (and a dropped
// h2c) is refused with 400 and logged with the offered token; nothing
// reaches the origin.
func TestUpgradeOtherTokenRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	for i, offer := range []string{"foo", "websocket, h2c", "h2c, tls/1.0", "TLS/1.2"} {
		resp, body := e.raw("GET / HTTP/1.1\r\nHost: api.example.test\r\nConnection: upgrade\r\nUpgrade: " + offer + "\r\n\r\n")
		if resp.StatusCode != http.StatusBadRequest || body != bodyUpgrade {
			t.Errorf("Upgrade %q: %d %q, want 400", offer, resp.StatusCode, body)
		}
		line := e.waitDecisions(i + 1)[i]
		if line["upgrade"] != offer || line["decision"] != "denied_upgrade" || line["reason"] != "upgrade_not_allowed" {
			t.Errorf("Upgrade %q: line %v", offer, line)
		}
	}
	e.assertOriginUntouched()
	// Without "upgrade" in Connection, Upgrade is a stray hop-by-hop
	// header: dropped, the request forwarded.
	resp, _ := e.raw("GET / HTTP/1.1\r\nHost: api.example.test\r\nUpgrade: foo\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Errorf("stray Upgrade: %d, want 200", resp.StatusCode)
	}
	if got := e.lastSeen(); got.Header.Get("Upgrade") != "" {
		t.Errorf("origin saw Upgrade %q", got.Header.Get("Upgrade"))
	}
}
