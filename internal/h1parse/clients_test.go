package h1parse

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// capturedConn is what the loopback server saw on one connection: every
// byte the client sent, and how many requests the fast path read of how
// many.
type capturedConn struct {
	bytes      []byte
	fast, reqs int
}

// recordingServer answers every request on a loopback listener with a small
// 200, reading each head with ReadRequest, and records each connection's
// bytes when the client closes it.
type recordingServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []capturedConn
}

func startRecordingServer(t *testing.T) *recordingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &recordingServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *recordingServer) serve(c net.Conn) {
	defer c.Close()
	var captured bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &captured))
	var rec capturedConn
	for {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		req, fast, err := read(br)
		if err != nil {
			break
		}
		rec.reqs++
		if fast {
			rec.fast++
		}
		_, err = io.Copy(io.Discard, req.Body)
		req.Body.Close()
		if err != nil {
			break
		}
		resp := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
		if req.Close {
			resp = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
		}
		if _, err := io.WriteString(c, resp); err != nil || req.Close {
			break
		}
	}
	rec.bytes = captured.Bytes()
	s.mu.Lock()
	s.conns = append(s.conns, rec)
	s.mu.Unlock()
}

// TestRealClients sends the requests real clients make (Go's http.Client,
// directly and through a proxy, curl, Python's urllib) over loopback TCP to
// a server that reads them with ReadRequest. Every request must be read on
// the fast path (these are the common shapes it exists for), and the bytes
// of every connection must read identically through http.ReadRequest.
func TestRealClients(t *testing.T) {
	t.Parallel()
	s := startRecordingServer(t)
	addr := s.ln.Addr().String()
	base := "http://" + addr

	// Go's own client: a JSON POST and a GET on one kept-alive connection,
	// then a GET in absolute form through the server as a proxy.
	direct := &http.Client{Transport: &http.Transport{}, Timeout: 20 * time.Second}
	doGo(t, direct, http.MethodPost, base+"/v1/chat/completions", `{"model":"m","messages":[]}`)
	doGo(t, direct, http.MethodGet, base+"/v1/models?limit=2", "")
	direct.CloseIdleConnections()
	proxyURL, _ := url.Parse(base)
	viaProxy := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 20 * time.Second}
	doGo(t, viaProxy, http.MethodGet, "http://api.example.test/v1/models", "")
	viaProxy.CloseIdleConnections()

	want := 3 // requests the Go client sent
	if curl := lookTool(t, "curl"); curl != "" {
		runTool(t, curl, "-sS", "-o", "/dev/null", "-H", "Authorization: Bearer not-a-secret",
			"-H", "Content-Type: application/json", "--data", `{"a":1}`, base+"/v1/messages")
		runTool(t, curl, "-sS", "-o", "/dev/null", "--noproxy", "", "-x", base, "http://api.example.test/v1/models")
		runTool(t, curl, "-sS", "-o", "/dev/null", "-H", "Transfer-Encoding: chunked", "--data-binary", "chunked upload", base+"/upload")
		want += 3
	}
	if python := lookTool(t, "python3"); python != "" {
		runTool(t, python, "-c", `import sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/v1/embeddings", data=b'{"input":"x"}', headers={"Content-Type": "application/json", "Authorization": "Bearer not-a-secret"})
urllib.request.urlopen(req).read()
urllib.request.urlopen(sys.argv[1] + "/v1/models").read()
`, base)
		want += 2
	}

	s.ln.Close()
	s.wg.Wait()
	got := 0
	for _, c := range s.conns {
		got += c.reqs
		if c.fast != c.reqs {
			t.Errorf("the fast path read %d of %d requests of a real client:\n%q", c.fast, c.reqs, c.bytes)
		}
		for _, w := range goldenWires {
			if d, _ := differ(c.bytes, w); d != "" {
				t.Errorf("a real client's bytes read differently from net/http (wire %+v): %s\n%q", w, d, c.bytes)
			}
		}
	}
	if got != want {
		t.Errorf("the server read %d requests, the clients sent %d", got, want)
	}
}

func doGo(t *testing.T, c *http.Client, method, target, body string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, target, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer not-a-secret")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: status %d", method, target, resp.StatusCode)
	}
}

// lookTool finds a client program; CI must have it, elsewhere its absence
// skips that client only.
func lookTool(t *testing.T, name string) string {
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found; CI must provide it", name)
		}
		t.Logf("%s not installed; its requests are not tried", name)
		return ""
	}
	return path
}

func runTool(t *testing.T, path string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NO_PROXY=", "no_proxy="}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %q: %v\n%s", path, args, err, out)
	}
}
