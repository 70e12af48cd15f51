package proxy

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/botbox/botbox/internal/scrub"
	"github.com/botbox/botbox/internal/testutil/wsecho"
)

// The secret newEnv writes, and the header value the rule sends with it.
const (
	scrubSecret = "sk-test-12345"
	scrubHeader = "Bearer " + scrubSecret
)

// revealsSecret reports whether text shows the agent scrubSecret.
func revealsSecret(text string) bool { return reveals(text, scrubSecret) }

// reveals reports whether text shows secret: raw, URL-encoded, or in any
// base64 decoding (standard or URL-safe, at any offset) of its runs of
// base64 characters. It does not use package scrub.
func reveals(text, secret string) bool {
	if strings.Contains(text, secret) || strings.Contains(text, url.QueryEscape(secret)) {
		return true
	}
	isB64 := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("+/-_", r)
	}
	for _, run := range strings.FieldsFunc(text, func(r rune) bool { return !isB64(r) }) {
		for off := range 4 {
			if off >= len(run) {
				break
			}
			s := run[off:]
			if len(s)%4 == 1 {
				s = s[:len(s)-1]
			}
			for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
				if dec, err := enc.DecodeString(s); err == nil && bytes.Contains(dec, []byte(secret)) {
					return true
				}
			}
		}
	}
	return false
}

