package policy

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/hostport"
)

// outcome is the comparable projection of a Decision (Rule by host).
type outcome struct {
	Kind   Kind
	Reason Reason
	Port   uint16
	Rule   string // the rule's host, "" when Rule is nil
}

func project(d Decision) outcome {
	o := outcome{Kind: d.Kind, Reason: d.Reason, Port: d.Port}
	if d.Rule != nil {
		o.Rule = d.Rule.Host
	}
	return o
}

func allowed(host string, port uint16) outcome {
	return outcome{Kind: Allow, Reason: ReasonRuleAllow, Port: port, Rule: host}
}

func portDenied(host string, port uint16) outcome {
	return outcome{Kind: Deny, Reason: ReasonPortNotAllowed, Port: port, Rule: host}
}

func defaultDenied(port uint16) outcome {
	return outcome{Kind: Deny, Reason: ReasonDefaultDeny, Port: port}
}

type decideCase struct {
	authority string // parsed with hostport.Parse
	want      outcome
}

// runDecide decides every case against p.
func runDecide(t *testing.T, p *Policy, tests []decideCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.authority, func(t *testing.T) {
			t.Parallel()
			d := p.Decide(mustTarget(t, tt.authority))
			if d := cmp.Diff(tt.want, project(d)); d != "" {
				t.Errorf("Decide(%q) (-want +got):\n%s", tt.authority, d)
			}
			if got, want := d.Allowed(), tt.want.Kind != Deny; got != want {
				t.Errorf("Decide(%q).Allowed() = %v, want %v", tt.authority, got, want)
			}
		})
	}
}

func mustTarget(t testing.TB, authority string) Target {
	t.Helper()
	hp, err := hostport.Parse(authority)
	if err != nil {
		t.Fatalf("hostport.Parse(%q) error = %v", authority, err)
	}
	return Target{Host: hp, Method: "GET", Path: "/"}
}

func mustCompile(t testing.TB, p config.Policy) *Policy {
	t.Helper()
	c, err := Compile(p)
	if err != nil {
		t.Fatalf("Compile() error = %v", err)
	}
	return c
}

// newPolicy compiles a policy; rules get their Index from their position.
func newPolicy(t testing.TB, def config.Action, rules ...config.Rule) *Policy {
	t.Helper()
	for i := range rules {
		rules[i].Index = i
		if rules[i].RawHost == "" {
			rules[i].RawHost = rules[i].Host
		}
	}
	return mustCompile(t, config.Policy{DefaultAction: def, Rules: rules})
}

func allowRule(host string, ports ...uint16) config.Rule {
	return config.Rule{Host: host, Action: config.ActionAllow, AllowedPorts: ports}
}

func denyRule(host string) config.Rule {
	return config.Rule{Host: host, Action: config.ActionDeny}
}

var openAIRewrites = []config.HeaderRewrite{{Name: "Authorization", Value: "Bearer {value}", SecretRef: "openai-api-key"}}

// referencePolicy is the shipped reference config's policy.
func referencePolicy(t testing.TB) *Policy {
	t.Helper()
	return newPolicy(t, config.ActionDeny,
		config.Rule{Host: "api.openai.com", Action: config.ActionAllow, HeaderRewrites: openAIRewrites},
		config.Rule{Host: "api.anthropic.com", Action: config.ActionAllow, HeaderRewrites: []config.HeaderRewrite{
			{Name: "x-api-key", Value: "{value}", SecretRef: "anthropic-api-key"},
			{Name: "anthropic-version", Value: "2023-06-01"},
		}},
	)
}

// The 13 tests of reference §9.1 (src/allowlist.rs), by name.

func TestAllowKnownHost(t *testing.T) {
	runDecide(t, referencePolicy(t), []decideCase{
		{"api.openai.com", allowed("api.openai.com", 443)},
		{"api.anthropic.com", allowed("api.anthropic.com", 443)},
	})
}

func TestDenyUnknownHost(t *testing.T) {
	runDecide(t, referencePolicy(t), []decideCase{
		{"evil.com", defaultDenied(443)},
		{"openai.com", defaultDenied(443)},
		{"sub.api.openai.com", defaultDenied(443)},
		{"api.openai.com.evil.com", defaultDenied(443)},
		{"1.2.3.4", defaultDenied(443)},
		{"evil.com:8080", defaultDenied(8080)},
	})
}

