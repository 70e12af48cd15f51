package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http2"
)

// trailerRecord is what the origin saw at the end of one request body.
type trailerRecord struct {
	method string
	body   string
	trail  http.Header
}

// recordTrailers makes the origin's /trailers read the whole body and
// report the trailers it received.
func (e *testEnv) recordTrailers() <-chan trailerRecord {
	got := make(chan trailerRecord, 16)
	e.originMux.HandleFunc("/trailers", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- trailerRecord{method: r.Method, body: string(b), trail: r.Trailer.Clone()}
	})
	return got
}

// TestRequestTrailersNeverForwarded: a request's trailers (chunked
// HTTP/1.1, HTTP/2) are read by no tripwire, no override check and no
// rewrite, so none of them reaches the origin: a placeholder, a method
// override and a second Authorization there stay with BotBox.
func TestRequestTrailersNeverForwarded(t *testing.T) {
	e := newTripEnv(t, envOpts{})
	got := e.recordTrailers()
	trailers := "X-Leak: " + phAPI + "\r\nX-Http-Method-Override: DELETE\r\nAuthorization: Bearer " + phOther + "\r\n"
	for _, host := range []string{"bare.example.test", "api.example.test"} {
		resp, _ := e.raw("POST /trailers HTTP/1.1\r\nHost: " + host + "\r\nTransfer-Encoding: chunked\r\n" +
			"Trailer: X-Leak, X-Http-Method-Override, Authorization\r\nConnection: close\r\n\r\n" +
			"5\r\nhello\r\n0\r\n" + trailers + "\r\n")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", host, resp.StatusCode)
		}
		rec := <-got
		if rec.body != "hello" || rec.method != http.MethodPost || len(rec.trail) != 0 {
			t.Errorf("%s: origin saw %s %q with trailers %v; want POST \"hello\" and no trailers", host, rec.method, rec.body, rec.trail)
		}
	}

	// HTTP/2 to the interception listener: trailers are a HEADERS frame
	// after the DATA.
	addr := e.intercept.Listener.Addr().String()
	tr := &http2.Transport{
		TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool(), NextProtos: []string{"h2"}},
		DialTLSContext: func(ctx context.Context, network, _ string, cfg *tls.Config) (net.Conn, error) {
			d := tls.Dialer{Config: cfg}
			return d.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	for _, host := range []string{"bare.example.test", "api.example.test"} {
		req, err := http.NewRequest(http.MethodPost, "https://"+host+"/trailers", io.NopCloser(strings.NewReader("hello")))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1
		// (Authorization is not a valid HTTP/2 trailer: refused by the server.)
		req.Trailer = http.Header{"X-Leak": {phAPI}, "X-Http-Method-Override": {"DELETE"}}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("h2 %s: status %d", host, resp.StatusCode)
		}
		rec := <-got
		if rec.body != "hello" || len(rec.trail) != 0 {
			t.Errorf("h2 %s: origin saw %q with trailers %v; want \"hello\" and no trailers", host, rec.body, rec.trail)
		}
	}
}

// TestTrailerNameCarriesNoPlaceholder: the names a request declares in
// its Trailer header are header names the origin would see (the
// transport declares them again), so a placeholder among them trips like
// one in any header name, on HTTP/1.1 and HTTP/2; and no request trailer,
// name or value, is forwarded (TestRequestTrailersNeverForwarded).
func TestTrailerNameCarriesNoPlaceholder(t *testing.T) {
	t.Run("http1", func(t *testing.T) {
		e := newTripEnv(t, envOpts{})
		resp, body := e.raw("POST /v1 HTTP/1.1\r\nHost: bare.example.test\r\nTransfer-Encoding: chunked\r\n" +
			"Trailer: " + phAPI + "\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
		e.assertTripped(resp.StatusCode, body, ListenerHTTP, "api-key", "header", "bare.example.test")
	})
	t.Run("http2", func(t *testing.T) {
		e := newTripEnv(t, envOpts{})
		addr := e.intercept.Listener.Addr().String()
		tr := &http2.Transport{
			TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool(), NextProtos: []string{"h2"}},
			DialTLSContext: func(ctx context.Context, network, _ string, cfg *tls.Config) (net.Conn, error) {
				d := tls.Dialer{Config: cfg}
				return d.DialContext(ctx, network, addr)
			},
		}
		t.Cleanup(tr.CloseIdleConnections)
		req, err := http.NewRequest(http.MethodPost, "https://bare.example.test/v1", io.NopCloser(strings.NewReader("hello")))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1
		req.Trailer = http.Header{phOther: {"x"}}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e.assertTripped(resp.StatusCode, string(b), ListenerHTTPS, "other-key", "header", "bare.example.test")
	})
}