// echoOrigin adds the echo endpoints: each returns the request's headers
// (JSON) in another form.
func echoOrigin(e *testEnv) {
	headersJSON := func(r *http.Request) []byte {
		b, _ := json.Marshal(r.Header)
		return b
	}
	mux := e.originMux
	mux.HandleFunc("/echo/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(headersJSON(r))
	})
	mux.HandleFunc("/echo/b64", func(w http.ResponseWriter, r *http.Request) {
		// Three alignments: the JSON, and the JSON after one and two bytes.
		for _, pre := range []string{"", "x", "xy"} {
			fmt.Fprintln(w, base64.StdEncoding.EncodeToString(append([]byte(pre), headersJSON(r)...)))
			fmt.Fprintln(w, base64.RawURLEncoding.EncodeToString(append([]byte(pre), headersJSON(r)...)))
		}
	})
	mux.HandleFunc("/echo/redirect", func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		w.Header().Set("Location", "/next?auth="+url.QueryEscape(auth))
		http.SetCookie(w, &http.Cookie{Name: "t", Value: base64.URLEncoding.EncodeToString([]byte(auth))})
		w.Header().Set("X-Echo", auth)
		w.WriteHeader(http.StatusFound)
	})
	mux.HandleFunc("/echo/early", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</hint?k="+r.Header.Get("Authorization")+">; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		fmt.Fprint(w, "done")
	})
	mux.HandleFunc("/echo/trailer", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Echo")
		fmt.Fprint(w, "body then trailer")
		_ = http.NewResponseController(w).Flush() // no Content-Length: trailers reach an HTTP/1.1 agent too
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
	})
	mux.HandleFunc("/echo/encoded/{coding}", func(w http.ResponseWriter, r *http.Request) {
		// Compressed whatever the request asked for.
		var buf bytes.Buffer
		var zw io.WriteCloser
		switch c := r.PathValue("coding"); c {
		case "gzip":
			zw = gzip.NewWriter(&buf)
		case "deflate":
			zw = zlib.NewWriter(&buf)
		case "br":
			zw = brotli.NewWriter(&buf)
		case "zstd":
			zw, _ = zstd.NewWriter(&buf)
		case "gzip-br":
			zw = nopWriteCloser{&buf} // filled below
			gz := gzip.NewWriter(&buf)
			br := brotli.NewWriter(gz)
			_, _ = br.Write(headersJSON(r))
			_ = br.Close()
			_ = gz.Close()
			w.Header().Set("Content-Encoding", "br, gzip")
		default: // an unknown coding: the bytes as they are
			zw = nopWriteCloser{&buf}
		}
		if r.PathValue("coding") != "gzip-br" {
			_, _ = zw.Write(headersJSON(r))
			w.Header().Set("Content-Encoding", r.PathValue("coding"))
		}
		_ = zw.Close()
		w.Header().Set("Content-Length", fmt.Sprint(buf.Len()))
		_, _ = w.Write(buf.Bytes())
	})
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// interceptClient serves e's interception handler on a TLS listener with
// a leaf for api.example.test and returns a client that reaches it for
// every URL, over HTTP/2 when h2.
func (e *testEnv) interceptClient(t *testing.T, h2 bool) *http.Client {
	t.Helper()
	srv := httptest.NewUnstartedServer(e.handler.Intercepted())
	srv.EnableHTTP2 = h2
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{e.ca.Leaf(t, "api.example.test", "noscrub.example.test")}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	tr := &http.Transport{
		TLSClientConfig:    &tls.Config{RootCAs: e.ca.Pool()},
		ForceAttemptHTTP2:  h2,
		DisableCompression: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// plainClient reaches e's plain listener for every URL (transparent mode:
// the URL's host becomes the Host header).
func (e *testEnv) plainClient(t *testing.T) *http.Client {
	addr := e.plain.Listener.Addr().String()
	tr := &http.Transport{DisableCompression: true, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// dump is everything of a response an agent can read: status line,
// headers, 1xx headers, body, trailers.
func dump(t *testing.T, c *http.Client, rawURL string) (*http.Response, string) {
	t.Helper()
	var early strings.Builder
	req, _ := http.NewRequest(http.MethodGet, rawURL, nil)
	req.Header.Set("Authorization", "Bearer agent-dummy")
	req.Header.Set("Accept-Encoding", "gzip, br, zstd")
	req = req.WithContext(withEarlyHints(req.Context(), &early))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("GET %s: body: %v", rawURL, err)
	}
	return resp, fmt.Sprintf("%s\n%v\n%s\n%s\n%v", resp.Status, resp.Header, early.String(), body, resp.Trailer)
}

// TestScrubEchoThroughBothListeners: an origin that echoes the request
// headers — as JSON, as base64 (three alignments, standard and URL-safe),
// in Location, Set-Cookie and another header, in a 103's Link, in a
// trailer, and compressed with gzip, deflate, br, zstd or two codings —
// never shows the agent the injected value, through the plain listener
// and the interception listener (HTTP/1.1 and HTTP/2), from an HTTP/1.1
// and an HTTP/2 origin. The origin is asked for identity encoding; each
// masking is counted and logged with secret_ref and where.
func TestScrubEchoThroughBothListeners(t *testing.T) {
	for _, h2origin := range []bool{false, true} {
		e := newEnv(t, envOpts{http2Origin: h2origin})
		echoOrigin(e)
		clients := map[string]*http.Client{
			"plain":    e.plainClient(t),
			"https/h1": e.interceptClient(t, false),
			"https/h2": e.interceptClient(t, true),
		}
		paths := []string{"/echo/json", "/echo/b64", "/echo/redirect", "/echo/early", "/echo/trailer",
			"/echo/encoded/gzip", "/echo/encoded/deflate", "/echo/encoded/br", "/echo/encoded/zstd", "/echo/encoded/gzip-br"}
		for name, c := range clients {
			scheme := "https"
			if name == "plain" {
				scheme = "http"
			}
			for _, p := range paths {
				t.Run(fmt.Sprintf("h2origin=%v/%s%s", h2origin, name, p), func(t *testing.T) {
					resp, seen := dump(t, c, scheme+"://api.example.test"+p)
					if resp.StatusCode >= 400 {
						t.Fatalf("status %s: %s", resp.Status, seen)
					}
					if revealsSecret(seen) {
						t.Fatalf("the agent sees the secret:\n%s", seen)
					}
					if !strings.Contains(seen, "*****") {
						t.Fatalf("nothing masked (did the echo work?):\n%s", seen)
					}
					if strings.HasPrefix(p, "/echo/encoded/") {
						if ce := resp.Header.Get("Content-Encoding"); ce != "" || !strings.Contains(seen, `"Authorization":["Bearer ******`) {
							t.Fatalf("Content-Encoding %q; body not decoded:\n%s", ce, seen)
						}
					}
					if got := e.lastSeen().Header.Get("Accept-Encoding"); got != "identity" {
						t.Errorf("origin got Accept-Encoding %q, want identity", got)
					}
				})
			}
		}
		if n := testutil.ToFloat64(e.metrics.SecretReflections.WithLabelValues("api-key")); n < float64(3*len(paths)) {
			t.Errorf("botbox_secret_reflections_total{secret_ref=api-key} = %v, want at least %d", n, 3*len(paths))
		}
		wheres := map[string]bool{}
		for _, r := range e.logs.Find(msgReflection) {
			if r["level"] != "WARN" || r["secret_ref"] != "api-key" {
				t.Errorf("reflection line %v", r)
			}
			wheres[fmt.Sprint(r["where"])] = true
		}
		for _, w := range []string{"body", "Location", "Set-Cookie", "X-Echo", "Link", "trailer:X-Echo"} {
			if !wheres[w] {
				t.Errorf("no reflection line with where=%s (got %v)", w, wheres)
			}
		}
		if strings.Contains(e.logs.String(), scrubSecret) {
			t.Error("the secret is in the logs")
		}
	}
}

// TestScrubUnknownCodingFailsClosed: a body in a content coding BotBox
// cannot decode is never forwarded: 502 "response could not be inspected".
func TestScrubUnknownCodingFailsClosed(t *testing.T) {
	e := newEnv(t, envOpts{})
	echoOrigin(e)
	resp, body := e.get("api.example.test", "/echo/encoded/compress", nil)
	if resp.StatusCode != http.StatusBadGateway || body != bodyUninspectable || resp.Header.Get(HeaderReason) != reasonUninspectable {
		t.Fatalf("got %d %q (%s), want 502 %q", resp.StatusCode, body, resp.Header.Get(HeaderReason), bodyUninspectable)
	}
	if line := e.waitDecisions(1)[0]; line["reason"] != reasonUninspectable || line["level"] != "WARN" {
		t.Errorf("decision line %v", line)
	}
}

// TestScrubOffRestoresReference: a rule with scrub_responses: false hands
// the echo over as the origin sent it (the reference's behaviour).
func TestScrubOffRestoresReference(t *testing.T) {
	e := newEnv(t, envOpts{})
	echoOrigin(e)
	_, seen := dump(t, e.plainClient(t), "http://noscrub.example.test/echo/json")
	if !strings.Contains(seen, scrubHeader) {
		t.Fatalf("scrub_responses: false masked the echo:\n%s", seen)
	}
	if got := e.lastSeen().Header.Get("Accept-Encoding"); got != "gzip, br, zstd" {
		t.Errorf("origin got Accept-Encoding %q, want the agent's", got)
	}
}

// TestScrubSSEStreamsEventByEvent: SSE events echoing the value arrive
// masked, each before the origin sends the next (no event waits for bytes
// that follow it).
func TestScrubSSEStreamsEventByEvent(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		e := newEnv(t, envOpts{http2Origin: h2})
		next := make(chan struct{})
		e.originMux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			rc := http.NewResponseController(w)
			for i := range 3 {
				fmt.Fprintf(w, "data: {\"n\":%d,\"auth\":%q}\n\n", i, r.Header.Get("Authorization"))
				_ = rc.Flush()
				select {
				case <-next:
				case <-r.Context().Done():
					return
				}
			}
		})
		resp, err := e.interceptClient(t, h2).Get("https://api.example.test/events")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() }) // before the origin's Close, which waits for the handler
		br := bufio.NewReader(resp.Body)
		for i := range 3 {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			if want := fmt.Sprintf("data: {\"n\":%d,\"auth\":\"Bearer %s\"}\n", i, strings.Repeat("*", len(scrubSecret))); line != want {
				t.Fatalf("got %q, want %q", line, want)
			}
			_, _ = br.ReadString('\n')
			next <- struct{}{}
		}
		resp.Body.Close()
	}
}

