package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/testutil/testpki"
)

// Durations of TestResponseHeaderTimeoutPerRequest. The tests never assert
// elapsed time: "long" is never reached (the origin is released by a
// barrier first), "short" is the one that expires.
const (
	shortTimeout = 20 * time.Millisecond
	longTimeout  = time.Hour
)

// slowOrigin is a TLS origin whose handler reports each request on arrived
// and then, depending on the path, waits for release before its head
// (/slow-head), or sends its head at once and waits for release before the
// body (/slow-body), or first reads the whole request body (/duplex).
type slowOrigin struct {
	*httptest.Server
	arrived chan string
	release chan struct{}
}

func newSlowOrigin(t *testing.T, h2 bool) *slowOrigin {
	t.Helper()
	o := &slowOrigin{arrived: make(chan string, 16), release: make(chan struct{})}
	ca := testpki.NewCA(t, "slow-origin")
	o.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.arrived <- r.URL.Path
		switch r.URL.Path {
		case "/slow-head":
			select {
			case <-o.release:
			case <-r.Context().Done():
				return
			}
		case "/slow-body", "/duplex":
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "head;")
			http.NewResponseController(w).Flush()
			if r.URL.Path == "/duplex" {
				_ = http.NewResponseController(w).EnableFullDuplex()
				if _, err := io.Copy(io.Discard, r.Body); err != nil {
					return
				}
			}
			select {
			case <-o.release:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "done")
	}))
	o.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, "127.0.0.1")}}
	o.EnableHTTP2 = h2
	o.StartTLS()
	t.Cleanup(o.Close)
	t.Cleanup(func() {
		select {
		case <-o.release:
		default:
			close(o.release)
		}
	})
	tr, err := NewTransport(Options{RootCAs: ca.Pool(), ResponseHeaderTimeout: shortTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	o.Client().Transport = tr
	return o
}

func (o *slowOrigin) transport() *Transport { return o.Client().Transport.(*Transport) }

// do sends a request for path with per-request timeout d (0: none set).
func (o *slowOrigin) do(t *testing.T, method, path string, d time.Duration, body io.Reader) (*http.Response, error) {
	t.Helper()
	// A watchdog, so that a regression fails instead of waiting for
	// longTimeout; it is far above every timeout the tests expect to fire,
	// and its plain DeadlineExceeded fails wantTimeout.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	if d != 0 {
		ctx = WithResponseHeaderTimeout(ctx, d)
	}
	req, err := http.NewRequestWithContext(ctx, method, o.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	return o.transport().RoundTrip(req)
}

// wantTimeout checks err is the response-header timeout of d, in every form
// the proxy's error mapping relies on.
func wantTimeout(t *testing.T, err error, d time.Duration) {
	t.Helper()
	var rht *ResponseHeaderTimeoutError
	if !errors.As(err, &rht) || rht.After != d {
		t.Fatalf("err = %v (%T), want *ResponseHeaderTimeoutError after %v", err, err, d)
	}
	if !IsTimeout(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("IsTimeout(%v) = %v, errors.Is DeadlineExceeded = %v; want both true", err, IsTimeout(err), errors.Is(err, context.DeadlineExceeded))
	}
}

// expireDefault sends a request that times out under the transport's
// default (shortTimeout): the barrier after which "longer than the default"
// has certainly passed for every request sent before it.
func (o *slowOrigin) expireDefault(t *testing.T) {
	t.Helper()
	resp, err := o.do(t, http.MethodGet, "/slow-head", 0, nil)
	if err == nil {
		resp.Body.Close()
		t.Fatal("request without its own timeout: got a response, want the default timeout")
	}
	wantTimeout(t, err, shortTimeout)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}

// TestResponseHeaderTimeoutPerRequest: a request's own response-header
// timeout replaces the transport's default, longer or shorter; the clock
// stops at the response head (a slow body or a request body that ends
// after the head is never cut), over HTTP/1.1 and HTTP/2.
func TestResponseHeaderTimeoutPerRequest(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		proto := map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2]
		t.Run(proto+"/longer than the default succeeds", func(t *testing.T) {
			o := newSlowOrigin(t, h2)
			type result struct {
				resp *http.Response
				err  error
			}
			done := make(chan result, 1)
			go func() {
				resp, err := o.do(t, http.MethodGet, "/slow-head", longTimeout, nil)
				done <- result{resp, err}
			}()
			<-o.arrived        // the long request is waiting for its head...
			o.expireDefault(t) // ...longer than the default (which expired here)...
			<-o.arrived        // (the barrier request's arrival)
			close(o.release)   // ...and then gets it.
			r := <-done
			if r.err != nil {
				t.Fatalf("request with response_header_timeout longer than the default: %v", r.err)
			}
			if got := readAll(t, r.resp); got != "done" {
				t.Errorf("body = %q, want done", got)
			}
			if wantMajor := map[bool]int{false: 1, true: 2}[h2]; r.resp.ProtoMajor != wantMajor {
				t.Errorf("protocol = %s, want %s", r.resp.Proto, proto)
			}
		})
		t.Run(proto+"/shorter than the default times out", func(t *testing.T) {
			o := newSlowOrigin(t, h2)
			o.transport().responseHeaderTimeout = longTimeout
			resp, err := o.do(t, http.MethodGet, "/slow-head", shortTimeout, nil)
			if err == nil {
				resp.Body.Close()
				t.Fatal("got a response, want the request's own timeout")
			}
			wantTimeout(t, err, shortTimeout)
		})
		t.Run(proto+"/slow body after the head is not cut", func(t *testing.T) {
			// Half a second rather than shortTimeout: the head must beat
			// the bound on a loaded machine (20 ms did not, under -race).
			const d = 500 * time.Millisecond
			o := newSlowOrigin(t, h2)
			resp, err := o.do(t, http.MethodGet, "/slow-body", d, nil)
			if err != nil {
				t.Fatal(err)
			}
			<-o.arrived
			// The body is silent for longer than the timeout: a request
			// with the same bound sent after the head expires first.
			_, err = o.do(t, http.MethodGet, "/slow-head", d, nil)
			wantTimeout(t, err, d)
			<-o.arrived
			close(o.release)
			if got := readAll(t, resp); got != "head;done" {
				t.Errorf("body = %q, want head;done", got)
			}
		})
	}
	// Full duplex needs HTTP/2 end to end: the request body ends only after
	// the response head arrived (a gRPC bidi stream), which must not start
	// the clock.
	t.Run("HTTP/2/request body ending after the head does not start the clock", func(t *testing.T) {
		o := newSlowOrigin(t, true)
		pr, pw := io.Pipe()
		resp, err := o.do(t, http.MethodPost, "/duplex", 0, pr)
		if err != nil {
			t.Fatal(err)
		}
		<-o.arrived
		head := make([]byte, len("head;"))
		if _, err := io.ReadFull(resp.Body, head); err != nil {
			t.Fatalf("reading the head of the body: %v", err)
		}
		_, _ = io.WriteString(pw, "client data")
		pw.Close() // WroteRequest fires now, after the first response byte
		o.expireDefault(t)
		<-o.arrived
		close(o.release)
		if got := string(head) + readAll(t, resp); got != "head;done" {
			t.Errorf("body = %q, want head;done", got)
		}
	})
}

