package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/placeholder"
	"github.com/botbox/botbox/internal/rewrite"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Placeholders of the test secrets: api-key (referenced by the
// api.example.test rule, real value "sk-test-12345") and other-key
// (referenced by no rule the requests go to). Their shape does not matter
// to the proxy.
const (
	phAPI   = "sk-test-PhAbCdEfGhIjKlMn0123456789"
	phOther = "sk-other-QrStUvWxYz9876543210AbCd"
)

type staticTable struct{ t *placeholder.Table }

func (s staticTable) Table() *placeholder.Table { return s.t }

func testPlaceholders() PlaceholderSource {
	return staticTable{placeholder.NewTable([]placeholder.Entry{
		{Ref: "api-key", Placeholder: phAPI, Current: true},
		{Ref: "other-key", Placeholder: phOther, Current: true},
	})}
}

// tripEnv is newEnv with placeholders, CONNECT interception and an
// interception listener (a TLS server running Intercepted with leaves of
// the test CA).
type tripEnv struct {
	*testEnv
	intercept *httptest.Server
}

func newTripEnv(t *testing.T, o envOpts) *tripEnv {
	o.placeholders = testPlaceholders()
	o.connectTLS = true
	e := &tripEnv{testEnv: newEnv(t, o)}
	e.intercept = httptest.NewUnstartedServer(e.handler.Intercepted())
	e.intercept.TLS = e.connectTLS()()
	e.intercept.StartTLS()
	t.Cleanup(e.intercept.Close)
	return e
}

// listeners are the ways a request reaches the pipeline: the plain
// listener, the interception listener over HTTP/1.1 and HTTP/2, and a
// CONNECT tunnel.
var listeners = []string{ListenerHTTP, ListenerHTTPS, listenerHTTPSH2, ListenerConnect}

// listenerHTTPSH2 is the interception listener spoken to over HTTP/2 (its
// decision lines say "https").
const listenerHTTPSH2 = "https-h2"

// send sends req to host through listener and returns the status and body.
// interceptClient is a client of the interception listener that trusts
// the test CA and dials the listener whatever the URL's host; h2 offers
// HTTP/2.
func (e *tripEnv) interceptClient(h2 bool) *http.Client {
	addr := e.intercept.Listener.Addr().String()
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: e.ca.Pool()},
		ForceAttemptHTTP2: h2,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func (e *tripEnv) send(listener, method, host, target string, hdr http.Header, body io.Reader, length int64) (int, string) {
	e.t.Helper()
	var (
		client *http.Client
		u      string
	)
	switch listener {
	case ListenerHTTP:
		client, u = e.client(), e.plain.URL+target
	case ListenerHTTPS, listenerHTTPSH2:
		client, u = e.interceptClient(listener == listenerHTTPSH2), "https://"+host+target
	case ListenerConnect:
		client, u = e.curlClient(false), "https://"+host+target
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Host = host
	req.ContentLength = length
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s via %s: %v", method, host, listener, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// assertTripped checks the alarm of one trip: 403 with its body, the
// origin untouched, the metric, and the ERROR line.
func (e *tripEnv) assertTripped(status int, body, listener, ref, foundIn, host string) {
	e.t.Helper()
	if status != http.StatusForbidden || body != bodyTripwire {
		e.t.Fatalf("got %d %q, want 403 %q", status, body, bodyTripwire)
	}
	e.assertOriginUntouched()
	if got := testutil.ToFloat64(e.metrics.SecretTripwire.WithLabelValues(ref)); got != 1 {
		e.t.Errorf("botbox_secret_tripwire_total{secret_ref=%q} = %v, want 1", ref, got)
	}
	lines := e.waitDecisions(1)
	line := lines[len(lines)-1]
	if listener == ListenerConnect {
		// The CONNECT's own line comes when the tunnel ends; find the request's.
		for _, l := range lines {
			if l["listener"] == ListenerConnect && l["event"] != nil {
				line = l
			}
		}
	}
	if listener == listenerHTTPSH2 {
		listener = ListenerHTTPS
	}
	want := map[string]any{
		"level": "ERROR", "event": "secret_tripwire", "decision": "denied_tripwire", "reason": "secret_tripwire",
		"host": host, "listener": listener, "found_in": foundIn, "status": float64(403),
	}
	for k, v := range want {
		if line[k] != v {
			e.t.Errorf("line[%s] = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
	if refs, _ := line["secret_ref"].([]any); len(refs) != 1 || refs[0] != ref {
		e.t.Errorf("line secret_ref = %v, want [%s]", line["secret_ref"], ref)
	}
	if strings.Contains(e.logs.String(), "sk-test-12345") {
		e.t.Error("the secret value is in the logs")
	}
}

func TestTripwireHeadEveryListener(t *testing.T) {
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+phOther))
	tests := []struct {
		name    string
		host    string // a host the CONNECT test leaves cover
		target  string
		hdr     http.Header
		ref     string
		foundIn string
	}{
		{"foreign placeholder in a header", "api.example.test", "/v1", http.Header{"X-Api-Key": {phOther}}, "other-key", "header"},
		{"own placeholder to a rule without it", "bare.example.test", "/v1", http.Header{"Authorization": {"Bearer " + phAPI}}, "api-key", "header"},
		{"placeholder in a query", "bare.example.test", "/v1?key=" + phAPI, nil, "api-key", "url"},
		{"percent-encoded in a path", "bare.example.test", "/v1/" + strings.ReplaceAll(url.PathEscape(phAPI), "s", "%73"), nil, "api-key", "url"},
		{"websocket upgrade", "bare.example.test", "/ws", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {phAPI}}, "api-key", "header"},
		{"base64 in basic auth", "api.example.test", "/v1", http.Header{"Proxy-Authorization": {basic}}, "other-key", "header"},
		{"placeholder in a header name", "bare.example.test", "/v1", http.Header{"X-" + phAPI: {"1"}}, "api-key", "header"},
	}
	for _, tt := range tests {
		for _, l := range listeners {
			t.Run(tt.name+"/"+l, func(t *testing.T) {
				e := newTripEnv(t, envOpts{})
				status, body := e.send(l, http.MethodGet, tt.host, tt.target, tt.hdr, nil, 0)
				e.assertTripped(status, body, l, tt.ref, tt.foundIn, tt.host)
			})
		}
	}
}

// TestTripwireAnyPolicy: the tripwire fires under default_action allow, for
// a denied host, and in report mode (never a report-only event).
func TestTripwireAnyPolicy(t *testing.T) {
	for _, tc := range []struct {
		name, action, host string
	}{
		{"default allow", "allow", "anything.example.test"},
		{"denied host", "deny", "evil.example.test"},
		{"deny rule", "deny", "blocked.example.test"},
		{"report mode, denied host", "deny", "evil.example.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTripEnv(t, envOpts{defaultAction: tc.action})
			if strings.HasPrefix(tc.name, "report") {
				// mode sits in egress_policy, where newEnv's template has no
				// slot: install it as a reload would.
				e.usePolicyMode("report")
			}
			status, body := e.send(ListenerHTTP, http.MethodGet, tc.host, "/x", http.Header{"Authorization": {"Bearer " + phAPI}}, nil, 0)
			e.assertTripped(status, body, ListenerHTTP, "api-key", "header", tc.host)
		})
	}
}

// usePolicyMode installs testConfig with egress_policy.mode set.
func (e *testEnv) usePolicyMode(mode string) {
	e.t.Helper()
	y := fmt.Sprintf(testConfig, e.secretDir, "", "deny")
	y = strings.Replace(y, "  default_action: deny\n", "  default_action: deny\n  mode: "+mode+"\n", 1)
	cfg, err := config.Parse([]byte(y))
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.handler.gen.Store(cfg); err != nil {
		e.t.Fatal(err)
	}
}

func TestTripwireHostName(t *testing.T) {
	e := newTripEnv(t, envOpts{defaultAction: "allow"})
	host := strings.ToLower(phOther) + ".evil.example.test"
	status, body := e.send(ListenerHTTP, http.MethodGet, host, "/", nil, nil, 0)
	e.assertTripped(status, body, ListenerHTTP, "other-key", "host", host)
}

func TestTripwireConnectTarget(t *testing.T) {
	e := newTripEnv(t, envOpts{})
	host := strings.ToLower(phOther) + ".evil.example.test"
	resp, body := e.raw("CONNECT " + host + ":443 HTTP/1.1\r\nHost: " + host + ":443\r\n\r\n")
	e.assertTripped(resp.StatusCode, body, ListenerHTTP, "other-key", "host", host)
}

// TestTripwireBodyKnownLength: a placeholder within the first 64 KiB of a
// body of known length trips before anything goes upstream, in any
// spelling; a clean body (larger than the scanned part) arrives intact.
func TestTripwireBodyKnownLength(t *testing.T) {
	jsonBody := `{"messages":[{"role":"user","content":"my key is ` + phOther + `"}]}`
	form := "a=1&key=" + url.QueryEscape(phOther)
	b64 := `{"blob":"` + base64.StdEncoding.EncodeToString([]byte("xx"+phOther+"yy")) + `"}`
	late := strings.Repeat("a", 60<<10) + phOther // ends inside the first 64 KiB
	for name, body := range map[string]string{"json": jsonBody, "form": form, "base64": b64, "at 60 KiB": late} {
		for _, l := range listeners {
			t.Run(name+"/"+l, func(t *testing.T) {
				e := newTripEnv(t, envOpts{})
				status, resp := e.send(l, http.MethodPost, "api.example.test", "/v1", nil, strings.NewReader(body), int64(len(body)))
				e.assertTripped(status, resp, l, "other-key", "body", "api.example.test")
			})
		}
	}
	// No rewrite replaces a body: the own secret's placeholder trips there
	// too, towards its own host (on ee87e5f it went through as is).
	for _, l := range listeners {
		t.Run("own placeholder to its own host/"+l, func(t *testing.T) {
			e := newTripEnv(t, envOpts{})
			body := `{"note":"` + phAPI + `"}`
			status, resp := e.send(l, http.MethodPost, "query.example.test", "/v1?key="+phAPI, nil, strings.NewReader(body), int64(len(body)))
			e.assertTripped(status, resp, l, "api-key", "body", "query.example.test")
		})
	}
	t.Run("clean body forwarded intact", func(t *testing.T) {
		for _, l := range listeners {
			e := newTripEnv(t, envOpts{})
			var got atomic.Pointer[[]byte]
			e.originMux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got.Store(&b)
			})
			want := bytes.Repeat([]byte("0123456789abcdef"), 10_000) // 160 KB
			status, _ := e.send(l, http.MethodPost, "api.example.test", "/upload", nil, bytes.NewReader(want), int64(len(want)))
			if status != http.StatusOK {
				t.Fatalf("%s: status %d", l, status)
			}
			if b := got.Load(); b == nil || !bytes.Equal(*b, want) {
				t.Fatalf("%s: origin got a different body", l)
			}
		}
	})
}

