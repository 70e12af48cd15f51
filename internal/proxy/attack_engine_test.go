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

	"github.com/botbox/botbox/internal/engine"
)

// hostileRoute makes path on the test origin answer with raw bytes:
// answer writes them on the hijacked connection after the request head
// was read (the origin speaks HTTP/1.1: the test env's origin has no h2).
func (e *testEnv) hostileRoute(path string, answer func(c net.Conn, rw *bufio.ReadWriter)) {
	e.originMux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			e.t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		answer(c, rw)
		_ = rw.Flush()
	})
}

// rawExchange writes req on a new connection to the plain listener and
// returns every byte answered until the proxy closes it (or 5 s pass).
func (e *testEnv) rawExchange(req string) string {
	e.t.Helper()
	c, err := net.DialTimeout("tcp", e.plain.Listener.Addr().String(), 5*time.Second)
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		e.t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	return string(b)
}

// TestAttackOriginSwitchesProtocols is a hostile origin answering 101
// Switching Protocols to a request that offered no upgrade (attack
// playbook classes 8 and 11: a long-lived channel outside the tunnel's
// limits, and every path alike). httputil.ReverseProxy refuses it (502:
// the backend switched protocols unasked); the engine's relay must too,
// never relay a 101 as a final response with a body (the origin's raw
// stream after it) nor keep reading the agent's connection as HTTP after it.
func TestAttackOriginSwitchesProtocols(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.hostileRoute("/switch", func(c net.Conn, rw *bufio.ReadWriter) {
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nraw-stream-from-origin")
	})
	e.hostileRoute("/switch-bare", func(c net.Conn, rw *bufio.ReadWriter) {
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\n\r\n")
	})
	for _, path := range []string{"/switch", "/switch-bare"} {
		out := e.rawExchange("GET " + path + " HTTP/1.1\r\nHost: bare.example.test\r\nConnection: close\r\n\r\n")
		if !strings.HasPrefix(out, "HTTP/1.1 502 ") || strings.Contains(out, "raw-stream") || strings.Contains(out, " 101 ") {
			t.Errorf("%s: agent got %q, want 502 and nothing of the switch", path, out)
		}
	}
}

// TestAttackOriginInformationalFraming is a hostile origin sending framing
// fields in a 1xx (attack playbook class 7, response framing): net/http
// writes a 1xx without Content-Length and Transfer-Encoding, so that no
// client reads a body after an interim head; the engine must too.
func TestAttackOriginInformationalFraming(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.hostileRoute("/hints", func(c net.Conn, rw *bufio.ReadWriter) {
		_, _ = rw.WriteString("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nContent-Length: 40\r\n\r\n" +
			"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal")
	})
	out := e.rawExchange("GET /hints HTTP/1.1\r\nHost: bare.example.test\r\nConnection: close\r\n\r\n")
	interim, final, ok := strings.Cut(out, "\r\n\r\n")
	if !ok || !strings.HasPrefix(interim, "HTTP/1.1 103 ") || !strings.HasPrefix(final, "HTTP/1.1 200 ") || !strings.HasSuffix(final, "final") {
		t.Fatalf("agent got %q, want a 103 then the 200", out)
	}
	if !strings.Contains(interim, "Link: ") {
		t.Errorf("103 lost its Link field: %q", interim)
	}
	if strings.Contains(strings.ToLower(interim), "content-length") || strings.Contains(strings.ToLower(interim), "transfer-encoding") {
		t.Errorf("103 carries a framing field: %q", interim)
	}
}