// TestScrubWebSocket: the offer reaches the origin without
// permessage-deflate, and the value the origin sends back split across two
// fragments (a ping between them) reaches the agent masked, frame lengths
// intact.
func TestScrubWebSocket(t *testing.T) {
	e := newEnv(t, envOpts{})
	offered := make(chan string, 1)
	e.originMux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		offered <- strings.Join(r.Header.Values("Sec-Websocket-Extensions"), "|")
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		msg := `{"auth":"` + r.Header.Get("Authorization") + `"}`
		half := len(msg) / 2
		_, _ = brw.Write(append([]byte{0x01, byte(half)}, msg[:half]...))            // text, not final
		_, _ = brw.Write([]byte{0x89, 4, 'p', 'i', 'n', 'g'})                        // ping
		_, _ = brw.Write(append([]byte{0x80, byte(len(msg) - half)}, msg[half:]...)) // continuation, final
		_ = brw.Flush()
		_, _ = brw.ReadString('\n') // until the agent is done
	})
	for _, listener := range []string{"plain", "https"} {
		var c net.Conn
		var err error
		if listener == "plain" {
			c, err = net.Dial("tcp", e.plain.Listener.Addr().String())
		} else {
			srv := httptest.NewUnstartedServer(e.handler.Intercepted())
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{e.ca.Leaf(t, "api.example.test")}}
			srv.StartTLS()
			defer srv.Close()
			c, err = tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{RootCAs: e.ca.Pool(), ServerName: "api.example.test", NextProtos: []string{"http/1.1"}})
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: api.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"+
			"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits, x-other\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("%s: upgrade %v, %v", listener, resp, err)
		}
		if got := <-offered; got != "x-other" {
			t.Errorf("%s: origin was offered extensions %q, want x-other", listener, got)
		}
		first, err1 := wsecho.ReadFrame(br)
		ping, err2 := wsecho.ReadFrame(br)
		second, err3 := wsecho.ReadFrame(br)
		if err1 != nil || err2 != nil || err3 != nil || ping != "ping" {
			t.Fatalf("%s: frames %q %q %q: %v %v %v", listener, first, ping, second, err1, err2, err3)
		}
		if got, want := first+second, `{"auth":"Bearer `+strings.Repeat("*", len(scrubSecret))+`"}`; got != want {
			t.Errorf("%s: message %q, want %q", listener, got, want)
		}
		fmt.Fprint(c, "bye\n")
		c.Close()
	}
}

