package config

import (
	"fmt"
	"strconv"
)

// EnvDNSGuardPort is the init step's variable naming the port its rules
// redirect the app's DNS to (internal/netfilter). `botbox inject` sets it
// on BotBox's container too, so that BotBox serves the guard there.
const EnvDNSGuardPort = "BOTBOX_DNS_GUARD_PORT"

// applyDNSGuardPort makes BotBox serve the DNS guard on the port of
// BOTBOX_DNS_GUARD_PORT when the variable is set (not empty): the init
// rules then send every DNS query of the app to that port, so a config that
// does not run the guard there would leave the app without DNS while BotBox
// reports ready. It fails closed without breaking the agent: the guard runs
// on that port, with the config's other dns_guard keys (their defaults when
// the block is absent or disabled), so the app resolves the names the
// policy allows and nothing else; a WARN names the key that was overridden.
// A value that is not a port, or one that collides with another listener of
// BotBox, is an error at start-up. TestApplyEnvDNSGuardPort holds this.
func applyDNSGuardPort(c *Config, getenv func(string) string) error {
	v := getenv(EnvDNSGuardPort)
	if v == "" {
		return nil
	}
	n, err := strconv.ParseUint(v, 10, 16)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != v {
		return fmt.Errorf("%s: %q is not a port (1-65535)", EnvDNSGuardPort, v)
	}
	port := uint16(n)
	if key, taken := dnsGuardPortTaken(c, port); taken {
		return fmt.Errorf("%s=%d collides with %s %d: the DNS guard must listen on that port (UDP and TCP); give the init step and BotBox another BOTBOX_DNS_GUARD_PORT", EnvDNSGuardPort, port, key, port)
	}
	for _, u := range c.DNSGuard.Upstream {
		if u.Port() == port && (u.Addr().IsLoopback() || u.Addr() == c.ListenAddr) {
			return fmt.Errorf("%s=%d: dns_guard.upstream '%s' is the guard itself; name the resolver the guard forwards to", EnvDNSGuardPort, port, u)
		}
	}
	switch {
	case !c.DNSGuard.Enabled:
		c.Warnings = append(c.Warnings, Warning{Path: "dns_guard.enabled", Message: fmt.Sprintf(
			"%s=%d is set (the init rules redirect the app's DNS to that port) but dns_guard is not enabled: serving the DNS guard on port %d with the dns_guard defaults; set dns_guard.enabled: true and dns_guard.listen_port: %d", EnvDNSGuardPort, port, port, port)})
	case c.DNSGuard.ListenPort != port:
		c.Warnings = append(c.Warnings, Warning{Path: "dns_guard.listen_port", Message: fmt.Sprintf(
			"%s=%d is set (the init rules redirect the app's DNS to that port) but dns_guard.listen_port is %d: serving the DNS guard on port %d; set dns_guard.listen_port: %d", EnvDNSGuardPort, port, c.DNSGuard.ListenPort, port, port)})
	}
	c.DNSGuard.Enabled, c.DNSGuard.ListenPort = true, port
	return nil
}

// dnsGuardPortTaken names the key of another listener of BotBox (TCP) that
// already uses port, if any.
func dnsGuardPortTaken(c *Config, port uint16) (key string, taken bool) {
	for _, other := range []struct {
		key  string
		port uint16
		on   bool
	}{
		{"listen_port", c.ListenPort, true},
		{"metrics_port", c.MetricsPort, true},
		{"https_interception.listen_port", c.Interception.ListenPort, c.Interception.Enabled},
	} {
		if other.on && other.port == port {
			return other.key, true
		}
	}
	return "", false
}
