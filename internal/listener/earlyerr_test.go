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

// TestObserveEarlyErrorsSkipsPriorKnowledgeH2: on a cleartext connection
// that opened with the HTTP/2 preface, bytes shaped like an early error
// (an HTTP/2 frame payload may carry them) are not reported; on one that
// did not, they are. The preface may arrive split across reads, as
// net/http reads it in two peeks.
func TestObserveEarlyErrorsSkipsPriorKnowledgeH2(t *testing.T) {
	early := []byte("HTTP/1.1 400 Bad Request" + earlyErrorHeaders + "400 Bad Request")
	tests := []struct {
		name   string
		chunks []string // what the peer sends, one read each
		fired  bool
	}{
		{"whole preface", []string{h2Preface}, false},
		{"preface in two reads", []string{"PRI * HTTP/2.0", "\r\n\r\nSM\r\n\r\n"}, false},
		{"preface byte by byte", strings.Split(h2Preface, ""), false},
		{"preface then frames", []string{h2Preface + "\x00\x00\x00\x04\x00\x00\x00\x00\x00"}, false},
		{"HTTP/1 request", []string{"GET / HTTP/1.1\r\n\r\n"}, true},
		{"PRI method but not the preface", []string{"PRI * HTTP/1.1\r\n\r\n"}, true},
		{"preface cut short", []string{"PRI * HTTP/2.0\r\n"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server, client := net.Pipe()
			defer client.Close()
			fired := false
			c := &earlyErrorConn{Conn: server, fn: func(int, net.Conn) { fired = true }}
			go func() {
				for _, ch := range tt.chunks {
					if _, err := io.WriteString(client, ch); err != nil {
						return
					}
				}
				_, _ = io.Copy(io.Discard, client)
			}()
			buf := make([]byte, 64)
			for _, ch := range tt.chunks {
				if _, err := io.ReadFull(c, buf[:len(ch)]); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.Write(early); err != nil {
				t.Fatal(err)
			}
			server.Close()
			if fired != tt.fired {
				t.Errorf("hook fired = %v, want %v", fired, tt.fired)
			}
		})
	}
}

// TestObserveEarlyErrorsServesPriorKnowledgeH2: an http.Server with
// unencrypted HTTP/2 enabled serves a prior-knowledge client through the
// hook, and still serves HTTP/1 on the same listener.
func TestObserveEarlyErrorsServesPriorKnowledgeH2(t *testing.T) {
	var mu sync.Mutex
	var seen []int
	ln := ObserveEarlyErrors(listen(t), func(code int, _ net.Conn) { mu.Lock(); seen = append(seen, code); mu.Unlock() })
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protos, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A body shaped like an early error must not reach the hook.
		fmt.Fprintf(w, "HTTP/1.1 400 Bad Request%s%s", earlyErrorHeaders, r.Proto)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	defer func() { srv.Close(); <-done }()

	for _, h2 := range []bool{true, false} {
		var cp http.Protocols
		cp.SetUnencryptedHTTP2(h2)
		cp.SetHTTP1(!h2)
		tr := &http.Transport{Protocols: &cp}
		resp, err := (&http.Client{Transport: tr}).Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatalf("h2=%v: %v", h2, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		want := "HTTP/1.1"
		if h2 {
			want = "HTTP/2.0"
		}
		if resp.Proto != want || !strings.HasSuffix(string(b), want) {
			t.Errorf("h2=%v: served as %s (%q)", h2, resp.Proto, b)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 0 {
		t.Errorf("hook saw %v for handler responses", seen)
	}
}
