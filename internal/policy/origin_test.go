package policy

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/addrguard"
	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/reqpath"
)

// denyRoutedPolicy is the GitHub rule of docs/policy.md at ee87e5f: two
// deny routes under a broad GET allow, POST on two paths.
func denyRoutedPolicy(t testing.TB) *Policy {
	t.Helper()
	return newPolicy(t, config.ActionDeny,
		config.Rule{Host: "api.github.com", Action: config.ActionAllow, HeaderRewrites: openAIRewrites, Routes: []config.Route{
			{Paths: []string{"/repos/acme/app/settings/**", "/repos/acme/app/hooks/**"}, Action: config.ActionDeny},
			{Methods: []string{"DELETE"}, Paths: []string{"/repos/acme/app/**"}, Action: config.ActionDeny},
			{Methods: []string{"GET"}, Paths: []string{"/repos/acme/app/secrets"}, Action: config.ActionDeny},
			{Methods: []string{"GET", "HEAD"}, Paths: []string{"/repos/acme/**", "/user"}, Action: config.ActionAllow},
			{Methods: []string{"POST"}, Paths: []string{"/repos/acme/app/issues/*/comments", "/repos/acme/app/pulls"}, Action: config.ActionAllow},
			{Paths: []string{"/any/**"}, Action: config.ActionAllow},
		}},
		allowRule("api.example.com"),
	)
}

// TestDenyRouteHoldsUnderOriginReadings: every spelling of
// redteam-2026-12-01 §4 and of playbook class 4 that an origin may read as
// a denied route is denied (route_deny) or refused (ambiguous_path,
// method_override); at ee87e5f the case, ';', override and
// double-encoding rows were allowed with the token.
func TestDenyRouteHoldsUnderOriginReadings(t *testing.T) {
	p := denyRoutedPolicy(t)
	host := mustTarget(t, "api.github.com").Host
	for _, tc := range []struct {
		method, path, query string
		header              map[string][]string
		want                Reason
	}{
		// Controls.
		{method: "GET", path: "/repos/acme/app/hooks", want: ReasonRouteDeny},
		{method: "GET", path: "/repos/acme/app/pulls/1", want: ReasonRuleAllow},
		{method: "POST", path: "/repos/acme/app/pulls", want: ReasonRuleAllow},
		// Case: GitHub resolves owner and repository case-insensitively.
		{method: "GET", path: "/repos/acme/App/hooks", want: ReasonRouteDeny},
		{method: "GET", path: "/repos/acme/app/HOOKS", want: ReasonRouteDeny},
		{method: "GET", path: "/REPOS/ACME/APP/SETTINGS/x", want: ReasonRouteDeny},
		{method: "GET", path: "/repos/%61cme/app/%68ooks", want: ReasonRouteDeny},
		{method: "GET", path: "/repos/acme/app/%48OOKS", want: ReasonRouteDeny},
		// Trailing forms and format suffixes.
		{method: "GET", path: "/repos/acme/app/hooks/", want: ReasonRouteDeny},
		{method: "GET", path: "/repos/acme/app/hooks.", want: ReasonRouteDeny},
		{method: "GET", path: "/repos/acme/app/hooks.json", want: ReasonRouteDeny},
		{method: "GET", path: "/repos/acme./app/hooks", want: ReasonRouteDeny},
		{method: "GET", path: "/repos/acme/app/hooks%20", want: ReasonRouteDeny},
		{method: "GET", path: "/repos/acme/app/secrets.xml", want: ReasonRouteDeny},
		// Path parameters, double encoding, overlong and confusable UTF-8.
		{method: "GET", path: "/repos/acme/app/hooks;x=1", want: ReasonAmbiguousPath},
		{method: "GET", path: "/repos/acme/app/settings;/x", want: ReasonAmbiguousPath},
		{method: "GET", path: "/repos/acme/app/hooks%3Bx=1", want: ReasonAmbiguousPath},
		{method: "GET", path: "/repos/acme/app/%252e%252e/app/hooks", want: ReasonAmbiguousPath},
		{method: "GET", path: "/repos/acme/app/x/%C0%AE%C0%AE/hooks", want: ReasonAmbiguousPath},
		{method: "GET", path: "/repos/acme/app/%EF%BD%88ooks", want: ReasonAmbiguousPath},
		{method: "GET", path: "/repos/acme/app/hoo%E2%84%AAs", want: ReasonAmbiguousPath},
		{method: "GET", path: "/repos/acme/app/x/.../hooks", want: ReasonAmbiguousPath},
		// Already refused at ee87e5f (the classes beyond the report).
		{method: "GET", path: "/repos/acme/app/x/../hooks", want: ReasonAmbiguousPath},
		{method: "GET", path: "/repos/acme/app%2Fhooks", want: ReasonAmbiguousPath},
		{method: "GET", path: `/repos/acme/app\hooks`, want: ReasonAmbiguousPath},
		{method: "GET", path: "/repos/acme//app/hooks", want: ReasonAmbiguousPath},
		// Methods: the deny side reads them as the origin may.
		{method: "delete", path: "/any/x", want: ReasonRuleAllow}, // no deny route covers /any
		{method: "delete", path: "/repos/acme/app/x", want: ReasonRouteDeny},
		{method: "Delete", path: "/repos/acme/app/x", want: ReasonRouteDeny},
		{method: "HEAD", path: "/repos/acme/app/secrets", want: ReasonRouteDeny},
		{method: "get", path: "/repos/acme/app/pulls/1", want: ReasonNoRoute}, // allow routes stay exact
		// Method and path overrides, any case, header or query.
		{method: "POST", path: "/repos/acme/app/pulls", header: map[string][]string{"X-Http-Method-Override": {"DELETE"}}, want: ReasonMethodOverride},
		{method: "POST", path: "/repos/acme/app/pulls", header: map[string][]string{"x-http-method": {"DELETE"}}, want: ReasonMethodOverride},
		{method: "POST", path: "/repos/acme/app/pulls", header: map[string][]string{"X-METHOD-OVERRIDE": {"DELETE"}}, want: ReasonMethodOverride},
		{method: "GET", path: "/repos/acme/app/pulls/1", header: map[string][]string{"X-Original-Url": {"/repos/acme/app/hooks"}}, want: ReasonMethodOverride},
		{method: "POST", path: "/repos/acme/app/pulls", query: "_method=DELETE", want: ReasonMethodOverride},
		{method: "POST", path: "/repos/acme/app/pulls", query: "a=1&%5FMETHOD=delete", want: ReasonMethodOverride},
		{method: "GET", path: "/repos/acme/app/pulls/1", query: "method=x&page=2", want: ReasonRuleAllow},
	} {
		tg := Target{Host: host, Method: tc.method, Path: tc.path, Override: reqpath.Override(tc.header, tc.query)}
		d := p.Decide(tg)
		if d.Reason != tc.want || d.Allowed() != (tc.want == ReasonRuleAllow) {
			t.Errorf("%s %s ?%s %v: %s (allowed %v), want %s", tc.method, tc.path, tc.query, tc.header, d.Reason, d.Allowed(), tc.want)
		}
	}
	// A rule without routes never looks at overrides (it allows any
	// method anyway).
	tg := mustTarget(t, "api.example.com")
	tg.Override = "x-http-method-override"
	if d := p.Decide(tg); !d.Allowed() {
		t.Errorf("rule without routes: %+v", d)
	}
}

