package proxy

import (
	"testing"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/policy"
)

// TestPlainListenerPort80: on the plain listener an explicit :80 means no
// port (evaluated as 443, sent over TLS), as every HTTP client means it
// (on ee87e5f it was port_not_allowed); a rule with upstream_tls: false
// keeps :80, its origin's real port; other ports are untouched.
func TestPlainListenerPort80(t *testing.T) {
	cfg, err := config.Parse([]byte(`egress_policy:
  rules:
    - host: api.example.test
      action: allow
    - host: 10.0.0.0/24
      action: allow
      allowed_ports: [80]
      upstream_tls: false
    - host: svc.internal.test
      action: allow
      allowed_ports: [80]
      upstream_tls: false
      allow_private_addresses: true
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(cfg.Policy)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in, want string
	}{
		{"api.example.test:80", "api.example.test"},
		{"unknown.example.test:80", "unknown.example.test"},
		{"api.example.test:8080", "api.example.test:8080"},
		{"api.example.test:443", "api.example.test:443"},
		{"api.example.test", "api.example.test"},
		{"10.0.0.5:80", "10.0.0.5:80"},
		{"10.0.0.5", "10.0.0.5:80"},
		{"10.0.0.5:8080", "10.0.0.5:8080"},
		{"10.0.1.5:80", "10.0.1.5"},
		{"10.0.1.5", "10.0.1.5"},
		{"svc.internal.test", "svc.internal.test:80"},
		{"svc.internal.test:80", "svc.internal.test:80"},
	} {
		hp, err := hostport.Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		got := plainDefaultPort(hp, p)
		if got.String() != tc.want {
			t.Errorf("plainDefaultPort(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	e := newEnv(t, envOpts{})
	if resp, body := e.get("api.example.test:80", "/", nil); resp.StatusCode != 200 {
		t.Fatalf("Host api.example.test:80: %d %q", resp.StatusCode, body)
	}
	if got := e.lastSeen().Host; got != "api.example.test" {
		t.Errorf("the origin saw Host %q, want api.example.test (443 implied)", got)
	}
}
