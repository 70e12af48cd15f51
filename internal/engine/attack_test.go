package engine

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
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