// slowBody yields its parts one Read at a time.
type slowBody struct{ parts [][]byte }

func (s *slowBody) Read(p []byte) (int, error) {
	if len(s.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.parts[0])
	s.parts[0] = s.parts[0][n:]
	if len(s.parts[0]) == 0 {
		s.parts = s.parts[1:]
	}
	return n, nil
}

// TestTripwireStreamedBody: a body of unknown length is scanned as it
// streams; a placeholder split across two writes at every position is
// found, the upstream request never completes, and the agent gets 403.
func TestTripwireStreamedBody(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		for split := 1; split < len(phOther); split += 7 {
			t.Run(fmt.Sprintf("h2=%v/split=%d", h2, split), func(t *testing.T) {
				e := newTripEnv(t, envOpts{http2Origin: h2})
				var complete atomic.Int64
				var leaked atomic.Bool
				e.originMux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
					b, err := io.ReadAll(r.Body)
					if bytes.Contains(b, []byte(phOther)) {
						leaked.Store(true)
					}
					if err == nil {
						complete.Add(1)
					}
				})
				body := &slowBody{parts: [][]byte{[]byte("prefix " + phOther[:split]), []byte(phOther[split:] + " suffix")}}
				status, resp := e.send(ListenerHTTP, http.MethodPost, "api.example.test", "/stream", nil, body, -1)
				if status != http.StatusForbidden || resp != bodyTripwire {
					t.Fatalf("got %d %q, want 403", status, resp)
				}
				if got := testutil.ToFloat64(e.metrics.SecretTripwire.WithLabelValues("other-key")); got != 1 {
					t.Errorf("tripwire metric = %v", got)
				}
				line := e.waitDecisions(1)[0]
				if line["level"] != "ERROR" || line["event"] != "secret_tripwire" || line["decision"] != "denied_tripwire" || line["found_in"] != "body" {
					t.Errorf("line = %v", line)
				}
				if complete.Load() != 0 || leaked.Load() {
					t.Errorf("origin got the body complete (%d) or the placeholder whole (%v)", complete.Load(), leaked.Load())
				}
			})
		}
	}
}

