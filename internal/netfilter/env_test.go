package netfilter

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var ipv6Warn = []string{
	"[WARN] BOTBOX_ENABLE_IPV6=0: IPv6 traffic control is DISABLED.",
	"  In dual-stack environments, IPv6 traffic may bypass the proxy.",
	"  Ensure IPv6 is disabled (sysctl) or blocked via NetworkPolicy.",
}

// envErrorCases are the fail-fast cases with their exact messages; the
// fuzz target is seeded from them.
var envErrorCases = []struct {
	name     string
	env      map[string]string
	wantErr  string
	wantWarn []string
}{
	{
		name: "ipv6 unset",
		env:  map[string]string{},
		wantErr: "ERROR: BOTBOX_ENABLE_IPV6 is not set.\n" +
			"  Set BOTBOX_ENABLE_IPV6=1 to mirror rules via ip6tables (recommended for dual-stack).\n" +
			"  Set BOTBOX_ENABLE_IPV6=0 for IPv4-only (ensure IPv6 is disabled or blocked separately).",
	},
	{
		name: "ipv6 unset wins over a conflict",
		env:  map[string]string{EnvHTTPSInterception: "1", EnvRedirectFromPort: "443"},
		wantErr: "ERROR: BOTBOX_ENABLE_IPV6 is not set.\n" +
			"  Set BOTBOX_ENABLE_IPV6=1 to mirror rules via ip6tables (recommended for dual-stack).\n" +
			"  Set BOTBOX_ENABLE_IPV6=0 for IPv4-only (ensure IPv6 is disabled or blocked separately).",
	},
	{
		name:    "backend unknown",
		env:     map[string]string{EnvIPv6: "1", EnvBackend: "nft"},
		wantErr: "ERROR: BOTBOX_NETFILTER_BACKEND must be nftables, iptables or auto (got 'nft').",
	},
	{
		name:    "backend case matters",
		env:     map[string]string{EnvIPv6: "1", EnvBackend: "NFTables"},
		wantErr: "ERROR: BOTBOX_NETFILTER_BACKEND must be nftables, iptables or auto (got 'NFTables').",
	},
	{
		name:    "ipv6 true",
		env:     map[string]string{EnvIPv6: "true"},
		wantErr: "ERROR: BOTBOX_ENABLE_IPV6 must be 0 or 1 (got 'true').",
	},
	{
		name:    "ipv6 with space",
		env:     map[string]string{EnvIPv6: "1 "},
		wantErr: "ERROR: BOTBOX_ENABLE_IPV6 must be 0 or 1 (got '1 ').",
	},
	{
		name:    "ipv6 control characters are escaped",
		env:     map[string]string{EnvIPv6: "1\nERROR: fake"},
		wantErr: `ERROR: BOTBOX_ENABLE_IPV6 must be 0 or 1 (got '1\nERROR: fake').`,
	},
	{
		name: "443 conflict ipv6=0 warns first",
		env:  map[string]string{EnvIPv6: "0", EnvHTTPSInterception: "1", EnvRedirectFromPort: "443"},
		wantErr: "ERROR: BOTBOX_ENABLE_HTTPS_INTERCEPTION=1 and BOTBOX_REDIRECT_FROM_PORT=443 conflict.\n" +
			"  Port 443 traffic would be redirected to the HTTP proxy (port 8080)\n" +
			"  instead of the HTTPS interception listener (port 8443).\n" +
			"  Use BOTBOX_REDIRECT_FROM_PORT=80 (default) with BOTBOX_ENABLE_HTTPS_INTERCEPTION=1.",
		wantWarn: ipv6Warn,
	},
	{
		name: "443 conflict names custom ports",
		env: map[string]string{EnvIPv6: "1", EnvHTTPSInterception: "1", EnvRedirectFromPort: "443",
			EnvProxyPort: "9000", EnvHTTPSInterceptionPort: "9443"},
		wantErr: "ERROR: BOTBOX_ENABLE_HTTPS_INTERCEPTION=1 and BOTBOX_REDIRECT_FROM_PORT=443 conflict.\n" +
			"  Port 443 traffic would be redirected to the HTTP proxy (port 9000)\n" +
			"  instead of the HTTPS interception listener (port 9443).\n" +
			"  Use BOTBOX_REDIRECT_FROM_PORT=80 (default) with BOTBOX_ENABLE_HTTPS_INTERCEPTION=1.",
	},
	{
		name:    "uid negative",
		env:     map[string]string{EnvIPv6: "1", EnvUID: "-1"},
		wantErr: "ERROR: BOTBOX_UID must be an integer from 0 to 4294967294 (got '-1').",
	},
	{
		name:    "uid (uid_t)-1",
		env:     map[string]string{EnvIPv6: "1", EnvUID: "4294967295"},
		wantErr: "ERROR: BOTBOX_UID must be an integer from 0 to 4294967294 (got '4294967295').",
	},
	{
		name:    "uid range",
		env:     map[string]string{EnvIPv6: "1", EnvUID: "1337-1340"},
		wantErr: "ERROR: BOTBOX_UID must be an integer from 0 to 4294967294 (got '1337-1340').",
	},
	{
		name:    "uid leading plus",
		env:     map[string]string{EnvIPv6: "1", EnvUID: "+1337"},
		wantErr: "ERROR: BOTBOX_UID must be an integer from 0 to 4294967294 (got '+1337').",
	},
	{
		name:    "proxy port zero",
		env:     map[string]string{EnvIPv6: "1", EnvProxyPort: "0"},
		wantErr: "ERROR: BOTBOX_PROXY_PORT must be a port number from 1 to 65535 (got '0').",
	},
	{
		name:    "proxy port too big",
		env:     map[string]string{EnvIPv6: "1", EnvProxyPort: "65536"},
		wantErr: "ERROR: BOTBOX_PROXY_PORT must be a port number from 1 to 65535 (got '65536').",
	},
	{
		name:    "redirect port leading zero",
		env:     map[string]string{EnvIPv6: "1", EnvRedirectFromPort: "080"},
		wantErr: "ERROR: BOTBOX_REDIRECT_FROM_PORT must be a port number from 1 to 65535 (got '080').",
	},
	{
		name:    "https port not a number",
		env:     map[string]string{EnvIPv6: "1", EnvHTTPSInterceptionPort: "8443 -j ACCEPT"},
		wantErr: "ERROR: BOTBOX_HTTPS_INTERCEPTION_PORT must be a port number from 1 to 65535 (got '8443 -j ACCEPT').",
	},
	{
		name:    "interception yes",
		env:     map[string]string{EnvIPv6: "1", EnvHTTPSInterception: "yes"},
		wantErr: "ERROR: BOTBOX_ENABLE_HTTPS_INTERCEPTION must be 0 or 1 (got 'yes').",
	},
	{
		name:    "interception port equals proxy port",
		env:     map[string]string{EnvIPv6: "1", EnvHTTPSInterception: "1", EnvHTTPSInterceptionPort: "8080"},
		wantErr: "ERROR: BOTBOX_HTTPS_INTERCEPTION_PORT and BOTBOX_PROXY_PORT must differ (both 8080).",
	},
	{
		name:    "metrics port zero",
		env:     map[string]string{EnvIPv6: "1", EnvMetricsPort: "0"},
		wantErr: "ERROR: BOTBOX_METRICS_PORT must be a port number from 1 to 65535 (got '0').",
	},
	{
		name:    "metrics port with rule text",
		env:     map[string]string{EnvIPv6: "1", EnvMetricsPort: "9090 -j ACCEPT"},
		wantErr: "ERROR: BOTBOX_METRICS_PORT must be a port number from 1 to 65535 (got '9090 -j ACCEPT').",
	},
	{
		name:    "metrics port equals proxy port",
		env:     map[string]string{EnvIPv6: "1", EnvMetricsPort: "8080"},
		wantErr: "ERROR: BOTBOX_METRICS_PORT and BOTBOX_PROXY_PORT must differ (both 8080).",
	},
	{
		name:    "metrics port equals interception port",
		env:     map[string]string{EnvIPv6: "1", EnvHTTPSInterception: "1", EnvMetricsPort: "8443"},
		wantErr: "ERROR: BOTBOX_METRICS_PORT and BOTBOX_HTTPS_INTERCEPTION_PORT must differ (both 8443).",
	},
	{
		name:    "nat chain builtin",
		env:     map[string]string{EnvIPv6: "1", EnvNATChain: "OUTPUT"},
		wantErr: "ERROR: BOTBOX_NAT_CHAIN is not a valid chain name (got 'OUTPUT'): a built-in chain or target name.",
	},
	{
		name:    "nat chain target lowercase",
		env:     map[string]string{EnvIPv6: "1", EnvNATChain: "redirect"},
		wantErr: "ERROR: BOTBOX_NAT_CHAIN is not a valid chain name (got 'redirect'): a built-in chain or target name.",
	},
	{
		name:    "filter chain too long",
		env:     map[string]string{EnvIPv6: "1", EnvFilterChain: "ABCDEFGHIJKLMNOPQRSTUVWXYZ123"},
		wantErr: "ERROR: BOTBOX_FILTER_CHAIN is not a valid chain name (got 'ABCDEFGHIJKLMNOPQRSTUVWXYZ123'): longer than 28 characters.",
	},
	{
		name:    "filter chain injection",
		env:     map[string]string{EnvIPv6: "1", EnvFilterChain: "X\n-A OUTPUT -j ACCEPT"},
		wantErr: `ERROR: BOTBOX_FILTER_CHAIN is not a valid chain name (got 'X\n-A OUTPUT -j ACCEPT'): only letters, digits, '_' and '-' are allowed.`,
	},
	{
		name:    "filter chain option",
		env:     map[string]string{EnvIPv6: "1", EnvFilterChain: "-F"},
		wantErr: "ERROR: BOTBOX_FILTER_CHAIN is not a valid chain name (got '-F'): starts with '-'.",
	},
	{
		name:    "wait negative",
		env:     map[string]string{EnvIPv6: "1", EnvWaitSeconds: "-5"},
		wantErr: "ERROR: BOTBOX_IPTABLES_WAIT_SECONDS must be an integer from 0 to 3600 (got '-5').",
	},
	{
		name:    "wait fraction",
		env:     map[string]string{EnvIPv6: "1", EnvWaitSeconds: "1.5"},
		wantErr: "ERROR: BOTBOX_IPTABLES_WAIT_SECONDS must be an integer from 0 to 3600 (got '1.5').",
	},
	{
		name:    "dns servers empty entry",
		env:     map[string]string{EnvIPv6: "1", EnvDNSServers: "10.0.0.1,,10.0.0.2"},
		wantErr: "ERROR: BOTBOX_DNS_SERVERS must be a comma-separated list of IP addresses (got '10.0.0.1,,10.0.0.2'): entry 2 is empty.",
	},
	{
		name:    "dns servers hostname",
		env:     map[string]string{EnvIPv6: "1", EnvDNSServers: "kube-dns"},
		wantErr: "ERROR: BOTBOX_DNS_SERVERS must be a comma-separated list of IP addresses (got 'kube-dns'): entry 1 is not an IP address.",
	},
	{
		name:    "dns servers prefix",
		env:     map[string]string{EnvIPv6: "1", EnvDNSServers: "10.96.0.0/12"},
		wantErr: "ERROR: BOTBOX_DNS_SERVERS must be a comma-separated list of IP addresses (got '10.96.0.0/12'): entry 1 is not an IP address.",
	},
	{
		name:    "dns servers zone",
		env:     map[string]string{EnvIPv6: "1", EnvDNSServers: "fe80::1%eth0"},
		wantErr: "ERROR: BOTBOX_DNS_SERVERS must be a comma-separated list of IP addresses (got 'fe80::1%eth0'): entry 1 has a zone.",
	},
	{
		name:    "dns servers mapped",
		env:     map[string]string{EnvIPv6: "1", EnvDNSServers: "::ffff:10.96.0.10"},
		wantErr: "ERROR: BOTBOX_DNS_SERVERS must be a comma-separated list of IP addresses (got '::ffff:10.96.0.10'): entry 1 is an IPv4-mapped IPv6 address; write 10.96.0.10.",
	},
	{
		name:    "dns servers unspecified",
		env:     map[string]string{EnvIPv6: "1", EnvDNSServers: "0.0.0.0"},
		wantErr: "ERROR: BOTBOX_DNS_SERVERS must be a comma-separated list of IP addresses (got '0.0.0.0'): entry 1 is the unspecified address.",
	},
	{
		name:    "drop icmp true",
		env:     map[string]string{EnvIPv6: "1", EnvDropICMP: "true"},
		wantErr: "ERROR: BOTBOX_DROP_ICMP must be 0 or 1 (got 'true').",
	},
	{
		name:    "reject yes",
		env:     map[string]string{EnvIPv6: "1", EnvReject: "yes"},
		wantErr: "ERROR: BOTBOX_REJECT must be 0 or 1 (got 'yes').",
	},
	{
		name: "every bad value is reported, in table order",
		env: map[string]string{EnvIPv6: "0", EnvUID: "x", EnvProxyPort: "y", EnvNATChain: "DROP",
			EnvDropICMP: "2", EnvReject: "on"},
		wantErr: "ERROR: BOTBOX_UID must be an integer from 0 to 4294967294 (got 'x').\n" +
			"ERROR: BOTBOX_PROXY_PORT must be a port number from 1 to 65535 (got 'y').\n" +
			"ERROR: BOTBOX_NAT_CHAIN is not a valid chain name (got 'DROP'): a built-in chain or target name.\n" +
			"ERROR: BOTBOX_DROP_ICMP must be 0 or 1 (got '2').\n" +
			"ERROR: BOTBOX_REJECT must be 0 or 1 (got 'on').",
		wantWarn: ipv6Warn,
	},
	{
		name:    "long value truncated",
		env:     map[string]string{EnvIPv6: "1", EnvUID: strings.Repeat("9", 100)},
		wantErr: "ERROR: BOTBOX_UID must be an integer from 0 to 4294967294 (got '" + strings.Repeat("9", 64) + "...').",
	},
}

