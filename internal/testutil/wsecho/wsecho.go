// Package wsecho is a minimal WebSocket-style upgrade peer for tests: an
// origin handler that answers 101 and echoes one line, and the client side
// of the same exchange over any connection. It proves that an upgrade and
// the bytes after it cross a proxy; it does not speak WebSocket framing.
package wsecho

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Handler answers an Upgrade: websocket request with 101, then echoes the
// first line it reads as "echo: <line>". check, when non-nil, vets the
// request first; a non-empty result is sent back as a 400.
func Handler(check func(r *http.Request) string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "not an upgrade", http.StatusBadRequest)
			return
		}
		if check != nil {
			if msg := check(r); msg != "" {
				http.Error(w, msg, http.StatusBadRequest)
				return
			}
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		if line, err := brw.ReadString('\n'); err == nil {
			fmt.Fprint(brw, "echo: "+line)
			_ = brw.Flush()
		}
	}
}

// RoundTrip sends an upgrade request for path with the given Host and extra
// header lines ("Name: value\r\n"…) on c, expects 101, sends "ping\n" and
// checks that "echo: ping\n" comes back.
func RoundTrip(t *testing.T, c net.Conn, host, path, extra string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n%sSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", path, host, extra)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade: status %d %q", resp.StatusCode, b)
	}
	fmt.Fprint(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo: ping\n" {
		t.Fatalf("after the upgrade got %q, %v; want the echo", line, err)
	}
}
