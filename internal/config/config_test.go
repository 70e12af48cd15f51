package config

import (
	"errors"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

const minimal = "egress_policy:\n  rules: []\n"

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	c, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse() error = %v\ninput:\n%s", err, src)
	}
	return c
}

// parseErr parses src, requires an error and returns its text.
func parseErr(t *testing.T, src string) string {
	t.Helper()
	c, err := Parse([]byte(src))
	if err == nil {
		t.Fatalf("Parse() = %+v, want error\ninput:\n%s", c, src)
	}
	for _, p := range Problems(err) {
		if p == nil {
			t.Fatalf("Problems(%v) has a nil entry", err)
		}
	}
	if got, want := len(Problems(err)), strings.Count(err.Error(), "\n")+1; got != want {
		t.Errorf("Parse() error has %d lines but %d problems: %v", want, got, err)
	}
	return err.Error()
}

func wantContains(t *testing.T, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("error = %q, want it to contain %q", got, w)
		}
	}
}

// --- The reference's config tests (reference §9.2), by name. ---

func TestParseValidConfig(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
listen_addr: "127.0.0.1"
listen_port: 8080
metrics_port: 9090
secrets_dir: "/var/run/secrets/botbox"
max_connections: 1024
egress_policy:
  default_action: deny
  rules:
    - host: api.openai.com
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: openai-api-key
    - host: evil.example.com
      action: deny
`)
	if c.ListenPort != 8080 || c.MetricsPort != 9090 {
		t.Errorf("ports = %d, %d, want 8080, 9090", c.ListenPort, c.MetricsPort)
	}
	want := Policy{DefaultAction: ActionDeny, Mode: ModeEnforce, Rules: []Rule{
		{Host: "api.openai.com", RawHost: "api.openai.com", Index: 0, Line: 10, Action: ActionAllow, ScrubResponses: true,
			HeaderRewrites: []HeaderRewrite{{Name: "Authorization", Value: "Bearer {value}", SecretRef: "openai-api-key"}}},
		{Host: "evil.example.com", RawHost: "evil.example.com", Index: 1, Line: 16, Action: ActionDeny},
	}}
	if d := cmp.Diff(want, c.Policy); d != "" {
		t.Errorf("Policy (-want +got):\n%s", d)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("Warnings = %v, want none", c.Warnings)
	}
}

func TestRejectEmptyHost(t *testing.T) {
	t.Parallel()
	for _, host := range []string{`""`, `"   "`} {
		got := parseErr(t, "egress_policy:\n  rules:\n    - host: "+host+"\n      action: allow\n")
		wantContains(t, got, "empty host", "line 3", "egress_policy.rules[0].host")
	}
	got := parseErr(t, "egress_policy:\n  rules:\n    - action: allow\n")
	wantContains(t, got, "empty host", "line 3")
}

func TestRejectDuplicateHost(t *testing.T) {
	t.Parallel()
	got := parseErr(t, `
egress_policy:
  rules:
    - host: api.openai.com
      action: allow
    - host: API.OPENAI.COM
      action: deny
`)
	wantContains(t, got, "line 6: egress_policy.rules[1].host: duplicate host in egress policy after normalization: api.openai.com", "rules[0], line 4")
}

func TestRejectDuplicateHostWhenOnlyPortDiffers(t *testing.T) {
	t.Parallel()
	got := parseErr(t, `
egress_policy:
  rules:
    - host: example.com
      action: allow
    - host: EXAMPLE.COM:443
      action: allow
`)
	wantContains(t, got, "duplicate host in egress policy after normalization: example.com")
}

func TestRejectInvalidAction(t *testing.T) {
	t.Parallel()
	for _, a := range []string{"maybe", "Allow", "DENY", `""`} {
		got := parseErr(t, "egress_policy:\n  rules:\n    - host: a.com\n      action: "+a+"\n")
		wantContains(t, got, "line 4: egress_policy.rules[0].action: must be allow or deny")
	}
}

func TestRejectInvalidHeaderName(t *testing.T) {
	t.Parallel()
	got := parseErr(t, `
egress_policy:
  rules:
    - host: a.com
      action: allow
      header_rewrites:
        - name: "X Bad Header"
          value: v
`)
	wantContains(t, got, "line 7: egress_policy.rules[0].header_rewrites[0].name: invalid header name 'X Bad Header' in rewrite for host 'a.com'")
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c := mustParse(t, minimal)
	want := &Config{
		ListenAddr:        netip.MustParseAddr("127.0.0.1"),
		ListenPort:        8080,
		MetricsPort:       9090,
		MetricsListenAddr: netip.MustParseAddr("127.0.0.1"),
		SecretsDir:        "/var/run/secrets/botbox",
		MaxConnections:    1024,
		AllowNonLoopback:  false,
		Policy:            Policy{DefaultAction: ActionDeny, Mode: ModeEnforce, Rules: []Rule{}},

		MaxConcurrentRequests:     1024,
		HTTP2MaxConcurrentStreams: 100,
		HTTP1Engine:               "botbox",
		Interception: Interception{
			ListenAddr:          netip.MustParseAddr("127.0.0.1"),
			ListenPort:          8443,
			EnforceSNIHostMatch: true,
			CertTTL:             86400 * time.Second,
			CertCacheSize:       1024,
			CertCacheTTL:        3600 * time.Second,
			HandshakeTimeout:    5 * time.Second,
		},
		Placeholders: Placeholders{Dir: "/var/run/botbox/placeholders"},
		DNSGuard:     DNSGuard{ListenPort: 8053, MaxTTL: 60 * time.Second},
		LogLevel:     slog.LevelInfo,
		Timeouts: Timeouts{
			UpstreamConnect:        10 * time.Second,
			UpstreamResponseHeader: 10 * time.Minute,
			UpstreamIdleConn:       90 * time.Second,
			DownstreamReadHeader:   10 * time.Second,
			DownstreamIdle:         120 * time.Second,
			DownstreamWrite:        60 * time.Second,
			Shutdown:               25 * time.Second,
			TunnelIdle:             600 * time.Second,
		},
		SecretsReloadDebounce: 2 * time.Second,
		SecretsResyncInterval: 30 * time.Second,

		UpstreamMaxConnsPerHost: 512,
		UpstreamMaxIdleConns:    1024,
		// The address guard is on by default (issue 12 §2).
		AddressGuard: AddressGuard{AllowedCIDRs: []netip.Prefix{}},
		Credentials:  []Credential{},
	}
	if d := cmp.Diff(want, c, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
		t.Errorf("defaults (-want +got):\n%s", d)
	}
}

// TestMetricsListenAddr: metrics_listen_addr takes any IP literal
// (loopback, unspecified, a Pod address, IPv6) without allow_non_loopback
// and without a warning, since the admin port serves no proxy; anything
// else is an error naming the key.
func TestMetricsListenAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"127.0.0.1", "127.0.0.1"},
		{"0.0.0.0", "0.0.0.0"},
		{`"::"`, "::"},
		{"10.1.2.3", "10.1.2.3"},
		{`"fd00::7"`, "fd00::7"},
	} {
		c := mustParse(t, "metrics_listen_addr: "+tc.in+"\n"+minimal)
		if got := c.MetricsListenAddr.String(); got != tc.want {
			t.Errorf("metrics_listen_addr %s: got %s, want %s", tc.in, got, tc.want)
		}
		if len(c.Warnings) != 0 {
			t.Errorf("metrics_listen_addr %s: unexpected warnings %v", tc.in, c.Warnings)
		}
	}
	for _, in := range []string{"localhost", `"fe80::1%eth0"`, `""`, "10.1.2.3:9090"} {
		got := parseErr(t, "metrics_listen_addr: "+in+"\n"+minimal)
		wantContains(t, got, "line 1: metrics_listen_addr: must be an IP literal")
	}
}

func TestRejectNonLoopbackBindWithoutOverride(t *testing.T) {
	t.Parallel()
	got := parseErr(t, "listen_addr: 0.0.0.0\n"+minimal)
	wantContains(t, got, "line 1: listen_addr: '0.0.0.0' is not loopback", "allow_non_loopback")
}

func TestAllowNonLoopbackBindWithOverride(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "listen_addr: 0.0.0.0\nallow_non_loopback: true\n"+minimal)
	if c.ListenAddr != netip.MustParseAddr("0.0.0.0") || !c.ListenAddrExplicit {
		t.Errorf("ListenAddr = %v (explicit %v), want 0.0.0.0", c.ListenAddr, c.ListenAddrExplicit)
	}
	want := []Warning{{Path: "listen_addr", Message: warnNonLoopback}}
	if d := cmp.Diff(want, c.Warnings); d != "" {
		t.Errorf("Warnings (-want +got):\n%s", d)
	}
}

func TestRejectEmptyAllowedPorts(t *testing.T) {
	t.Parallel()
	got := parseErr(t, "egress_policy:\n  rules:\n    - host: a.com\n      action: allow\n      allowed_ports: []\n")
	wantContains(t, got, "line 5: egress_policy.rules[0].allowed_ports: allowed_ports cannot be empty for host 'a.com'")
}

func TestRejectHostHeaderRewrite(t *testing.T) {
	t.Parallel()
	got := parseErr(t, "egress_policy:\n  rules:\n    - host: a.com\n      action: allow\n      header_rewrites:\n        - {name: Host, value: evil.com}\n")
	wantContains(t, got, "header 'Host' cannot be used in rewrites (reserved/hop-by-hop) for host 'a.com'")
}

func TestRejectConnectionHeaderRewrite(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Connection", "keep-alive", "Proxy-Connection", "proxy-authenticate",
		"Proxy-Authorization", "TE", "trailer", "Transfer-Encoding", "upgrade"} {
		got := parseErr(t, "egress_policy:\n  rules:\n    - host: a.com\n      action: allow\n      header_rewrites:\n        - {name: "+name+", value: x}\n")
		wantContains(t, got, "cannot be used in rewrites")
	}
}

func TestRequiredSecretRefs(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
egress_policy:
  rules:
    - host: b.com
      action: allow
      header_rewrites:
        - {name: X-B, value: "{value}", secret_ref: key-b}
        - {name: X-Static, value: static}
    - host: a.com
      action: deny
      header_rewrites:
        - {name: X-A, value: "{value}", secret_ref: key-a}
        - {name: X-B, value: "t {value}", secret_ref: key-b}
`)
	if d := cmp.Diff([]string{"key-a", "key-b"}, c.RequiredSecretRefs()); d != "" {
		t.Errorf("RequiredSecretRefs() (-want +got):\n%s", d)
	}
}

