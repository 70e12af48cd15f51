package proxy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/telemetry"
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

// interceptH2 is an HTTP/2-only transport to the interception listener.
func (e *tripEnv) interceptH2() *http.Transport {
	addr := e.intercept.Listener.Addr().String()
	var p http.Protocols
	p.SetHTTP2(true)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool()},
		Protocols:       &p,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return tr
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
	tr := e.interceptH2()
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
		if resp.ProtoMajor != 2 {
			t.Fatalf("spoke %s, want HTTP/2", resp.Proto)
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
		tr := e.interceptH2()
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
		if resp.ProtoMajor != 2 {
			t.Fatalf("spoke %s, want HTTP/2", resp.Proto)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e.assertTripped(resp.StatusCode, string(b), ListenerHTTPS, "other-key", "header", "bare.example.test")
	})
}

// hooksDenyRules: the GitHub shape of redteam 2026-12-01 §4, a deny route
// under a broad allow, with the credential.
const hooksDenyRules = `    - host: api.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
      routes:
        - paths: ["/repos/acme/app/hooks/**"]
          action: deny
        - methods: [GET, HEAD, POST]
          paths: ["/repos/acme/**"]
`

// TestDenyRouteEverySpellingEveryListener: every spelling an origin may
// read as the denied /repos/acme/app/hooks, sent through every listener
// (plain, interception over HTTP/1.1 and HTTP/2, a CONNECT tunnel), is
// refused before the origin, with or without the credential's header.
func TestDenyRouteEverySpellingEveryListener(t *testing.T) {
	spellings := []string{
		"/repos/acme/app/hooks",
		"/repos/acme/app/hooks/",
		"/repos/acme/App/Hooks",
		"/repos/acme/app/HOOKS/1",
		"/repos/acme/app/%68ooks",
		"/repos/acme/app/ho%6Fks",
		"/repos/acme/app/hooks.",
		"/repos/acme/app/hooks%2E",
		"/repos/acme/app/hooks%20",
		"/repos/acme/app/hooks.json",
		"/repos/acme/app/hooks.x.json",
		"/repos/acme/app/hooks;x=1",
		"/repos/acme/app/hooks%3Bx",
		"/repos/acme/app/hooks%252e",
		"/repos/acme/app/hook%C5%BF",    // ſ folds to s
		"/repos/acme/app/%EF%BD%88ooks", // fullwidth h
		"/repos/acme/app/hooks%00",
		"/repos/acme/app/hooks%0a",
		"/repos/acme/app/x/../hooks",
		"/repos/acme/app/./hooks",
		"/repos/acme/app//hooks",
		"/repos/acme/app%2Fhooks",
		"/repos/acme/app%5Chooks",
		"/repos/acme/app/hooks?_method=GET",
		"/repos/acme/app/hooks#frag",
		"/repos/acme/app/hooks%3Fx=1",
		"/repos/acme/app%3F/hooks",
		"/repos/acme/app/pulls?_method=DELETE",
		"/repos/acme/app/pulls?a=1;_METHOD=DELETE",
		"/repos/acme/app/pulls?%5Fmethod=DELETE",
		"/repos/acme/app/pulls?.method=DELETE",
	}
	for _, l := range listeners {
		t.Run(l, func(t *testing.T) {
			e := newTripEnv(t, envOpts{})
			e.usePolicy(hooksDenyRules)
			for _, p := range spellings {
				for _, method := range []string{http.MethodGet, http.MethodPost} {
					status, _ := e.sendRaw(l, method, "api.example.test", p, nil)
					if status < 400 {
						t.Errorf("%s %s via %s: %d, want a refusal", method, p, l, status)
					}
				}
			}
			for _, hdr := range []http.Header{
				{"X-Http-Method-Override": {"DELETE"}},
				{"X_HTTP_METHOD_OVERRIDE": {"DELETE"}},
				{"X-Original-Url": {"/repos/acme/app/hooks"}},
				{"X-Rewrite-Url": {"/repos/acme/app/hooks"}},
			} {
				status, _ := e.sendRaw(l, http.MethodPost, "api.example.test", "/repos/acme/app/pulls", hdr)
				if status != http.StatusBadRequest {
					t.Errorf("POST with %v via %s: %d, want 400", hdr, l, status)
				}
			}
			if n := e.hits.Load(); n != 0 {
				t.Fatalf("origin received %d requests", n)
			}
			// Control: the allow route itself works through this listener.
			if status, _ := e.sendRaw(l, http.MethodGet, "api.example.test", "/repos/acme/app/pulls", nil); status != http.StatusOK {
				t.Fatalf("control GET via %s: %d", l, status)
			}
		})
	}
}