// v6 builds an IPv6 address from its 16 bytes.
func v6(b ...byte) netip.Addr { return netip.AddrFrom16([16]byte(b)) }

// embeddedSpellings returns IPv6 spellings of the IPv4 address v4 in every
// form addrguard.Embedded knows except IPv4-mapped (hostport unmaps it):
// IPv4-compatible, NAT64 (/96 and the local-use /48), 6to4, and Teredo
// with v4 as server and as client.
func embeddedSpellings(v4 netip.Addr) map[string]netip.Addr {
	b := v4.As4()
	return map[string]netip.Addr{
		"compatible":    v6(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b[0], b[1], b[2], b[3]),
		"nat64":         v6(0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, b[0], b[1], b[2], b[3]),
		"nat64-local":   v6(0, 0x64, 0xff, 0x9b, 0, 1, b[0], b[1], 0, b[2], b[3], 0, 0, 0, 0, 0),
		"6to4":          v6(0x20, 0x02, b[0], b[1], b[2], b[3], 0, 0, 0, 0, 0, 0, 0, 0, 0, 1),
		"teredo-server": v6(0x20, 0x01, 0, 0, b[0], b[1], b[2], b[3], 0, 0, 0, 0, 0xf5, 0x39, 0xe7, 0xfe),
		"teredo-client": v6(0x20, 0x01, 0, 0, 203, 0, 113, 9, 0, 0, 0, 0, ^b[0], ^b[1], ^b[2], ^b[3]),
	}
}

