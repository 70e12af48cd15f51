package server

import (
	"crypto/tls"
	"net/http"
	"testing"
)

// TestInterceptionWildcardAndRoutes: through the real interception
// listener, a wildcard allow rule admits the SNI (the leaf is minted for the
// exact SNI, never a wildcard), the apex is refused at the handshake, an
// allowed route is forwarded with the credential, and a route-denied request
// never reaches the origin.
func TestInterceptionWildcardAndRoutes(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, interception: "  deny_handshake_on_disallowed_sni: true\n", rules: `    - host: "*.example.test"
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
      routes:
        - methods: [GET]
          paths: ["/v1/**"]
`})
	addr := h.addrs.Intercept[0].String()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: "api.example.test"})
	if err != nil {
		t.Fatalf("wildcard-allowed SNI: %v", err)
	}
	leaf := c.ConnectionState().PeerCertificates[0]
	c.Close()
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "api.example.test" {
		t.Errorf("leaf DNSNames = %v, want exactly [api.example.test]", leaf.DNSNames)
	}
	if c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: h.botboxCA.Pool(), ServerName: "example.test"}); err == nil {
		c.Close()
		t.Error("handshake for the apex of a wildcard rule succeeded")
	}

	for _, h2 := range []bool{false, true} {
		cl := h.interceptClient("api.example.test", h2)
		for _, tc := range []struct {
			method, path string
			status       int
		}{
			{http.MethodDelete, "/v1/models", 403},
			{http.MethodGet, "/admin", 403},
			{http.MethodGet, "/v1/%2e%2e/admin", 400},
		} {
			req, _ := http.NewRequest(tc.method, "https://api.example.test"+tc.path, nil)
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatalf("h2=%v %s %s: %v", h2, tc.method, tc.path, err)
			}
			b := body(t, resp)
			if resp.StatusCode != tc.status {
				t.Errorf("h2=%v %s %s: %d %q, want %d", h2, tc.method, tc.path, resp.StatusCode, b, tc.status)
			}
		}
		if n := len(h.seen); n != 0 {
			t.Fatalf("h2=%v: origin saw %d route-denied requests", h2, n)
		}
		resp, err := cl.Get("https://api.example.test/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		if b := body(t, resp); resp.StatusCode != 200 {
			t.Fatalf("h2=%v allowed route: %d %s", h2, resp.StatusCode, b)
		}
		if got := h.lastSeen().Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+canary {
			t.Errorf("h2=%v: origin Authorization has %d values, want the injected one", h2, len(got))
		}
	}
}
