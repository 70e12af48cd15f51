package proxy

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/telemetry"
)

// usePolicy swaps e's policy for the egress_policy rules in rulesYAML
// (indented as list items under rules:), as a reload would.
func (e *testEnv) usePolicy(rulesYAML string) {
	e.t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf("secrets_dir: %s\negress_policy:\n  default_action: deny\n  rules:\n%s", e.secretDir, rulesYAML)))
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.handler.gen.Store(cfg); err != nil {
		e.t.Fatal(err)
	}
}

const routedRules = `    - host: api.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
      routes:
        - methods: [GET, HEAD]
          paths: ["/repos/acme/**", "/user"]
        - methods: [POST]
          paths: ["/repos/acme/app/issues/*/comments"]
        - methods: [DELETE]
          action: deny
`

// TestRouteDeniedNeverReachesOrigin: a route denial (deny route or no
// matching route) is 403 "route not allowed", an ambiguous path is 400 before
// matching; neither reaches the origin, and each is counted under its own
// bounded decision label.
func TestRouteDeniedNeverReachesOrigin(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.usePolicy(routedRules)
	for _, tc := range []struct {
		method, path string
		status       int
		body, reason string
	}{
		{"DELETE", "/repos/acme/app", 403, bodyRouteDenied, "route_deny"},
		{"POST", "/repos/acme/app", 403, bodyRouteDenied, "no_route"},
		{"GET", "/repos/other/app", 403, bodyRouteDenied, "no_route"},
		{"PUT", "/user", 403, bodyRouteDenied, "no_route"},
		{"GET", "/repos/acme/../other/app", 400, bodyAmbiguousPath, "ambiguous_path"},
		{"GET", "/repos/acme/%2e%2e/other", 400, bodyAmbiguousPath, "ambiguous_path"},
		{"GET", "/repos/acme%2Fapp", 400, bodyAmbiguousPath, "ambiguous_path"},
		{"GET", "/repos/acme%5capp", 400, bodyAmbiguousPath, "ambiguous_path"},
		{"GET", "/repos//acme/app", 400, bodyAmbiguousPath, "ambiguous_path"},
		{"GET", `/repos/acme\app`, 400, bodyAmbiguousPath, "ambiguous_path"},
	} {
		resp, body := e.raw(tc.method + " " + tc.path + " HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != tc.status || body != tc.body || resp.Header.Get(HeaderReason) != tc.reason {
			t.Errorf("%s %s: %d %q reason %q; want %d %q %q", tc.method, tc.path, resp.StatusCode, body, resp.Header.Get(HeaderReason), tc.status, tc.body, tc.reason)
		}
	}
	e.assertOriginUntouched()
	if got := testutil.ToFloat64(e.metrics.Requests.WithLabelValues(telemetry.HostDenied, telemetry.DecisionDeniedRoute)); got != 4 {
		t.Errorf("requests_total{_denied,denied_route} = %v, want 4", got)
	}
	if got := testutil.ToFloat64(e.metrics.Requests.WithLabelValues(telemetry.HostDenied, telemetry.DecisionDeniedPath)); got != 6 {
		t.Errorf("requests_total{_denied,denied_path} = %v, want 6", got)
	}
	recs := e.logs.Find("proxy decision")
	if len(recs) == 0 || recs[0]["decision"] != telemetry.DecisionDeniedRoute || recs[0]["route"] != float64(2) || recs[0]["rule"] != "api.example.test" {
		t.Errorf("first decision line = %v, want denied_route by route 2 of api.example.test", recs)
	}

	// The allowed route is forwarded with the credential.
	resp, _ := e.raw("GET /repos/acme/app HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("allowed route: %d", resp.StatusCode)
	}
	if got := e.lastSeen(); got.Header.Get("Authorization") != "Bearer sk-test-12345" || got.Path != "/repos/acme/app" {
		t.Errorf("origin saw %q %q", got.Path, got.Header.Get("Authorization"))
	}
	recs = e.logs.Find("proxy decision")
	if last := recs[len(recs)-1]; last["decision"] != "allow" || last["route"] != float64(0) {
		t.Errorf("allow line = %v, want route 0", last)
	}
}

// TestRouteForwardsCanonicalPath: the origin receives exactly the canonical
// path the routes judged (unreserved escapes decoded, other escapes
// upper-cased), with the query untouched.
func TestRouteForwardsCanonicalPath(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.usePolicy(routedRules)
	for _, tc := range []struct{ sent, want string }{
		{"/repos/%61cme/%7Ex", "/repos/acme/~x"},
		{"/repos/acme/a%3ab?q=%2f&x=..", "/repos/acme/a%3Ab?q=%2f&x=.."},
		{"/repos/acme/%e2%82%ac", "/repos/acme/%E2%82%AC"},
		{"/user", "/user"},
	} {
		resp, _ := e.raw("GET " + tc.sent + " HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d, want 200", tc.sent, resp.StatusCode)
			continue
		}
		if got := e.lastSeen().Path; got != tc.want {
			t.Errorf("GET %s: origin saw %q, want %q", tc.sent, got, tc.want)
		}
	}
}

// TestRulesWithoutRoutesIgnorePaths: a rule without routes forwards the
// agent's path untouched, ambiguous or not (reference behaviour).
func TestRulesWithoutRoutesIgnorePaths(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp, _ := e.raw("GET /a/%2e%2e/b%2Fc HTTP/1.1\r\nHost: bare.example.test\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	if got := e.lastSeen().Path; got != "/a/%2e%2e/b%2Fc" {
		t.Errorf("origin saw %q", got)
	}
}

// TestWildcardHostThroughProxy: a wildcard allow rule admits a subdomain
// (with its header rewrites), never the apex; an exact deny beats it.
func TestWildcardHostThroughProxy(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.usePolicy(`    - host: "*.example.test"
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
    - host: blocked.example.test
      action: deny
`)
	resp, _ := e.get("bare.example.test", "/x", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("wildcard-allowed host: %d", resp.StatusCode)
	}
	if got := e.lastSeen(); got.Header.Get("Authorization") != "Bearer sk-test-12345" {
		t.Errorf("origin Authorization = %q", got.Header.Get("Authorization"))
	}
	for _, host := range []string{"blocked.example.test", "example.test", "example.test.evil"} {
		if resp, body := e.get(host, "/x", nil); resp.StatusCode != 403 || body != bodyDenied {
			t.Errorf("%s: %d %q, want 403", host, resp.StatusCode, body)
		}
	}
	if n := e.hits.Load(); n != 1 {
		t.Errorf("origin received %d requests, want 1", n)
	}
	if got := testutil.ToFloat64(e.metrics.Requests.WithLabelValues("*.example.test", telemetry.DecisionAllow)); got != 1 {
		t.Errorf("requests_total{*.example.test,allow} = %v, want 1", got)
	}
}
