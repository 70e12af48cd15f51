package config

import (
	"strings"
	"testing"
)

// TestApplyEnvDNSGuardPort: with BOTBOX_DNS_GUARD_PORT set (the init rules
// redirect the app's DNS there), BotBox serves the guard on that port
// whatever dns_guard says: absent, disabled or on another port, with a WARN
// naming the key; the block's other keys are kept. A value that is not a
// port, or that collides with another listener, is an error naming the
// variable and the key; unset or empty changes nothing.
func TestApplyEnvDNSGuardPort(t *testing.T) {
	t.Parallel()
	guard := func(block string) string { return minimal + "dns_guard:\n" + block }
	for _, tt := range []struct {
		name, config, env string
		wantErr           string
		wantWarn          string // the warning's key path; "" none
		wantPort          uint16
		wantOn            bool
	}{
		{name: "unset, no block", config: minimal, wantPort: 8053},
		{name: "unset, enabled", config: guard("  enabled: true\n  listen_port: 9053\n"), wantPort: 9053, wantOn: true},
		{name: "no block", config: minimal, env: "8053", wantWarn: "dns_guard.enabled", wantPort: 8053, wantOn: true},
		{name: "disabled", config: guard("  enabled: false\n"), env: "15353", wantWarn: "dns_guard.enabled", wantPort: 15353, wantOn: true},
		{name: "another port", config: guard("  enabled: true\n  listen_port: 9053\n  max_ttl_seconds: 5\n"), env: "8053", wantWarn: "dns_guard.listen_port", wantPort: 8053, wantOn: true},
		{name: "matching", config: guard("  enabled: true\n  listen_port: 8053\n"), env: "8053", wantPort: 8053, wantOn: true},
		{name: "not a number", config: minimal, env: "dns", wantErr: `BOTBOX_DNS_GUARD_PORT: "dns" is not a port`},
		{name: "zero", config: minimal, env: "0", wantErr: "is not a port"},
		{name: "too large", config: minimal, env: "65536", wantErr: "is not a port"},
		{name: "leading zero", config: minimal, env: "08053", wantErr: "is not a port"},
		{name: "sign", config: minimal, env: "+8053", wantErr: "is not a port"},
		{name: "the proxy's port", config: minimal, env: "8080", wantErr: "BOTBOX_DNS_GUARD_PORT=8080 collides with listen_port 8080"},
		{name: "the metrics port", config: minimal, env: "9090", wantErr: "collides with metrics_port 9090"},
		{name: "upstream is the guard", config: guard("  enabled: false\n  upstream: [\"127.0.0.1:8053\"]\n"), env: "8053", wantErr: "is the guard itself"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := mustParse(t, tt.config)
			before := len(c.Warnings)
			err := ApplyEnv(c, func(k string) string {
				if k == EnvDNSGuardPort {
					return tt.env
				}
				return ""
			})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ApplyEnv(%s=%q) = %v, want an error containing %q", EnvDNSGuardPort, tt.env, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ApplyEnv: %v", err)
			}
			if c.DNSGuard.Enabled != tt.wantOn || c.DNSGuard.ListenPort != tt.wantPort {
				t.Errorf("dns_guard enabled=%v listen_port=%d, want %v %d", c.DNSGuard.Enabled, c.DNSGuard.ListenPort, tt.wantOn, tt.wantPort)
			}
			added := c.Warnings[before:]
			switch {
			case tt.wantWarn == "" && len(added) != 0:
				t.Errorf("warnings %v, want none", added)
			case tt.wantWarn != "" && (len(added) != 1 || added[0].Path != tt.wantWarn || !strings.Contains(added[0].Message, EnvDNSGuardPort)):
				t.Errorf("warnings %v, want one on %s naming %s", added, tt.wantWarn, EnvDNSGuardPort)
			}
			if tt.name == "another port" && c.DNSGuard.MaxTTL.Seconds() != 5 {
				t.Errorf("max_ttl_seconds lost: %v", c.DNSGuard.MaxTTL)
			}
		})
	}
}