// TestAttackOriginFramingLies holds the response framing against a
// hostile origin on one keep-alive agent connection (attack playbook
// class 7): a HEAD answered with a length and no body, a 204 and a 304
// that announce bodies (and a 204 that sends one), a Content-Length that
// promises more than the origin sends. Every response reaches the agent
// framed so that the next one on its connection is read where it starts,
// and a short body never looks complete.
func TestAttackOriginFramingLies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.hostileRoute("/head", func(c net.Conn, rw *bufio.ReadWriter) {
		_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n")
	})
	e.hostileRoute("/nocontent", func(c net.Conn, rw *bufio.ReadWriter) {
		_, _ = rw.WriteString("HTTP/1.1 204 No Content\r\nContent-Length: 30\r\n\r\nHTTP/1.1 200 OK\r\nX-Smuggled: 1\r\n\r\n")
	})
	e.hostileRoute("/notmodified", func(c net.Conn, rw *bufio.ReadWriter) {
		_, _ = rw.WriteString("HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	})
	e.hostileRoute("/short", func(c net.Conn, rw *bufio.ReadWriter) {
		_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")
	})
	c, err := net.DialTimeout("tcp", e.plain.Listener.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for _, tt := range []struct {
		method, path string
		status       int
		body         string
	}{
		{http.MethodHead, "/head", 200, ""},
		{http.MethodGet, "/nocontent", 204, ""},
		{http.MethodGet, "/notmodified", 304, ""},
		{http.MethodGet, "/ok", 200, `{"path":"/ok"}`},
	} {
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: bare.example.test\r\n\r\n", tt.method, tt.path)
		resp, err := http.ReadResponse(br, &http.Request{Method: tt.method})
		if err != nil {
			t.Fatalf("%s %s: %v", tt.method, tt.path, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != tt.status || string(b) != tt.body || resp.Header.Get("X-Smuggled") != "" {
			t.Errorf("%s %s: %d %q %v, want %d %q", tt.method, tt.path, resp.StatusCode, b, err, tt.status, tt.body)
		}
	}
	fmt.Fprintf(c, "GET /short HTTP/1.1\r\nHost: bare.example.test\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return // no head at all (net/http aborts before its first flush): nothing looks complete
	}
	if b, err := io.ReadAll(resp.Body); err == nil {
		t.Errorf("a body shorter than its Content-Length reached the agent as complete: %q", b)
	}
}

// TestAttackAbandonedStreamAfterBody is attack playbook class 10
// (exhaustion: an abandoned exchange holds an upstream connection and a
// request slot): the agent posts a body (chunked, or of known length),
// reads the head of a stream the origin then keeps silent, and goes
// away. net/http's background read cancels the upstream request; on the
// engine the watch of the agent's connection must start for a chunked
// body read to its end as for one of known length.
func TestAttackAbandonedStreamAfterBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	cancelled := make(chan string, 2)
	e.originMux.HandleFunc("/silent", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		_ = http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
			cancelled <- string(b)
		case <-time.After(10 * time.Second):
		}
	})
	for _, tt := range []struct{ name, req, body string }{
		{"chunked", "POST /silent HTTP/1.1\r\nHost: bare.example.test\r\nTransfer-Encoding: chunked\r\n\r\n7\r\nchunked\r\n0\r\n\r\n", "chunked"},
		{"length", "POST /silent HTTP/1.1\r\nHost: bare.example.test\r\nContent-Length: 6\r\n\r\nlength", "length"},
	} {
		c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprint(c, tt.req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "data: first\n" {
			t.Fatalf("%s: first event %q, %v", tt.name, line, err)
		}
		c.Close()
		select {
		case got := <-cancelled:
			if got != tt.body {
				t.Errorf("%s: origin got body %q", tt.name, got)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: the agent went away, the origin's silent stream is still relayed 5 s later", tt.name)
		}
	}
}

// TestAttackOriginForbiddenTrailers is a hostile origin announcing
// trailers that may not be trailers (RFC 9110 §6.5.1: framing, routing,
// authentication, content handling; httpguts.ValidTrailerHeader):
// net/http's server drops them from what it relays, so that no client
// that merges trailers into the head gets a second Content-Type or a
// WWW-Authenticate after the body. The engine must drop them too, and
// keep the others.
func TestAttackOriginForbiddenTrailers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.hostileRoute("/trailers", func(c net.Conn, rw *bufio.ReadWriter) {
		_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nTrailer: Www-Authenticate, Content-Type, X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"2\r\nok\r\n0\r\nWww-Authenticate: Basic realm=evil\r\nContent-Type: text/html\r\nX-Sum: 1\r\n\r\n")
	})
	resp, err := e.client().Do(func() *http.Request {
		req, _ := http.NewRequest(http.MethodGet, e.plain.URL+"/trailers", nil)
		req.Host = "bare.example.test"
		return req
	}())
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != "ok" {
		t.Fatalf("body %q, %v", b, err)
	}
	if resp.Trailer.Get("X-Sum") != "1" {
		t.Errorf("trailer X-Sum lost: %v", resp.Trailer)
	}
	for _, k := range []string{"Www-Authenticate", "Content-Type"} {
		if v := resp.Trailer.Values(k); len(v) > 0 {
			t.Errorf("forbidden trailer %s: %q relayed", k, v)
		}
	}
}

// TestAttackNothingBleedsToTheNextRequest holds keep-alive isolation on
// one agent connection (attack playbook class 2): the credential injected
// into a request to api.example.test, and the response fields its origin
// set, reach neither the next request to another host nor its response.
// The engine mutates the request's header map in place and adopts the
// origin's header map as the response's: both must be the request's own.
func TestAttackNothingBleedsToTheNextRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.originMux.HandleFunc("/first", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-First-Only", "1")
		w.Header().Set("Trailer", "X-First-Trailer")
		_, _ = io.WriteString(w, "first")
		w.Header().Set("X-First-Trailer", "1")
	})
	c, err := net.DialTimeout("tcp", e.plain.Listener.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	send := func(req string) (*http.Response, string) {
		t.Helper()
		fmt.Fprint(c, req)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	if resp, _ := send("GET /first HTTP/1.1\r\nHost: api.example.test\r\nTe: trailers\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	if got := e.lastSeen().Header.Get("Authorization"); got != "Bearer sk-test-12345" {
		t.Fatalf("first request: credential not injected (%q): the test proves nothing", got)
	}
	for _, req := range []string{
		"GET /second HTTP/1.1\r\nHost: bare.example.test\r\n\r\n",
		"POST /third HTTP/1.1\r\nHost: bare.example.test\r\nContent-Length: 2\r\n\r\nhi",
	} {
		resp, body := send(req)
		seen := e.lastSeen()
		if v := seen.Header.Values("Authorization"); len(v) > 0 || seen.Header.Get("X-Static") != "" {
			t.Errorf("%q: the origin got the previous request's fields: %v", req, seen.Header)
		}
		if resp.Header.Get("X-First-Only") != "" || resp.Trailer.Get("X-First-Trailer") != "" || strings.Contains(body, "sk-test") {
			t.Errorf("%q: the agent got the previous response's fields: %v %v", req, resp.Header, resp.Trailer)
		}
	}
}

// TestAttackSwitchEchoingCredentialStaysMasked holds attack playbook
// class 2 on the 101 refusal: a hostile origin echoes the injected
// credential into the Upgrade field of an unasked 101; the 502 and the
// decision line (upstream_status 101, or 0 where the synchronous pool
// refuses the switch itself) carry no byte of it, on either
// engine (net/http quotes the value in its error, which the log masks).
func TestAttackSwitchEchoingCredentialStaysMasked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.originMux.HandleFunc("/echo-switch", func(w http.ResponseWriter, r *http.Request) {
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + r.Header.Get("Authorization") + "\r\nConnection: Upgrade\r\n\r\n")
		_ = rw.Flush()
	})
	out := e.rawExchange("GET /echo-switch HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n")
	line := e.waitDecisions(1)[0]
	// On BotBox's engine the synchronous pool refuses the 101 itself (it
	// never sends an upgrade): no upstream status, the refusal in error.
	wantUpstream := float64(101)
	if onEngine() {
		wantUpstream = 0
	}
	if !strings.HasPrefix(out, "HTTP/1.1 502 ") || line["upstream_status"] != wantUpstream || line["status"] != float64(502) {
		t.Errorf("agent got %q, line %v; want 502 with upstream_status %v", out, line, wantUpstream)
	}
	if strings.Contains(out, "sk-test") || strings.Contains(e.logs.String(), "sk-test") {
		t.Error("the echoed credential reached the agent or the log")
	}
}

