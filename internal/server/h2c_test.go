package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/telemetry"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// originRecord is what the test origin saw of one request.
type originRecord struct {
	host, auth, upgrade string
}

// recordingOrigin is an origin handler (harnessOpts.origin): it records each
// request and holds those to /hold until release is closed.
type recordingOrigin struct {
	seen    chan originRecord
	release chan struct{}
}

func newRecordingOrigin() *recordingOrigin {
	return &recordingOrigin{seen: make(chan originRecord, 64), release: make(chan struct{})}
}

func (o *recordingOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.seen <- originRecord{host: r.Host, auth: r.Header.Get("Authorization"), upgrade: r.Header.Get("Upgrade") + r.Header.Get("Http2-Settings")}
	if r.URL.Path == "/hold" {
		select {
		case <-o.release:
		case <-r.Context().Done():
		}
	}
	fmt.Fprintf(w, "origin %s", r.Proto)
}

func (o *recordingOrigin) next(t *testing.T) originRecord {
	t.Helper()
	select {
	case r := <-o.seen:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("origin saw nothing")
		return originRecord{}
	}
}

// priorKnowledgeClient speaks HTTP/2 with prior knowledge to the plain
// listener over ONE connection, as an app whose port-80 connection was
// redirected there: every request is a stream of that connection, whatever
// its host.
func (h *harness) priorKnowledgeClient(t *testing.T) *http.Client {
	t.Helper()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	cc, err := tr.NewClientConn(t.Context(), "http", h.addrs.Proxy[0].String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &http.Client{Transport: cc}
}

// decisionLines returns the decision lines logged for host.
func (h *harness) decisionLines(host string) []map[string]any {
	var out []map[string]any
	for _, r := range h.logs.Find("proxy decision") {
		if r[telemetry.KeyHost] == host {
			out = append(out, r)
		}
	}
	return out
}

// TestPlainPriorKnowledgeH2 is issue 10 item 4: streams of one
// prior-knowledge HTTP/2 connection to the plain listener, to different
// hosts and in flight together, are each judged on their own :authority,
// rewritten and logged on their own: the allowed host gets the credential,
// another allowed host none, a deny rule and the default deny answer 403
// while the allowed streams are still open on the same connection.
func TestPlainPriorKnowledgeH2(t *testing.T) {
	o := newRecordingOrigin()
	h := start(t, harnessOpts{writeSecret: true, origin: o})
	c := h.priorKnowledgeClient(t)

	type result struct {
		status int
		proto  string
		body   string
		err    error
	}
	do := func(host, auth string) result {
		req, _ := http.NewRequest(http.MethodGet, "http://"+host+"/hold", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := c.Do(req)
		if err != nil {
			return result{err: err}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return result{status: resp.StatusCode, proto: resp.Proto, body: string(b)}
	}
	held := map[string]chan result{"api.example.test": make(chan result, 1), "other.example.test": make(chan result, 1)}
	go func() { held["api.example.test"] <- do("api.example.test", "Bearer agent-own") }()
	go func() { held["other.example.test"] <- do("other.example.test", "") }()
	seen := map[string]originRecord{}
	for range 2 {
		r := o.next(t)
		seen[r.host] = r
	}
	if got := seen["api.example.test"].auth; got != "Bearer "+canary {
		t.Errorf("api.example.test: origin Authorization is not the injected credential (%d bytes)", len(got))
	}
	if r, ok := seen["other.example.test"]; !ok || r.auth != "" {
		t.Errorf("other.example.test: origin saw %+v, want the request without Authorization", r)
	}
	// Both allowed streams are held open at the origin; the denied ones are
	// answered meanwhile on the same connection.
	for host, reason := range map[string]string{"blocked.example.test": "rule_deny", "nowhere.example.test": "default_deny"} {
		r := do(host, "Bearer agent-own")
		if r.err != nil || r.status != http.StatusForbidden || r.proto != "HTTP/2.0" {
			t.Errorf("%s: %+v, want 403 over HTTP/2", host, r)
		}
		lines := h.decisionLines(host)
		if len(lines) != 1 || lines[0][telemetry.KeyDecision] != telemetry.DecisionDeny || lines[0][telemetry.KeyReason] != reason ||
			lines[0][telemetry.KeyListener] != telemetry.ListenerHTTP || lines[0][telemetry.KeyStatus] != float64(403) {
			t.Errorf("%s: decision lines %v, want one deny/%s/403 on listener http", host, lines, reason)
		}
	}
	close(o.release)
	for host, ch := range held {
		r := <-ch
		if r.err != nil || r.status != 200 || r.proto != "HTTP/2.0" || r.body != "origin HTTP/2.0" {
			t.Errorf("%s: %+v, want 200 over HTTP/2", host, r)
		}
	}
	for _, host := range []string{"api.example.test", "other.example.test"} {
		lines := h.decisionLines(host)
		if len(lines) != 1 || lines[0][telemetry.KeyDecision] != telemetry.DecisionAllow || lines[0][telemetry.KeyStatus] != float64(200) ||
			lines[0][telemetry.KeyListener] != telemetry.ListenerHTTP || lines[0][telemetry.KeyPath] != "/hold" {
			t.Errorf("%s: decision lines %v, want one allow/200 on listener http", host, lines)
		}
	}
}

// h2Conn is a raw prior-knowledge HTTP/2 connection to the plain listener.
type h2Conn struct {
	t   *testing.T
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
	dec *hpack.Decoder
	// settings is the server's first SETTINGS frame.
	settings *http2.SettingsFrame
}

func (h *harness) dialH2(t *testing.T) *h2Conn {
	t.Helper()
	c, err := net.Dial("tcp", h.addrs.Proxy[0].String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	hc := &h2Conn{t: t, c: c, fr: http2.NewFramer(c, c), dec: hpack.NewDecoder(4096, nil)}
	hc.enc = hpack.NewEncoder(&hc.buf)
	if err := hc.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for hc.settings == nil {
		f, err := hc.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's SETTINGS: %v", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			hc.settings = sf
			if err := hc.fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return hc
}

// request sends one GET made of fields (pseudo-headers first, in order)
// on stream id and returns its status, or the RST_STREAM code as "rst:".
func (hc *h2Conn) request(id uint32, fields ...string) string {
	hc.t.Helper()
	hc.send(id, fields...)
	return hc.wait(id)
}

// send opens stream id with a GET made of fields, its only frame.
func (hc *h2Conn) send(id uint32, fields ...string) {
	hc.t.Helper()
	hc.buf.Reset()
	for i := 0; i < len(fields); i += 2 {
		_ = hc.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := hc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hc.buf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		hc.t.Fatal(err)
	}
}

// wait reads frames until stream id ends and returns its status, or the
// RST_STREAM code as "rst:".
func (hc *h2Conn) wait(id uint32) string {
	hc.t.Helper()
	return hc.readUntil(id, nil)
}

// readUntil is wait that also returns "" as soon as stop accepts a frame
// read before the stream ended.
func (hc *h2Conn) readUntil(id uint32, stop func(http2.Frame) bool) string {
	hc.t.Helper()
	status := ""
	for {
		f, err := hc.fr.ReadFrame()
		if err != nil {
			hc.t.Fatalf("stream %d: %v", id, err)
		}
		if stop != nil && stop(f) {
			return ""
		}
		if f.Header().StreamID != id {
			continue
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			return "rst:" + f.ErrCode.String()
		case *http2.HeadersFrame:
			hf, err := hc.dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				hc.t.Fatal(err)
			}
			for _, x := range hf {
				if x.Name == ":status" {
					status = x.Value
				}
			}
			if f.StreamEnded() {
				return status
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				return status
			}
		}
	}
}

// TestPlainH2AuthorityRefusedLikeHTTP1: an HTTP/2 stream is judged on
// :authority, or on Host when :authority is absent (RFC 9113 §8.3.1), is
// forwarded to the host it was judged on, and is
// refused with 400 like an HTTP/1 request when neither names a valid host
// or when :path is not origin-form (HTTP/2 has no absolute-form: such a
// :path would name a second destination next to :authority).
func TestPlainH2AuthorityRefusedLikeHTTP1(t *testing.T) {
	o := newRecordingOrigin()
	h := start(t, harnessOpts{writeSecret: true, origin: o})
	close(o.release)
	hc := h.dialH2(t)
	base := []string{":method", "GET", ":scheme", "http"}
	tests := []struct {
		name   string
		fields []string
		want   string
		reason string // of the decision line, "" when no handler runs
	}{
		{"no authority, no Host", []string{":path", "/x"}, "400", "missing_host"},
		{"authority with a space", []string{":path", "/x", ":authority", "api.example.test evil"}, "400", "invalid_host"},
		{"authority with a bad port", []string{":path", "/x", ":authority", "api.example.test:99999"}, "400", "invalid_host"},
		{"absolute :path", []string{":path", "http://other.example.test/x", ":authority", "api.example.test"}, "400", "invalid_target"},
		{"userinfo in authority", []string{":path", "/x", ":authority", "u@api.example.test"}, "rst:PROTOCOL_ERROR", ""},
		{"Host instead of authority", []string{":path", "/x", "host", "api.example.test"}, "200", "allowed"},
		// :authority wins; the Host header is never forwarded.
		{"authority and another Host", []string{":path", "/x", ":authority", "api.example.test", "host", "blocked.example.test"}, "200", "allowed"},
	}
	for i, tt := range tests {
		before := len(h.logs.Find("proxy decision"))
		got := hc.request(uint32(2*i+1), append(append([]string{}, base...), tt.fields...)...)
		if got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
			continue
		}
		lines := h.logs.Find("proxy decision")[before:]
		switch {
		case tt.reason == "":
			if len(lines) != 0 {
				t.Errorf("%s: decision lines %v for a reset stream", tt.name, lines)
			}
		case tt.want == "200":
			if len(lines) != 1 || lines[0][telemetry.KeyHost] != "api.example.test" || lines[0][telemetry.KeyDecision] != telemetry.DecisionAllow {
				t.Errorf("%s: decision lines %v", tt.name, lines)
			}
			if r := o.next(t); r.auth != "Bearer "+canary || r.host != "api.example.test" {
				t.Errorf("%s: origin saw host %q, credential injected %v", tt.name, r.host, r.auth == "Bearer "+canary)
			}
		default:
			if len(lines) != 1 || lines[0][telemetry.KeyReason] != tt.reason || lines[0][telemetry.KeyStatus] != float64(400) {
				t.Errorf("%s: decision lines %v, want one with reason %s", tt.name, lines, tt.reason)
			}
		}
	}
	select {
	case r := <-o.seen:
		t.Errorf("origin saw a refused request: %+v", r)
	default:
	}
}

// TestPlainH2StreamBudget: the plain listener announces
// http2_max_concurrent_streams, like the interception listener, and its
// streams draw on the same max_concurrent_requests budget (503 beyond it).
func TestPlainH2StreamBudget(t *testing.T) {
	const streams, budget = 7, 2
	o := newRecordingOrigin()
	h := start(t, harnessOpts{writeSecret: true, origin: o,
		extraYAML: fmt.Sprintf("http2_max_concurrent_streams: %d\nmax_concurrent_requests: %d\n", streams, budget)})
	hc := h.dialH2(t)
	if v, ok := hc.settings.Value(http2.SettingMaxConcurrentStreams); !ok || v != streams {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (announced %v), want %d", v, ok, streams)
	}
	c := h.priorKnowledgeClient(t)
	var wg sync.WaitGroup
	for range budget {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := c.Get("http://api.example.test/hold"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	for range budget {
		o.next(t)
	}
	resp, err := c.Get("http://api.example.test/over")
	if err != nil {
		t.Fatal(err)
	}
	b := body(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || b != bodyOverloaded || resp.Proto != "HTTP/2.0" {
		t.Errorf("stream beyond max_concurrent_requests: %d %s %q", resp.StatusCode, resp.Proto, b)
	}
	close(o.release)
	wg.Wait()
}

// TestPlainH2CUpgradeServedAsHTTP1: enabling prior-knowledge HTTP/2 does
// not make the plain listener honour an "Upgrade: h2c" offer (net/http
// has no such path): the request is answered over HTTP/1.1, not 101, with
// the credential injected and the offer not forwarded, and the connection
// stays HTTP/1.1 for the next request.
func TestPlainH2CUpgradeServedAsHTTP1(t *testing.T) {
	o := newRecordingOrigin()
	h := start(t, harnessOpts{writeSecret: true, origin: o})
	close(o.release)
	c, err := net.Dial("tcp", h.addrs.Proxy[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	fmt.Fprint(c, "GET /v1/models HTTP/1.1\r\nHost: api.example.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"+
		"HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\nAuthorization: Bearer agent-own\r\n\r\n")
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Proto != "HTTP/1.1" || resp.Header.Get("Upgrade") != "" || string(b) != "origin HTTP/2.0" {
			t.Fatalf("response %d: %d %s Upgrade=%q %q, want 200 over HTTP/1.1", i, resp.StatusCode, resp.Proto, resp.Header.Get("Upgrade"), b)
		}
		if r := o.next(t); r.auth != "Bearer "+canary || r.upgrade != "" {
			t.Errorf("response %d: origin saw upgrade offer %q or no injected credential", i, r.upgrade)
		}
		// The same connection, still HTTP/1.1.
		fmt.Fprint(c, "GET /again HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	}
}

// TestPlainH2Curl: curl --http2-prior-knowledge, sent the transparent way
// (URL names the origin, the connection goes to the plain listener).
func TestPlainH2Curl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("curl is required in CI")
		}
		t.Skip("curl not installed")
	}
	o := newRecordingOrigin()
	h := start(t, harnessOpts{writeSecret: true, origin: o})
	close(o.release)
	_, port, _ := net.SplitHostPort(h.addrs.Proxy[0].String())
	out, err := exec.Command(curl, "-sS", "--http2-prior-knowledge", "--connect-to", "api.example.test:80:127.0.0.1:"+port,
		"-H", "Authorization: Bearer agent-own", "-w", "\n%{http_version} %{http_code}", "http://api.example.test/v1/models").CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	if got := string(out); got != "origin HTTP/2.0\n2 200" {
		t.Errorf("curl printed %q, want the origin's answer over HTTP/2", got)
	}
	if r := o.next(t); r.auth != "Bearer "+canary {
		t.Error("credential not injected")
	}
	lines := h.decisionLines("api.example.test")
	if len(lines) != 1 || lines[0][telemetry.KeyDecision] != telemetry.DecisionAllow {
		t.Errorf("decision lines %v", lines)
	}
}

// TestPlainH2GracefulDrain: at shutdown a prior-knowledge HTTP/2
// connection gets a GOAWAY, and its stream in flight still completes.
func TestPlainH2GracefulDrain(t *testing.T) {
	o := newRecordingOrigin()
	h := start(t, harnessOpts{writeSecret: true, shutdown: 10, origin: o})
	hc := h.dialH2(t)
	hc.send(1, ":method", "GET", ":scheme", "http", ":path", "/hold", ":authority", "api.example.test")
	o.next(t)
	h.cancel()
	var goaway *http2.GoAwayFrame
	if got := hc.readUntil(1, func(f http2.Frame) bool { goaway, _ = f.(*http2.GoAwayFrame); return goaway != nil }); got != "" {
		t.Fatalf("stream ended (%s) before any GOAWAY", got)
	}
	if goaway.ErrCode != http2.ErrCodeNo {
		t.Errorf("GOAWAY %v, want NO_ERROR", goaway.ErrCode)
	}
	close(o.release)
	if got := hc.wait(1); got != "200" {
		t.Errorf("stream in flight at the drain: %s, want 200", got)
	}
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		h.done <- nil // for the cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}
}
