package engine

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// serveWith serves h with the engine (withEngine) or net/http alone and
// returns the address.
func serveWith(t *testing.T, withEngine bool, h http.Handler, opts ...func(*Options)) string {
	t.Helper()
	addr, _ := serveHandler(t, withEngine, h, opts...)
	return addr
}

func engineName(withEngine bool) string {
	if withEngine {
		return "engine"
	}
	return "net/http"
}

// TestAttackLateBodyUseStaysInItsRequest is attack playbook class 2/10
// (state that bleeds between keep-alive requests): a request body used
// after its handler returned — what http.Transport's write loop does when
// the origin answered before the body was sent, and an HTTP/2 upstream's
// asynchronous Close — must not reach the next request on the connection.
// net/http answers such a Read with an error and ignores the Close. The
// engine reused one body wrapper per connection: the late Read read the
// next request's body (its bytes went to the first request's origin) and
// the late Close cut the next request's body off.
func TestAttackLateBodyUseStaysInItsRequest(t *testing.T) {
	t.Parallel()
	for _, withEngine := range []bool{true, false} {
		t.Run(engineName(withEngine), func(t *testing.T) {
			t.Parallel()
			type lateResult struct {
				got string
				err error
			}
			inSecond := make(chan struct{})
			lateDone := make(chan lateResult, 1)
			lateFinished := make(chan struct{})
			secondBody := make(chan string, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/first":
					body := r.Body
					go func() { // outlives the handler, as a transport's write loop
						<-inSecond
						buf := make([]byte, 64)
						n, err := body.Read(buf)
						_ = body.Close()
						lateDone <- lateResult{string(buf[:n]), err}
						close(lateFinished)
					}()
					_, _ = io.WriteString(w, "first") // body left unread
				case "/second":
					close(inSecond)
					select {
					case <-lateFinished:
					case <-time.After(5 * time.Second):
					}
					b, err := io.ReadAll(r.Body)
					if err != nil {
						b = append(b, " (err: "+err.Error()+")"...)
					}
					secondBody <- string(b)
					_, _ = io.WriteString(w, "second")
				}
			})
			addr := serveWith(t, withEngine, h)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			fmt.Fprint(c, "POST /first HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc")
			readOK(t, br)
			fmt.Fprint(c, "POST /second HTTP/1.1\r\nHost: a\r\nContent-Length: 15\r\n\r\nsecond-request!")
			readOK(t, br)
			late := <-lateDone
			if late.got != "" || late.err == nil {
				t.Errorf("a Read of the first body after its handler returned got %q, %v; want nothing and an error", late.got, late.err)
			}
			if got := <-secondBody; got != "second-request!" {
				t.Errorf("second request's body = %q, want it whole (the first body's late Close and Read must not touch it)", got)
			}
		})
	}
}

func readOK(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("response %d %q %v", resp.StatusCode, b, err)
	}
	return string(b)
}

// TestAttackSwitchingProtocolsHasNoBody: a 101 the handler sets is a
// final head without a body (no chunked framing after it, nothing of a
// Write), as the package doc says of every 1xx; the engine serves no
// upgrade, so nothing may follow it as if it were a response body.
func TestAttackSwitchingProtocolsHasNoBody(t *testing.T) {
	t.Parallel()
	wrote := make(chan error, 1)
	addr := serveWith(t, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusSwitchingProtocols)
		_, err := io.WriteString(w, "raw-after-switch")
		wrote <- err
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	b, _ := io.ReadAll(c)
	out := string(b)
	head, rest, _ := strings.Cut(out, "\r\n\r\n")
	if !strings.HasPrefix(head, "HTTP/1.1 101 ") || strings.Contains(head, "Transfer-Encoding") || strings.Contains(head, "Content-Length") || rest != "" {
		t.Errorf("answered %q, want a bare 101 head", out)
	}
	if err := <-wrote; err == nil {
		t.Error("a body Write after 101 succeeded")
	}
}

