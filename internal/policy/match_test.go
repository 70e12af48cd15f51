package policy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/reqpath"
)

// precedencePolicy has a rule of every kind overlapping every other.
func precedencePolicy(t testing.TB, def config.Action) *Policy {
	t.Helper()
	return newPolicy(t, def,
		allowRule("*.example.com"),
		denyRule("*.internal.example.com"),
		allowRule("*.ok.internal.example.com"),
		denyRule("api.example.com"),
		allowRule("db.internal.example.com", 5432),
		allowRule("10.0.0.0/8", 443, 8080),
		denyRule("10.1.0.0/16"),
		allowRule("10.1.2.0/24"),
		denyRule("10.1.2.3"),
		allowRule("2001:db8::/32"),
		denyRule("2001:db8:bad::/48"),
		denyRule("0.0.0.0/0"),
	)
}

// TestPrecedence: exact, then longest wildcard suffix, then longest CIDR
// (IP literals only), then default_action; one row per case.
func TestPrecedence(t *testing.T) {
	ruleDenied := func(host string) outcome { return outcome{Kind: Deny, Reason: ReasonRuleDeny, Port: 443, Rule: host} }
	tests := []decideCase{
		// Wildcards: one or more labels, never the apex.
		{"x.example.com", allowed("*.example.com", 443)},
		{"a.b.c.example.com", allowed("*.example.com", 443)},
		{"X.Example.COM.", allowed("*.example.com", 443)},
		{"example.com", defaultDenied(443)},
		{"badexample.com", defaultDenied(443)},
		{"example.com.evil.net", defaultDenied(443)},
		{"x.example.com:8443", portDenied("*.example.com", 8443)},
		// Exact beats wildcard, either way.
		{"api.example.com", ruleDenied("api.example.com")},
		{"db.internal.example.com:5432", allowed("db.internal.example.com", 5432)},
		{"db.internal.example.com", portDenied("db.internal.example.com", 443)},
		// Longest suffix wins.
		{"internal.example.com", allowed("*.example.com", 443)},
		{"a.internal.example.com", ruleDenied("*.internal.example.com")},
		{"ok.internal.example.com", ruleDenied("*.internal.example.com")},
		{"x.ok.internal.example.com", allowed("*.ok.internal.example.com", 443)},
		{"x.y.ok.internal.example.com", allowed("*.ok.internal.example.com", 443)},
		// CIDR: longest prefix; exact IP beats any prefix.
		{"10.9.9.9", allowed("10.0.0.0/8", 443)},
		{"10.9.9.9:8080", allowed("10.0.0.0/8", 8080)},
		{"10.1.9.9", ruleDenied("10.1.0.0/16")},
		{"10.1.2.9", allowed("10.1.2.0/24", 443)},
		{"10.1.2.3", ruleDenied("10.1.2.3")},
		{"11.0.0.1", ruleDenied("0.0.0.0/0")},
		{"[2001:db8::1]", allowed("2001:db8::/32", 443)},
		{"[2001:db8:bad::1]", ruleDenied("2001:db8:bad::/48")},
		{"[::ffff:10.9.9.9]", allowed("10.0.0.0/8", 443)},
		{"[2001:db9::1]", defaultDenied(443)},
		// A CIDR never matches a name, a wildcard never an IP.
		{"10.example.org", defaultDenied(443)},
	}
	runDecide(t, precedencePolicy(t, config.ActionDeny), tests)

	// Under default allow, only the no-match rows change.
	p := precedencePolicy(t, config.ActionAllow)
	runDecide(t, p, []decideCase{
		{"example.com", outcome{Kind: DefaultAllow, Reason: ReasonDefaultAllow, Port: 443}},
		{"a.internal.example.com", ruleDenied("*.internal.example.com")},
		{"11.0.0.1", ruleDenied("0.0.0.0/0")},
	})
}

