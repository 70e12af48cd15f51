package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/testutil/eventually"
)

// proxyClient is an agent with HTTPS_PROXY=http://<plain listener>,
// trusting the BotBox CA.
func (h *harness) proxyClient(h2 bool) *http.Client {
	pu := &url.URL{Scheme: "http", Host: h.addrs.Proxy[0].String()}
	var p http.Protocols
	p.SetHTTP1(!h2)
	p.SetHTTP2(h2)
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: h.botboxCA.Pool()}, Protocols: &p}
	h.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// linesOn returns the decision lines of one listener.
func (h *harness) linesOn(listener string) []map[string]any {
	var out []map[string]any
	for _, r := range h.logs.Find("proxy decision") {
		if r["listener"] == listener {
			out = append(out, r)
		}
	}
	return out
}

// TestConnectInterceptedEndToEnd: with interception on, an HTTPS_PROXY
// client reaches an allowed host through the plain listener, over HTTP/1.1
// and h2, with a leaf from the interception CA and the credential injected
// (issue 10 item 5; before, every CONNECT got 405).
func TestConnectInterceptedEndToEnd(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, interception: "  deny_handshake_on_disallowed_sni: true\n"})
	for _, h2 := range []bool{false, true} {
		c := h.proxyClient(h2)
		req, _ := http.NewRequest(http.MethodGet, "https://api.example.test/v1/models", nil)
		req.Header.Set("Authorization", "Bearer agent-own")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("h2=%v: %v", h2, err)
		}
		b := body(t, resp)
		if resp.StatusCode != 200 {
			t.Fatalf("h2=%v: %d %s", h2, resp.StatusCode, b)
		}
		if want := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != want {
			t.Errorf("h2=%v: agent protocol %s", h2, resp.Proto)
		}
		if got := h.lastSeen().Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+canary {
			t.Errorf("h2=%v: origin got %d Authorization values, want the injected one only", h2, len(got))
		}
		if resp.TLS.PeerCertificates[0].Issuer.CommonName != "botbox-test-interception-ca" {
			t.Errorf("leaf issued by %q", resp.TLS.PeerCertificates[0].Issuer.CommonName)
		}
		c.CloseIdleConnections()
	}
	eventually.Eventually(t, 5*time.Second, func() bool { return len(h.linesOn("connect")) == 2 }, "two tunnel request lines")
	eventually.Eventually(t, 5*time.Second, func() bool {
		n := 0
		for _, l := range h.linesOn("http") {
			if l["method"] == "CONNECT" && l["reason"] == "connect_tunnel" && l["host"] == "api.example.test" && l["port"] == float64(443) {
				n++
			}
		}
		return n == 2
	}, "two CONNECT lines")
	// A host the policy denies: 405 naming it, no leaf issued.
	_, err := h.proxyClient(false).Get("https://evil.test/")
	if err == nil || !strings.Contains(err.Error(), "Method Not Allowed") {
		t.Errorf("CONNECT to a denied host: %v, want 405", err)
	}
}

// TestConnectWithoutInterceptionStays405: with interception off CONNECT is
// refused as before, with the hint and the target in the line.
func TestConnectWithoutInterceptionStays405(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true})
	c, err := net.Dial("tcp", h.addrs.Proxy[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); resp.StatusCode != 405 || !strings.Contains(b, "enable HTTPS interception") {
		t.Errorf("got %d %q", resp.StatusCode, b)
	}
	eventually.Eventually(t, 5*time.Second, func() bool {
		l := h.linesOn("http")
		return len(l) == 1 && l[0]["host"] == "api.example.test" && l[0]["port"] == float64(443) && l[0]["decision"] == "denied_connect"
	}, "CONNECT line naming its target")
}

// TestConnectTunnelHoldsConnectionPermit: the tunnel keeps its plain
// connection's max_connections permit until it closes.
func TestConnectTunnelHoldsConnectionPermit(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, maxConnections: 1, interception: "  enforce_sni_host_match: true\n"})
	c, err := net.Dial("tcp", h.addrs.Proxy[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(c, &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: "api.example.test"})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if _, err := tls.Dial("tcp", h.addrs.Intercept[0].String(), &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: "api.example.test"}); err == nil {
		t.Fatal("a second connection was accepted beyond max_connections while the tunnel was open")
	}
	tc.Close()
	eventually.Eventually(t, 5*time.Second, func() bool {
		c, err := tls.Dial("tcp", h.addrs.Intercept[0].String(), &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: "api.example.test"})
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "permit returned after the tunnel closed")
}