// TestAttackHandlerFieldsCannotSplit holds response splitting (attack
// playbook class 9: our outputs are inputs): CR and LF in a value the
// handler sets, and a name that is no token, never start a field or a
// response of their own, on a keep-alive connection whose next response
// is read where it starts.
func TestAttackHandlerFieldsCannotSplit(t *testing.T) {
	t.Parallel()
	addr := serveWith(t, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", "a\r\nSet-Cookie: evil=1\r\n\r\nHTTP/1.1 200 OK")
		w.Header()["X-Bad\r\nSet-Cookie"] = []string{"evil=2"}
		w.Header().Set("Trailer", "X-T")
		_, _ = io.WriteString(w, "one")
		w.Header().Set("X-T", "t\r\nSet-Cookie: evil=3")
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for i := range 2 {
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != "one" || resp.Header.Get("Set-Cookie") != "" || resp.Trailer.Get("Set-Cookie") != "" || len(resp.Header.Values("X-Echo")) != 1 {
			t.Errorf("response %d: %q %v header %v trailer %v", i, b, err, resp.Header, resp.Trailer)
		}
	}
}

// TestAttackSlowHeadsAreCut holds slowloris against the engine (attack
// playbook class 10): a head sent a byte at a time is cut at
// ReadHeaderTimeout from its first byte, however steadily it trickles,
// and an idle keep-alive connection at IdleTimeout.
func TestAttackSlowHeadsAreCut(t *testing.T) {
	t.Parallel()
	const rht, idle = 300 * time.Millisecond, 300 * time.Millisecond
	addr := serveWith(t, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), func(o *Options) {
		o.ReadHeaderTimeout, o.IdleTimeout = rht, idle
	})
	trickle := func(c net.Conn, s string) (sent int) {
		for i := range len(s) {
			if _, err := c.Write([]byte{s[i]}); err != nil {
				return i
			}
			time.Sleep(20 * time.Millisecond)
		}
		return len(s)
	}
	// A first head, then a second after a served request, each trickled.
	for _, prefix := range []string{"", "GET / HTTP/1.1\r\nHost: a\r\n\r\n"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		if prefix != "" {
			fmt.Fprint(c, prefix)
			if _, err := http.ReadResponse(br, nil); err != nil {
				t.Fatal(err)
			}
		}
		head := "GET /slow HTTP/1.1\r\nHost: a\r\nX-Pad: " + strings.Repeat("p", 200) + "\r\n\r\n"
		start := time.Now()
		done := make(chan int)
		go func() { done <- trickle(c, head) }()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, rerr := br.ReadByte()
		sent := <-done
		c.Close()
		if rerr == nil || sent == len(head) {
			t.Errorf("prefix %q: a %d-byte head trickled over %v was read (%d bytes sent, read err %v)", prefix, len(head), time.Since(start), sent, rerr)
		}
	}
	// An idle keep-alive connection is closed.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	br := bufio.NewReader(c)
	if _, err := http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("idle connection: %v, want EOF at IdleTimeout", err)
	}
}

// TestAttackNoGoroutineLeftBehind holds the engine's goroutines (attack
// playbook class 10): connections served on the engine, handed over to
// net/http, cut mid-head or mid-body, and left idle leave no goroutine of
// the engine's once they are closed.
func TestAttackNoGoroutineLeftBehind(t *testing.T) {
	addr := serveWith(t, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	count := func() int {
		buf := make([]byte, 1<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "botbox/internal/engine.(*conn).serve")
	}
	var conns []net.Conn
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHos",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc",
		"",
	} {
		for range 10 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.WriteString(c, raw)
			conns = append(conns, c)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if n := count(); n == 0 {
		t.Fatal("no connection goroutine seen while connections are open: the count proves nothing")
	}
	for _, c := range conns {
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for count() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := count(); n > 0 {
		t.Errorf("%d engine connection goroutines still running after every client closed", n)
	}
}

// FuzzEngineUnreadMatchesNetHTTP is the differential of
// FuzzEngineMatchesNetHTTP with a handler that never reads a body
// (attack playbook: desync through a body the handler did not read): for
// any bytes on a connection, the engine (which drains what is left, or
// closes) and net/http serve the same requests, in the same order. Its
// seeds are the smuggling shapes.
func FuzzEngineUnreadMatchesNetHTTP(f *testing.F) {
	for _, s := range smugglingShapes {
		f.Add(s)
	}
	type rec struct {
		mu   sync.Mutex
		seen []string
	}
	start := func(withEngine bool) (*server, *rec) {
		r := &rec{}
		addr, _ := serveHandler(f, withEngine, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.mu.Lock()
			r.seen = append(r.seen, req.Method+" "+req.RequestURI+" "+req.Host)
			r.mu.Unlock()
			_, _ = io.WriteString(w, "unread")
		}))
		return &server{addr: addr}, r
	}
	eng, engRec := start(true)
	std, stdRec := start(false)
	served := func(r *rec, s *server, t *testing.T, raw string) []string {
		r.mu.Lock()
		before := len(r.seen)
		r.mu.Unlock()
		s.exchange(t, raw)
		r.mu.Lock()
		defer r.mu.Unlock()
		return slices.Clone(r.seen[before:])
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if len(raw) > 16<<10 {
			return
		}
		if got, want := served(engRec, eng, t, raw), served(stdRec, std, t, raw); !slices.Equal(got, want) {
			t.Errorf("%q:\nengine:   %q\nnet/http: %q", raw, got, want)
		}
	})
}
