package server

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/telemetry"
)

// TestAttackInterceptedStreamThenPipelined holds the engine on the
// interception listener (attack playbook class 11, every path): a stream
// relayed over TLS is watched (the watch reads the TLS connection and is
// ended by a read deadline), and the connection then carries the next
// requests, one pipelined while the stream was still running and one
// sent after; each is injected and read where it starts, on one TLS
// connection.
func TestAttackInterceptedStreamThenPipelined(t *testing.T) {
	release := make(chan struct{})
	seen := make(chan string, 8)
	h := start(t, harnessOpts{writeSecret: true,
		interception: "  deny_handshake_on_disallowed_sni: false\n  enforce_sni_host_match: true\n",
		origin: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case seen <- r.Header.Get("Authorization"):
			default:
			}
			if r.URL.Path == "/stream" {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "data: 1\n\n")
				_ = http.NewResponseController(w).Flush()
				select {
				case <-release:
				case <-time.After(5 * time.Second):
				}
				fmt.Fprint(w, "data: 2\n\n")
				return
			}
			fmt.Fprintf(w, "path %s", r.URL.Path)
		})})
	tc, err := tls.Dial("tcp", h.addrs.Intercept[0].String(), &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: "api.example.test", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	_ = tc.SetDeadline(time.Now().Add(15 * time.Second))
	br := bufio.NewReader(tc)
	fmt.Fprint(tc, "GET /stream HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	sr := bufio.NewReader(resp.Body)
	if line, err := sr.ReadString('\n'); err != nil || line != "data: 1\n" {
		t.Fatalf("first event %q, %v", line, err)
	}
	// Pipelined while the stream runs: the watch sees bytes and ends.
	fmt.Fprint(tc, "GET /pipelined HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	close(release)
	rest, err := io.ReadAll(sr)
	if err != nil || !strings.Contains(string(rest), "data: 2") {
		t.Fatalf("rest of the stream %q, %v", rest, err)
	}
	for _, path := range []string{"/pipelined", "/after"} {
		if path == "/after" {
			fmt.Fprint(tc, "GET /after HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "path "+path {
			t.Errorf("%s: %d %q", path, resp.StatusCode, b)
		}
	}
	n := 0
	for {
		select {
		case got := <-seen:
			n++
			if got != "Bearer "+canary {
				t.Errorf("request %d: credential not injected", n)
			}
			continue
		default:
		}
		break
	}
	if n != 3 {
		t.Errorf("origin saw %d requests, want 3", n)
	}
	lines := h.decisionLines("api.example.test")
	if len(lines) != 3 {
		t.Errorf("%d decision lines, want 3", len(lines))
	}
	for _, l := range lines {
		if l[telemetry.KeyEngine] != telemetry.EngineBotBox {
			t.Errorf("%v served on %v, want the engine", l[telemetry.KeyPath], l[telemetry.KeyEngine])
		}
	}
}

// TestAttackReloadMidConnection holds per-request decisions on one engine
// keep-alive connection across hot reloads (attack playbook classes 8 and
// 11: a long-lived connection outlives a decision; a reload in the
// middle): allowed, then denied after a reload to deny, then allowed and
// forwarded after a reload to report mode, each on the same connection
// and each line on the engine.
func TestAttackReloadMidConnection(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, configFile: true})
	c, err := net.Dial("tcp", h.addrs.Proxy[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	br := bufio.NewReader(c)
	get := func() int {
		t.Helper()
		fmt.Fprint(c, "GET /mid HTTP/1.1\r\nHost: other.example.test\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("the connection did not survive the reload: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get(); got != http.StatusOK {
		t.Fatalf("before reload: %d", got)
	}
	denied := h.withOther("    - host: other.example.test\n      action: deny\n")
	h.writeConfig(denied)
	if err := h.srv.Reload(TriggerSIGHUP); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != http.StatusForbidden {
		t.Errorf("after the reload to deny, same connection: %d, want 403", got)
	}
	h.writeConfig(strings.Replace(denied, "  default_action: deny\n", "  default_action: deny\n  mode: report\n", 1))
	if err := h.srv.Reload(TriggerSIGHUP); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != http.StatusOK {
		t.Errorf("after the reload to report mode, same connection: %d, want 200 (forwarded, logged as would-deny)", got)
	}
	lines := h.decisionLines("other.example.test")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3", len(lines))
	}
	for _, l := range lines {
		if l[telemetry.KeyEngine] != telemetry.EngineBotBox {
			t.Errorf("line %v on %v, want the engine", l, l[telemetry.KeyEngine])
		}
	}
}
