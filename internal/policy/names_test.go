package policy

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/hostport"
)

func TestAllowsNameAndHost(t *testing.T) {
	deny := newPolicy(t, config.ActionDeny,
		allowRule("api.openai.com"),
		allowRule("alt.example", 8443), // allowed, but not on 443
		denyRule("blocked.example"),
		allowRule("::1", 8080),
	)
	allow := newPolicy(t, config.ActionAllow, denyRule("blocked.example"), allowRule("alt.example", 8443))
	var nilPolicy *Policy
	tests := []struct {
		name     string
		p        *Policy
		host     string
		wantName bool // any port
		wantHost bool // port 443
	}{
		{"allow rule", deny, "api.openai.com", true, true},
		{"allow rule, other spelling", deny, "API.OpenAI.com.", true, true},
		{"allow rule on 8443 only", deny, "alt.example", true, false},
		{"deny rule", deny, "blocked.example", false, false},
		{"deny rule, other spelling", deny, "BLOCKED.example.", false, false},
		{"no rule, default deny", deny, "evil.example", false, false},
		{"subdomain of an allowed host", deny, "x.api.openai.com", false, false},
		{"ip rule", deny, "::1", true, false},
		{"ip rule, other spelling", deny, "0:0::1", true, false},
		{"no rule, default allow", allow, "anything.example", true, true},
		{"deny rule under default allow", allow, "blocked.example", false, false},
		{"deny rule under default allow, other spelling", allow, "Blocked.Example.", false, false},
		{"rule on 8443 only under default allow", allow, "alt.example", true, false},
		{"unparsable under default allow", allow, "bad host", false, false},
		{"empty under default allow", allow, "", false, false},
		{"host with a port", allow, "a.example:443", false, false},
		{"nil policy", nilPolicy, "api.openai.com", false, false},
	}
	for _, tt := range tests {
		if got := tt.p.AllowsName(tt.host); got != tt.wantName {
			t.Errorf("%s: AllowsName(%q) = %v, want %v", tt.name, tt.host, got, tt.wantName)
		}
		if got := tt.p.AllowsHost(tt.host); got != tt.wantHost {
			t.Errorf("%s: AllowsHost(%q) = %v, want %v", tt.name, tt.host, got, tt.wantHost)
		}
	}
}

