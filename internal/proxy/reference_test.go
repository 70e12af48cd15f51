package proxy

import (
	"net/http"
	"testing"

	"github.com/botbox/botbox/internal/hostport"
)

// TestReferenceProxyUnits ports the 28 unit tests of the reference's
// src/proxy.rs (reference §9.5). The reference's helpers (strip_port,
// extract_port, build_upstream_uri, host_header_value) are one function
// here, hostport.Parse plus HostPort.Authority(443); each case keeps the
// reference's name. Where BotBox is deliberately stricter the expectation
// says so.
func TestReferenceProxyUnits(t *testing.T) {
	type want struct {
		host      string // canonical host (strip_port)
		port      uint16 // 0 = none (extract_port)
		authority string // upstream authority and Host header (build_upstream_uri, host_header_value)
		invalid   bool
	}
	tests := []struct {
		name string
		in   string
		want want
	}{
		{"test_strip_port_ipv4_with_port", "127.0.0.1:8080", want{host: "127.0.0.1", port: 8080, authority: "127.0.0.1:8080"}},
		{"test_strip_port_ipv4_without_port", "127.0.0.1", want{host: "127.0.0.1", authority: "127.0.0.1"}},
		{"test_strip_port_ipv6_with_brackets", "[::1]:8080", want{host: "::1", port: 8080, authority: "[::1]:8080"}},
		// The reference accepted a bare IPv6 literal in a Host header; it is
		// ambiguous with host:port, so BotBox refuses it (400 invalid host).
		{"test_strip_port_bare_ipv6", "2001:db8::1", want{invalid: true}},
		// "host:notaport" stayed unchanged in the reference and then matched
		// nothing; BotBox refuses it outright.
		{"test_strip_port_non_numeric_after_colon", "example.com:notaport", want{invalid: true}},
		{"test_extract_host_from_host_header", "api.openai.com:443", want{host: "api.openai.com", port: 443, authority: "api.openai.com"}},
		{"test_extract_host_preserves_port_from_header", "api.openai.com:8443", want{host: "api.openai.com", port: 8443, authority: "api.openai.com:8443"}},
		{"test_build_upstream_uri_basic", "api.openai.com", want{host: "api.openai.com", authority: "api.openai.com"}},
		{"test_build_upstream_uri_custom_port", "example.com:8443", want{host: "example.com", port: 8443, authority: "example.com:8443"}},
		{"test_build_upstream_uri_port_443_stripped", "example.com:443", want{host: "example.com", port: 443, authority: "example.com"}},
		{"test_build_upstream_uri_ipv6", "[::1]", want{host: "::1", authority: "[::1]"}},
		{"test_build_upstream_uri_ipv6_with_port", "[::1]:8443", want{host: "::1", port: 8443, authority: "[::1]:8443"}},
		{"test_extract_port_present", "example.com:8080", want{host: "example.com", port: 8080, authority: "example.com:8080"}},
		{"test_extract_port_absent", "example.com", want{host: "example.com", authority: "example.com"}},
		{"test_extract_port_bracketed_ipv6", "[2001:db8::1]:443", want{host: "2001:db8::1", port: 443, authority: "[2001:db8::1]"}},
		{"test_host_header_value_port_443_omitted", "api.openai.com:443", want{host: "api.openai.com", port: 443, authority: "api.openai.com"}},
		{"test_host_header_value_port_8443_included", "api.openai.com:8443", want{host: "api.openai.com", port: 8443, authority: "api.openai.com:8443"}},
		{"test_host_header_value_no_port", "api.openai.com", want{host: "api.openai.com", authority: "api.openai.com"}},
		{"test_host_header_value_ipv6_no_port", "[2001:db8::1]", want{host: "2001:db8::1", authority: "[2001:db8::1]"}},
		{"test_host_header_value_ipv6_port_443", "[::1]:443", want{host: "::1", port: 443, authority: "[::1]"}},
		{"test_host_header_value_ipv6_non_443_port", "[::1]:8443", want{host: "::1", port: 8443, authority: "[::1]:8443"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hp, err := hostport.Parse(tt.in)
			if tt.want.invalid {
				if err == nil {
					t.Fatalf("Parse(%q) = %+v, want an error", tt.in, hp)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if hp.Host != tt.want.host || hp.Port != tt.want.port || hp.HasPort != (tt.want.port != 0) {
				t.Errorf("Parse(%q) = %+v, want host %q port %d", tt.in, hp, tt.want.host, tt.want.port)
			}
			if got := hp.Authority(443); got != tt.want.authority {
				t.Errorf("Authority(443) of %q = %q, want %q", tt.in, got, tt.want.authority)
			}
		})
	}
}

// The request-level halves of §9.5: host source, query and root path.
func TestReferenceProxyRequestUnits(t *testing.T) {
	e := newEnv(t, envOpts{})
	t.Run("test_extract_host_from_uri", func(t *testing.T) {
		resp, _ := e.raw("GET http://api.example.test/x HTTP/1.1\r\nHost: ignored.test\r\n\r\n")
		if got := e.lastSeen(); resp.StatusCode != 200 || got.Host != "api.example.test" {
			t.Errorf("status %d, origin host %q", resp.StatusCode, got.Host)
		}
	})
	t.Run("test_extract_host_preserves_port_from_uri", func(t *testing.T) {
		resp, _ := e.raw("GET http://ports.example.test:8443/x HTTP/1.1\r\nHost: ignored.test\r\n\r\n")
		if got := e.lastSeen(); resp.StatusCode != 200 || got.Host != "ports.example.test:8443" {
			t.Errorf("status %d, origin host %q", resp.StatusCode, got.Host)
		}
	})
	t.Run("test_extract_host_missing", func(t *testing.T) {
		resp, body := e.raw("GET / HTTP/1.0\r\n\r\n")
		if resp.StatusCode != http.StatusBadRequest || body != bodyMissingHost {
			t.Errorf("%d %q", resp.StatusCode, body)
		}
	})
	t.Run("test_build_upstream_uri_with_query", func(t *testing.T) {
		e.get("api.example.test", "/v1/x?a=1&b=2", nil)
		if got := e.lastSeen(); got.Path != "/v1/x?a=1&b=2" {
			t.Errorf("origin path %q", got.Path)
		}
	})
	t.Run("test_build_upstream_uri_root", func(t *testing.T) {
		e.raw("GET http://api.example.test HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
		if got := e.lastSeen(); got.Path != "/" {
			t.Errorf("origin path %q, want /", got.Path)
		}
	})
	t.Run("test_strip_hop_by_hop_headers", func(t *testing.T) {
		e.raw("GET / HTTP/1.1\r\nHost: api.example.test\r\nKeep-Alive: 1\r\nX-Custom: kept\r\nAuthorization: Bearer agent\r\n\r\n")
		got := e.lastSeen()
		if got.Header.Get("X-Custom") != "kept" || got.Header.Get("Keep-Alive") != "" || got.Header.Get("Authorization") == "" {
			t.Errorf("origin headers %v", got.Header)
		}
	})
	t.Run("test_strip_hop_by_hop_headers_connection_tokens", func(t *testing.T) {
		e.raw("GET / HTTP/1.1\r\nHost: api.example.test\r\nConnection: X-Named\r\nX-Named: drop\r\n\r\n")
		if got := e.lastSeen(); got.Header.Get("X-Named") != "" {
			t.Errorf("header named in Connection forwarded: %v", got.Header)
		}
	})
}