// TestPlaceholderOnlyWhereRewritten: a placeholder is accepted only in a
// header or query parameter that the allowing rule's rewrites replace
// with that placeholder's secret; the origin then sees the rewrite's value
// and nothing of the app's. Everywhere else — another header, Cookie, a
// parameter not named, the path, a parameter named in another case, the
// placeholder of another secret in a replaced place — it trips, towards
// the secret's own host too (redteam-2026-12-01 §2). On ee87e5f the
// X-Api-Key, query and Basic cases were swapped for the real key.
func TestPlaceholderOnlyWhereRewritten(t *testing.T) {
	basicReal := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:sk-test-12345"))
	accepted := []struct {
		name, host, target string
		hdr                http.Header
		wantPath, wantAuth string
	}{
		{"rewritten header", "api.example.test", "/v1?x=1", http.Header{"Authorization": {"Bearer " + phAPI}},
			"/v1?x=1", "Bearer sk-test-12345"},
		{"rewritten header, lower-case key", "api.example.test", "/v1", http.Header{"authorization": {phAPI}},
			"/v1", "Bearer sk-test-12345"},
		{"basic template over git's Basic", "query.example.test", "/repo.git/info/refs",
			http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+phAPI))}},
			"/repo.git/info/refs?key=sk-test-12345", basicReal},
		{"named parameter", "query.example.test", "/v1?key=" + phAPI + "&x=1", nil,
			"/v1?x=1&key=sk-test-12345", basicReal},
		{"named parameter twice, percent-encoded name", "query.example.test", "/v1?a=1&key=" + phAPI + "&%6Bey=" + url.QueryEscape(phAPI) + "&b=2", nil,
			"/v1?a=1&b=2&key=sk-test-12345", basicReal},
		{"named parameter, no placeholder", "query.example.test", "/v1?key=whatever", nil,
			"/v1?key=sk-test-12345", basicReal},
	}
	for _, tt := range accepted {
		for _, l := range listeners {
			t.Run("accepted/"+tt.name+"/"+l, func(t *testing.T) {
				e := newTripEnv(t, envOpts{})
				status, _ := e.send(l, http.MethodGet, tt.host, tt.target, tt.hdr, nil, 0)
				if status != http.StatusOK {
					t.Fatalf("status %d", status)
				}
				seen := e.lastSeen()
				if got := seen.Header.Values("Authorization"); len(got) != 1 || got[0] != tt.wantAuth {
					t.Errorf("Authorization = %q, want %q", got, tt.wantAuth)
				}
				if seen.Path != tt.wantPath {
					t.Errorf("path = %q, want %q", seen.Path, tt.wantPath)
				}
				for k, vs := range seen.Header {
					for _, v := range vs {
						if strings.Contains(v, phAPI) {
							t.Errorf("the placeholder reached the origin in %s", k)
						}
					}
				}
				if got := testutil.ToFloat64(e.metrics.SecretTripwire.WithLabelValues("api-key")); got != 0 {
					t.Errorf("tripwire fired: %v", got)
				}
			})
		}
	}
	basicPH := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+phAPI))
	tripped := []struct {
		name, host, target string
		hdr                http.Header
		ref, foundIn       string
	}{
		{"another header, own host", "api.example.test", "/v1", http.Header{"X-Api-Key": {phAPI}}, "api-key", "header"},
		{"cookie, own host", "api.example.test", "/v1", http.Header{"Cookie": {"s=" + phAPI}}, "api-key", "header"},
		{"basic in another header, own host", "api.example.test", "/v1", http.Header{"X-Basic": {basicPH}}, "api-key", "header"},
		{"query, own host without query_rewrites", "api.example.test", "/store?k=n1&v=" + phAPI, nil, "api-key", "url"},
		{"path, own host", "api.example.test", "/v1/" + phAPI, nil, "api-key", "url"},
		{"parameter not named", "query.example.test", "/v1?key=x&q=" + phAPI, nil, "api-key", "url"},
		{"parameter named in another case", "query.example.test", "/v1?KEY=" + phAPI, nil, "api-key", "url"},
		{"parameter named after a semicolon", "query.example.test", "/v1?a=1;key=" + phAPI, nil, "api-key", "url"},
		{"percent-encoded in a parameter not named", "query.example.test", "/v1?q=" + strings.ReplaceAll(url.QueryEscape(phAPI), "s", "%73"), nil, "api-key", "url"},
		{"another secret in the named parameter", "query.example.test", "/v1?key=" + phOther, nil, "other-key", "url"},
		{"another secret in the rewritten header", "api.example.test", "/v1", http.Header{"Authorization": {"Bearer " + phOther}}, "other-key", "header"},
		{"header named by a static rewrite", "api.example.test", "/v1", http.Header{"X-Static": {phAPI}}, "api-key", "header"},
		{"header remove_headers deletes", "query.example.test", "/v1", http.Header{"X-Api-Key": {phAPI}}, "api-key", "header"},
	}
	for _, tt := range tripped {
		for _, l := range listeners {
			t.Run("tripped/"+tt.name+"/"+l, func(t *testing.T) {
				e := newTripEnv(t, envOpts{})
				status, body := e.send(l, http.MethodGet, tt.host, tt.target, tt.hdr, nil, 0)
				e.assertTripped(status, body, l, tt.ref, tt.foundIn, tt.host)
			})
		}
	}
}