func TestCaseInsensitive(t *testing.T) {
	runDecide(t, referencePolicy(t), []decideCase{
		{"API.OPENAI.COM", allowed("api.openai.com", 443)},
		{"Api.OpenAI.Com", allowed("api.openai.com", 443)},
		{"api.openai.com.", allowed("api.openai.com", 443)}, // one trailing dot is canonicalised away
	})
}

func TestStripPort(t *testing.T) {
	runDecide(t, referencePolicy(t), []decideCase{
		{"api.openai.com:443", allowed("api.openai.com", 443)},
		{"API.OPENAI.COM.:443", allowed("api.openai.com", 443)},
	})
}

func TestExplicitDenyRule(t *testing.T) {
	p := newPolicy(t, config.ActionAllow, denyRule("blocked.com"), allowRule("ok.com", 443, 8443))
	ruleDenied := outcome{Kind: Deny, Reason: ReasonRuleDeny, Port: 443, Rule: "blocked.com"}
	runDecide(t, p, []decideCase{
		{"blocked.com", ruleDenied},
		{"BLOCKED.com", ruleDenied},
		{"blocked.com.", ruleDenied},
		{"blocked.com:443", ruleDenied},
		{"blocked.com:8443", outcome{Kind: Deny, Reason: ReasonRuleDeny, Port: 8443, Rule: "blocked.com"}},
		{"other.com", outcome{Kind: DefaultAllow, Reason: ReasonDefaultAllow, Port: 443}},
		{"ok.com:8443", allowed("ok.com", 8443)},
	})
}

func TestAllowReturnsRuleWithRewrites(t *testing.T) {
	p := referencePolicy(t)
	for _, tt := range []struct {
		authority string
		want      []config.HeaderRewrite
	}{
		{"api.openai.com", openAIRewrites},
		{"api.anthropic.com:443", []config.HeaderRewrite{
			{Name: "x-api-key", Value: "{value}", SecretRef: "anthropic-api-key"},
			{Name: "anthropic-version", Value: "2023-06-01"},
		}},
	} {
		d := p.Decide(mustTarget(t, tt.authority))
		if d.Kind != Allow || d.Rule == nil {
			t.Fatalf("Decide(%q) = %+v, want Allow with a rule", tt.authority, d)
		}
		if d := cmp.Diff(tt.want, d.Rule.HeaderRewrites); d != "" {
			t.Errorf("Decide(%q).Rule.HeaderRewrites (-want +got):\n%s", tt.authority, d)
		}
		if r := &p.rules[d.Rule.Index]; r != d.Rule {
			t.Errorf("Decide(%q).Rule = %p, want the compiled rule %p", tt.authority, d.Rule, r)
		}
	}
	// A rule that does not allow the port is still named, for the log.
	d := p.Decide(mustTarget(t, "api.openai.com:8443"))
	if d.Rule == nil || d.Rule.Host != "api.openai.com" || d.Allowed() {
		t.Errorf("Decide(api.openai.com:8443) = %+v, want a denial naming the rule", d)
	}
}

func TestDefaultAllowReturnsBareRule(t *testing.T) {
	p := newPolicy(t, config.ActionAllow, config.Rule{Host: "api.openai.com", Action: config.ActionAllow, HeaderRewrites: openAIRewrites})
	runDecide(t, p, []decideCase{
		{"unknown.example", outcome{Kind: DefaultAllow, Reason: ReasonDefaultAllow, Port: 443}},
	})
	if d := p.Decide(mustTarget(t, "unknown.example")); d.Rule != nil {
		t.Errorf("Decide(unknown.example) = %+v, want no rule (so no rewrites)", d)
	}
}

func TestIPv6Host(t *testing.T) {
	p := newPolicy(t, config.ActionDeny, allowRule("::1", 443, 8080), allowRule("2001:db8::1"))
	runDecide(t, p, []decideCase{
		{"[::1]:8080", allowed("::1", 8080)},
		{"[::1]", allowed("::1", 443)},
		{"[::1]:443", allowed("::1", 443)},
		{"[0:0:0:0:0:0:0:1]:8080", allowed("::1", 8080)},
		{"[::1]:9999", portDenied("::1", 9999)},
		{"[2001:DB8:0::1]", allowed("2001:db8::1", 443)},
		{"[::2]", defaultDenied(443)},
		{"127.0.0.1", defaultDenied(443)},
	})
}