// TestWildcardNames: AllowsHost (the SNI authorizer) and AllowsName (the
// DNS guard) use the same matching as Decide.
func TestWildcardNames(t *testing.T) {
	p := precedencePolicy(t, config.ActionDeny)
	for _, tt := range []struct {
		name            string
		wantName, wantH bool
	}{
		{"x.example.com", true, true},
		{"X.EXAMPLE.COM.", true, true},
		{"example.com", false, false},
		{"api.example.com", false, false},
		{"a.internal.example.com", false, false},
		{"x.ok.internal.example.com", true, true},
		{"db.internal.example.com", true, false}, // port 5432 only
		{"10.1.2.9", true, true},
		{"10.1.2.3", false, false},
		{"*.example.com", false, false},
	} {
		if got := p.AllowsName(tt.name); got != tt.wantName {
			t.Errorf("AllowsName(%q) = %v, want %v", tt.name, got, tt.wantName)
		}
		if got := p.AllowsHost(tt.name); got != tt.wantH {
			t.Errorf("AllowsHost(%q) = %v, want %v", tt.name, got, tt.wantH)
		}
	}
}

func routedPolicy(t testing.TB) *Policy {
	t.Helper()
	return newPolicy(t, config.ActionDeny,
		config.Rule{Host: "api.github.com", Action: config.ActionAllow, HeaderRewrites: openAIRewrites, Routes: []config.Route{
			{Methods: []string{"GET", "HEAD"}, Paths: []string{"/repos/acme/**", "/user"}, Action: config.ActionAllow},
			{Methods: []string{"POST"}, Paths: []string{"/repos/acme/app/pulls", "/repos/acme/app/issues/*/comments"}, Action: config.ActionAllow},
			{Paths: []string{"/admin/**"}, Action: config.ActionDeny},
			{Methods: []string{"DELETE"}, Action: config.ActionDeny},
			{Paths: []string{"/~x/**"}, Action: config.ActionAllow},
		}},
		allowRule("*.example.com"),
	)
}

// TestRoutes: first matching route decides; no match is no_route; an
// ambiguous path is refused before any route; the canonical path is
// returned.
func TestRoutes(t *testing.T) {
	p := routedPolicy(t)
	type result struct {
		Kind   Kind
		Reason Reason
		Route  int
		Path   string
	}
	for _, tt := range []struct {
		method, path string
		want         result
	}{
		{"GET", "/repos/acme/app", result{Allow, ReasonRuleAllow, 0, "/repos/acme/app"}},
		{"HEAD", "/user", result{Allow, ReasonRuleAllow, 0, "/user"}},
		{"GET", "/user/", result{Deny, ReasonNoRoute, -1, "/user/"}},
		{"get", "/user", result{Deny, ReasonNoRoute, -1, "/user"}},
		{"POST", "/repos/acme/app/pulls", result{Allow, ReasonRuleAllow, 1, "/repos/acme/app/pulls"}},
		{"POST", "/repos/acme/app/issues/7/comments", result{Allow, ReasonRuleAllow, 1, "/repos/acme/app/issues/7/comments"}},
		{"POST", "/repos/acme/app/issues/7/labels", result{Deny, ReasonNoRoute, -1, "/repos/acme/app/issues/7/labels"}},
		{"GET", "/repos/other/app", result{Deny, ReasonNoRoute, -1, "/repos/other/app"}},
		{"GET", "/admin/x", result{Deny, ReasonRouteDeny, 2, "/admin/x"}},
		{"DELETE", "/repos/acme/app", result{Deny, ReasonRouteDeny, 3, "/repos/acme/app"}},
		{"PUT", "/x", result{Deny, ReasonNoRoute, -1, "/x"}},
		// Canonicalisation before matching: %61 is 'a', %7E is '~'.
		{"GET", "/repos/%61cme/app", result{Allow, ReasonRuleAllow, 0, "/repos/acme/app"}},
		{"PATCH", "/%7ex/y", result{Allow, ReasonRuleAllow, 4, "/~x/y"}},
		// Ambiguous paths: refused before matching, whatever the method.
		{"GET", "/repos/acme/../other/app", result{Deny, ReasonAmbiguousPath, -1, ""}},
		{"GET", "/repos/acme/%2e%2e/other", result{Deny, ReasonAmbiguousPath, -1, ""}},
		{"GET", "/repos/acme%2Fapp", result{Deny, ReasonAmbiguousPath, -1, ""}},
		{"GET", "/repos//acme/app", result{Deny, ReasonAmbiguousPath, -1, ""}},
		{"GET", "", result{Deny, ReasonAmbiguousPath, -1, ""}},
	} {
		d := p.Decide(Target{Host: mustTarget(t, "api.github.com").Host, Method: tt.method, Path: tt.path})
		got := result{d.Kind, d.Reason, d.Route, d.Path}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", tt.method, tt.path, diff)
		}
		if d.Rule == nil || d.Rule.Host != "api.github.com" {
			t.Errorf("%s %s: Rule = %v", tt.method, tt.path, d.Rule)
		}
	}
	// A rule without routes ignores the path entirely, ambiguous or not.
	d := p.Decide(Target{Host: mustTarget(t, "x.example.com").Host, Method: "GET", Path: "/a/../b"})
	if d.Kind != Allow || d.Route != -1 || d.Path != "" {
		t.Errorf("no-routes rule: %+v", d)
	}
	// Host and port are decided before routes.
	d = p.Decide(Target{Host: mustTarget(t, "api.github.com:8443").Host, Method: "GET", Path: "/a/../b"})
	if d.Reason != ReasonPortNotAllowed {
		t.Errorf("port before routes: %+v", d)
	}
	// The SNI authorizer admits a routed host: each request is decided alone.
	if !p.AllowsHost("api.github.com") {
		t.Error("AllowsHost(api.github.com) = false for a rule with routes")
	}
}