// TestEmbeddedIPv4Readings: an IPv6 literal carrying an IPv4 address is
// judged by the CIDR and exact IP rules as that IPv4 too, deny winning
// (redteam-2026-12-01 §9: "[64:ff9b::0ac6:1801]" escaped a deny of
// 10.198.24.1/32 at ee87e5f and the guard's allowed_cidrs let it out).
// Every spelling is the one addrguard.Embedded reads, so the policy and
// the guard judge the same IPv4.
func TestEmbeddedIPv4Readings(t *testing.T) {
	target := netip.MustParseAddr("10.198.24.1")
	spellings := embeddedSpellings(target)
	spellings["nat64 text"] = netip.MustParseAddr("64:ff9b::0ac6:1801")
	spellings["nat64 dotted"] = netip.MustParseAddr("64:ff9b::10.198.24.1")
	spellings["compatible dotted"] = netip.MustParseAddr("::10.198.24.1")
	for form, a := range spellings {
		if _, carried := addrguard.Embedded(a); carried[0] != target && carried[1] != target {
			t.Fatalf("%s %s: addrguard.Embedded carries %v, not %s", form, a, carried, target)
		}
	}
	authority := func(a netip.Addr) string { return "[" + a.String() + "]" }

	// The report's case: default allow, a /32 deny, and an allow rule for
	// the NAT64 prefix that must not open it either.
	p := newPolicy(t, config.ActionAllow, denyRule("10.198.24.1/32"), allowRule("64:ff9b::/96"), allowRule("2002:ac6::/32"))
	for form, a := range spellings {
		if d := p.Decide(mustTarget(t, authority(a))); d.Allowed() || d.Reason != ReasonRuleDeny || d.Rule.Host != "10.198.24.1/32" {
			t.Errorf("%s %s: %s by %v, want rule_deny by 10.198.24.1/32", form, a, d.Reason, d.Rule)
		}
		if p.AllowsName(a.String()) || p.AllowsHost(a.String()) {
			t.Errorf("%s %s: AllowsName/AllowsHost true", form, a)
		}
	}
	// An exact IP deny rule holds the same way; so does a deny on the IPv6
	// prefix against an IPv4 allow.
	p = newPolicy(t, config.ActionDeny, denyRule("10.198.24.1"), allowRule("10.0.0.0/8"))
	for form, a := range spellings {
		if d := p.Decide(mustTarget(t, authority(a))); d.Allowed() || d.Rule == nil || d.Rule.Host != "10.198.24.1" {
			t.Errorf("exact deny, %s %s: %+v", form, a, d)
		}
	}
	p = newPolicy(t, config.ActionDeny, allowRule("10.0.0.0/8"), denyRule("64:ff9b::/96"))
	if d := p.Decide(mustTarget(t, authority(spellings["nat64"]))); d.Allowed() || d.Rule.Host != "64:ff9b::/96" {
		t.Errorf("IPv6 prefix deny against an IPv4 allow: %+v", d)
	}

	// Allow: the IPv4's rule decides (its ports and rewrites), as for the
	// IPv4 literal; a carried IPv4 no rule names falls back to the
	// literal's own rule, else the default.
	p = newPolicy(t, config.ActionDeny,
		config.Rule{Host: "10.0.0.0/8", Action: config.ActionAllow, AllowedPorts: []uint16{8443}, HeaderRewrites: openAIRewrites},
		allowRule("64:ff9b::/96"))
	for form, a := range spellings {
		d := p.Decide(mustTarget(t, authority(a)+":8443"))
		if strings.HasPrefix(form, "teredo") {
			// Teredo carries two addresses: the other one (203.0.113.9 or
			// 10.198.24.1 inverted) decides only if the first has no rule.
			continue
		}
		if !d.Allowed() || d.Rule.Host != "10.0.0.0/8" {
			t.Errorf("allow, %s %s:8443: %+v", form, a, d)
		}
	}
	other := embeddedSpellings(netip.MustParseAddr("198.51.100.7"))
	if d := p.Decide(mustTarget(t, authority(other["nat64"]))); !d.Allowed() || d.Rule.Host != "64:ff9b::/96" {
		t.Errorf("NAT64 of an IPv4 no rule names: %+v, want the prefix rule", d)
	}
	if d := p.Decide(mustTarget(t, authority(other["6to4"]))); d.Allowed() || d.Reason != ReasonDefaultDeny {
		t.Errorf("6to4 of an IPv4 no rule names: %+v, want default_deny", d)
	}
	// Teredo: deny wins when either carried address is denied.
	p = newPolicy(t, config.ActionAllow, denyRule("203.0.113.9/32"))
	if d := p.Decide(mustTarget(t, authority(spellings["teredo-client"]))); d.Allowed() || d.Rule.Host != "203.0.113.9/32" {
		t.Errorf("Teredo with a denied server: %+v", d)
	}
	// A plain IPv6 literal and a plain IPv4 one decide as before.
	p = newPolicy(t, config.ActionDeny, allowRule("2001:db8::/32"), denyRule("10.0.0.0/8"))
	if d := p.Decide(mustTarget(t, "[2001:db8::a00:1]")); !d.Allowed() {
		t.Errorf("plain IPv6: %+v", d)
	}
}