func TestNon443PortDeniedByDefault(t *testing.T) {
	runDecide(t, referencePolicy(t), []decideCase{
		{"api.openai.com:8443", portDenied("api.openai.com", 8443)},
		{"api.openai.com:80", portDenied("api.openai.com", 80)},
		{"api.openai.com:1", portDenied("api.openai.com", 1)},
		{"api.openai.com:65535", portDenied("api.openai.com", 65535)},
	})
}

func Test443PortAllowedByDefault(t *testing.T) {
	runDecide(t, referencePolicy(t), []decideCase{
		{"api.openai.com:443", allowed("api.openai.com", 443)},
	})
}

func TestExplicitPortAllowance(t *testing.T) {
	p := newPolicy(t, config.ActionDeny, allowRule("a.example", 443, 8443), allowRule("b.example", 8443))
	runDecide(t, p, []decideCase{
		{"a.example:8443", allowed("a.example", 8443)},
		{"a.example:443", allowed("a.example", 443)},
		{"a.example:9999", portDenied("a.example", 9999)},
		// An explicit list replaces the default: 443 is not implied.
		{"b.example:8443", allowed("b.example", 8443)},
		{"b.example:443", portDenied("b.example", 443)},
	})
}

func TestNoPortMeans443(t *testing.T) {
	p := newPolicy(t, config.ActionDeny, allowRule("a.example"), allowRule("b.example", 8443))
	runDecide(t, p, []decideCase{
		{"a.example", allowed("a.example", 443)},
		{"b.example", portDenied("b.example", 443)},
	})
}

func TestDefaultAllowDeniesNon443(t *testing.T) {
	p := newPolicy(t, config.ActionAllow)
	runDecide(t, p, []decideCase{
		{"unknown.example:8080", outcome{Kind: Deny, Reason: ReasonPortNotAllowed, Port: 8080}},
		{"unknown.example:80", outcome{Kind: Deny, Reason: ReasonPortNotAllowed, Port: 80}},
		{"unknown.example:443", outcome{Kind: DefaultAllow, Reason: ReasonDefaultAllow, Port: 443}},
	})
}

// Beyond the reference.