// TestConnectWithCurl runs the real curl with -x against the full server:
// the explicit-proxy case of the real-clients review (curl printed
// "CONNECT tunnel failed, response 405").
func TestConnectWithCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("curl not found; CI must provide it")
		}
		t.Skip("curl not installed")
	}
	h := start(t, harnessOpts{writeSecret: true, interception: "  enforce_sni_host_match: true\n"})
	caFile, _ := h.botboxCA.WriteFiles(t, t.TempDir())
	proxyURL := "http://" + h.addrs.Proxy[0].String()
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, curl, append([]string{"-sS", "--noproxy", "", "-x", proxyURL, "--cacert", caFile}, args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, proto := range []string{"--http1.1", "--http2"} {
		out, err := run(proto, "-H", "Authorization: Bearer agent-own", "-w", "\n%{http_code} %{http_version}", "https://api.example.test/v1/models")
		if err != nil {
			t.Fatalf("curl %s: %v\n%s", proto, err, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		want := map[string]string{"--http1.1": "200 1.1", "--http2": "200 2"}[proto]
		if lines[len(lines)-1] != want {
			t.Errorf("curl %s: status/version %q, want %q\n%s", proto, lines[len(lines)-1], want, out)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(lines[0]), &got); err != nil || got["host"] != "api.example.test" {
			t.Errorf("curl %s: body %q", proto, lines[0])
		}
		if a := h.lastSeen().Values("Authorization"); len(a) != 1 || a[0] != "Bearer "+canary {
			t.Errorf("curl %s: origin got %d Authorization values, want the injected one only", proto, len(a))
		}
	}
	out, err := run("https://evil.test/")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(out, "405") {
		t.Errorf("curl to a denied host: %v %q, want CONNECT refused with 405", err, out)
	}
}

// TestConnectIdleTunnelHoldsNoRequestPermit: an open tunnel is a
// connection, not a request in flight: with max_concurrent_requests 1, a
// request in the tunnel and one on another connection both get through
// while the tunnel stays open (each request inside takes its own permit).
func TestConnectIdleTunnelHoldsNoRequestPermit(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, extraYAML: "max_concurrent_requests: 1\n", interception: "  enforce_sni_host_match: true\n"})
	c := h.proxyClient(false)
	for i := range 2 {
		resp, err := c.Get("https://api.example.test/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		if b := body(t, resp); resp.StatusCode != 200 {
			t.Fatalf("request %d in the tunnel: %d %q", i, resp.StatusCode, b)
		}
		req, _ := http.NewRequest(http.MethodGet, "http://"+h.addrs.Proxy[0].String()+"/", nil)
		req.Host = "other.example.test"
		resp, err = (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if b := body(t, resp); resp.StatusCode != 200 {
			t.Fatalf("plain request %d beside the open tunnel: %d %q", i, resp.StatusCode, b)
		}
	}
}

// TestShutdownClosesConnectTunnel: a CONNECT tunnel (a hijacked
// connection http.Server's Shutdown does not see) still busy at the drain
// deadline — its request's origin never answers — is closed then, and its
// line says so. The request in flight keeps the tunnel from being drained
// as idle: a tunnel that has only shaken hands counts as idle for the
// tunnel's own http.Server once it is 5 s old, which a loaded machine
// reached before the deadline.
func TestShutdownClosesConnectTunnel(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, shutdown: 1, interception: "  enforce_sni_host_match: true\n"})
	arrived, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	h.origin.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
	})
	tc := openConnectTunnel(t, h)
	fmt.Fprint(tc, "GET /never HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	<-arrived
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		h.done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("CONNECT tunnel still open after the drain deadline: %v", err)
	}
	eventually.Eventually(t, 5*time.Second, func() bool {
		for _, l := range h.linesOn("http") {
			if l["method"] == "CONNECT" && l["reason"] == "shutdown" {
				return true
			}
		}
		return false
	}, "CONNECT line with reason shutdown")
}

// clientEnv is the test process's environment without proxy variables,
// plus extra.
func clientEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasSuffix(strings.ToLower(k), "_proxy") || strings.HasPrefix(k, "CURL_") || strings.HasPrefix(k, "SSL_CERT") || k == "REQUESTS_CA_BUNDLE" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// pythonHTTPSProxy fetches argv[2] with Authorization "Bearer agent-own"
// using urllib or requests (argv[1]), which both take the proxy from
// HTTPS_PROXY, and prints the status and the body.
const pythonHTTPSProxy = `
import sys
lib, url = sys.argv[1], sys.argv[2]
hdr = {"Authorization": "Bearer agent-own"}
if lib == "requests":
    import requests
    r = requests.get(url, headers=hdr, timeout=20)
    print(r.status_code, r.text)
else:
    import urllib.request
    with urllib.request.urlopen(urllib.request.Request(url, headers=hdr), timeout=20) as r:
        print(r.status, r.read().decode())
`

