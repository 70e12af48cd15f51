package engine

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// seen is what a handler observed of one request: everything of the head
// the parser decided, the body read to its end, and who served it.
type seen struct {
	Engine           bool
	Method, URI      string
	Host             string
	Proto            string
	Header           string // sorted "Key: v1|v2" lines
	ContentLength    int64
	TransferEncoding []string
	Close            bool
	Body             string
	BodyErr          bool
	Trailer          string
}

func headerText(h http.Header) string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(h[k], "|"))
	}
	return b.String()
}

// recorder is a handler that records every request and answers with a
// small body naming its order.
type recorder struct {
	mu  sync.Mutex
	got []seen
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	s := seen{Engine: Serving(r.Context()), Method: r.Method, URI: r.RequestURI, Host: r.Host, Proto: r.Proto,
		Header: headerText(r.Header), ContentLength: r.ContentLength, TransferEncoding: r.TransferEncoding,
		Close: r.Close, Body: string(b), BodyErr: err != nil, Trailer: headerText(r.Trailer)}
	rec.mu.Lock()
	rec.got = append(rec.got, s)
	n := len(rec.got)
	rec.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "request %d", n)
}

func (rec *recorder) records() []seen {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.got)
}

// server is a server under test on a loopback listener.
type server struct {
	addr  string
	rec   *recorder
	close func()
}

// startServer starts the engine (withEngine) or net/http alone on a
// loopback port, both with the same recorder as their handler.
func startServer(t testing.TB, withEngine bool, opts ...func(*Options)) *server {
	t.Helper()
	rec := &recorder{}
	addr, closeFn := serveHandler(t, withEngine, rec, opts...)
	return &server{addr: addr, rec: rec, close: closeFn}
}

// serveHandler serves h with the engine (withEngine) or net/http alone
// on a loopback port until the test ends; it returns the address and a
// function that closes the server.
func serveHandler(t testing.TB, withEngine bool, h http.Handler, opts ...func(*Options)) (string, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fb := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, MaxHeaderBytes: 64 << 10}
	var srv interface {
		Serve(net.Listener) error
		Close() error
	} = fb
	if withEngine {
		o := Options{Handler: h, Fallback: fb, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}
		for _, f := range opts {
			f(&o)
		}
		e, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		srv = e
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	closeFn := func() { _ = srv.Close(); <-done }
	t.Cleanup(closeFn)
	return ln.Addr().String(), closeFn
}

// exchange writes raw to a new connection, half-closes it and returns
// everything the server answered until it closed.
func (s *server) exchange(t testing.TB, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		_, _ = io.WriteString(c, raw)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	b, _ := io.ReadAll(c)
	return string(b)
}

func TestJudgeHead(t *testing.T) {
	tests := []struct {
		name string
		head string
		want headVerdict
		host int
	}{
		{"common GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", serveHere, 1},
		{"bare LF", "GET / HTTP/1.1\nHost: a\n\n", serveHere, 1},
		{"absolute-form", "GET http://a/x HTTP/1.1\r\nHost: a\r\n\r\n", serveHere, 1},
		{"two Host fields counted", "GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", serveHere, 2},
		{"no Host counted", "GET / HTTP/1.1\r\nX: y\r\n\r\n", serveHere, 0},
		{"incomplete", "GET / HTTP/1.1\r\nHost: a\r\n", incomplete, 0},
		{"incomplete request line", "GET / HT", incomplete, 0},
		{"HTTP/1.0", "GET / HTTP/1.0\r\nHost: a\r\n\r\n", handOver, 0},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", handOver, 0},
		{"CONNECT", "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", handOver, 0},
		{"Upgrade", "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n", handOver, 0},
		{"upgrade any case", "GET / HTTP/1.1\r\nHost: a\r\nuPgRaDe: h2c\r\n\r\n", handOver, 0},
		{"Upgrade space before colon", "GET / HTTP/1.1\r\nHost: a\r\nUpgrade : h2c\r\n\r\n", handOver, 0},
		{"Expect", "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", handOver, 0},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n", handOver, 0},
		{"leading empty line", "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", handOver, 0},
		{"no version", "GET /\r\nHost: a\r\n\r\n", handOver, 0},
		{"lower-case version", "GET / http/1.1\r\nHost: a\r\n\r\n", handOver, 0},
		{"asterisk-form", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", handOver, 0},
		{"X-Upgrade is not Upgrade", "GET / HTTP/1.1\r\nHost: a\r\nX-Upgrade: 1\r\n\r\n", serveHere, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := judgeHead([]byte(tt.head))
			if got.verdict != tt.want || (tt.want == serveHere && got.hostFields != tt.host) {
				t.Errorf("judgeHead = %+v, want verdict %d host fields %d", got, tt.want, tt.host)
			}
		})
	}
}

