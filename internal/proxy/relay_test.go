package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEngineMatchesReverseProxy sends the same raw requests through the
// same pipeline served by net/http (httputil.ReverseProxy) and by BotBox's
// engine (relayEngine), and compares what the origin received and what
// the agent received: hop-by-hop fields and those named in Connection
// removed both ways, Forwarded and X-Forwarded-* removed, no User-Agent
// added, TE: trailers kept, unparsable query parameters cleaned, the
// credential injected, 1xx relayed, trailers announced or not, HEAD and
// 204. Date is the only field allowed to differ.
func TestEngineMatchesReverseProxy(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.originMux.HandleFunc("/shapes/", func(w http.ResponseWriter, r *http.Request) {
		switch strings.TrimPrefix(r.URL.Path, "/shapes/") {
		case "hop":
			w.Header().Set("Connection", "X-Hop, keep-alive")
			w.Header().Set("X-Hop", "origin-internal")
			w.Header().Set("Keep-Alive", "timeout=5")
			w.Header().Set("Proxy-Authenticate", "Basic")
			w.Header().Set("Upgrade", "nothing")
			_, _ = io.WriteString(w, "hop")
		case "trailers":
			w.Header().Set("Trailer", "X-Sum")
			_, _ = io.WriteString(w, "body")
			w.Header().Set("X-Sum", "7")
			w.Header().Set(http.TrailerPrefix+"X-Late", "late")
		case "announced":
			w.Header().Set("Trailer", "X-Sum")
			_, _ = io.WriteString(w, "body")
			w.Header().Set("X-Sum", "8")
		case "hints":
			w.Header().Set("Link", "</s.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			_, _ = io.WriteString(w, "after hints")
		case "nocontent":
			w.WriteHeader(http.StatusNoContent)
		case "chunked":
			_, _ = io.WriteString(w, "a")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "b")
		default:
			_, _ = io.WriteString(w, "default")
		}
	})
	origin := make(chan string, 16)
	e.originMux.HandleFunc("/echo/", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		origin <- fmt.Sprintf("%s %s\n%s%s", r.Method, r.URL.RequestURI(), fieldsOf(r.Header), b)
		_, _ = io.WriteString(w, "echoed")
	})
	servers := map[string]string{}
	for _, name := range []string{"net/http", "botbox"} {
		servers[name] = serveWith(t, e.handler.Plain(), name).Listener.Addr().String()
	}
	requests := []string{
		"GET /shapes/hop HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"GET /shapes/trailers HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"GET /shapes/announced HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"GET /shapes/hints HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"GET /shapes/nocontent HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"GET /shapes/chunked HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"HEAD /shapes/default HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"GET /echo/a?x=1;y=2&z=%zz HTTP/1.1\r\nHost: api.example.test\r\nConnection: X-Secret, keep-alive\r\nX-Secret: agent-internal\r\n" +
			"Keep-Alive: 5\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nTE: trailers, deflate\r\nForwarded: for=1.2.3.4\r\n" +
			"X-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Proto: http\r\nAuthorization: Bearer agent-own\r\n\r\n",
		"POST /echo/b HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 5\r\nUser-Agent: agent/1\r\n\r\nhello",
		"POST /echo/c HTTP/1.1\r\nHost: api.example.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n",
	}
	for _, raw := range requests {
		got := map[string]string{}
		for name, addr := range servers {
			agent := rawExchange(t, addr, raw)
			var seen string
			if strings.Contains(raw, " /echo/") {
				select {
				case seen = <-origin:
				case <-time.After(5 * time.Second):
					t.Fatalf("%s: origin saw nothing for %q", name, raw)
				}
			}
			got[name] = "agent:\n" + agent + "\norigin:\n" + seen
		}
		if got["net/http"] != got["botbox"] {
			t.Errorf("%q:\n--- net/http\n%s\n--- botbox\n%s", raw, got["net/http"], got["botbox"])
		}
	}
}

// rawExchange sends raw on a new connection and returns the agent's view
// of the response (interim heads, status, fields but Date, body,
// trailers), read with net/http's client parser.
func rawExchange(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	method, _, _ := strings.Cut(raw, " ")
	var out strings.Builder
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			fmt.Fprintf(&out, "interim %d\n%s", resp.StatusCode, fieldsOf(resp.Header))
			continue
		}
		b, err := io.ReadAll(resp.Body)
		fmt.Fprintf(&out, "%d\n%sbody %q err %v\ntrailer %s", resp.StatusCode, fieldsOf(resp.Header), b, err, fieldsOf(resp.Trailer))
		return out.String()
	}
}

func fieldsOf(h http.Header) string {
	keys := make([]string, 0, len(h))
	for k := range h {
		if k != "Date" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		vv := slices.Clone(h[k])
		if k == "Trailer" {
			// Announced names in any order.
			var names []string
			for _, v := range vv {
				for n := range strings.SplitSeq(v, ",") {
					names = append(names, strings.TrimSpace(n))
				}
			}
			slices.Sort(names)
			vv = []string{strings.Join(names, ", ")}
		}
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(vv, " | "))
	}
	return b.String()
}