// sendRaw is send with target written on the wire exactly as given (the
// URL's Opaque), so that no client normalises the spelling under test.
// The HTTP/1.1 plain listener is written to by hand.
func (e *tripEnv) sendRaw(listener, method, host, target string, hdr http.Header) (int, string) {
	e.t.Helper()
	if listener == ListenerHTTP {
		resp, body := e.raw(method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n" + headerLines(hdr) + "Content-Length: 0\r\nConnection: close\r\n\r\n")
		return resp.StatusCode, body
	}
	return e.sendOpaque(listener, method, host, target, hdr)
}

// sendOpaque is send with the request target taken verbatim (URL.Opaque).
func (e *tripEnv) sendOpaque(listener, method, host, target string, hdr http.Header) (int, string) {
	e.t.Helper()
	var client *http.Client
	switch listener {
	case ListenerHTTPS, listenerHTTPSH2:
		client = e.interceptClient(listener == listenerHTTPSH2)
	case ListenerConnect:
		client = e.curlClient(false)
	default:
		e.t.Fatalf("sendOpaque: listener %s", listener)
	}
	req, err := http.NewRequest(method, "https://"+host+"/", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.URL.Opaque = target
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s via %s: %v", method, target, listener, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReportModeRouteDenialCarriesNoCredential: in report mode, a request
// that a route of a credentialed rule refuses (deny route, no route,
// method override, ambiguous path) is forwarded without the rule's
// header or query rewrites, and one carrying the placeholder still trips:
// report mode never sends the key where enforce mode would refuse.
func TestReportModeRouteDenialCarriesNoCredential(t *testing.T) {
	e := newTripEnv(t, envOpts{})
	rules := `    - host: api.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
      query_rewrites:
        - name: key
          value: "{value}"
          secret_ref: api-key
      routes:
        - paths: ["/repos/acme/app/hooks/**"]
          action: deny
        - methods: [GET]
          paths: ["/repos/acme/**"]
`
	cfg, err := config.Parse([]byte(fmt.Sprintf("secrets_dir: %s\negress_policy:\n  default_action: deny\n  mode: report\n  rules:\n%s", e.secretDir, rules)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.handler.gen.Store(cfg); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, target string
		hdr            http.Header
		reason         string
	}{
		{http.MethodGet, "/repos/acme/app/hooks?key=x", nil, "route_deny"},
		{http.MethodPost, "/repos/acme/app", nil, "no_route"},
		{http.MethodGet, "/repos/acme/app", http.Header{"X-Http-Method-Override": {"DELETE"}}, "method_override"},
		{http.MethodGet, "/repos/acme/app/hooks%3Fx", nil, "ambiguous_path"},
	} {
		resp, _ := e.raw(tc.method + " " + tc.target + " HTTP/1.1\r\nHost: api.example.test\r\n" + headerLines(tc.hdr) + "Content-Length: 0\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d, want forwarded (report mode)", tc.method, tc.target, resp.StatusCode)
		}
		seen := e.lastSeen()
		if a := seen.Header.Get("Authorization"); a != "" || strings.Contains(seen.Path, "sk-test-12345") {
			t.Errorf("%s %s (%s) in report mode reached the origin with Authorization %q, path %q", tc.method, tc.target, tc.reason, a, seen.Path)
		}
		line := e.logs.Find("proxy decision")
		if l := line[len(line)-1]; l["decision"] != "report_deny" || l["reason"] != tc.reason {
			t.Errorf("%s %s: line %v, want report_deny %s", tc.method, tc.target, l, tc.reason)
		}
	}
	status, body := e.send(ListenerHTTP, http.MethodGet, "api.example.test", "/repos/acme/app/hooks", http.Header{"Authorization": {"Bearer " + phAPI}}, nil, 0)
	if status != http.StatusForbidden || body != bodyTripwire {
		t.Errorf("placeholder on a report-denied route: %d %q, want the tripwire", status, body)
	}
	if strings.Contains(e.logs.String(), "sk-test-12345") {
		t.Error("the secret value is in the logs")
	}
}

// headerLines writes hdr as HTTP/1.1 header lines.
func headerLines(hdr http.Header) string {
	var b strings.Builder
	for k, vs := range hdr {
		for _, v := range vs {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	return b.String()
}

// TestPlaceholderInMethodTrips: a request method is a token, and a
// placeholder's characters are token characters: the method goes to the
// origin as written, so a placeholder in it trips like one in a header,
// on every listener.
func TestPlaceholderInMethodTrips(t *testing.T) {
	for _, method := range []string{phAPI, strings.ToLower(phAPI), "X" + strings.ToUpper(phAPI)} {
		for _, l := range listeners {
			t.Run(l, func(t *testing.T) {
				e := newTripEnv(t, envOpts{})
				status, body := e.send(l, method, "bare.example.test", "/v1", nil, nil, 0)
				e.assertTripped(status, body, l, "api-key", "method", "bare.example.test")
			})
		}
	}
}

// TestTraceNeverCarriesCredential: an origin answers TRACE (and IIS's
// TRACK) with the request it received, the injected credential included
// (RFC 9110 §9.3.8: a client must not send credentials in a TRACE). On a
// rule with rewrites such a request, or one whose method override names
// them, is refused with 403 before any
// upstream work, on every listener and in any case; a rule without
// rewrites forwards it (nothing of BotBox's is in it).
func TestTraceNeverCarriesCredential(t *testing.T) {
	for _, l := range listeners {
		t.Run(l, func(t *testing.T) {
			e := newTripEnv(t, envOpts{})
			e.originMux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "message/http")
				_ = r.Write(w) // what a TRACE-answering origin does
			})
			for _, tc := range []struct{ method, host string }{
				{"TRACE", "noscrub.example.test"},
				{"TRACE", "api.example.test"},
				{"TRACK", "noscrub.example.test"},
				{"trace", "query.example.test"},
			} {
				status, body := e.send(l, tc.method, tc.host, "/echo", nil, nil, 0)
				if strings.Contains(body, "sk-test-12345") {
					t.Fatalf("%s %s via %s: the key came back: %q", tc.method, tc.host, l, body)
				}
				if status != http.StatusForbidden || body != bodyTraceCredential {
					t.Errorf("%s %s via %s: %d %q, want 403 %q", tc.method, tc.host, l, status, body, bodyTraceCredential)
				}
			}
			e.assertOriginUntouched()
			line := e.logs.Find("proxy decision")
			if last := line[len(line)-1]; last["reason"] != reasonTraceCredential || last["decision"] != telemetry.DecisionDeny {
				t.Errorf("line %v, want deny %s", last, reasonTraceCredential)
			}
			// The same through a method override the origin may obey, on a
			// rule without routes (which forwards overrides otherwise).
			for _, o := range []struct {
				target string
				hdr    http.Header
			}{
				{"/echo", http.Header{"X-Http-Method-Override": {"TRACE"}}},
				{"/echo", http.Header{"X-Method-Override": {" track "}}},
				{"/echo?_method=trace", nil},
				{"/echo?a=1;%5FMETHOD=TRACE", nil},
			} {
				status, body := e.send(l, http.MethodPost, "noscrub.example.test", o.target, o.hdr, nil, 0)
				if status != http.StatusForbidden || body != bodyTraceCredential {
					t.Errorf("POST %s %v via %s: %d %q, want 403 %q", o.target, o.hdr, l, status, body, bodyTraceCredential)
				}
			}
			e.assertOriginUntouched()
			// Control: without rewrites, TRACE goes to the origin.
			if status, _ := e.send(l, "TRACE", "bare.example.test", "/echo", nil, nil, 0); status != http.StatusOK {
				t.Errorf("TRACE without rewrites via %s: %d, want 200", l, status)
			}
		})
	}
}

// TestDecisionLineNotForgeable: the agent's bytes in the fields of a
// decision line (path decoded from escapes, method, host, upgrade offer,
// the placeholder trip) never end a line or add a field: every line is
// one JSON object, one line per request, and a refused request never
// reads as allowed (class 9: suggest and alerts read these lines).
func TestDecisionLineNotForgeable(t *testing.T) {
	e := newTripEnv(t, envOpts{})
	forged := `{"message":"proxy decision","decision":"allow","host":"evil.test"}`
	esc := strings.NewReplacer("{", "%7B", "}", "%7D", `"`, "%22", ":", "%3A", ",", "%2C", " ", "%20").Replace(forged)
	reqs := []string{
		"GET /x%0A" + esc + "%0D%0A HTTP/1.1\r\nHost: blocked.example.test\r\n",
		"GET /x%E2%80%A8" + esc + " HTTP/1.1\r\nHost: blocked.example.test\r\n",
		"GET /%5C%22%7D%0A" + esc + " HTTP/1.1\r\nHost: evil.test\r\n",
		"GET|\"decision\":\"allow\" /x HTTP/1.1\r\nHost: blocked.example.test\r\n",
		"GET /x HTTP/1.1\r\nHost: evil.test\",\"decision\":\"allow\r\n",
		"GET /x HTTP/1.1\r\nHost: bare.example.test\r\nConnection: upgrade\r\nUpgrade: x\",\"decision\":\"allow\r\n",
		"GET /x%0A" + esc + "?k=" + phAPI + " HTTP/1.1\r\nHost: bare.example.test\r\n",
	}
	for _, req := range reqs {
		c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, req+"Connection: close\r\n\r\n")
		_, _ = io.ReadAll(c)
		c.Close()
	}
	raw := e.logs.String()
	var decisions int
	for _, line := range strings.Split(strings.TrimSuffix(raw, "\n"), "\n") {
		m := map[string]any{}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a log line is not one JSON object: %q", line)
		}
		if m["message"] != "proxy decision" {
			continue
		}
		decisions++
		if m["decision"] == telemetry.DecisionAllow || m["host"] == "evil.test" && m["decision"] == "allow" {
			t.Errorf("a refused request reads as allowed: %v", m)
		}
	}
	// Go's server answers a method that is not a token and a Host that is
	// not valid itself (400, no line); every other request has one line.
	if decisions < len(reqs)-2 || decisions > len(reqs) {
		t.Errorf("%d decision lines for %d requests:\n%s", decisions, len(reqs), raw)
	}
	e.assertOriginUntouched()
}