func TestParseEnvErrors(t *testing.T) {
	for _, tt := range envErrorCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, warnings, err := ParseEnv(getenvFrom(tt.env))
			if err == nil {
				t.Fatalf("ParseEnv(%v) = %+v, want error %q", tt.env, s, tt.wantErr)
			}
			if got := err.Error(); got != tt.wantErr {
				t.Errorf("ParseEnv(%v) error:\n%s\nwant:\n%s", tt.env, got, tt.wantErr)
			}
			if _, ok := errors.AsType[*CheckError](err); !ok {
				t.Errorf("error %T is not a *CheckError", err)
			}
			if d := cmp.Diff(tt.wantWarn, warnings); d != "" {
				t.Errorf("warnings (-want +got):\n%s", d)
			}
			if d := cmp.Diff(Settings{}, s); d != "" {
				t.Errorf("settings on error are not zero (-want +got):\n%s", d)
			}
		})
	}
}

func TestParseEnv(t *testing.T) {
	custom := Settings{
		UID: 2000, ProxyPort: 18080, RedirectFromPort: 8000, HTTPSInterception: true,
		HTTPSInterceptionPort: 18443, IPv6: true, NATChain: "BB_NAT", FilterChain: "BB_FILTER",
		WaitSeconds: 10,
		DNSServers:  []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00:10::a")},
		DropICMP:    true,
		MetricsPort: 19090,
		Reject:      true,
		Backend:     BackendNFTables,
	}
	tests := []struct {
		name     string
		env      map[string]string
		want     Settings
		wantWarn []string
	}{
		{
			name:     "defaults ipv6=0",
			env:      map[string]string{EnvIPv6: "0"},
			want:     DefaultSettings(),
			wantWarn: ipv6Warn,
		},
		{
			name: "defaults ipv6=1",
			env:  map[string]string{EnvIPv6: "1"},
			want: func() Settings { s := DefaultSettings(); s.IPv6 = true; return s }(),
		},
		{
			name: "empty values take defaults",
			env: map[string]string{EnvIPv6: "1", EnvUID: "", EnvProxyPort: "", EnvNATChain: "",
				EnvDNSServers: "", EnvDropICMP: "", EnvReject: ""},
			want: func() Settings { s := DefaultSettings(); s.IPv6 = true; return s }(),
		},
		{
			name: "everything custom",
			env: func() map[string]string {
				env := customEnv()
				env[EnvIPv6] = "1"
				env[EnvHTTPSInterception] = "1"
				env[EnvDNSServers] = " 10.96.0.10 ,fd00:10::a,10.96.0.10"
				env[EnvDropICMP] = "1"
				env[EnvReject] = "1"
				env[EnvBackend] = "nftables"
				return env
			}(),
			want: custom,
		},
		{
			name: "backend iptables",
			env:  map[string]string{EnvIPv6: "1", EnvBackend: "iptables"},
			want: func() Settings { s := DefaultSettings(); s.IPv6, s.Backend = true, BackendIPTables; return s }(),
		},
		{
			name: "backend auto is the default",
			env:  map[string]string{EnvIPv6: "1", EnvBackend: "auto"},
			want: func() Settings { s := DefaultSettings(); s.IPv6 = true; return s }(),
		},
		{
			name: "interception 0 with redirect 443 is no conflict",
			env:  map[string]string{EnvIPv6: "1", EnvHTTPSInterception: "0", EnvRedirectFromPort: "443"},
			want: func() Settings { s := DefaultSettings(); s.IPv6 = true; s.RedirectFromPort = 443; return s }(),
		},
		{
			name: "limits",
			env: map[string]string{EnvIPv6: "1", EnvUID: "4294967294", EnvProxyPort: "65535",
				EnvRedirectFromPort: "1", EnvWaitSeconds: "0", EnvNATChain: "ABCDEFGHIJKLMNOPQRSTUVWXYZ12",
				EnvFilterChain: "a_b-c9"},
			want: func() Settings {
				s := DefaultSettings()
				s.IPv6, s.UID, s.ProxyPort, s.RedirectFromPort, s.WaitSeconds = true, 4294967294, 65535, 1, 0
				s.NATChain, s.FilterChain = "ABCDEFGHIJKLMNOPQRSTUVWXYZ12", "a_b-c9"
				return s
			}(),
		},
		{
			name:     "uid 0 warns",
			env:      map[string]string{EnvIPv6: "1", EnvUID: "0"},
			want:     func() Settings { s := DefaultSettings(); s.IPv6 = true; s.UID = 0; return s }(),
			wantWarn: []string{"[WARN] BOTBOX_UID=0: every process running as root bypasses the proxy and the egress filter."},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, warnings, err := ParseEnv(getenvFrom(tt.env))
			if err != nil {
				t.Fatalf("ParseEnv(%v): %v", tt.env, err)
			}
			if d := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
				t.Errorf("ParseEnv(%v) (-want +got):\n%s", tt.env, d)
			}
			if d := cmp.Diff(tt.wantWarn, warnings); d != "" {
				t.Errorf("warnings (-want +got):\n%s", d)
			}
		})
	}
}

