package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// h2Agent serves h over TLS with HTTP/2, as the interception listener
// carries gRPC, and returns the server and a client that trusts it.
func (e *testEnv) h2Agent(h http.Handler) (*httptest.Server, *http.Client) {
	e.t.Helper()
	s := httptest.NewUnstartedServer(h)
	s.EnableHTTP2 = true
	s.TLS = &tls.Config{Certificates: []tls.Certificate{e.ca.Leaf(e.t, "127.0.0.1")}}
	s.StartTLS()
	e.t.Cleanup(s.Close)
	return s, s.Client()
}

// hangGuard turns a hang of the code under test into a failure: it is the
// harness's bound, never a performance assertion (the fixed path ends in
// milliseconds; the broken one never ends).
const hangGuard = 20 * time.Second

// TestServerEndsFirstWhileBodyOpen is the mechanism of issue 10 item 2
// with no gRPC library: an HTTP/2 POST whose request body the agent keeps
// open, to an HTTP/2 origin that answers one message and ends its response
// (with trailers, like a gRPC server ending a bidi stream with OK or an
// error status), resets it, or loses its connection before the response
// head. Before the fix the handler stayed blocked in the transport (in
// ReverseProxy's close of the origin's body, or in RoundTrip) until the
// agent's body ended: the trailers never left and the agent waited for its
// own deadline. Only the trailers-only answer (no response body) passed.
func TestServerEndsFirstWhileBodyOpen(t *testing.T) {
	cases := []struct {
		name    string
		trailer string // Grpc-Status trailer the origin sends; "" for none
		only    bool   // status in the response head, no body (gRPC trailers-only)
		reset   bool   // the origin fails mid-body instead of ending cleanly
		lost    bool   // the origin's connection is lost before the response head
	}{
		{name: "ok trailers", trailer: "0"},
		{name: "error trailers", trailer: "9"},
		{name: "trailers-only", trailer: "5", only: true},
		{name: "no trailers", trailer: ""},
		{name: "origin resets mid-body", reset: true},
		{name: "connection lost before the head", lost: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{http2Origin: true})
			// echoed is closed once the agent has read the echo: the origin
			// ends only then, when BotBox's copy of the agent's body is long
			// back in a Read waiting for the next message.
			echoed := make(chan struct{})
			e.originMux.HandleFunc("/bidi", func(w http.ResponseWriter, r *http.Request) {
				if tc.only {
					w.Header().Set("Grpc-Status", tc.trailer)
					w.WriteHeader(http.StatusOK)
					return
				}
				if tc.lost {
					_, _ = bufio.NewReader(r.Body).ReadString('\n')
					go e.origin.CloseClientConnections()
					<-r.Context().Done()
					return
				}
				if tc.trailer != "" {
					w.Header().Set("Trailer", "Grpc-Status")
				}
				w.WriteHeader(http.StatusOK)
				// Echo the agent's first message, then end while the agent's
				// side of the stream is still open.
				line, err := bufio.NewReader(r.Body).ReadString('\n')
				if err != nil {
					return
				}
				_, _ = io.WriteString(w, "echo "+line)
				_ = http.NewResponseController(w).Flush()
				select {
				case <-echoed:
				case <-r.Context().Done():
					return
				}
				if tc.reset {
					panic(http.ErrAbortHandler)
				}
				if tc.trailer != "" {
					w.Header().Set("Grpc-Status", tc.trailer)
				}
			})
			s, c := e.h2Agent(e.handler.Plain())
			pr, pw := io.Pipe()
			defer pw.Close() // the agent's side stays open until the test is over
			req, _ := http.NewRequest(http.MethodPost, s.URL+"/bidi", pr)
			req.Host = "api.example.test"
			go func() { _, _ = io.WriteString(pw, "m0\n") }()

			type result struct {
				resp *http.Response
				body string
				err  error
			}
			done := make(chan result, 1)
			go func() {
				resp, err := c.Do(req)
				if err != nil {
					done <- result{err: err}
					return
				}
				var echo []byte
				if resp.StatusCode == http.StatusOK && !tc.only {
					echo = make([]byte, len("echo m0\n"))
					if _, err := io.ReadFull(resp.Body, echo); err != nil {
						done <- result{resp: resp, err: fmt.Errorf("reading the echo: %w", err)}
						return
					}
					close(echoed)
				}
				b, err := io.ReadAll(resp.Body)
				done <- result{resp: resp, body: string(echo) + string(b), err: err}
			}()
			var got result
			select {
			case got = <-done:
			case <-time.After(hangGuard):
				t.Fatal("the response never ended: the proxy waits for the agent's request body")
			}
			if tc.reset {
				if got.err == nil {
					t.Fatalf("origin reset mid-body, agent read %q with no error", got.body)
				}
				return
			}
			if got.err != nil {
				t.Fatalf("agent: %v", got.err)
			}
			if tc.lost {
				if got.resp.StatusCode != http.StatusBadGateway {
					t.Fatalf("connection lost: %d %q, want 502", got.resp.StatusCode, got.body)
				}
				return
			}
			if want := map[bool]string{true: "", false: "echo m0\n"}[tc.only]; got.body != want {
				t.Errorf("body %q, want %q", got.body, want)
			}
			status := got.resp.Trailer.Get("Grpc-Status")
			if tc.only {
				status = got.resp.Header.Get("Grpc-Status")
			}
			if status != tc.trailer {
				t.Errorf("Grpc-Status %q, want %q (header %v, trailer %v)", status, tc.trailer, got.resp.Header, got.resp.Trailer)
			}
			line := e.waitDecisions(1)[0]
			if line["status"] != float64(http.StatusOK) || line["error"] != nil {
				t.Errorf("decision line: %v", line)
			}
		})
	}
}