func TestRequiredSecretRefsEmpty(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "egress_policy:\n  rules:\n    - {host: a.com, action: allow, header_rewrites: [{name: X, value: y}]}\n")
	if got := c.RequiredSecretRefs(); len(got) != 0 {
		t.Errorf("RequiredSecretRefs() = %v, want empty", got)
	}
}

func TestNonLoopbackWithDefaultAllowValidatesOK(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "listen_addr: 0.0.0.0\nallow_non_loopback: true\negress_policy:\n  default_action: allow\n  rules: []\n")
	want := []Warning{
		{Path: "listen_addr", Message: warnNonLoopback},
		{Path: "egress_policy.default_action", Message: warnDefaultAllow},
	}
	if d := cmp.Diff(want, c.Warnings); d != "" {
		t.Errorf("Warnings (-want +got):\n%s", d)
	}
}

const interceptionOK = `
https_interception:
  enabled: true
  ca_cert_path: /etc/botbox/ca/ca.crt
  ca_key_path: /etc/botbox/ca/ca.key
`

func TestHTTPSInterceptionEnabledRejectsNonLoopbackListenerEvenWithGlobalOverride(t *testing.T) {
	t.Parallel()
	got := parseErr(t, "allow_non_loopback: true\n"+minimal+interceptionOK+"  listen_addr: 0.0.0.0\n")
	wantContains(t, got, "https_interception.listen_addr: '0.0.0.0' must be loopback; HTTPS interception listener must bind to loopback only")
}

func TestHTTPSInterceptionEnabledRejectsPortCollisionWithHTTPListener(t *testing.T) {
	t.Parallel()
	got := parseErr(t, minimal+interceptionOK+"  listen_port: 8080\n")
	wantContains(t, got, "line 8: https_interception.listen_port: https_interception.listen_port 8080 collides with listen_port 8080")
}

func TestHTTPSInterceptionEnabledRejectsPortCollisionWithMetricsListener(t *testing.T) {
	t.Parallel()
	got := parseErr(t, minimal+interceptionOK+"  listen_port: 9090\n")
	wantContains(t, got, "https_interception.listen_port 9090 collides with metrics_port 9090")
}

func TestHTTPSInterceptionEnabledRequiresNonEmptyCAPaths(t *testing.T) {
	t.Parallel()
	got := parseErr(t, minimal+"https_interception:\n  enabled: true\n  ca_cert_path: \"\"\n  ca_key_path: \" \"\n")
	wantContains(t, got, "https_interception.ca_cert_path and https_interception.ca_key_path must not be empty")
	got = parseErr(t, minimal+"https_interception:\n  enabled: true\n")
	wantContains(t, got, "https_interception.ca_cert_path and https_interception.ca_key_path must not be empty")
	got = parseErr(t, minimal+"https_interception:\n  enabled: true\n  ca_cert_path: a\n")
	wantContains(t, got, "https_interception.ca_key_path must not be empty")
	got = parseErr(t, minimal+"https_interception:\n  enabled: true\n  ca_key_path: a\n")
	wantContains(t, got, "https_interception.ca_cert_path must not be empty")
}

func TestHTTPSInterceptionEnabledRejectsZeroCertCacheSize(t *testing.T) {
	t.Parallel()
	got := parseErr(t, minimal+interceptionOK+"  cert_cache_size: 0\n")
	wantContains(t, got, "https_interception.cert_cache_size must be greater than 0")
}

func TestHTTPSInterceptionEnabledRejectsOutOfRangeCertTTLSeconds(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"30", "59", "604801"} {
		got := parseErr(t, minimal+interceptionOK+"  cert_ttl_seconds: "+v+"\n  cert_cache_ttl_seconds: 0\n")
		wantContains(t, got, "https_interception.cert_ttl_seconds: "+v+" must be between 60 and 604800")
	}
}

func TestHTTPSInterceptionEnabledRejectsOutOfRangeHandshakeTimeoutMS(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"5", "99", "60001"} {
		got := parseErr(t, minimal+interceptionOK+"  handshake_timeout_ms: "+v+"\n")
		wantContains(t, got, "https_interception.handshake_timeout_ms: "+v+" must be between 100 and 60000")
	}
}

func TestHTTPSInterceptionCacheTTLMustNotExceedCertTTL(t *testing.T) {
	t.Parallel()
	got := parseErr(t, minimal+interceptionOK+"  cert_ttl_seconds: 600\n  cert_cache_ttl_seconds: 601\n")
	wantContains(t, got, "https_interception.cert_cache_ttl_seconds (601) must not exceed https_interception.cert_ttl_seconds (600)")
	c := mustParse(t, minimal+interceptionOK+"  cert_ttl_seconds: 600\n  cert_cache_ttl_seconds: 0\n")
	if c.Interception.CertCacheTTL != 0 {
		t.Errorf("CertCacheTTL = %v, want 0", c.Interception.CertCacheTTL)
	}
}