// TestWildcardNeverAdmitsTenants: an allow wildcard over a domain with
// public suffixes below it never matches a tenant's name under them
// (redteam-2026-12-01 §5), so its header rewrites never reach one; a deny
// wildcard still matches them, and the operator's own names still match.
func TestWildcardNeverAdmitsTenants(t *testing.T) {
	p := newPolicy(t, config.ActionDeny,
		config.Rule{Host: "*.amazonaws.com", Action: config.ActionAllow, HeaderRewrites: openAIRewrites},
		denyRule("*.example.com"))
	for _, tc := range []struct {
		host string
		want Reason
		rule string
	}{
		{"ec2.amazonaws.com", ReasonRuleAllow, "*.amazonaws.com"},
		{"s3.amazonaws.com", ReasonRuleAllow, "*.amazonaws.com"},
		{"evil-bucket.s3.amazonaws.com", ReasonDefaultDeny, ""},
		{"EVIL-Bucket.S3.amazonaws.com.", ReasonDefaultDeny, ""},
		{"evil.s3.us-east-1.amazonaws.com", ReasonDefaultDeny, ""},
		{"ec2-1-2-3-4.us-east-1.compute.amazonaws.com", ReasonDefaultDeny, ""},
		{"a.example.com", ReasonRuleDeny, "*.example.com"},
	} {
		d := p.Decide(mustTarget(t, tc.host))
		got := ""
		if d.Rule != nil {
			got = d.Rule.Host
		}
		if d.Reason != tc.want || got != tc.rule {
			t.Errorf("%s: %s by %q, want %s by %q", tc.host, d.Reason, got, tc.want, tc.rule)
		}
		if p.AllowsName(tc.host) != (tc.want == ReasonRuleAllow) || p.AllowsHost(tc.host) != (tc.want == ReasonRuleAllow) {
			t.Errorf("%s: AllowsName/AllowsHost disagree with Decide", tc.host)
		}
	}
	// Under default allow a tenant gets the default: no rule, no rewrites.
	p = newPolicy(t, config.ActionAllow, config.Rule{Host: "*.amazonaws.com", Action: config.ActionAllow, HeaderRewrites: openAIRewrites})
	if d := p.Decide(mustTarget(t, "evil-bucket.s3.amazonaws.com")); d.Kind != DefaultAllow || d.Rule != nil {
		t.Errorf("default allow: %+v", d)
	}
	// Compile refuses an allow wildcard over a public suffix of either
	// section; a deny one compiles.
	for _, host := range []string{"*.workers.dev", "*.s3.us-east-1.amazonaws.com", "*.co.uk"} {
		if _, err := Compile(config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{allowRule(host)}}); err == nil || !strings.Contains(err.Error(), "is a public suffix") {
			t.Errorf("Compile(allow %s) = %v", host, err)
		}
		if _, err := Compile(config.Policy{DefaultAction: config.ActionAllow, Rules: []config.Rule{denyRule(host)}}); err != nil {
			t.Errorf("Compile(deny %s) = %v", host, err)
		}
	}
}

// FuzzEmbeddedNeverMoreLenient: for any IPv4 address a deny rule names
// (by /32 or exactly), every IPv6 spelling that carries it (as
// addrguard.Embedded reads it) is denied by that rule, whatever allow
// rules name the IPv6 prefixes.
func FuzzEmbeddedNeverMoreLenient(f *testing.F) {
	f.Add([]byte{10, 198, 24, 1}, false)
	f.Add([]byte{127, 0, 0, 1}, true)
	f.Add([]byte{0, 0, 0, 2}, false)
	f.Fuzz(func(t *testing.T, b []byte, exact bool) {
		if len(b) != 4 {
			return
		}
		v4 := netip.AddrFrom4([4]byte(b))
		deny := denyRule(v4.String() + "/32")
		if exact {
			deny = denyRule(v4.String())
		}
		p := newPolicy(t, config.ActionAllow, deny, allowRule("64:ff9b::/96"), allowRule("2002::/32"), allowRule("2001::/32"), allowRule("::/96"))
		for form, a := range embeddedSpellings(v4) {
			if f, _ := addrguard.Embedded(a); f == "" {
				continue // :: and ::1 carry nothing, for the guard too
			}
			if d := p.Decide(Target{Host: mustTarget(t, "["+a.String()+"]").Host}); d.Allowed() || d.Rule == nil || d.Rule.Host != deny.Host {
				t.Fatalf("%s %s of %s: %+v", form, a, v4, d)
			}
		}
	})
}