// smugglingShapes are heads and pipelines whose reading decides what a
// proxy forwards: each must be read by the engine exactly as by net/http
// (TestEngineReadsLikeNetHTTP, and the seeds of FuzzEngineMatchesNetHTTP).
var smugglingShapes = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET /next HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: v\r\n\r\nGET /next HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabcGET /after HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 03\r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:  3 \r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\n\r\n",
	"GET http://user:pw@a/ HTTP/1.1\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX\x01: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX : b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\n X: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n\r\n",
	"GET / HTTP/1.1\rHost: a\r\r\n\r\n",
	"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /\x00 HTTP/1.1\r\nHost: a\r\n\r\n",
	"G\x00T / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET * HTTP/1.1\r\nHost: a\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
	"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
	"GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /never HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nab\r\nGET /crlf-after-post HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n\r\nGET /crlf-after-get HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("v", 5000) + "\r\n\r\nGET /after-big HTTP/1.1\r\nHost: a\r\n\r\n",
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
	"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.2\r\nHost: a\r\n\r\n",
	"GET / HTTP/01.1\r\nHost: a\r\n\r\n",
}

// TestEngineReadsLikeNetHTTP sends every smuggling shape to the engine
// and to net/http alone and compares what their handlers saw, request by
// request: the engine never reads a head or a body differently, and
// never serves a request net/http would not.
func TestEngineReadsLikeNetHTTP(t *testing.T) {
	eng, std := startServer(t, true), startServer(t, false)
	for i, raw := range smugglingShapes {
		before := len(eng.rec.records())
		stdBefore := len(std.rec.records())
		eng.exchange(t, raw)
		std.exchange(t, raw)
		got, want := eng.rec.records()[before:], std.rec.records()[stdBefore:]
		if msg := diffSeen(got, want); msg != "" {
			t.Errorf("shape %d %q:\n%s", i, raw, msg)
		}
	}
}

// diffSeen compares the engine's records with net/http's, ignoring only
// who served each.
func diffSeen(got, want []seen) string {
	if len(got) != len(want) {
		return fmt.Sprintf("engine served %d requests, net/http %d\nengine: %+v\nnet/http: %+v", len(got), len(want), got, want)
	}
	for i := range got {
		g := got[i]
		g.Engine = false
		if fmt.Sprintf("%+v", g) != fmt.Sprintf("%+v", want[i]) {
			return fmt.Sprintf("request %d differs\nengine:   %+v\nnet/http: %+v", i, got[i], want[i])
		}
	}
	return ""
}

// FuzzEngineMatchesNetHTTP is the differential proof of the engine's
// reading: for any bytes on a connection, the requests the handler sees
// (method, target, every field, framing, body, trailers, and how many)
// are the same as under net/http's server alone.
func FuzzEngineMatchesNetHTTP(f *testing.F) {
	for _, s := range smugglingShapes {
		f.Add(s)
	}
	eng, std := startServer(f, true), startServer(f, false)
	f.Fuzz(func(t *testing.T, raw string) {
		if len(raw) > 16<<10 {
			return
		}
		before, stdBefore := len(eng.rec.records()), len(std.rec.records())
		eng.exchange(t, raw)
		std.exchange(t, raw)
		if msg := diffSeen(eng.rec.records()[before:], std.rec.records()[stdBefore:]); msg != "" {
			t.Errorf("%q:\n%s", raw, msg)
		}
	})
}