func TestHTTPSInterceptionEnabled(t *testing.T) {
	t.Parallel()
	c := mustParse(t, minimal+interceptionOK+"  deny_handshake_on_disallowed_sni: true\n  enforce_sni_host_match: false\n")
	in := c.Interception
	if !in.Enabled || in.CACertPath != "/etc/botbox/ca/ca.crt" || in.CAKeyPath != "/etc/botbox/ca/ca.key" ||
		!in.DenyHandshakeOnDisallowedSNI || in.EnforceSNIHostMatch || in.ListenPort != 8443 || in.ListenAddrExplicit {
		t.Errorf("Interception = %+v", in)
	}
}

// --- Regressions for reference §10.3. ---

// §10.3 #7: listen_port == metrics_port was not validated.
func TestRejectListenPortEqualsMetricsPort(t *testing.T) {
	t.Parallel()
	got := parseErr(t, "listen_port: 9090\n"+minimal)
	wantContains(t, got, "line 1: listen_port: listen_port 9090 collides with metrics_port 9090")
	got = parseErr(t, "listen_port: 7000\nmetrics_port: 7000\n"+minimal)
	wantContains(t, got, "line 2: metrics_port: metrics_port 7000 collides with listen_port 7000")
}

// §10.3 #11: config strictness.
func TestStrictness(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		src   string
		wants []string
	}{
		{
			name:  "unknown top-level key https_intercept",
			src:   minimal + "https_intercept:\n  enabled: true\n",
			wants: []string{`line 3: https_intercept: unknown key (did you mean "https_interception"?)`},
		},
		{
			name:  "legacy mitm key",
			src:   minimal + "mitm:\n  enabled: true\n",
			wants: []string{`line 3: mitm: unknown key (the legacy "mitm" block is now "https_interception")`},
		},
		{
			name:  "nested unknown key has line and path",
			src:   "egress_policy:\n  rules:\n    - host: a.com\n      action: allow\n      allowed_port: [8443]\n",
			wants: []string{`line 5: egress_policy.rules[0].allowed_port: unknown key (did you mean "allowed_ports"?)`},
		},
		{
			name:  "unknown key in rewrite",
			src:   "egress_policy:\n  rules:\n    - host: a.com\n      action: allow\n      header_rewrites:\n        - {name: X, value: y, secretref: k}\n",
			wants: []string{`line 6: egress_policy.rules[0].header_rewrites[0].secretref: unknown key (did you mean "secret_ref"?)`},
		},
		{
			name:  "unknown key in interception",
			src:   minimal + "https_interception:\n  enabled: false\n  ca_cert: x\n",
			wants: []string{`line 5: https_interception.ca_cert: unknown key`},
		},
		{
			name:  "unknown key without suggestion",
			src:   minimal + "zzz: 1\n",
			wants: []string{"line 3: zzz: unknown key"},
		},
		{
			name:  "duplicate key",
			src:   "listen_port: 8080\n" + minimal + "listen_port: 8081\n",
			wants: []string{"line 4: listen_port: duplicate key (first defined at line 1)"},
		},
		{
			name:  "duplicate nested key",
			src:   "egress_policy:\n  rules:\n    - host: a.com\n      host: b.com\n      action: allow\n",
			wants: []string{"line 4: egress_policy.rules[0].host: duplicate key (first defined at line 3)"},
		},
		{name: "empty file", src: "", wants: []string{"config is empty"}},
		{name: "only comments", src: "# nothing\n\n", wants: []string{"config is empty"}},
		{name: "only separator", src: "---\n", wants: []string{"config is empty"}},
		{name: "null document", src: "null\n", wants: []string{"config is empty"}},
		{
			name:  "second document",
			src:   minimal + "---\nlisten_port: 1\n",
			wants: []string{"line 3: a second YAML document is not allowed"},
		},
		{name: "not a mapping", src: "- a\n- b\n", wants: []string{"line 1: the config must be a mapping"}},
		{name: "syntax error", src: "egress_policy:\n  rules: [\n", wants: []string{"invalid YAML"}},
		{name: "tab indentation", src: "egress_policy:\n\trules: []\n", wants: []string{"line 2: invalid YAML: a tab is used for indentation; YAML indentation must use spaces"}},
		{name: "tab after spaces", src: "listen_port: 1\n  \tx: 2\n", wants: []string{"line 2: invalid YAML: a tab is used for indentation"}},
		// go-yaml reports this one a line early; the message names the tab's line.
		{name: "tab in a list item", src: "egress_policy:\n  rules:\n    - host: a\n\t  action: allow\n", wants: []string{"line 4: invalid YAML: a tab is used for indentation"}},
		{name: "tab in block scalar is content", src: "egress_policy:\n  rules: []\nx: |\n  a\n  \tb\ny: [\n", wants: []string{"line 6: invalid YAML: did not find expected node content"}},
		// go-yaml names the start of the list; the message names the mis-indented line.
		{name: "mis-indented key", src: "egress_policy:\n  default_action: deny\n  rules:\n    - host: a.example\n      action: allow\n    - host: b.example\n     action: allow\n", wants: []string{"line 7: invalid YAML: did not find expected '-' indicator; check the indentation of this line"}},
		{name: "mis-indented rewrite key", src: "egress_policy:\n  rules:\n    - host: a.example\n      action: allow\n      header_rewrites:\n        - name: X\n         value: y\n", wants: []string{"line 7: invalid YAML: did not find expected '-' indicator; check the indentation of this line"}},
		{name: "syntax error at its line", src: "listen_port: 1\n egress_policy:\n  rules: []\n", wants: []string{"line 2: invalid YAML: mapping values are not allowed in this context"}},
		// A type error does not hide the other checks.
		{
			name:  "type error with other problems",
			src:   "listen_port: \"x\"\nhttps_interception:\n  enabled: yes\n" + minimal + "zz: 1\n",
			wants: []string{`line 1: listen_port: expected an integer, got a string "x"`, `line 3: https_interception.enabled: expected true or false, got a string "yes"`, "line 6: zz: unknown key"},
		},
		{name: "key at the wrong level", src: "rules: []\negress_policy:\n  rules: []\n", wants: []string{`line 1: rules: unknown key ("rules" belongs under egress_policy)`}},
		{name: "integer out of range", src: "listen_port: 99999999999999999999\n" + minimal, wants: []string{`line 1: listen_port: expected an integer, got a number "99999999999999999999"`}},
		{name: "int64 overflow", src: "listen_port: 9223372036854775808\n" + minimal, wants: []string{`line 1: listen_port: integer "9223372036854775808" is out of range`}},
		{name: "list item of wrong kind", src: "egress_policy:\n  rules:\n    - a.example\n    - {host: b.example, action: maybe}\n", wants: []string{`line 3: egress_policy.rules[0]: expected a mapping, got a string "a.example"`, "line 4: egress_policy.rules[1].action: must be allow or deny, got 'maybe'"}},
		// yaml.v3 drops null list items silently, shifting later indexes.
		{name: "null rule", src: "egress_policy:\n  rules:\n    -\n    - {host: a.com, action: maybe}\n", wants: []string{"line 3: egress_policy.rules[0]: empty list item", "line 4: egress_policy.rules[1].action: must be allow or deny, got 'maybe'"}},
		{name: "null port", src: "egress_policy:\n  rules:\n    - {host: a.com, action: allow, allowed_ports: [~, 0]}\n", wants: []string{"line 3: egress_policy.rules[0].allowed_ports[0]: empty list item", "egress_policy.rules[0].allowed_ports[1]: port 0 out of range"}},
		{name: "null rewrite via alias", src: "x: &n ~\negress_policy:\n  rules:\n    - {host: a.com, action: allow, header_rewrites: [*n]}\n", wants: []string{"egress_policy.rules[0].header_rewrites[0]: empty list item"}},
		{name: "non-scalar key", src: "? [a]\n: 1\n" + minimal, wants: []string{"line 1: a key must be a plain name, got a list"}},
		{
			name:  "port out of uint16 range",
			src:   "listen_port: 70000\n" + minimal,
			wants: []string{"line 1: listen_port: port 70000 out of range 1-65535"},
		},
		{name: "listen_port 0", src: "listen_port: 0\n" + minimal, wants: []string{"line 1: listen_port: port 0 out of range 1-65535"}},
		{name: "negative metrics port", src: "metrics_port: -1\n" + minimal, wants: []string{"line 1: metrics_port: port -1 out of range"}},
		{
			name:  "port not a number",
			src:   "listen_port: http\n" + minimal,
			wants: []string{`line 1: listen_port: expected an integer, got a string "http"`},
		},
		{
			name:  "quoted port",
			src:   "listen_port: \"8080\"\n" + minimal,
			wants: []string{`line 1: listen_port: expected an integer, got a string "8080"`},
		},
		{
			name:  "bool not a bool",
			src:   "allow_non_loopback: maybe\n" + minimal,
			wants: []string{`line 1: allow_non_loopback: expected true or false, got a string "maybe"`},
		},
		{
			name:  "rules not a list",
			src:   "egress_policy:\n  rules: {host: a}\n",
			wants: []string{"line 2: egress_policy.rules: expected a list, got a mapping"},
		},
		{
			name:  "allowed_ports entry not a number",
			src:   "egress_policy:\n  rules:\n    - host: a.com\n      action: allow\n      allowed_ports: [443, https]\n",
			wants: []string{`line 5: egress_policy.rules[0].allowed_ports[1]: expected an integer, got a string "https"`},
		},
		{
			name:  "allowed_ports entry 0",
			src:   "egress_policy:\n  rules:\n    - host: a.com\n      action: allow\n      allowed_ports:\n        - 443\n        - 0\n",
			wants: []string{"line 7: egress_policy.rules[0].allowed_ports[1]: port 0 out of range 1-65535"},
		},
		{
			name:  "allowed_ports entry 70000",
			src:   "egress_policy:\n  rules:\n    - host: a.com\n      action: allow\n      allowed_ports: [70000]\n",
			wants: []string{"line 5: egress_policy.rules[0].allowed_ports[0]: port 70000 out of range 1-65535"},
		},
		{name: "max_connections 0", src: "max_connections: 0\n" + minimal, wants: []string{"line 1: max_connections: 0 must be between 1 and 4294967295"}},
		{name: "max_connections negative", src: "max_connections: -5\n" + minimal, wants: []string{"max_connections: -5 must be between 1"}},
		{name: "upstream_max_conns_per_host 0", src: "upstream_max_conns_per_host: 0\n" + minimal, wants: []string{"line 1: upstream_max_conns_per_host: 0 must be between 1 and 65535"}},
		{name: "upstream_max_conns_per_host too large", src: "upstream_max_conns_per_host: 65536\n" + minimal, wants: []string{"line 1: upstream_max_conns_per_host: 65536 must be between 1 and 65535"}},
		{name: "upstream_max_idle_conns 0", src: "upstream_max_idle_conns: 0\n" + minimal, wants: []string{"line 1: upstream_max_idle_conns: 0 must be between 1 and 1048576"}},
		{name: "float through alias", src: "x-port: &p 8080.5\n" + minimal, wants: []string{`line 1: x-port: unknown key`}},
		{name: "float port via alias", src: "listen_port: &p 80.5\nmetrics_port: *p\n" + minimal, wants: []string{`line 1: listen_port: expected an integer, got a number "80.5"`, `line 2: metrics_port: expected an integer, got a number "80.5"`}},
		{name: "missing egress_policy", src: "listen_port: 8080\n", wants: []string{"egress_policy: required key is missing"}},
		{name: "missing rules", src: "egress_policy:\n  default_action: deny\n", wants: []string{"line 1: egress_policy.rules: required key is missing"}},
		{name: "null rules", src: "egress_policy:\n  rules:\n", wants: []string{"line 2: egress_policy.rules: required key is missing"}},
		{name: "bad default_action", src: "egress_policy:\n  default_action: Deny\n  rules: []\n", wants: []string{"line 2: egress_policy.default_action: must be allow or deny, got 'Deny'"}},
		{name: "missing action", src: "egress_policy:\n  rules:\n    - host: a.com\n", wants: []string{"line 3: egress_policy.rules[0].action: required key is missing"}},
		{name: "bad listen_addr", src: "listen_addr: localhost\n" + minimal, wants: []string{"line 1: listen_addr: must be an IP literal, got 'localhost'"}},
		{name: "listen_addr with zone", src: "listen_addr: \"::1%lo\"\n" + minimal, wants: []string{"listen_addr: must be an IP literal"}},
		{name: "empty secrets_dir", src: "secrets_dir: \"\"\n" + minimal, wants: []string{"line 1: secrets_dir: must not be empty"}},
		{name: "bad log_level", src: "log_level: verbose\n" + minimal, wants: []string{`line 1: log_level: invalid log level "verbose" (want debug, info, warn or error)`}},
		{name: "uppercase log_level", src: "log_level: INFO\n" + minimal, wants: []string{"log_level: invalid log level"}},
		{name: "interception enabled missing", src: minimal + "https_interception:\n  ca_cert_path: a\n  ca_key_path: b\n", wants: []string{"line 3: https_interception.enabled: required key is missing"}},
		{name: "interception port 0", src: minimal + interceptionOK + "  listen_port: 0\n", wants: []string{"https_interception.listen_port: port 0 out of range 1-65535"}},
		{name: "interception listen_addr not ip", src: minimal + interceptionOK + "  listen_addr: localhost\n", wants: []string{"https_interception.listen_addr: must be an IP literal, got 'localhost'"}},
		{name: "cert_cache_size huge", src: minimal + interceptionOK + "  cert_cache_size: 2000000\n", wants: []string{"cert_cache_size: 2000000 must be between 1 and 1048576"}},
		{name: "negative cache ttl", src: minimal + interceptionOK + "  cert_cache_ttl_seconds: -1\n", wants: []string{"cert_cache_ttl_seconds: -1 must not be negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wantContains(t, parseErr(t, tt.src), tt.wants...)
		})
	}
}