// TestConnectWithPython runs Python's urllib and requests with
// HTTPS_PROXY set to the plain listener (the review's "Tunnel connection
// failed: 405 Method Not Allowed"): the allowed host answers with the
// credential injected, a denied host still fails with 405.
func TestConnectWithPython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 not found; CI must provide it")
		}
		t.Skip("python3 not installed")
	}
	h := start(t, harnessOpts{writeSecret: true, interception: "  enforce_sni_host_match: true\n"})
	caFile, _ := h.botboxCA.WriteFiles(t, t.TempDir())
	script := t.TempDir() + "/client.py"
	if err := os.WriteFile(script, []byte(pythonHTTPSProxy), 0o644); err != nil {
		t.Fatal(err)
	}
	env := clientEnv("HTTPS_PROXY=http://"+h.addrs.Proxy[0].String(), "SSL_CERT_FILE="+caFile, "REQUESTS_CA_BUNDLE="+caFile, "NO_PROXY=")
	run := func(lib, url string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, python, script, lib, url)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, lib := range []string{"urllib", "requests"} {
		t.Run(lib, func(t *testing.T) {
			if lib == "requests" {
				if out, err := exec.Command(python, "-c", "import requests").CombinedOutput(); err != nil {
					if os.Getenv("CI") != "" {
						t.Fatalf("python3-requests missing in CI: %s", out)
					}
					t.Skipf("python3-requests not installed: %s", out)
				}
			}
			out, err := run(lib, "https://api.example.test/v1/models")
			if err != nil || !strings.HasPrefix(out, "200 ") || !strings.Contains(out, `"host":"api.example.test"`) {
				t.Fatalf("%s through HTTPS_PROXY: %v\n%s", lib, err, out)
			}
			if a := h.lastSeen().Values("Authorization"); len(a) != 1 || a[0] != "Bearer "+canary {
				t.Errorf("%s: origin got %d Authorization values, want the injected one only", lib, len(a))
			}
			out, err = run(lib, "https://evil.test/")
			if err == nil || !strings.Contains(out, "405") {
				t.Errorf("%s to a denied host: %v %q, want the CONNECT refused with 405", lib, err, out)
			}
		})
	}
}

// TestShutdownDrainsIdleConnectTunnel: at drain start an idle keep-alive
// CONNECT tunnel is closed at once, like an idle plain connection, rather
// than at the drain deadline (30 s here; the test waits at most 10 s).
func TestShutdownDrainsIdleConnectTunnel(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, shutdown: 30, interception: "  enforce_sni_host_match: true\n"})
	tc := openConnectTunnel(t, h)
	br := bufio.NewReader(tc)
	fmt.Fprint(tc, "GET /v1/models HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); resp.StatusCode != 200 {
		t.Fatalf("request in the tunnel: %d %q", resp.StatusCode, b)
	}
	h.cancel()
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("idle CONNECT tunnel not closed at drain start: %v", err)
	}
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		h.done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Run still draining with only an idle tunnel open")
	}
	eventually.Eventually(t, 5*time.Second, func() bool {
		for _, l := range h.linesOn("http") {
			if l["method"] == "CONNECT" && l["reason"] == "connect_tunnel" {
				return true
			}
		}
		return false
	}, "CONNECT line closed by the drain (reason connect_tunnel, not shutdown)")
}

// TestShutdownLetsTunnelRequestFinish: a request in flight in a CONNECT
// tunnel when the drain starts completes, then the tunnel closes.
func TestShutdownLetsTunnelRequestFinish(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, shutdown: 30, interception: "  enforce_sni_host_match: true\n"})
	arrived, release := make(chan struct{}), make(chan struct{})
	h.origin.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		fmt.Fprint(w, "finished")
	})
	tc := openConnectTunnel(t, h)
	fmt.Fprint(tc, "GET /slow HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	<-arrived
	h.cancel()
	eventually.Eventually(t, 5*time.Second, h.srv.draining.Load, "drain started")
	close(release)
	br := bufio.NewReader(tc)
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the request in flight did not complete: %v", err)
	}
	if b := body(t, resp); resp.StatusCode != 200 || b != "finished" {
		t.Errorf("request in flight: %d %q", resp.StatusCode, b)
	}
	if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("tunnel not closed after its last request during the drain: %v", err)
	}
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		h.done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

// TestConnectOverPriorKnowledgeH2: a CONNECT stream on a prior-knowledge
// HTTP/2 connection to the plain listener cannot become a tunnel: 405 with
// a hint, the target in the line, even with interception on.
func TestConnectOverPriorKnowledgeH2(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, interception: "  enforce_sni_host_match: true\n"})
	c := h.priorKnowledgeClient(t)
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Host: "api.example.test:443"}, Host: "api.example.test:443", Header: http.Header{}}
	resp, err := c.Transport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); resp.StatusCode != 405 || !strings.Contains(b, "send CONNECT over HTTP/1.1") {
		t.Errorf("got %d %q", resp.StatusCode, b)
	}
	eventually.Eventually(t, 5*time.Second, func() bool {
		l := h.linesOn("http")
		return len(l) == 1 && l[0]["host"] == "api.example.test" && l[0]["port"] == float64(443) && l[0]["decision"] == "denied_connect"
	}, "CONNECT line naming its target")
}

// openConnectTunnel opens a CONNECT tunnel to api.example.test:443 on the
// plain listener and returns the TLS client inside it (HTTP/1.1 by ALPN,
// handshake on first use); the connection closes when the test ends.
func openConnectTunnel(t *testing.T, h *harness) *tls.Conn {
	t.Helper()
	c, err := net.Dial("tcp", h.addrs.Proxy[0].String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprint(c, "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	return tls.Client(c, &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: "api.example.test", NextProtos: []string{"http/1.1"}})
}