func TestDecideRoutesDoNotAllocate(t *testing.T) {
	p := routedPolicy(t)
	tg := Target{Host: mustTarget(t, "api.github.com").Host, Method: "POST", Path: "/repos/acme/app/issues/7/comments"}
	if n := testing.AllocsPerRun(100, func() { _ = p.Decide(tg) }); n != 0 {
		t.Errorf("Decide allocates %v times, want 0", n)
	}
	// An allow wildcard asks publicsuffix.PublicSuffix whether the name is
	// a tenant's (UnderDeeperPublicSuffix); its netip.ParseAddr error is
	// the one allocation.
	tg = Target{Host: mustTarget(t, "a.b.example.com").Host}
	if n := testing.AllocsPerRun(100, func() { _ = p.Decide(tg) }); n > 1 {
		t.Errorf("Decide (wildcard) allocates %v times, want at most 1", n)
	}
	tg = Target{Host: mustTarget(t, "[64:ff9b::a09:909]").Host}
	if n := testing.AllocsPerRun(100, func() { _ = p.Decide(tg) }); n != 0 {
		t.Errorf("Decide (NAT64 literal) allocates %v times, want 0", n)
	}
}

// BenchmarkDecideV2 is Decide for the request of the proxy's
// BenchmarkServePlainPolicy: the exact-host hit, and a wildcard hit with 5
// routes (the fifth matching) in a 20-rule policy.
func BenchmarkDecideV2(b *testing.B) {
	exact := newPolicy(b, config.ActionDeny, config.Rule{Host: "api.example.test", Action: config.ActionAllow, HeaderRewrites: openAIRewrites})
	var rules []config.Rule
	for i := range 8 {
		rules = append(rules, allowRule(fmt.Sprintf("host-%d.example.org", i)))
	}
	for i := range 6 {
		rules = append(rules, allowRule(fmt.Sprintf("*.cdn-%d.example.net", i)))
	}
	rules = append(rules, denyRule("*.internal.example.test"), allowRule("10.0.0.0/8"), denyRule("10.1.0.0/16"), allowRule("2001:db8::/32"), denyRule("blocked.example.test"),
		config.Rule{Host: "*.example.test", Action: config.ActionAllow, HeaderRewrites: openAIRewrites, Routes: []config.Route{
			{Paths: []string{"/admin/**"}, Action: config.ActionDeny},
			{Methods: []string{"POST"}, Paths: []string{"/v1/files/**"}, Action: config.ActionDeny},
			{Methods: []string{"GET", "HEAD"}, Paths: []string{"/v1/models", "/v1/models/*"}, Action: config.ActionAllow},
			{Methods: []string{"POST"}, Paths: []string{"/v1/chat/completions", "/v1/responses"}, Action: config.ActionAllow},
			{Methods: []string{"GET", "POST"}, Paths: []string{"/v1/chat", "/v1/embeddings"}, Action: config.ActionAllow},
		}})
	v2 := newPolicy(b, config.ActionDeny, rules...)
	tg := Target{Host: mustTarget(b, "api.example.test").Host, Method: "GET", Path: "/v1/chat"}
	for _, v := range []struct {
		name string
		p    *Policy
	}{{"policy=exact", exact}, {"policy=v2-20rules", v2}} {
		if d := v.p.Decide(tg); !d.Allowed() {
			b.Fatalf("%s: %+v", v.name, d)
		}
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v.p.Decide(tg)
			}
		})
	}
}