// withEarlyHints records the headers of every 1xx response into b.
func withEarlyHints(ctx context.Context, b *strings.Builder) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			fmt.Fprintf(b, "%d %v\n", code, h)
			return nil
		},
	})
}

// TestScrubResponseHead: the reason phrase (which ReverseProxy writes
// for a 101), a header name and values are masked; a 101 whose origin
// accepted permessage-deflate and a body in an unknown coding are
// uninspectable; a coded response without a body loses its
// Content-Encoding and Content-Length.
func TestScrubResponseHead(t *testing.T) {
	u := newUnitHandler(t, true)
	m, err := scrub.Compile([]scrub.Secret{{Ref: "api-key", Value: []byte("sk-unit"), Header: "Bearer sk-unit"}, {Ref: "api-key", Value: []byte("Tok-Abc")}})
	if err != nil {
		t.Fatal(err)
	}
	x := &exchange{h: u.Handler, ctx: context.Background(), id: "test"}
	s := &responseScrub{m: m, x: x}
	resp := &http.Response{
		Status: "101 Switching sk-unit", StatusCode: 101,
		Header: http.Header{"X-Tok-Abc": {"v"}, "X-Echo": {"a sk-unit", "clean"}, "Sec-Websocket-Extensions": {"x-other"}},
		Body:   nopRWC{},
	}
	if err := s.scrubResponse(resp); err != nil {
		t.Fatal(err)
	}
	if resp.Status != "101 Switching *******" || resp.Header.Get("X-Echo") != "a *******" || resp.Header.Values("X-Echo")[1] != "clean" {
		t.Errorf("status %q, headers %v", resp.Status, resp.Header)
	}
	if _, ok := resp.Header["X-Tok-Abc"]; ok || len(resp.Header["X-*******"]) != 1 {
		t.Errorf("header name not masked: %v", resp.Header)
	}
	if _, ok := resp.Body.(*scrubbedConn); !ok {
		t.Errorf("101 body is %T, want the frame scrubber", resp.Body)
	}
	bad := &http.Response{Status: "101 Switching Protocols", StatusCode: 101, Header: http.Header{"Sec-Websocket-Extensions": {"permessage-deflate"}}, Body: nopRWC{}}
	if err := s.scrubResponse(bad); !isUninspectable(err) {
		t.Errorf("101 with permessage-deflate: %v, want uninspectable", err)
	}
	for _, tt := range []struct {
		coding string
		body   io.ReadCloser
		ok     bool
	}{{"compress", io.NopCloser(strings.NewReader("x")), false}, {"gzip, identity", http.NoBody, true}, {"x-gzip", http.NoBody, true}} {
		r := &http.Response{Status: "200 OK", StatusCode: 200, Header: http.Header{"Content-Encoding": {tt.coding}, "Content-Length": {"9"}}, Body: tt.body, ContentLength: 9}
		err := s.scrubResponse(r)
		if isUninspectable(err) == tt.ok {
			t.Errorf("%s: err %v", tt.coding, err)
		}
		if tt.ok && (r.Header.Get("Content-Encoding") != "" || r.Header.Get("Content-Length") != "" || r.ContentLength != -1) {
			t.Errorf("%s: header %v, length %d", tt.coding, r.Header, r.ContentLength)
		}
	}
	if n := testutil.ToFloat64(u.metrics.SecretReflections.WithLabelValues("api-key")); n != 3 {
		t.Errorf("reflections counted %v, want 3 (reason, name, value)", n)
	}
}