// TestResponseHeaderTimeoutDefault: without a value, a transport waits
// DefaultResponseHeaderTimeout (10 minutes), and a request's zero or
// negative value leaves the default in force.
func TestResponseHeaderTimeoutDefault(t *testing.T) {
	tr, err := NewTransport(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.responseHeaderTimeout != 10*time.Minute || DefaultResponseHeaderTimeout != 10*time.Minute {
		t.Errorf("default response-header timeout = %v (constant %v), want 10m", tr.responseHeaderTimeout, DefaultResponseHeaderTimeout)
	}
	if tr.base.ResponseHeaderTimeout != 0 {
		t.Errorf("http.Transport.ResponseHeaderTimeout = %v, want 0 (enforced per request)", tr.base.ResponseHeaderTimeout)
	}
	o := newSlowOrigin(t, false)
	for _, d := range []time.Duration{0, -time.Second} {
		resp, err := o.do(t, http.MethodGet, "/slow-head", d, nil)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("WithResponseHeaderTimeout(%v): got a response, want the default timeout", d)
		}
		wantTimeout(t, err, shortTimeout)
	}
	if msg := (&ResponseHeaderTimeoutError{After: time.Minute}).Error(); !strings.Contains(msg, "upstream_response_header_timeout_ms") {
		t.Errorf("error %q does not name the config key", msg)
	}
}

// TestHeaderWaitClock: the clock's state machine without the network. It
// starts on a successful WroteRequest only, never after the response head
// started (a request body that ends after the head, as in a bidi stream),
// and it never cancels once the head started.
func TestHeaderWaitClock(t *testing.T) {
	cancelled := make(chan error, 4)
	newWait := func() *headerWait {
		return &headerWait{d: longTimeout, cancel: func(err error) { cancelled <- err }}
	}

	w := newWait()
	w.wroteRequest(httptrace.WroteRequestInfo{Err: errors.New("write failed")})
	if w.timer != nil {
		t.Error("clock started by a failed write")
	}

	w = newWait()
	w.gotFirstByte()
	w.wroteRequest(httptrace.WroteRequestInfo{})
	if w.timer != nil {
		t.Error("clock started by a write that ended after the response head")
	}
	w.expire() // a timer that fires after the head must not cancel
	if w.finish() {
		t.Error("finish() = fired after the head started")
	}

	w = newWait()
	w.wroteRequest(httptrace.WroteRequestInfo{})
	first := w.timer
	w.wroteRequest(httptrace.WroteRequestInfo{}) // a retry on another connection
	if first == nil || w.timer == first {
		t.Error("a second write (retry) did not restart the clock")
	}
	if first.Stop() {
		t.Error("the first attempt's timer still runs after the retry")
	}
	w.expire()
	if !w.finish() {
		t.Error("finish() after expiry = not fired")
	}
	var rht *ResponseHeaderTimeoutError
	if err := <-cancelled; !errors.As(err, &rht) || rht.After != longTimeout {
		t.Errorf("cancel cause = %v, want *ResponseHeaderTimeoutError", err)
	}
	select {
	case err := <-cancelled:
		t.Errorf("cancelled twice (%v)", err)
	default:
	}
}