// naiveRoute is the reference route scan FuzzDecideRoutes checks Decide
// against: split segments, recursive globs, first match wins.
func naiveRoute(routes []config.Route, method, path string) (int, bool) {
	var glob func(pat, segs []string) bool
	glob = func(pat, segs []string) bool {
		switch {
		case len(pat) == 0:
			return len(segs) == 0
		case pat[0] == "**":
			for k := 0; k <= len(segs); k++ {
				if glob(pat[1:], segs[k:]) {
					return true
				}
			}
			return false
		case len(segs) == 0:
			return false
		case pat[0] == segs[0] || pat[0] == "*" && segs[0] != "":
			return glob(pat[1:], segs[1:])
		}
		return false
	}
	segs := strings.Split(path[1:], "/")
	for i, rt := range routes {
		deny := rt.Action == config.ActionDeny
		if rt.Methods != nil && !slices.ContainsFunc(rt.Methods, func(m string) bool {
			// A deny route reads methods as an origin may (any case, GET
			// covering HEAD); an allow route byte for byte.
			return m == method || deny && (strings.EqualFold(m, method) || m == "GET" && strings.EqualFold(method, "HEAD"))
		}) {
			continue
		}
		match := rt.Paths == nil
		for _, p := range rt.Paths {
			if !deny && glob(strings.Split(p[1:], "/"), segs) {
				match = true
			}
			// Deny paths: the folded reading (reqpath's own fuzz target,
			// FuzzDenyHoldsUnderFolding, checks folding).
			if g, err := reqpath.ParsePattern(p); deny && err == nil && g.MatchFolded(reqpath.Fold(path)) {
				match = true
			}
		}
		if match {
			return i, rt.Action == config.ActionAllow
		}
	}
	return -1, false
}

// FuzzDecideRoutes checks the route stage of Decide against naiveRoute, on
// the canonical path, and that an ambiguous path is never allowed.
func FuzzDecideRoutes(f *testing.F) {
	for _, s := range []string{"/repos/acme/app", "/user", "/user/", "/admin/x", "/%7ex/y", "/repos/acme/../x", "//", "/repos/acme/app/issues/7/comments", "", "/ADMIN.json", "/a;b"} {
		for _, m := range []string{"GET", "POST", "DELETE", "PATCH", "get", "delete"} {
			f.Add(m, s)
		}
	}
	p := routedPolicy(f)
	host := mustTarget(f, "api.github.com").Host
	rule := p.match("api.github.com")
	f.Fuzz(func(t *testing.T, method, path string) {
		d := p.Decide(Target{Host: host, Method: method, Path: path})
		canon, err := reqpath.Canonical(path)
		if err != nil {
			if d.Allowed() || d.Reason != ReasonAmbiguousPath {
				t.Fatalf("ambiguous %q: %+v", path, d)
			}
			return
		}
		i, allow := naiveRoute(rule.Routes, method, canon)
		if d.Route != i || d.Allowed() != allow || d.Path != canon {
			t.Fatalf("%s %q: Decide route %d allowed %v path %q; naive %d %v %q", method, path, d.Route, d.Allowed(), d.Path, i, allow, canon)
		}
	})
}