func TestParseEnvForRemove(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    Settings
		wantErr string
	}{
		{"ipv6 not required", map[string]string{}, DefaultSettings(), ""},
		{"conflict is irrelevant", map[string]string{EnvHTTPSInterception: "1", EnvRedirectFromPort: "443"},
			func() Settings {
				s := DefaultSettings()
				s.HTTPSInterception = true
				s.RedirectFromPort = 443
				return s
			}(), ""},
		{"custom chains", map[string]string{EnvNATChain: "A", EnvFilterChain: "B"},
			func() Settings { s := DefaultSettings(); s.NATChain, s.FilterChain = "A", "B"; return s }(), ""},
		{"ipv6 still validated", map[string]string{EnvIPv6: "2"}, Settings{},
			"ERROR: BOTBOX_ENABLE_IPV6 must be 0 or 1 (got '2')."},
		{"reject still validated", map[string]string{EnvReject: "true"}, Settings{},
			"ERROR: BOTBOX_REJECT must be 0 or 1 (got 'true')."},
		{"backend still validated", map[string]string{EnvBackend: "xt"}, Settings{},
			"ERROR: BOTBOX_NETFILTER_BACKEND must be nftables, iptables or auto (got 'xt')."},
		{"backend", map[string]string{EnvBackend: "nftables"},
			func() Settings { s := DefaultSettings(); s.Backend = BackendNFTables; return s }(), ""},
		{"chain still validated", map[string]string{EnvNATChain: "a b"}, Settings{},
			"ERROR: BOTBOX_NAT_CHAIN is not a valid chain name (got 'a b'): only letters, digits, '_' and '-' are allowed."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEnvForRemove(lookupOf(getenvFrom(tt.env)))
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tt.wantErr {
				t.Fatalf("parseEnvForRemove error = %q, want %q", gotErr, tt.wantErr)
			}
			if d := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