// TestPlaceholderReportModeAllowed: in report mode a request the policy
// allows is judged as in enforce mode (the same accepted places).
func TestPlaceholderReportModeAllowed(t *testing.T) {
	e := newTripEnv(t, envOpts{})
	e.usePolicyMode("report")
	status, body := e.send(ListenerHTTP, http.MethodGet, "api.example.test", "/v1?k="+phAPI, nil, nil, 0)
	e.assertTripped(status, body, ListenerHTTP, "api-key", "url", "api.example.test")
}

// TestTripwireOffWithoutPlaceholders: no Options.Placeholders, no scan.
func TestTripwireOffWithoutPlaceholders(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp, _ := e.get("api.example.test", "/v1", http.Header{"X-Api-Key": {phOther}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// BenchmarkServePlainPlaceholders is BenchmarkServePlain with placeholders
// off, on (two placeholders, a request carrying none: the full head scan)
// and on with the request's own placeholder in the header its rule
// rewrites (docs/performance.md, "Placeholders").
func BenchmarkServePlainPlaceholders(b *testing.B) {
	for _, v := range []struct {
		name string
		src  PlaceholderSource
		hdr  string
	}{
		{"ph=off", nil, ""},
		{"ph=on", testPlaceholders(), ""},
		{"ph=on,swap", testPlaceholders(), "Authorization: Bearer " + phAPI + "\r\n"},
	} {
		b.Run(v.name, func(b *testing.B) {
			h := newBenchHandler(b, cannedTransport{}, 8443, "")
			h.placeholders = v.src
			raw := strings.Replace(fmt.Sprintf(benchReq, "api.example.test"), "\r\n\r\n", "\r\n"+v.hdr+"\r\n", 1)
			serveLoop(b, h.Plain(), parsedRequest(b, raw))
		})
	}
}

// TestScanningBodyEverySplit: a placeholder split across two reads of a
// streamed body, at every position, fails the read that completes it,
// and no read before it returns the whole placeholder.
func TestScanningBodyEverySplit(t *testing.T) {
	h := &Handler{metrics: telemetry.NewMetrics()}
	tab := testPlaceholders().Table()
	for split := 0; split <= len(phOther); split++ {
		x := &exchange{}
		x.tw.table = tab
		parts := [][]byte{[]byte("head " + phOther[:split]), []byte(phOther[split:] + " tail")}
		b := &scanningBody{ReadCloser: io.NopCloser(&slowBody{parts: parts}), h: h, x: x, keep: tab.MaxLen() - 1}
		var got []byte
		var err error
		buf := make([]byte, 1024)
		for err == nil {
			var n int
			n, err = b.Read(buf)
			got = append(got, buf[:n]...)
		}
		if _, ok := errors.AsType[*tripwireError](err); !ok {
			t.Fatalf("split %d: err = %v, want the tripwire", split, err)
		}
		if bytes.Contains(got, []byte(phOther)) {
			t.Fatalf("split %d: the placeholder was returned whole", split)
		}
		if info := x.tw.trip.Load(); info == nil || info.ref != "other-key" || info.foundIn != "body" {
			t.Fatalf("split %d: trip = %+v", split, info)
		}
	}
	// Everything after the first 64 KiB passes.
	x := &exchange{}
	x.tw.table = tab
	late := append(bytes.Repeat([]byte("a"), tripwireBodyScan), phOther...)
	body := append([]byte("clean "), late...)
	b := &scanningBody{ReadCloser: io.NopCloser(bytes.NewReader(body)), h: h, x: x, keep: tab.MaxLen() - 1}
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("clean body: err %v, %d of %d bytes", err, len(got), len(body))
	}
}

// TestTripwireReportModeBody: in report mode a denied request is
// forwarded, but not with a placeholder in its body.
func TestTripwireReportModeBody(t *testing.T) {
	e := newTripEnv(t, envOpts{})
	e.usePolicyMode("report")
	body := `{"key":"` + phAPI + `"}`
	status, resp := e.send(ListenerHTTP, http.MethodPost, "evil.example.test", "/x", nil, strings.NewReader(body), int64(len(body)))
	e.assertTripped(status, resp, ListenerHTTP, "api-key", "body", "evil.example.test")
}

// TestQueryRewriteDecisionLine: the decision line names the parameters a
// query rewrite set (query_rewritten, configured names) and the secret,
// never the query (which now holds the key) nor the value; an app's
// parameter name cannot add itself to the field.
func TestQueryRewriteDecisionLine(t *testing.T) {
	e := newTripEnv(t, envOpts{})
	status, _ := e.send(ListenerHTTP, http.MethodGet, "query.example.test", "/v1?key=junk&query_rewritten=x&x=1", nil, nil, 0)
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	if seen := e.lastSeen(); seen.Path != "/v1?query_rewritten=x&x=1&key=sk-test-12345" {
		t.Errorf("origin path = %q", seen.Path)
	}
	line := e.waitDecisions(1)[0]
	if got, _ := line["query_rewritten"].([]any); len(got) != 1 || got[0] != "key" {
		t.Errorf("query_rewritten = %v", line["query_rewritten"])
	}
	if got, _ := line["secret_ref"].([]any); len(got) != 1 || got[0] != "api-key" {
		t.Errorf("secret_ref = %v", line["secret_ref"])
	}
	if line["path"] != "/v1" {
		t.Errorf("path = %v", line["path"])
	}
	if logs := e.logs.String(); strings.Contains(logs, "sk-test-12345") || strings.Contains(logs, "junk") {
		t.Error("the logs hold the key or the app's query")
	}
}

// TestQueryRewriteMissingSecret: a query rewrite whose secret is missing
// fails the request closed (500), nothing is forwarded, and the line
// names the secret_ref.
func TestQueryRewriteMissingSecret(t *testing.T) {
	e := newTripEnv(t, envOpts{})
	if err := os.Remove(filepath.Join(e.secretDir, "api-key")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := e.store.Snapshot().Lookup("api-key"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the store still holds the removed secret")
		}
	}
	status, body := e.send(ListenerHTTP, http.MethodGet, "query.example.test", "/v1?key=x", nil, nil, 0)
	if status != http.StatusInternalServerError || body != bodySecretMissing {
		t.Fatalf("got %d %q", status, body)
	}
	e.assertOriginUntouched()
	line := e.waitDecisions(1)[0]
	if got, _ := line["secret_ref"].([]any); len(got) != 1 || got[0] != "api-key" {
		t.Errorf("secret_ref = %v", line["secret_ref"])
	}
}

// TestPlaceholderInUserinfo: an absolute-form target whose userinfo holds
// the placeholder, towards the secret's own host, is never forwarded: a
// target with userinfo is refused before the policy (400 invalid host).
func TestPlaceholderInUserinfo(t *testing.T) {
	e := newTripEnv(t, envOpts{})
	resp, body := e.raw("GET http://x-access-token:" + phAPI + "@api.example.test/v1 HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest || strings.TrimSpace(body) != "invalid host" {
		t.Fatalf("got %d %q, want 400 invalid host", resp.StatusCode, body)
	}
	e.assertOriginUntouched()
}

// FuzzFindInHead holds the query half of the tripwire's contract: for any
// raw query with the placeholders spliced in anywhere (as is or
// percent-encoded), either findInHead trips, or the query that
// ApplyQuery forwards holds no placeholder in any spelling the table
// knows (the named parameter, replaced whole, is the only place one may
// sit), and the key goes only into that parameter.
func FuzzFindInHead(f *testing.F) {
	f.Add("key=", "&x=1", 0, true)
	f.Add("a=1&%6Bey=", "", 1, false)
	f.Add("KEY=", "", 0, false)
	f.Add("a;key=", "", 0, false)
	f.Add("key=x&q=", "", 0, true)
	set, err := rewrite.CompileRule(config.Rule{QueryRewrites: []config.QueryRewrite{{Name: "key", Value: "{value}", SecretRef: "api-key"}}})
	if err != nil {
		f.Fatal(err)
	}
	tab := testPlaceholders().Table()
	secrets := mapLookup{"api-key": "sk-test-12345"}
	f.Fuzz(func(t *testing.T, before, after string, which int, escape bool) {
		ph := []string{phAPI, phOther}[uint(which)%2]
		if escape {
			ph = strings.ReplaceAll(ph, "s", "%73")
		}
		raw := before + ph + after
		if strings.ContainsAny(raw, " #\r\n") {
			return
		}
		u := &url.URL{Path: "/v1", RawQuery: raw}
		if _, found := findInHead(tab, set, set.HeaderAccepts, u, http.Header{}); found {
			return
		}
		out, _, err := set.ApplyQuery(raw, secrets)
		if err != nil {
			t.Fatal(err)
		}
		kept, _ := set.SplitQuery(out)
		if ref, _, found := tab.FindEncoded(kept, nil); found {
			t.Fatalf("not tripped, yet %s's placeholder is forwarded in %q", ref, out)
		}
		if strings.Contains(kept, "sk-test-12345") {
			t.Fatalf("the key outside its parameter: %q", out)
		}
	})
}

// mapLookup is a placeholder-free secrets lookup for FuzzFindInHead.
type mapLookup map[string]string

func (m mapLookup) Lookup(ref string) (secrets.Value, bool) {
	v, ok := m[ref]
	return secrets.NewValue([]byte(v)), ok
}
