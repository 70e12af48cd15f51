package proxy

import (
	"net/http"
	"testing"

	"github.com/botbox/botbox/internal/telemetry"
)

// denyRoutedRules is the GitHub rule of docs/policy.md at ee87e5f, for
// api.example.test: deny routes under a broad GET allow.
const denyRoutedRules = `    - host: api.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
      routes:
        - paths: ["/repos/acme/app/settings/**", "/repos/acme/app/hooks/**"]
          action: deny
        - methods: [GET, HEAD]
          paths: ["/repos/acme/**", "/user"]
        - methods: [POST]
          paths: ["/repos/acme/app/pulls"]
`

// TestDenyRoutesHoldOnEveryPath: the bypasses of redteam-2026-12-01 §4 —
// case, ';', double encoding, overlong UTF-8, method override headers and
// _method — are denied or refused on the plain listener (HTTP/1) and on
// the interception listener over HTTP/1.1 and HTTP/2, and never reach the
// origin (at ee87e5f each was forwarded with the token).
func TestDenyRoutesHoldOnEveryPath(t *testing.T) {
	cases := []struct {
		method, target string
		header         http.Header
		status         int
		reason         string
	}{
		{"GET", "/repos/acme/App/hooks", nil, 403, "route_deny"},
		{"GET", "/repos/acme/app/HOOKS", nil, 403, "route_deny"},
		{"GET", "/repos/acme/app/hooks.json", nil, 403, "route_deny"},
		{"GET", "/repos/acme/app/hooks/", nil, 403, "route_deny"},
		{"GET", "/repos/acme/app/hooks;x=1", nil, 400, "ambiguous_path"},
		{"GET", "/repos/acme/app/settings;/x", nil, 400, "ambiguous_path"},
		{"GET", "/repos/acme/app/%252e%252e/hooks", nil, 400, "ambiguous_path"},
		{"GET", "/repos/acme/app/x/%C0%AE%C0%AE/hooks", nil, 400, "ambiguous_path"},
		{"GET", "/repos/acme/app/%EF%BD%88ooks", nil, 400, "ambiguous_path"},
		{"POST", "/repos/acme/app/pulls", http.Header{"X-Http-Method-Override": {"DELETE"}}, 400, "method_override"},
		{"POST", "/repos/acme/app/pulls", http.Header{"X-Http-Method": {"DELETE"}}, 400, "method_override"},
		{"POST", "/repos/acme/app/pulls", http.Header{"X-Method-Override": {"DELETE"}}, 400, "method_override"},
		{"POST", "/repos/acme/app/pulls?_method=DELETE", nil, 400, "method_override"},
		{"GET", "/repos/acme/app/pulls?x=1&_METHOD=delete", nil, 400, "method_override"},
	}
	for _, listener := range []string{"plain", "intercept-h1", "intercept-h2"} {
		t.Run(listener, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			e.usePolicy(denyRoutedRules)
			c, scheme := e.plainClient(t), "http://"
			switch listener {
			case "intercept-h1":
				c, scheme = e.interceptClient(t, false), "https://"
			case "intercept-h2":
				c, scheme = e.interceptClient(t, true), "https://"
			}
			for _, tc := range cases {
				req, err := http.NewRequest(tc.method, scheme+"api.example.test"+tc.target, nil)
				if err != nil {
					t.Fatal(err)
				}
				for k, v := range tc.header {
					req.Header[k] = v
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", tc.method, tc.target, err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.status || resp.Header.Get(HeaderReason) != tc.reason {
					t.Errorf("%s %s %v: %d %q, want %d %q", tc.method, tc.target, tc.header, resp.StatusCode, resp.Header.Get(HeaderReason), tc.status, tc.reason)
				}
				if want := "HTTP/2.0"; listener == "intercept-h2" && resp.Proto != want {
					t.Errorf("%s %s: proto %s, want %s", tc.method, tc.target, resp.Proto, want)
				}
			}
			e.assertOriginUntouched()
			// The control request goes out.
			resp, err := c.Get(scheme + "api.example.test/repos/acme/app/pulls")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("control: %d", resp.StatusCode)
			}
		})
	}
}

// TestDecisionLinePathOfAbsoluteFormWithoutPath: "DELETE http://host
// HTTP/1.1" forwards "/" and its decision line says "/" (at ee87e5f it said
// "", and botbox suggest turned that into "/**": redteam-2026-12-01 §10).
func TestDecisionLinePathOfAbsoluteFormWithoutPath(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp, _ := e.raw("DELETE http://bare.example.test HTTP/1.1\r\nHost: bare.example.test\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := e.lastSeen().Path; got != "/" {
		t.Errorf("origin saw %q, want /", got)
	}
	recs := e.waitDecisions(1)
	if got := recs[len(recs)-1][telemetry.KeyPath]; got != "/" {
		t.Errorf("decision line path %q, want /", got)
	}
}