type nopRWC struct{}

func (nopRWC) Read([]byte) (int, error)    { return 0, io.EOF }
func (nopRWC) Write(p []byte) (int, error) { return len(p), nil }
func (nopRWC) Close() error                { return nil }

// TestDecodeBodyCodings: each supported coding, raw deflate (which some
// servers send for "deflate") and a chain of two decode to the original
// bytes.
func TestDecodeBodyCodings(t *testing.T) {
	const text = `{"echo":"Bearer sk-test-12345"}`
	enc := func(coding string) []byte {
		var b bytes.Buffer
		var w io.WriteCloser
		switch coding {
		case "gzip":
			w = gzip.NewWriter(&b)
		case "deflate":
			w = zlib.NewWriter(&b)
		case "raw-deflate":
			w, _ = flate.NewWriter(&b, flate.BestSpeed)
		case "br":
			w = brotli.NewWriter(&b)
		case "zstd":
			w, _ = zstd.NewWriter(&b)
		}
		_, _ = io.WriteString(w, text)
		_ = w.Close()
		return b.Bytes()
	}
	cases := map[string][]byte{"gzip": enc("gzip"), "deflate": enc("deflate"), "br": enc("br"), "zstd": enc("zstd")}
	cases["deflate (raw)"] = enc("raw-deflate")
	for name, body := range cases {
		coding, _, _ := strings.Cut(name, " ")
		resp := &http.Response{Header: http.Header{"Content-Encoding": {coding}}, Body: io.NopCloser(bytes.NewReader(body))}
		if err := decodeBody(resp); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || string(got) != text {
			t.Errorf("%s: %q, %v", name, got, err)
		}
		_ = resp.Body.Close()
	}
	// "gzip, br": gzip applied first, so br is undone first.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(text))
	_ = zw.Close()
	var chain bytes.Buffer
	bw := brotli.NewWriter(&chain)
	_, _ = bw.Write(gz.Bytes())
	_ = bw.Close()
	resp := &http.Response{Header: http.Header{"Content-Encoding": {"gzip", "br"}}, Body: io.NopCloser(&chain)}
	if err := decodeBody(resp); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(resp.Body); err != nil || string(got) != text {
		t.Errorf("gzip, br: %q, %v", got, err)
	}
}

// TestDecodeZstdWindowBounded: a zstd stream declaring a window beyond
// 8 MiB is refused rather than decoded into that much memory.
func TestDecodeZstdWindowBounded(t *testing.T) {
	// A frame (RFC 8878 §3.1.1) with no content size and a window
	// descriptor of 2^26 bytes, then one raw last block of one byte.
	frame := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 16 << 3, 0x09, 0x00, 0x00, 'x'}
	resp := &http.Response{Header: http.Header{"Content-Encoding": {"zstd"}}, Body: io.NopCloser(bytes.NewReader(frame))}
	if err := decodeBody(resp); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(resp.Body); err == nil {
		t.Fatalf("decoded %q from a 64 MiB-window stream, want an error", got)
	}
}

// TestScrubAWSChunkedIsIdentity: a response whose Content-Encoding names
// aws-chunked (an S3-compatible store echoing an object's upload framing)
// is scanned as the plain bytes it is: 200, the secret masked.
func TestScrubAWSChunkedIsIdentity(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	echoOrigin(e)
	resp, body := e.get("api.example.test", "/echo/encoded/aws-chunked", nil)
	if resp.StatusCode != http.StatusOK || revealsSecret(body) || !strings.Contains(body, "Authorization") {
		t.Fatalf("got %d %q, want 200 with the echo masked", resp.StatusCode, body)
	}
}
