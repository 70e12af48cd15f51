// Package wsecho is a minimal WebSocket-style upgrade peer for tests: an
// origin handler that answers 101 and echoes one line, and the client side
// of the same exchange over any connection. It proves that an upgrade and
// the bytes after it cross a proxy. The server's bytes are WebSocket
// frames (one unmasked text frame per echo, RFC 6455 §5.2), which a proxy
// that scrubs server frames must parse; the client's are bare lines.
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
			_, _ = brw.Write(Frame("echo: " + line))
			_ = brw.Flush()
		}
	}
}

// Frame returns payload (at most 65535 bytes) as one unmasked, final text
// frame: what a server sends.
func Frame(payload string) []byte {
	if len(payload) < 126 {
		return append([]byte{0x81, byte(len(payload))}, payload...)
	}
	return append([]byte{0x81, 126, byte(len(payload) >> 8), byte(len(payload))}, payload...)
}

// ReadFrame reads one unmasked frame of at most 65535 bytes (Frame's
// output) and returns its payload.
func ReadFrame(r io.Reader) (string, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:2]); err != nil {
		return "", err
	}
	n := int(h[1] & 0x7f)
	if h[1]&0x80 != 0 || n == 127 {
		return "", fmt.Errorf("wsecho: unsupported frame header % x", h[:2])
	}
	if n == 126 {
		if _, err := io.ReadFull(r, h[2:]); err != nil {
			return "", err
		}
		n = int(h[2])<<8 | int(h[3])
	}
	p := make([]byte, n)
	_, err := io.ReadFull(r, p)
	return string(p), err
}

// RoundTrip sends an upgrade request for path with the given Host and extra
// header lines ("Name: value\r\n"…) on c, expects 101, sends "ping\n" and
// checks that "echo: ping\n" comes back in one frame.
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
	if line, err := ReadFrame(br); err != nil || line != "echo: ping\n" {
		t.Fatalf("after the upgrade got %q, %v; want the echo", line, err)
	}
}