// TestRuleForName: the rule naming a name whatever the port, in any
// spelling; nil without one, for an unparsable name and a nil policy.
func TestRuleForName(t *testing.T) {
	p := newPolicy(t, config.ActionAllow,
		allowRule("alt.example", 8443),
		denyRule("blocked.example"),
		allowRule("*.wild.example"),
	)
	var nilPolicy *Policy
	for _, tt := range []struct {
		p    *Policy
		name string
		want string // the rule's host, "" = nil
	}{
		{p, "alt.example", "alt.example"}, // allowed on 8443 only: still its rule
		{p, "ALT.example.", "alt.example"},
		{p, "blocked.example", "blocked.example"},
		{p, "a.wild.example", "*.wild.example"},
		{p, "wild.example", ""},
		{p, "other.example", ""},
		{p, "bad host", ""},
		{nilPolicy, "alt.example", ""},
	} {
		got := ""
		if r := tt.p.RuleForName(tt.name); r != nil {
			got = r.Host
		}
		if got != tt.want {
			t.Errorf("RuleForName(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// FuzzAllowsName checks AllowsName and AllowsHost against Decide: a name is
// allowed iff Decide allows its canonical form on some port (443 or a port
// some rule lists; no other port can be allowed), and AllowsHost iff
// Decide allows it on 443. A name that does not canonicalise is never
// allowed.
func FuzzAllowsName(f *testing.F) {
	for _, s := range []string{
		"api.openai.com", "API.OPENAI.COM.", "blocked.example", "Blocked.Example", "b.example", "::1", "[::1]",
		"xn--bcher-kva.example", "bücher.example", "127.1", "", "a..b", "a.example:443",
		"a.wild.example", "wild.example", "x.deny.wild.example", "a.ports.example", "10.1.2.3", "10.9.1.1",
	} {
		f.Add(s, "b.example", true, []byte{0x20, 0xfb}, false)
		f.Add(s, "bücher.example", false, []byte(nil), true)
	}
	f.Fuzz(func(t *testing.T, name, ruleHost string, ruleAllow bool, portBytes []byte, defaultAllow bool) {
		if len(name) > 300 || len(ruleHost) > 300 {
			return
		}
		rules := []config.Rule{
			{Host: "api.openai.com", Action: config.ActionAllow},
			{Host: "::1", Action: config.ActionAllow, AllowedPorts: []uint16{8080}},
			{Host: "blocked.example", Action: config.ActionDeny},
			{Host: "*.wild.example", Action: config.ActionAllow, AllowedPorts: []uint16{443, 8443}},
			{Host: "*.deny.wild.example", Action: config.ActionDeny},
			{Host: "*.ports.example", Action: config.ActionAllow, AllowedPorts: []uint16{9000}},
			{Host: "10.0.0.0/8", Action: config.ActionAllow},
			{Host: "10.9.0.0/16", Action: config.ActionDeny},
		}
		if h, err := hostport.ParseHost(ruleHost); err == nil && !slices.ContainsFunc(rules, func(r config.Rule) bool { return r.Host == h }) {
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
		gotName, gotHost := p.AllowsName(name), p.AllowsHost(name)
		canon, err := hostport.ParseHost(name)
		if err != nil {
			if gotName || gotHost {
				t.Fatalf("AllowsName(%q), AllowsHost = %v, %v for a name that does not parse", name, gotName, gotHost)
			}
			return
		}
		ports := []uint16{443, 1, 65535}
		for _, r := range rules {
			ports = append(ports, r.AllowedPorts...)
		}
		anyPort := false
		for _, port := range ports {
			if p.Decide(Target{Host: hostport.HostPort{Host: canon, Port: port, HasPort: true}}).Allowed() {
				anyPort = true
			}
		}
		if gotName != anyPort {
			t.Fatalf("AllowsName(%q) = %v, but Decide allows it on some port: %v", name, gotName, anyPort)
		}
		if want := p.Decide(Target{Host: hostport.HostPort{Host: canon}}).Allowed(); gotHost != want {
			t.Fatalf("AllowsHost(%q) = %v, Decide on 443 = %v", name, gotHost, want)
		}
		if gotHost && !gotName {
			t.Fatalf("AllowsHost(%q) without AllowsName", name)
		}
	})
}

// TestNameRuleMatchesAllowsName: NameRule's allowed is AllowsName, and its
// rule is the one Decide picks for the canonical name (nil when no rule
// names it), which the DNS guard hands to its address filter.
func TestNameRuleMatchesAllowsName(t *testing.T) {
	p := newPolicy(t, config.ActionDeny,
		allowRule("api.openai.com"),
		allowRule("*.example.test"),
		denyRule("bad.example.test"),
	)
	allow := newPolicy(t, config.ActionAllow, denyRule("blocked.example"))
	tests := []struct {
		p        *Policy
		name     string
		wantRule string // "" = nil
		want     bool
	}{
		{p, "API.openai.com.", "api.openai.com", true},
		{p, "x.y.example.test", "*.example.test", true},
		{p, "bad.example.test", "bad.example.test", false},
		{p, "other.example", "", false},
		{p, "bad name", "", false},
		{allow, "anything.example", "", true},
		{allow, "blocked.example", "blocked.example", false},
		{nil, "api.openai.com", "", false},
	}
	for _, tt := range tests {
		r, ok := tt.p.NameRule(tt.name)
		if ok != tt.want || ok != tt.p.AllowsName(tt.name) {
			t.Errorf("NameRule(%q) allowed = %v, want %v (= AllowsName)", tt.name, ok, tt.want)
		}
		got := ""
		if r != nil {
			got = r.Host
		}
		if got != tt.wantRule {
			t.Errorf("NameRule(%q) rule = %q, want %q", tt.name, got, tt.wantRule)
		}
	}
}