// TestAttackInformationalFloodThenClose is a hostile origin that answers
// with 103 Early Hints without end (http.Transport sets no bound on the
// 1xx responses a trace receives, and the first of them stops the
// response header timer) while the engine is closed under it, as at the
// drain deadline (attack playbook class 10). RoundTrip then returns while
// the transport's read loop may still be inside Got1xxResponse: the relay
// must not touch the response writer from there any more (ReverseProxy's
// roundTripDone), or the read loop and the error answer race on the
// header map (concurrent map writes kill the process). Run with -race.
func TestAttackInformationalFloodThenClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	flooding := make(chan struct{}, 1)
	e.hostileRoute("/flood", func(c net.Conn, rw *bufio.ReadWriter) {
		hint := "HTTP/1.1 103 Early Hints\r\n" + strings.Repeat("Link: </a.css>; rel=preload\r\n", 8) + "\r\n"
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		for i := 0; ; i++ {
			if _, err := rw.WriteString(hint); err != nil {
				return
			}
			if err := rw.Flush(); err != nil {
				return
			}
			if i == 0 {
				// Started: the synchronous pool refuses the sixth 1xx and
				// closes, so on a loaded host the origin may never get to
				// write many more (the test's flake: "never started").
				flooding <- struct{}{}
			}
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Options{Handler: e.handler.Plain(), Fallback: &http.Server{Handler: e.handler.Plain()}})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = eng.Serve(ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() { _, _ = io.Copy(io.Discard, c) }()
	fmt.Fprint(c, "GET /flood HTTP/1.1\r\nHost: bare.example.test\r\n\r\n")
	select {
	case <-flooding:
	case <-time.After(5 * time.Second):
		t.Fatal("the origin's flood never started")
	}
	_ = eng.Close()
	<-served
	e.waitDecisions(1) // the exchange ended and was logged
}
