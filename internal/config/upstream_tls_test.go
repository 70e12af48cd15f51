package config

import (
	"strings"
	"testing"
)

// TestUpstreamTLSValidation: upstream_tls: false is accepted only for an
// allow rule with allowed_ports whose host is a loopback or private IP or
// CIDR, or that sets allow_private_addresses; every other use is an error
// naming the key and the fix. Omitted or true keeps TLS.
func TestUpstreamTLSValidation(t *testing.T) {
	for _, tc := range []struct {
		name, rule string
		wantErr    string // "" = valid
		wantTLS    bool
	}{
		{"omitted", "host: api.example.com\n      action: allow", "", true},
		{"true", "host: api.example.com\n      action: allow\n      upstream_tls: true", "", true},
		{"loopback ip", "host: 127.0.0.1\n      action: allow\n      allowed_ports: [8000]\n      upstream_tls: false", "", false},
		{"ipv6 loopback", "host: '::1'\n      action: allow\n      allowed_ports: [8000]\n      upstream_tls: false", "", false},
		{"private cidr", "host: 10.1.0.0/16\n      action: allow\n      allowed_ports: [80]\n      upstream_tls: false", "", false},
		{"name with allow_private_addresses", "host: '*.svc.cluster.local'\n      action: allow\n      allowed_ports: [80]\n      allow_private_addresses: true\n      upstream_tls: false", "", false},
		{"public ip", "host: 8.8.8.8\n      action: allow\n      allowed_ports: [80]\n      upstream_tls: false", "in the clear to a public address", false},
		{"metadata ip", "host: 169.254.169.254\n      action: allow\n      allowed_ports: [80]\n      upstream_tls: false", "to a metadata address", false},
		{"cidr reaching public space", "host: 172.0.0.0/11\n      action: allow\n      allowed_ports: [80]\n      upstream_tls: false", "public address", false},
		{"name without opt-in", "host: svc.local\n      action: allow\n      allowed_ports: [80]\n      upstream_tls: false", "needs allow_private_addresses: true", false},
		{"no allowed_ports", "host: 127.0.0.1\n      action: allow\n      upstream_tls: false", "needs allowed_ports", false},
		{"deny rule", "host: 127.0.0.1\n      action: deny\n      upstream_tls: false", "applies only to an allow rule", false},
		{"not a bool", "host: 127.0.0.1\n      action: allow\n      allowed_ports: [80]\n      upstream_tls: plain", "upstream_tls", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte("egress_policy:\n  rules:\n    - " + tc.rule + "\n"))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "upstream_tls") && tc.name != "deny rule" {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := !cfg.Policy.Rules[0].PlainHTTP; got != tc.wantTLS {
				t.Errorf("TLS = %v, want %v", got, tc.wantTLS)
			}
			eff, err := cfg.Effective()
			if err != nil {
				t.Fatal(err)
			}
			if shown := strings.Contains(string(eff), "upstream_tls: false"); shown == tc.wantTLS {
				t.Errorf("effective config shows upstream_tls: false = %v:\n%s", shown, eff)
			}
		})
	}
}
