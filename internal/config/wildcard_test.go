package config

import (
	"strings"
	"testing"
)

// TestWildcardOverPublicSuffix: an allow wildcard over a public suffix of
// either section of the list is refused at load, naming the suffix, with
// or without header_rewrites (redteam-2026-12-01 §5: the private-section
// ones loaded silently at ee87e5f, header rewrites included); a deny
// wildcard over one loads (it denies every tenant).
func TestWildcardOverPublicSuffix(t *testing.T) {
	t.Parallel()
	const rewrite = "      header_rewrites:\n        - {name: Authorization, value: \"Bearer {value}\", secret_ref: api-key}\n"
	for _, host := range []string{"*.workers.dev", "*.vercel.app", "*.herokuapp.com", "*.github.io", "*.s3.us-east-1.amazonaws.com", "*.s3.eu-west-1.amazonaws.com", "*.s3.amazonaws.com", "*.githubusercontent.com", "*.co.uk", "*.WORKERS.dev."} {
		suffix := strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "*."), "."))
		for _, extra := range []string{"", rewrite} {
			src := "secrets_dir: /run/s\negress_policy:\n  rules:\n    - host: \"" + host + "\"\n      action: allow\n" + extra
			wantContains(t, parseErr(t, src), "egress_policy.rules[0].host", `"`+suffix+`" is a public suffix`, "name the exact host")
		}
		c := mustParse(t, "egress_policy:\n  default_action: allow\n  rules:\n    - host: \""+host+"\"\n      action: deny\n")
		if got := c.Policy.Rules[0].Host; got != "*."+suffix {
			t.Errorf("deny %s: host %q", host, got)
		}
	}
	for _, host := range []string{"*.example.com", "*.amazonaws.com", "*.fastly.example-cdn.net"} {
		mustParse(t, "egress_policy:\n  rules:\n    - host: \""+host+"\"\n      action: allow\n")
	}
}