func TestKeepAliveAndHandover(t *testing.T) {
	s := startServer(t, true)
	raw := "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n" +
		"POST /2 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc" +
		"GET /3 HTTP/1.1\r\nHost: a\r\nUpgrade: foo\r\n\r\n" +
		"GET /4 HTTP/1.1\r\nHost: a\r\n\r\n"
	out := s.exchange(t, raw)
	recs := s.rec.records()
	if len(recs) != 4 {
		t.Fatalf("%d requests served, want 4; answered:\n%s", len(recs), out)
	}
	wantEngine := []bool{true, true, false, false} // handed over at /3, for good
	for i, r := range recs {
		if r.Engine != wantEngine[i] || r.URI != fmt.Sprintf("/%d", i+1) {
			t.Errorf("request %d: %s on engine=%v, want /%d on engine=%v", i, r.URI, r.Engine, i+1, wantEngine[i])
		}
	}
	if recs[1].Body != "abc" {
		t.Errorf("body = %q", recs[1].Body)
	}
	if n := strings.Count(out, "HTTP/1.1 200 OK"); n != 4 {
		t.Errorf("%d responses, want 4:\n%s", n, out)
	}
}

func TestEarlyErrorsAnsweredLikeNetHTTP(t *testing.T) {
	eng, std := startServer(t, true), startServer(t, false)
	for _, raw := range []string{
		"GET / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX : b\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
	} {
		got, want := eng.exchange(t, raw), std.exchange(t, raw)
		if got != want {
			t.Errorf("%q:\nengine:   %q\nnet/http: %q", raw, got, want)
		}
	}
}

func TestUnreadBodyDrainedOrClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var paths []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		w.WriteHeader(http.StatusForbidden) // never reads the body
	})
	e, err := New(Options{Handler: h, Fallback: &http.Server{Handler: h}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.Serve(ln) }()
	defer e.Close()
	s := &server{addr: ln.Addr().String()}
	small := strings.Repeat("x", 1000)
	s.exchange(t, "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n"+small+"GET /b HTTP/1.1\r\nHost: a\r\n\r\n")
	big := strings.Repeat("GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n", 300<<10/40)
	s.exchange(t, fmt.Sprintf("POST /c HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", len(big), big))
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(paths, []string{"/a", "/b", "/c"}) {
		t.Errorf("served %v, want [/a /b /c]: a small unread body is drained, a large one closes the connection, and no head is read from inside a body", paths)
	}
}

