package listener

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/telemetry"
)

func TestParseEarlyError(t *testing.T) {
	tests := []struct {
		name string
		in   string
		code int
		ok   bool
	}{
		{"400", "HTTP/1.1 400 Bad Request" + earlyErrorHeaders + "400 Bad Request", 400, true},
		{"400 with text", "HTTP/1.1 400 Bad Request: missing required Host header" + earlyErrorHeaders + "400 Bad Request: missing required Host header", 400, true},
		{"431", "HTTP/1.1 431 Request Header Fields Too Large" + earlyErrorHeaders + "431 Request Header Fields Too Large", 431, true},
		{"501", "HTTP/1.1 501 Not Implemented" + earlyErrorHeaders + "Unsupported transfer encoding", 501, true},
		// A handler's response: sorted headers, a Date, never this shape.
		{"handler 400", "HTTP/1.1 400 Bad Request\r\nContent-Length: 3\r\nContent-Type: text/plain; charset=utf-8\r\nDate: x\r\n\r\nbad", 0, false},
		{"handler 200", "HTTP/1.1 200 OK" + earlyErrorHeaders + "ok", 0, false},
		{"body bytes", "hello", 0, false},
		{"short", "HTTP/1.1 40", 0, false},
		{"no headers", "HTTP/1.1 400 Bad Request", 0, false},
		{"not a number", "HTTP/1.1 4x0 Bad" + earlyErrorHeaders, 0, false},
	}
	for _, tt := range tests {
		code, ok := parseEarlyError([]byte(tt.in))
		if code != tt.code || ok != tt.ok {
			t.Errorf("%s: parseEarlyError = %d %v, want %d %v", tt.name, code, ok, tt.code, tt.ok)
		}
	}
}

func FuzzParseEarlyError(f *testing.F) {
	f.Add([]byte("HTTP/1.1 400 Bad Request" + earlyErrorHeaders + "400 Bad Request"))
	f.Add([]byte("HTTP/1.1 200 OK\r\n\r\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		code, ok := parseEarlyError(b)
		if ok && (code < 400 || code > 599 || !strings.HasPrefix(string(b), "HTTP/1.1 ") || !strings.Contains(string(b), earlyErrorHeaders)) {
			t.Fatalf("accepted %q as %d", b, code)
		}
		if !ok && code != 0 {
			t.Fatalf("rejected with code %d", code)
		}
	})
}

// TestObserveEarlyErrors: the hook sees net/http's own refusals on plain
// and TLS HTTP/1 connections, not a handler's error responses; a TLS
// connection keeps Request.TLS, and an h2 connection stays a *tls.Conn.
func TestObserveEarlyErrors(t *testing.T) {
	f := newTLSFixture(t)
	f.cfg.NextProtos = []string{"h2", "http/1.1"}
	var mu sync.Mutex
	var seen []int
	hook := func(code int, c net.Conn) {
		mu.Lock()
		seen = append(seen, code)
		mu.Unlock()
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/handler-400" {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "tls=%v proto=%s", r.TLS != nil, r.Proto)
	})
	plainLn := ObserveEarlyErrors(listen(t), hook)
	plain := &http.Server{Handler: handler}
	tlsInner := NewTLSListener(listen(t), f.cfg, 5*time.Second, f.metrics, telemetry.NewLogger(io.Discard, nil))
	tlsLn := ObserveEarlyErrors(tlsInner, hook)
	tlsSrv := &http.Server{Handler: handler, TLSConfig: f.cfg}
	var wg sync.WaitGroup
	for _, p := range []struct {
		s  *http.Server
		ln net.Listener
	}{{plain, plainLn}, {tlsSrv, tlsLn}} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.s.Serve(p.ln) }()
	}
	defer func() { plain.Close(); tlsSrv.Close(); wg.Wait() }()

	raw := func(c net.Conn, req string) string {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprint(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	dialPlain := func() net.Conn {
		c, err := net.Dial("tcp", plainLn.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dialTLS := func(protos ...string) *tls.Conn {
		c, err := tls.Dial("tcp", tlsLn.Addr().String(), &tls.Config{RootCAs: f.ca.Pool(), ServerName: "api.example.test", NextProtos: protos})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if got := raw(dialPlain(), "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"); !strings.HasPrefix(got, "400") {
		t.Errorf("duplicate Host: %s", got)
	}
	if got := raw(dialPlain(), "GET /handler-400 HTTP/1.1\r\nHost: a\r\n\r\n"); !strings.HasPrefix(got, "400") {
		t.Errorf("handler 400: %s", got)
	}
	if got := raw(dialTLS("http/1.1"), "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"); !strings.HasPrefix(got, "501") {
		t.Errorf("TLS bad TE: %s", got)
	}
	if got := raw(dialTLS("http/1.1"), "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); got != "200 tls=true proto=HTTP/1.1" {
		t.Errorf("TLS HTTP/1 request lost its TLS state: %s", got)
	}
	// h2 still negotiates and serves through the hook.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.ca.Pool(), ServerName: "api.example.test"}, ForceAttemptHTTP2: true}}
	resp, err := client.Get("https://" + tlsLn.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	client.CloseIdleConnections()
	if string(b) != "tls=true proto=HTTP/2.0" {
		t.Errorf("h2 through the hook: %s", b)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != "[400 501]" {
		t.Errorf("hook saw %v, want [400 501] (not the handler's 400)", seen)
	}
}