func TestTimeoutRanges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key    string
		lo, hi string
	}{
		{"upstream_connect_timeout_ms", "1", "300000"},
		{"upstream_response_header_timeout_ms", "1", "3600000"},
		{"upstream_idle_conn_timeout_seconds", "1", "3600"},
		{"read_header_timeout_ms", "1", "600000"},
		{"idle_timeout_seconds", "1", "3600"},
		{"shutdown_timeout_seconds", "1", "3600"},
		{"secrets_reload_debounce_ms", "1", "60000"},
		{"secrets_resync_seconds", "1", "3600"},
		{"tunnel_idle_timeout_seconds", "1", "86400"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			t.Parallel()
			mustParse(t, tt.key+": "+tt.lo+"\n"+minimal)
			mustParse(t, tt.key+": "+tt.hi+"\n"+minimal)
			wantContains(t, parseErr(t, tt.key+": 0\n"+minimal), "line 1: "+tt.key+": 0 must be between "+tt.lo+" and "+tt.hi)
			wantContains(t, parseErr(t, tt.key+": "+tt.hi+"1\n"+minimal), tt.key+": "+tt.hi+"1 must be between")
		})
	}
}

func TestNewKeys(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
log_level: debug
upstream_ca_file: /etc/ssl/corp.pem
upstream_connect_timeout_ms: 1500
upstream_response_header_timeout_ms: 120000
upstream_idle_conn_timeout_seconds: 30
read_header_timeout_ms: 2000
idle_timeout_seconds: 60
shutdown_timeout_seconds: 10
secrets_reload_debounce_ms: 100
secrets_resync_seconds: 5
upstream_max_conns_per_host: 8
upstream_max_idle_conns: 16
tunnel_idle_timeout_seconds: 300
`+minimal)
	if c.UpstreamMaxConnsPerHost != 8 || c.UpstreamMaxIdleConns != 16 {
		t.Errorf("UpstreamMaxConnsPerHost, UpstreamMaxIdleConns = %d, %d, want 8, 16", c.UpstreamMaxConnsPerHost, c.UpstreamMaxIdleConns)
	}
	want := Timeouts{
		UpstreamConnect:        1500 * time.Millisecond,
		UpstreamResponseHeader: 2 * time.Minute,
		UpstreamIdleConn:       30 * time.Second,
		DownstreamReadHeader:   2 * time.Second,
		DownstreamIdle:         time.Minute,
		DownstreamWrite:        60 * time.Second,
		Shutdown:               10 * time.Second,
		TunnelIdle:             5 * time.Minute,
	}
	if d := cmp.Diff(want, c.Timeouts); d != "" {
		t.Errorf("Timeouts (-want +got):\n%s", d)
	}
	if c.LogLevel != slog.LevelDebug || c.UpstreamCAFile != "/etc/ssl/corp.pem" ||
		c.SecretsReloadDebounce != 100*time.Millisecond || c.SecretsResyncInterval != 5*time.Second {
		t.Errorf("got log %v, ca %q, debounce %v, resync %v", c.LogLevel, c.UpstreamCAFile, c.SecretsReloadDebounce, c.SecretsResyncInterval)
	}
}

func TestRuleHosts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw      string
		want     string
		wantWarn string
		wantErr  string
	}{
		{raw: "API.OpenAI.com", want: "api.openai.com"},
		{raw: "api.openai.com.", want: "api.openai.com"},
		{raw: "bücher.example", want: "xn--bcher-kva.example"},
		{raw: "::1", want: "::1"},
		{raw: "\"[::1]\"", want: "::1"},
		{raw: "2001:DB8::1", want: "2001:db8::1"},
		{raw: "10.0.0.1", want: "10.0.0.1"},
		{raw: "example.com:8443", want: "example.com", wantWarn: "port 8443 in host 'example.com:8443' is ignored; only allowed_ports selects ports"},
		{raw: "\"[::1]:8080\"", want: "::1", wantWarn: "port 8080 in host '[::1]:8080' is ignored"},
		{raw: "\"bad host\"", wantErr: `egress_policy.rules[0].host: invalid host "bad host": contains a space`},
		{raw: "a@b", wantErr: `invalid host "a@b": userinfo`},
		{raw: "\" a.com\"", wantErr: "host ' a.com' has leading/trailing whitespace in egress policy rule"},
		{raw: "127.1", wantErr: "numeric name"},
		{raw: "0x7f000001", wantErr: "numeric name"},
		{raw: "\"*.Example.COM.\"", want: "*.example.com"},
		{raw: "\"*.bücher.example\"", want: "*.xn--bcher-kva.example"},
		{raw: "\"*\"", wantErr: `must be "*." followed by a domain`},
		{raw: "\"*example.com\"", wantErr: `must be "*." followed by a domain`},
		{raw: "\"a.*.com\"", wantErr: `must be "*." followed by a domain`},
		{raw: "\"*.com\"", wantErr: "top-level domain"},
		{raw: "\"*.co.uk\"", wantErr: `"co.uk" is a public suffix (ICANN section`},
		{raw: "\"*.workers.dev\"", wantErr: `"workers.dev" is a public suffix (private section`},
		{raw: "10.0.0.0/8", want: "10.0.0.0/8"},
		{raw: "2001:DB8::/32", want: "2001:db8::/32"},
		{raw: "10.0.0.0/7", wantErr: "CIDR 10.0.0.0/7 is too wide for an allow rule"},
		{raw: "2001:db8::/31", wantErr: "CIDR 2001:db8::/31 is too wide for an allow rule"},
		{raw: "10.1.0.0/8", wantErr: "host bits are set (did you mean 10.0.0.0/8?)"},
		{raw: "a_b.com", wantErr: "not a valid host name"},
		{raw: "example.com:0", wantErr: "invalid host"},
		{raw: "https://example.com", wantErr: "invalid host"},
		// Fix hints for what users paste into host:.
		{raw: "https://api.x.com/", wantErr: `invalid host "https://api.x.com/": '/' is not allowed (write the bare host: api.x.com)`},
		{raw: "api.x.com/v1/models", wantErr: "(write the bare host: api.x.com)"},
		{raw: "HTTPS://API.X.COM:8443/v1", wantErr: "(write the bare host: api.x.com, and list port 8443 in allowed_ports)"},
		{raw: "https://api.x.com:443/", wantErr: "(write the bare host: api.x.com)"},
		{raw: "api.x.com:443", want: "api.x.com", wantWarn: "port 443 in host 'api.x.com:443' is ignored; only allowed_ports selects ports (without it only 443 is allowed); write the bare host: api.x.com"},
		{raw: "api.x.com:8443", want: "api.x.com", wantWarn: "port 8443 in host 'api.x.com:8443' is ignored; only allowed_ports selects ports (without it only 443 is allowed); write the bare host: api.x.com"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			t.Parallel()
			src := "egress_policy:\n  rules:\n    - host: " + tt.raw + "\n      action: allow\n"
			if tt.wantErr != "" {
				wantContains(t, parseErr(t, src), "line 3: ", tt.wantErr)
				return
			}
			c := mustParse(t, src)
			if got := c.Policy.Rules[0].Host; got != tt.want {
				t.Errorf("Host = %q, want %q", got, tt.want)
			}
			if tt.wantWarn == "" {
				if len(c.Warnings) != 0 {
					t.Errorf("Warnings = %v, want none", c.Warnings)
				}
				return
			}
			if len(c.Warnings) != 1 || c.Warnings[0].Path != "egress_policy.rules[0].host" || !strings.Contains(c.Warnings[0].Message, tt.wantWarn) {
				t.Errorf("Warnings = %v, want one containing %q", c.Warnings, tt.wantWarn)
			}
		})
	}
}

func TestRewriteValidation(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-static-token-5f2b"
	tests := []struct {
		name    string
		rewrite string
		wantErr string
	}{
		{name: "ok secret", rewrite: `{name: Authorization, value: "Bearer {value}", secret_ref: openai-api-key}`},
		{name: "ok static", rewrite: `{name: anthropic-version, value: 2023-06-01}`},
		{name: "ok static empty", rewrite: `{name: X-Empty, value: ""}`},
		{name: "ok static literal placeholder", rewrite: `{name: X-Lit, value: "{value}"}`},
		{name: "ok two placeholders", rewrite: `{name: X-Two, value: "{value}:{value}", secret_ref: k}`},
		{name: "empty name", rewrite: `{name: "", value: x}`, wantErr: "empty header name in rewrite for host 'a.com'"},
		{name: "missing name", rewrite: `{value: x}`, wantErr: "empty header name"},
		{name: "missing value", rewrite: `{name: X}`, wantErr: "header_rewrites[0].value: required key is missing"},
		{name: "colon in name", rewrite: `{name: "X:Y", value: x}`, wantErr: "invalid header name 'X:Y'"},
		{name: "static CRLF", rewrite: `{name: X-Static, value: "` + canary + `\r\nX-Evil: 1"}`, wantErr: "static value of header 'X-Static' for host 'a.com' contains characters not allowed in a header value"},
		{name: "static LF", rewrite: `{name: X-Static, value: "` + canary + `\n"}`, wantErr: "contains characters not allowed"},
		{name: "static NUL", rewrite: `{name: X-Static, value: "` + canary + `\u0000"}`, wantErr: "contains characters not allowed"},
		{name: "template CR", rewrite: `{name: X-T, value: "` + canary + `\r{value}", secret_ref: k}`, wantErr: "value template of header 'X-T'"},
		{name: "secret without placeholder", rewrite: `{name: Authorization, value: "Bearer ` + canary + `", secret_ref: openai-api-key}`, wantErr: "value of header 'Authorization' for host 'a.com' has secret_ref 'openai-api-key' but no {value} placeholder"},
		{name: "secret_ref empty", rewrite: `{name: X, value: "{value}", secret_ref: ""}`, wantErr: "secret_ref '' for header 'X' must be a plain file name"},
		{name: "secret_ref slash", rewrite: `{name: X, value: "{value}", secret_ref: "../etc/passwd"}`, wantErr: "secret_ref '../etc/passwd'"},
		{name: "secret_ref subdir", rewrite: `{name: X, value: "{value}", secret_ref: "a/b"}`, wantErr: "must be a plain file name"},
		{name: "secret_ref dotfile", rewrite: `{name: X, value: "{value}", secret_ref: ".hidden"}`, wantErr: "must be a plain file name"},
		{name: "secret_ref data dir", rewrite: `{name: X, value: "{value}", secret_ref: "..data"}`, wantErr: "must be a plain file name"},
		{name: "secret_ref space", rewrite: `{name: X, value: "{value}", secret_ref: "a b"}`, wantErr: "must be a plain file name"},
		{name: "ok basic", rewrite: `{name: Authorization, value: "{basic:x-access-token}", secret_ref: gh}`},
		{name: "ok basic empty user", rewrite: `{name: Authorization, value: "{basic:}", secret_ref: gh}`},
		{name: "basic not whole value", rewrite: `{name: Authorization, value: "Basic {basic:x}", secret_ref: gh}`, wantErr: "{basic:USER} must be the whole value"},
		{name: "basic unclosed", rewrite: `{name: Authorization, value: "{basic:x", secret_ref: gh}`, wantErr: "closed by one '}'"},
		{name: "basic text after", rewrite: `{name: Authorization, value: "{basic:x}{value}", secret_ref: gh}`, wantErr: "closed by one '}'"},
		{name: "basic colon in user", rewrite: `{name: Authorization, value: "{basic:a:b}", secret_ref: gh}`, wantErr: "not allowed at offset 1"},
		{name: "basic space in user", rewrite: `{name: Authorization, value: "{basic:a b}", secret_ref: gh}`, wantErr: "not allowed at offset 1"},
		{name: "basic without secret_ref", rewrite: `{name: Authorization, value: "{basic:x}"}`, wantErr: "uses {basic:USER} without a secret_ref"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := "egress_policy:\n  rules:\n    - host: a.com\n      action: allow\n      header_rewrites:\n        - " + tt.rewrite + "\n"
			if tt.wantErr == "" {
				mustParse(t, src)
				return
			}
			got := parseErr(t, src)
			wantContains(t, got, "line 6: egress_policy.rules[0].header_rewrites[0].", tt.wantErr)
			if strings.Contains(got, canary) {
				t.Errorf("error echoes a header value: %q", got)
			}
		})
	}
}

// TestQueryRewriteValidation: query_rewrites entries are checked with
// their line, and no message quotes a value.
func TestQueryRewriteValidation(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-literal-5f2b"
	tests := []struct {
		name, rewrites, wantErr string
	}{
		{name: "ok", rewrites: `[{name: key, value: "{value}", secret_ref: google-api-key}]`},
		{name: "ok two", rewrites: `[{name: key, value: "{value}", secret_ref: a}, {name: sig.v-1_~, value: "x{value}", secret_ref: b}]`},
		{name: "empty name", rewrites: `[{name: "", value: "{value}", secret_ref: a}]`, wantErr: "[0].name: empty query parameter name"},
		{name: "missing name", rewrites: `[{value: "{value}", secret_ref: a}]`, wantErr: "[0].name: empty query parameter name"},
		{name: "ampersand", rewrites: `[{name: "a&b", value: "{value}", secret_ref: a}]`, wantErr: "[0].name: invalid query parameter name 'a&b'"},
		{name: "semicolon", rewrites: `[{name: "a;b", value: "{value}", secret_ref: a}]`, wantErr: "invalid query parameter name"},
		{name: "percent", rewrites: `[{name: "%6Bey", value: "{value}", secret_ref: a}]`, wantErr: "invalid query parameter name"},
		{name: "duplicate", rewrites: `[{name: key, value: "{value}", secret_ref: a}, {name: key, value: "{value}", secret_ref: b}]`, wantErr: "[1].name: query parameter 'key' is set twice"},
		{name: "no secret_ref", rewrites: `[{name: key, value: "{value}"}]`, wantErr: "[0].secret_ref: required key is missing"},
		{name: "bad secret_ref", rewrites: `[{name: key, value: "{value}", secret_ref: "../x"}]`, wantErr: "[0].secret_ref: secret_ref '../x' for query parameter 'key' must be"},
		{name: "no value", rewrites: `[{name: key, secret_ref: a}]`, wantErr: "[0].value: required key is missing"},
		{name: "no placeholder", rewrites: `[{name: key, value: "` + canary + `", secret_ref: a}]`, wantErr: "[0].value: value template of query parameter 'key' for host 'a.com': the value has no {value} placeholder"},
		{name: "basic", rewrites: `[{name: key, value: "{basic:u}", secret_ref: a}]`, wantErr: "{basic:USER} is only valid in header_rewrites"},
		{name: "control", rewrites: `[{name: key, value: "` + canary + `\t{value}", secret_ref: a}]`, wantErr: "has a control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := "egress_policy:\n  rules:\n    - host: a.com\n      action: allow\n      query_rewrites: " + tt.rewrites + "\n"
			if tt.wantErr == "" {
				c := mustParse(t, src)
				if refs := c.RequiredSecretRefs(); len(refs) == 0 {
					t.Error("query_rewrites secret_refs are not required secrets")
				}
				return
			}
			got := parseErr(t, src)
			wantContains(t, got, "line 5: egress_policy.rules[0].query_rewrites", tt.wantErr)
			if strings.Contains(got, canary) {
				t.Errorf("error echoes a value: %q", got)
			}
		})
	}
}

// TestParseTemplate is the template grammar, table-driven.
func TestParseTemplate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		basicOK bool
		want    Template
		wantErr bool
	}{
		{in: "Bearer {value}", basicOK: true, want: Template{Parts: []string{"Bearer ", ""}}},
		{in: "{value}:{value}", want: Template{Parts: []string{"", ":", ""}}},
		{in: "{basic:x-access-token}", basicOK: true, want: Template{Basic: true, BasicUser: "x-access-token"}},
		{in: "{basic:}", basicOK: true, want: Template{Basic: true}},
		{in: "{basic:x}", wantErr: true},
		{in: "{basic:x", basicOK: true, wantErr: true},
		{in: "{basic:x}}", basicOK: true, wantErr: true},
		{in: "Basic {basic:x}", basicOK: true, wantErr: true},
		{in: "{value}{basic:x}", basicOK: true, wantErr: true},
		{in: "{basic:" + strings.Repeat("u", 256) + "}", basicOK: true, wantErr: true},
		{in: "{basic:\x7f}", basicOK: true, wantErr: true},
		{in: "no token", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseTemplate(tt.in, tt.basicOK)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseTemplate(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && (got.Basic != tt.want.Basic || got.BasicUser != tt.want.BasicUser || !slices.Equal(got.Parts, tt.want.Parts)) {
			t.Errorf("ParseTemplate(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestStaticDateValueStaysString(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "egress_policy:\n  rules:\n    - host: a.com\n      action: allow\n      header_rewrites:\n        - name: anthropic-version\n          value: 2023-06-01\n")
	if got := c.Policy.Rules[0].HeaderRewrites[0].Value; got != "2023-06-01" {
		t.Errorf("Value = %q, want 2023-06-01", got)
	}
}

func TestInterceptionDisabledNeedsNoCAPaths(t *testing.T) {
	t.Parallel()
	c := mustParse(t, minimal+"https_interception:\n  enabled: false\n")
	if c.Interception.Enabled {
		t.Error("Interception.Enabled = true")
	}
	// Like the reference, values of a disabled block are not checked.
	mustParse(t, minimal+"https_interception:\n  enabled: false\n  cert_ttl_seconds: 1\n  listen_port: 8080\n")
}

func TestMultipleProblems(t *testing.T) {
	t.Parallel()
	src := `listen_addr: 0.0.0.0
listen_port: 9090
max_connections: 0
egress_policy:
  default_action: sometimes
  rules:
    - host: a.com
      action: allow
      allowed_ports: [0, 443]
      header_rewrites:
        - {name: "bad name", value: x}
    - host: A.COM
      action: maybe
https_interception:
  enabled: true
  listen_port: 9090
`
	_, err := Parse([]byte(src))
	got := Problems(err)
	want := []*FieldError{
		{Path: "listen_addr", Line: 1, Msg: "'0.0.0.0' is not loopback; set allow_non_loopback: true to permit non-loopback binding"},
		{Path: "listen_port", Line: 2, Msg: "listen_port 9090 collides with metrics_port 9090"},
		{Path: "max_connections", Line: 3, Msg: "0 must be between 1 and 4294967295 (0 would refuse every connection)"},
		{Path: "egress_policy.default_action", Line: 5, Msg: "must be allow or deny, got 'sometimes'"},
		{Path: "egress_policy.rules[0].allowed_ports[0]", Line: 9, Msg: "port 0 out of range 1-65535"},
		{Path: "egress_policy.rules[0].header_rewrites[0].name", Line: 11, Msg: "invalid header name 'bad name' in rewrite for host 'a.com'"},
		{Path: "egress_policy.rules[1].action", Line: 13, Msg: "must be allow or deny, got 'maybe'"},
		{Path: "egress_policy.rules[1].host", Line: 12, Msg: "duplicate host in egress policy after normalization: a.com (first at egress_policy.rules[0], line 7)"},
		{Path: "https_interception", Line: 14, Msg: "https_interception.ca_cert_path and https_interception.ca_key_path must not be empty when enabled"},
		{Path: "https_interception.listen_port", Line: 16, Msg: "https_interception.listen_port 9090 collides with listen_port 9090"},
		{Path: "https_interception.listen_port", Line: 16, Msg: "https_interception.listen_port 9090 collides with metrics_port 9090"},
	}
	// Problems are sorted by line (stable).
	sortByLine(want)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Problems (-want +got):\n%s", d)
	}
}

func sortByLine(ps []*FieldError) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].Line < ps[j-1].Line; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

// TestMergeKeys: YAML merge keys work as in yaml.v3; a key a merge provides
// may be overridden without a duplicate-key error, but the merged mapping's
// own keys are still checked.
func TestMergeKeys(t *testing.T) {
	t.Parallel()
	src := "egress_policy:\n  rules:\n    - &r {host: a.example, action: deny}\n    - <<: *r\n      host: b.example\n      action: allow\n"
	c := mustParse(t, src)
	if len(c.Policy.Rules) != 2 || c.Policy.Rules[1].Host != "b.example" || c.Policy.Rules[1].Action != ActionAllow {
		t.Errorf("Rules = %+v, want b.example allow from the merge", c.Policy.Rules)
	}
	bad := "egress_policy:\n  rules:\n    - &r {host: a.example, action: deny, alowed_ports: [1]}\n    - <<: *r\n      host: b.example\n"
	wantContains(t, parseErr(t, bad), `line 3: egress_policy.rules[0].alowed_ports: unknown key (did you mean "allowed_ports"?)`)
}

func TestFieldErrorFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		e    FieldError
		want string
	}{
		{FieldError{Path: "a.b", Line: 3, Msg: "m"}, "line 3: a.b: m"},
		{FieldError{Path: "a.b", Msg: "m"}, "a.b: m"},
		{FieldError{Line: 3, Msg: "m"}, "line 3: m"},
		{FieldError{Msg: "m"}, "m"},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("%+v.Error() = %q, want %q", tt.e, got, tt.want)
		}
	}
}

func TestApplyEnvMetricsListenAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env, want, wantErr string
	}{
		{env: "", want: "127.0.0.1"},
		{env: "10.1.2.3", want: "10.1.2.3"},
		{env: "fd00::7", want: "fd00::7"},
		{env: "::ffff:10.1.2.3", want: "10.1.2.3"},
		{env: "pod-ip", wantErr: `BOTBOX_METRICS_LISTEN_ADDR: "pod-ip" is not an IP address`},
		{env: "fe80::1%eth0", wantErr: "is not an IP address"},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			t.Parallel()
			c := mustParse(t, minimal)
			err := ApplyEnv(c, func(k string) string {
				if k == "BOTBOX_METRICS_LISTEN_ADDR" {
					return tt.env
				}
				return ""
			})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ApplyEnv(%q) = %v, want error containing %q", tt.env, err, tt.wantErr)
				}
				return
			}
			if err != nil || c.MetricsListenAddr.String() != tt.want {
				t.Errorf("ApplyEnv(%q) = %v, MetricsListenAddr %v, want %v", tt.env, err, c.MetricsListenAddr, tt.want)
			}
		})
	}
}

func TestApplyEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env     string
		want    slog.Level
		wantErr string
	}{
		{env: "", want: slog.LevelWarn},
		{env: "debug", want: slog.LevelDebug},
		{env: "info", want: slog.LevelInfo},
		{env: "warn", want: slog.LevelWarn},
		{env: "error", want: slog.LevelError},
		{env: "DEBUG", wantErr: `BOTBOX_LOG_LEVEL: invalid log level "DEBUG"`},
		{env: "trace", wantErr: "BOTBOX_LOG_LEVEL: invalid log level"},
		{env: " info", wantErr: "BOTBOX_LOG_LEVEL: invalid log level"},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			t.Parallel()
			c := mustParse(t, "log_level: warn\n"+minimal)
			err := ApplyEnv(c, func(k string) string {
				if k == "BOTBOX_LOG_LEVEL" {
					return tt.env
				}
				return ""
			})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ApplyEnv(%q) = %v, want error containing %q", tt.env, err, tt.wantErr)
				}
				if c.LogLevel != slog.LevelWarn {
					t.Errorf("LogLevel changed to %v on error", c.LogLevel)
				}
				return
			}
			if err != nil || c.LogLevel != tt.want {
				t.Errorf("ApplyEnv(%q) = %v, LogLevel %v, want %v", tt.env, err, c.LogLevel, tt.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte(minimal), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(minimal+"mitm: {}\nlisten_port: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(good); err != nil {
		t.Errorf("Load(good) error = %v", err)
	}
	_, err := Load(filepath.Join(dir, "missing.yaml"))
	if want := "config file not found: " + filepath.Join(dir, "missing.yaml"); err == nil || !errors.Is(err, fs.ErrNotExist) || err.Error() != want || Problems(err) != nil {
		t.Errorf("Load(missing) error = %v, want %q wrapping fs.ErrNotExist, with no problems", err, want)
	}
	_, err = Load(dir)
	if err == nil || !strings.HasPrefix(err.Error(), "reading config file "+dir+": ") || Problems(err) != nil {
		t.Errorf("Load(directory) error = %v, want reading config file ...", err)
	}
	_, err = Load(bad)
	if err == nil || !strings.HasPrefix(err.Error(), "line ") {
		t.Fatalf("Load(bad) error = %v", err)
	}
	if got := len(Problems(err)); got != 2 {
		t.Errorf("Problems(Load(bad)) = %d problems, want 2: %v", got, err)
	}
}

func TestReservedHeader(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Host", "host", "Connection", "KEEP-ALIVE", "Proxy-Connection", "Proxy-Authenticate", "proxy-authorization", "TE", "Trailer", "Transfer-Encoding", "Upgrade"} {
		if !ReservedHeader(name) {
			t.Errorf("ReservedHeader(%q) = false, want true", name)
		}
	}
	for _, name := range []string{"Authorization", "X-Api-Key", "Hosts", "Content-Length", ""} {
		if ReservedHeader(name) {
			t.Errorf("ReservedHeader(%q) = true, want false", name)
		}
	}
}

// TestNodeCheckerKinds: keys of kinds the wire structs do not use yet
// (other helpers add keys) are checked too, and whatever nodeChecker leaves
// in the tree decodes without a yaml error, so Parse never has to fall back
// to go-yaml's text.
func TestNodeCheckerKinds(t *testing.T) {
	t.Parallel()
	type wireProbe struct {
		U  *uint16           `yaml:"u"`
		F  *float64          `yaml:"f"`
		I  int32             `yaml:"i"`
		M  map[string]int64  `yaml:"m"`
		S  []string          `yaml:"s"`
		PS *[]int64          `yaml:"ps"`
		MS map[string]string `yaml:"ms"`
	}
	tests := []struct {
		src  string
		want []string
	}{
		{"u: 443\nf: 1.5\ni: -3\nm: {a: 1}\ns: [x, 1]\nps: [1]\nms: {k: v}\n", nil},
		{"u: 70000\n", []string{`line 1: u: integer "70000" is out of range`}},
		{"u: -1\n", []string{`line 1: u: integer "-1" is out of range`}},
		{"i: 3000000000\n", []string{`line 1: i: integer "3000000000" is out of range`}},
		{"f: x\n", []string{`line 1: f: expected a number, got a string "x"`}},
		{"m: {a: b}\n", []string{`line 1: m.a: expected an integer, got a string "b"`}},
		{"m: [1]\n", []string{"line 1: m: expected a mapping, got a list"}},
		{"ms: {[a]: b}\n", []string{"line 1: ms: expected a mapping of names to values"}},
		{"s: {a: 1}\n", []string{"line 1: s: expected a list, got a mapping"}},
		{"s: [[a]]\n", []string{"line 1: s[0]: expected a string, got a list"}},
		{"ps: x\nu: y\n", []string{`line 1: ps: expected a list, got a string "x"`, `line 2: u: expected an integer, got a string "y"`}},
		{"i: [1]\n", []string{"line 1: i: expected an integer, got a list"}},
	}
	for _, tt := range tests {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(tt.src), &doc); err != nil {
			t.Fatal(err)
		}
		root := doc.Content[0]
		ck := &nodeChecker{}
		ck.check(root, reflect.TypeFor[wireProbe](), "")
		var got []string
		for _, p := range ck.problems {
			got = append(got, p.Error())
		}
		if d := cmp.Diff(tt.want, got); d != "" {
			t.Errorf("%q: problems (-want +got):\n%s", tt.src, d)
		}
		var w wireProbe
		if err := root.Decode(&w); err != nil {
			t.Errorf("%q: the checked tree does not decode: %v", tt.src, err)
		}
	}
}

// TestRuleRemoveHeadersAndResponseHeaderTimeout: the two per-rule keys
// reach the Rule as written; absent, they are nil and 0 (the global
// timeout applies).
func TestRuleRemoveHeadersAndResponseHeaderTimeout(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `egress_policy:
  rules:
    - host: api.anthropic.com
      action: allow
      header_rewrites:
        - {name: Authorization, value: "Bearer {value}", secret_ref: anthropic-api-key}
      remove_headers: [x-api-key, Api-Key]
      response_header_timeout_ms: 1200000
    - host: a.example
      action: allow
      remove_headers: []
`)
	r0, r1 := c.Policy.Rules[0], c.Policy.Rules[1]
	if d := cmp.Diff([]string{"x-api-key", "Api-Key"}, r0.RemoveHeaders); d != "" {
		t.Errorf("RemoveHeaders (-want +got):\n%s", d)
	}
	if r0.ResponseHeaderTimeout != 20*time.Minute {
		t.Errorf("ResponseHeaderTimeout = %v, want 20m", r0.ResponseHeaderTimeout)
	}
	if r1.RemoveHeaders != nil || r1.ResponseHeaderTimeout != 0 {
		t.Errorf("rule without the keys: RemoveHeaders = %#v, ResponseHeaderTimeout = %v; want nil, 0", r1.RemoveHeaders, r1.ResponseHeaderTimeout)
	}
	if c.Timeouts.UpstreamResponseHeader != 10*time.Minute {
		t.Errorf("UpstreamResponseHeader = %v, want the 10 min default", c.Timeouts.UpstreamResponseHeader)
	}
}

// TestPlaceholdersDirAgainstRelativeSecretsDir: a relative secrets_dir is
// resolved against the working directory before the overlap check.
func TestPlaceholdersDirAgainstRelativeSecretsDir(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	_, err := Parse([]byte("secrets_dir: secrets\nplaceholders:\n  enabled: true\n  dir: " + dir + "\negress_policy:\n  rules:\n    - host: a.example\n      action: allow\n"))
	if err == nil || !strings.Contains(err.Error(), "overlaps secrets_dir") {
		t.Fatalf("err = %v, want the overlap refused", err)
	}
}

// TestRuleScrubResponses: scrub_responses defaults to true on an allow
// rule, false turns it off, a deny rule never scrubs and may not set it,
// and the effective configuration shows it where it acts.
func TestRuleScrubResponses(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `egress_policy:
  rules:
    - host: a.example
      action: allow
      header_rewrites:
        - {name: Authorization, value: "Bearer {value}", secret_ref: k}
    - host: b.example
      action: allow
      scrub_responses: false
      header_rewrites:
        - {name: Authorization, value: "Bearer {value}", secret_ref: k}
    - host: c.example
      action: deny
`)
	got := []bool{c.Policy.Rules[0].ScrubResponses, c.Policy.Rules[1].ScrubResponses, c.Policy.Rules[2].ScrubResponses}
	if d := cmp.Diff([]bool{true, false, false}, got); d != "" {
		t.Errorf("ScrubResponses (-want +got):\n%s", d)
	}
	_, err := Parse([]byte(`egress_policy:
  rules:
    - host: c.example
      action: deny
      scrub_responses: true
`))
	if err == nil || !strings.Contains(err.Error(), "scrub_responses applies only to an allow rule") {
		t.Errorf("deny rule with scrub_responses: err = %v", err)
	}
}