func TestDecideFailsClosed(t *testing.T) {
	p := newPolicy(t, config.ActionAllow)
	var nilPolicy *Policy
	tests := []struct {
		name string
		p    *Policy
		t    Target
		want outcome
	}{
		{"zero target under default allow", p, Target{}, defaultDenied(443)},
		{"empty host with port", p, Target{Host: hostport.HostPort{Port: 443, HasPort: true}}, defaultDenied(443)},
		{"nil policy", nilPolicy, mustTarget(t, "a.example"), defaultDenied(443)},
		{"port 0 from a hand-built target", p, Target{Host: hostport.HostPort{Host: "a.example", HasPort: true}}, outcome{Kind: Deny, Reason: ReasonPortNotAllowed}},
	}
	for _, tt := range tests {
		if d := cmp.Diff(tt.want, project(tt.p.Decide(tt.t))); d != "" {
			t.Errorf("%s: Decide(%+v) (-want +got):\n%s", tt.name, tt.t, d)
		}
	}
	if (Decision{}).Allowed() {
		t.Error("zero Decision is allowed")
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name    string
		policy  config.Policy
		wantErr string
	}{
		{"empty default action", config.Policy{}, `egress_policy.default_action: unknown action ""`},
		{"bad default action", config.Policy{DefaultAction: "Allow"}, `egress_policy.default_action: unknown action "Allow"`},
		{"bad rule action", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{{Host: "a.example", Action: "maybe"}}},
			`egress_policy.rules[0]: unknown action "maybe"`},
		{"non-canonical host", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{allowRule("a.example"), allowRule("API.openai.com")}},
			`egress_policy.rules[1]: host "API.openai.com" is not canonical (want "api.openai.com")`},
		{"trailing dot", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{allowRule("a.example.")}},
			`egress_policy.rules[0]: host "a.example." is not canonical (want "a.example")`},
		{"bracketed ipv6", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{allowRule("[::1]")}},
			`egress_policy.rules[0]: host "[::1]" is not canonical (want "::1")`},
		{"bad wildcard", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{allowRule("a.*.example.com")}},
			`egress_policy.rules[0]: host: `},
		{"public suffix wildcard", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{allowRule("*.co.uk")}},
			`egress_policy.rules[0]: host: invalid host "*.co.uk": "co.uk" is a public suffix`},
		{"non-canonical wildcard", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{allowRule("*.Example.com")}},
			`egress_policy.rules[0]: host "*.Example.com" is not canonical (want "*.example.com")`},
		{"wide cidr allow", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{allowRule("10.0.0.0/7")}},
			`egress_policy.rules[0]: CIDR 10.0.0.0/7 is too wide for an allow rule`},
		{"wide v6 cidr allow", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{allowRule("2000::/3")}},
			`egress_policy.rules[0]: CIDR 2000::/3 is too wide for an allow rule`},
		{"duplicate wildcard", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{allowRule("*.example.com"), denyRule("*.example.com")}},
			`egress_policy.rules[1]: duplicate host "*.example.com" (also rules[0])`},
		{"duplicate cidr", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{denyRule("10.0.0.0/8"), denyRule("10.0.0.0/8")}},
			`egress_policy.rules[1]: duplicate host "10.0.0.0/8" (also rules[0])`},
		{"routes on deny", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{{Host: "a.example", Action: config.ActionDeny, Routes: []config.Route{{Action: config.ActionAllow}}}}},
			`egress_policy.rules[0]: routes on a deny rule`},
		{"non-canonical route path", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{{Host: "a.example", Action: config.ActionAllow, Routes: []config.Route{{Paths: []string{"/%7e"}, Action: config.ActionAllow}}}}},
			`egress_policy.rules[0]: routes[0]: path "/%7e" is not canonical (want "/~")`},
		{"bad route path", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{{Host: "a.example", Action: config.ActionAllow, Routes: []config.Route{{Paths: []string{"/a*"}, Action: config.ActionAllow}}}}},
			`egress_policy.rules[0]: routes[0]: invalid path pattern`},
		{"bad route action", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{{Host: "a.example", Action: config.ActionAllow, Routes: []config.Route{{}}}}},
			`egress_policy.rules[0]: routes[0]: unknown action ""`},
		{"empty host", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{allowRule("")}},
			`egress_policy.rules[0]: host: `},
		{"duplicate host", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{allowRule("a.example"), denyRule("a.example")}},
			`egress_policy.rules[1]: duplicate host "a.example" (also rules[0])`},
		{"empty allowed_ports", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{{Host: "a.example", Action: config.ActionAllow, AllowedPorts: []uint16{}}}},
			`egress_policy.rules[0]: allowed_ports is empty (omit it to allow 443 only)`},
		{"port 0", config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{allowRule("a.example", 443, 0)}},
			`egress_policy.rules[0]: allowed_ports contains port 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Compile(tt.policy)
			if err == nil {
				t.Fatalf("Compile() = %v, want error %q", p, tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Errorf("Compile() error = %q, want prefix %q", err, tt.wantErr)
			}
		})
	}
}

func TestCompileCopiesConfig(t *testing.T) {
	rules := []config.Rule{{
		Host: "a.example", Action: config.ActionAllow, AllowedPorts: []uint16{8443},
		HeaderRewrites: []config.HeaderRewrite{{Name: "X-A", Value: "v"}},
	}}
	p := mustCompile(t, config.Policy{DefaultAction: config.ActionDeny, Rules: rules})
	rules[0].AllowedPorts[0] = 9999
	rules[0].HeaderRewrites[0].Value = "mutated"
	rules[0].Host = "b.example"

	d := p.Decide(mustTarget(t, "a.example:8443"))
	if d.Kind != Allow {
		t.Fatalf("Decide(a.example:8443) = %+v after mutating the config, want Allow", d)
	}
	if got := d.Rule.HeaderRewrites[0].Value; got != "v" {
		t.Errorf("rewrite value = %q after mutating the config, want %q", got, "v")
	}
	if d := cmp.Diff([]uint16{8443}, d.Rule.AllowedPorts); d != "" {
		t.Errorf("Rule.AllowedPorts (-want +got):\n%s", d)
	}
}

func TestCompileSetsIndex(t *testing.T) {
	// A hand-built config without Index: the compiled rules are numbered
	// by position, the index the rewrites of a generation are keyed by.
	p := mustCompile(t, config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{allowRule("b.example"), allowRule("a.example")}})
	for i, r := range p.rules {
		if r.Index != i {
			t.Errorf("rules[%d].Index = %d", i, r.Index)
		}
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Deny: "deny", Allow: "allow", DefaultAllow: "default_allow", Kind(7): "Kind(7)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}

func TestDecideDoesNotAllocate(t *testing.T) {
	p := referencePolicy(t)
	targets := []Target{mustTarget(t, "api.openai.com"), mustTarget(t, "evil.com:8080"), mustTarget(t, "api.openai.com:8443")}
	for _, tg := range targets {
		if n := testing.AllocsPerRun(100, func() { _ = p.Decide(tg) }); n != 0 {
			t.Errorf("Decide(%v) allocates %v times, want 0", tg.Host, n)
		}
	}
}

// naiveMatch finds the rule for host by linear scans, written straight from
// the precedence text: exact, then the longest wildcard suffix (one or more
// labels before it), then the longest CIDR containing an IP-literal host.
func naiveMatch(rules []config.Rule, host string) (config.Rule, bool) {
	for _, r := range rules {
		if r.Host == host {
			return r, true
		}
	}
	best, found := config.Rule{}, false
	for _, r := range rules {
		suffix, ok := strings.CutPrefix(r.Host, "*.")
		if ok && strings.HasSuffix(host, "."+suffix) && len(host) > len(suffix)+1 && (!found || len(r.Host) > len(best.Host)) {
			if _, err := netip.ParseAddr(host); err == nil {
				continue
			}
			best, found = r, true
		}
	}
	if found {
		return best, true
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return best, false
	}
	bits := -1
	for _, r := range rules {
		if pfx, err := netip.ParsePrefix(r.Host); err == nil && pfx.Contains(a) && pfx.Bits() > bits {
			best, bits, found = r, pfx.Bits(), true
		}
	}
	return best, found
}

// naive is the reference matcher the fuzz target checks Decide against: a
// linear scan, written straight from the reference text.
func naive(rules []config.Rule, defaultAllow bool, t Target) outcome {
	port := uint16(443)
	if t.Host.HasPort {
		port = t.Host.Port
	}
	if t.Host.Host == "" {
		return defaultDenied(port)
	}
	if r, ok := naiveMatch(rules, t.Host.Host); ok {
		if r.Action == config.ActionDeny {
			return outcome{Kind: Deny, Reason: ReasonRuleDeny, Port: port, Rule: r.Host}
		}
		ok := port == 443
		if r.AllowedPorts != nil {
			ok = slices.Contains(r.AllowedPorts, port)
		}
		if ok {
			return allowed(r.Host, port)
		}
		return portDenied(r.Host, port)
	}
	switch {
	case !defaultAllow:
		return defaultDenied(port)
	case port == 443:
		return outcome{Kind: DefaultAllow, Reason: ReasonDefaultAllow, Port: port}
	default:
		return outcome{Kind: Deny, Reason: ReasonPortNotAllowed, Port: port}
	}
}

// FuzzDecide checks Decide against the naive matcher, and two safety
// invariants directly: under default deny nothing is allowed that no allow
// rule names, and nothing is allowed on a port that is not permitted.
func FuzzDecide(f *testing.F) {
	for _, s := range []string{
		"api.openai.com", "API.OPENAI.COM", "api.openai.com:443", "api.openai.com:8443", "evil.com",
		"[::1]:8080", "[::1]", "blocked.com.", "x@blocked.com", "127.1", "b.example:8443", "",
		"x.example.com", "example.com", "a.internal.example.com", "internal.example.com", "api.example.com",
		"10.2.3.4:8080", "10.1.2.3", "[2001:db8::5]", "x.y.z.example.com",
	} {
		f.Add(s, "*.y.z.example.com", false, []byte(nil), false)
		f.Add(s, "10.2.0.0/16", false, []byte(nil), false)
		f.Add(s, "b.example", true, []byte{0x20, 0xfb, 0x01, 0xbb}, false) // ports 8443, 443
		f.Add(s, "blocked.com", false, []byte(nil), true)
	}
	f.Fuzz(func(t *testing.T, authority, ruleHost string, ruleAllow bool, portBytes []byte, defaultAllow bool) {
		if len(authority) > 300 || len(ruleHost) > 300 {
			return // long names are hostport's business; keep minimisation fast
		}
		rules := []config.Rule{
			{Host: "api.openai.com", Action: config.ActionAllow, HeaderRewrites: openAIRewrites},
			{Host: "::1", Action: config.ActionAllow, AllowedPorts: []uint16{443, 8080}},
			{Host: "blocked.example", Action: config.ActionDeny},
			{Host: "*.example.com", Action: config.ActionAllow},
			{Host: "*.internal.example.com", Action: config.ActionDeny},
			{Host: "api.example.com", Action: config.ActionDeny},
			{Host: "10.0.0.0/8", Action: config.ActionAllow, AllowedPorts: []uint16{443, 8080}},
			{Host: "10.1.0.0/16", Action: config.ActionDeny},
			{Host: "2001:db8::/32", Action: config.ActionAllow},
		}
		h, err := hostport.ParseHost(ruleHost)
		if hostport.IsWildcard(ruleHost) {
			h, _, err = hostport.ParseWildcard(ruleHost)
		} else if hostport.IsCIDR(ruleHost) {
			var pfx netip.Prefix
			pfx, h, err = hostport.ParseCIDR(ruleHost)
			if err == nil && ruleAllow && pfx.Bits() < 32 && (pfx.Addr().Is6() || pfx.Bits() < 8) {
				err = fmt.Errorf("too wide")
			}
		}
		if err == nil && !slices.ContainsFunc(rules, func(r config.Rule) bool { return r.Host == h }) {
			r := config.Rule{Host: h, Action: config.ActionDeny}
			if ruleAllow {
				r.Action = config.ActionAllow
			}
			for i := 0; i+1 < len(portBytes) && i < 16; i += 2 {
				if p := binary.BigEndian.Uint16(portBytes[i:]); p != 0 {
					r.AllowedPorts = append(r.AllowedPorts, p)
				}
			}
			rules = append(rules, r)
		}
		def := config.ActionDeny
		if defaultAllow {
			def = config.ActionAllow
		}
		p, err := Compile(config.Policy{DefaultAction: def, Rules: rules})
		if err != nil {
			t.Fatalf("Compile() error = %v", err)
		}

		targets := []Target{
			// Raw, possibly non-canonical: must not panic, must fail closed.
			{Host: hostport.HostPort{Host: authority}},
		}
		if hp, err := hostport.Parse(authority); err == nil {
			targets = append(targets, Target{Host: hp})
		}
		for _, tg := range targets {
			d := p.Decide(tg)
			want := naive(rules, defaultAllow, tg)
			if diff := cmp.Diff(want, project(d)); diff != "" {
				t.Fatalf("Decide(%+v) vs naive matcher (-want +got):\n%s", tg.Host, diff)
			}
			if !d.Allowed() {
				continue
			}
			port := tg.Host.PortOr(443)
			named := slices.IndexFunc(rules, func(r config.Rule) bool {
				m, ok := naiveMatch(rules, tg.Host.Host)
				return ok && m.Host == r.Host && r.Action == config.ActionAllow
			})
			if !defaultAllow && named < 0 {
				t.Fatalf("Decide(%+v) allowed a host no allow rule names under default deny", tg.Host)
			}
			permitted := port == 443
			if named >= 0 && rules[named].AllowedPorts != nil {
				permitted = slices.Contains(rules[named].AllowedPorts, port)
			}
			if !permitted {
				t.Fatalf("Decide(%+v) allowed port %d, which is not permitted", tg.Host, port)
			}
		}
	})
}

func BenchmarkDecide(b *testing.B) {
	rules := []config.Rule{{Host: "api.openai.com", Action: config.ActionAllow, HeaderRewrites: openAIRewrites}}
	for i := range 200 {
		rules = append(rules, config.Rule{Host: fmt.Sprintf("host-%d.example.com", i), Action: config.ActionAllow, AllowedPorts: []uint16{443, 8443, 9000}})
	}
	rules = append(rules, config.Rule{Host: "blocked.example", Action: config.ActionDeny})
	p := mustCompile(b, config.Policy{DefaultAction: config.ActionDeny, Rules: rules})
	for _, name := range []string{"api.openai.com", "host-150.example.com:9000", "api.openai.com:8443", "blocked.example", "unknown.example.org"} {
		tg := mustTarget(b, name)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Decide(tg)
			}
		})
	}
}