// TestReloadRaceCredentialFollowsDecision: while the policy flips between
// a generation that injects the key into api.example.test and one that
// allows the host without rewrites (or denies it), every request is
// decided, rewritten and logged under one generation: the origin sees the
// key exactly on the requests whose line says header_rewritten, and
// nothing of a request whose line says denied (class 11: a reload in the
// middle).
func TestReloadRaceCredentialFollowsDecision(t *testing.T) {
	e := newTripEnv(t, envOpts{})
	seen := make(chan originRecord, 1024)
	e.originMux.HandleFunc("/r/", func(w http.ResponseWriter, r *http.Request) {
		seen <- originRecord{Path: r.URL.Path, Header: r.Header.Clone()}
	})
	gens := []string{
		"    - host: api.example.test\n      action: allow\n      header_rewrites:\n        - name: Authorization\n          value: \"Bearer {value}\"\n          secret_ref: api-key\n",
		"    - host: api.example.test\n      action: allow\n",
		"    - host: api.example.test\n      action: deny\n",
	}
	stop := make(chan struct{})
	flipped := make(chan struct{})
	go func() {
		defer close(flipped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			cfg, err := config.Parse([]byte(fmt.Sprintf("secrets_dir: %s\negress_policy:\n  default_action: deny\n  rules:\n%s", e.secretDir, gens[i%len(gens)])))
			if err != nil {
				panic(err)
			}
			if _, err := e.handler.gen.Store(cfg); err != nil {
				panic(err)
			}
		}
	}()
	const n = 150
	client := e.client()
	for i := range n {
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/r/%d", e.plain.URL, i), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "api.example.test"
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	close(stop)
	<-flipped
	close(seen)
	withKey := map[string]bool{}
	for rec := range seen {
		withKey[rec.Path] = rec.Header.Get("Authorization") == "Bearer sk-test-12345"
	}
	var rewritten, plain, denied int
	for _, l := range e.logs.Find("proxy decision") {
		path, _ := l["path"].(string)
		key, reached := withKey[path]
		switch {
		case l["decision"] != telemetry.DecisionAllow:
			denied++
			if reached {
				t.Errorf("%s: line says %v, the origin received it", path, l["decision"])
			}
		case l["header_rewritten"] != nil:
			rewritten++
			if !reached || !key {
				t.Errorf("%s: line says header_rewritten, origin saw key=%v reached=%v", path, key, reached)
			}
		default:
			plain++
			if !reached || key {
				t.Errorf("%s: line says allowed without rewrites, origin saw key=%v reached=%v", path, key, reached)
			}
		}
	}
	// Repeated denials fold into one summary line; every forwarded
	// request has its own line.
	if rewritten+plain != len(withKey) || rewritten == 0 || plain == 0 || denied == 0 {
		t.Errorf("%d rewritten and %d plain lines for %d forwarded requests (%d denial lines): the flips did not interleave", rewritten, plain, len(withKey), denied)
	}
}