func TestResponseFraming(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/length":
			w.Header().Set("Content-Length", "5")
			_, _ = io.WriteString(w, "hello")
		case "/chunked":
			w.Header().Set("Trailer", "X-Sum")
			_, _ = io.WriteString(w, "hel")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "lo")
			w.Header().Set("X-Sum", "42")
		case "/empty":
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
			_, _ = io.WriteString(w, "refused")
		case "/short":
			w.Header().Set("Content-Length", "10")
			_, _ = io.WriteString(w, "hello")
		case "/hints":
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			clear(w.Header())
			_, _ = io.WriteString(w, "final")
		case "/abort":
			_, _ = io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
	})
	e, err := New(Options{Handler: h, Fallback: &http.Server{Handler: h}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.Serve(ln) }()
	defer e.Close()
	var early []int
	c := &http.Client{}
	for _, tt := range []struct {
		path, method string
		status       int
		body         string
		trailer      string
		fail         bool
	}{
		{path: "/length", status: 200, body: "hello"},
		{path: "/length", method: http.MethodHead, status: 200},
		{path: "/chunked", status: 200, body: "hello", trailer: "42"},
		{path: "/empty", status: 200},
		{path: "/nocontent", status: 204},
		{path: "/hints", status: 200, body: "final"},
		{path: "/short", fail: true},
		{path: "/abort", fail: true},
		{path: "/length", status: 200, body: "hello"}, // the server still serves
	} {
		method := tt.method
		if method == "" {
			method = http.MethodGet
		}
		req, _ := http.NewRequest(method, "http://"+ln.Addr().String()+tt.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, tt.path, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if tt.fail {
			if err == nil {
				t.Errorf("%s: body read without error (%q): a broken response must not look complete", tt.path, b)
			}
			continue
		}
		if err != nil || resp.StatusCode != tt.status || string(b) != tt.body || resp.Trailer.Get("X-Sum") != tt.trailer {
			t.Errorf("%s %s: %d %q err=%v trailer=%q, want %d %q trailer %q", method, tt.path, resp.StatusCode, b, err, resp.Trailer.Get("X-Sum"), tt.status, tt.body, tt.trailer)
		}
		if resp.Header.Get("Date") == "" {
			t.Errorf("%s: no Date", tt.path)
		}
	}
	_ = early
}

func TestShutdownDrains(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "done")
	})
	e, err := New(Options{Handler: h, Fallback: &http.Server{Handler: h}})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- e.Serve(ln) }()
	// An idle keep-alive connection and one with a request in flight.
	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprintf(idle, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	br := bufio.NewReader(idle)
	if resp, err := http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	busy, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	fmt.Fprintf(busy, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	time.Sleep(50 * time.Millisecond) // the request reaches the handler
	shut := make(chan error, 1)
	go func() { shut <- e.Shutdown(context.Background()) }()
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("idle connection: %v, want EOF (closed by Shutdown)", err)
	}
	close(release)
	resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatalf("in-flight request: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "done" || !resp.Close {
		t.Errorf("in-flight request: %q close=%v, want done and Connection: close", b, resp.Close)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; err != ErrServerClosed {
		t.Errorf("Serve: %v, want ErrServerClosed", err)
	}
}

// BenchmarkServer is one keep-alive GET answered with a 130-byte body,
// through the engine and through net/http's server, same run: the cost of
// the server layer alone (docs/performance.md). The client's cost is
// included and equal in both.
func BenchmarkServer(b *testing.B) {
	body := strings.Repeat("x", 130)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "130")
		_, _ = io.WriteString(w, body)
	})
	for _, name := range []string{"engine", "nethttp"} {
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			fb := &http.Server{Handler: h}
			var srv interface {
				Serve(net.Listener) error
				Close() error
			} = fb
			if name == "engine" {
				if srv, err = New(Options{Handler: h, Fallback: fb}); err != nil {
					b.Fatal(err)
				}
			}
			go func() { _ = srv.Serve(ln) }()
			defer srv.Close()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			req := []byte("GET /v1/models HTTP/1.1\r\nHost: api.example.test\r\nUser-Agent: bench\r\nAccept: */*\r\nAuthorization: Bearer agent-own\r\n\r\n")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if n != 130 {
					b.Fatalf("%d bytes", n)
				}
			}
		})
	}
}

// flakyListener fails its first Accepts as a process out of descriptors
// does, then accepts.
type flakyListener struct {
	net.Listener
	fails int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails > 0 {
		l.fails--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAcceptExhaustionDoesNotStopServing: EMFILE from accept (playbook
// class 10, exhaustion from inside) backs off; the listener keeps serving.
func TestAcceptExhaustionDoesNotStopServing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	e, err := New(Options{Handler: rec, Fallback: &http.Server{Handler: rec}})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- e.Serve(&flakyListener{Listener: ln, fails: 3}) }()
	defer e.Close()
	s := &server{addr: ln.Addr().String(), rec: rec}
	if out := s.exchange(t, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); !strings.HasPrefix(out, "HTTP/1.1 200 OK") {
		t.Fatalf("after EMFILE: %q", out)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v", err)
	default:
	}
}
