package policy

import (
	"testing"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/hostport"
)

// TestDecideConnection: a connection is decided on host and port only; a
// rule with routes allows the connection (its requests are decided one by
// one with Decide), whatever route would refuse an empty path. On ee87e5f
// the CONNECT path asked Decide with no path and got ambiguous_path for
// every routed host (review D1).
func TestDecideConnection(t *testing.T) {
	p := mustCompile(t, config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{
		{Host: "routed.example", Action: config.ActionAllow, Routes: []config.Route{{Methods: []string{"GET"}, Paths: []string{"/user"}, Action: config.ActionAllow}}},
		{Host: "plain.example", Action: config.ActionAllow},
		{Host: "ports.example", Action: config.ActionAllow, AllowedPorts: []uint16{8443}},
		{Host: "*.wild.example", Action: config.ActionAllow, Routes: []config.Route{{Paths: []string{"/ok/**"}, Action: config.ActionAllow}}},
		{Host: "blocked.example", Action: config.ActionDeny},
	}})
	tests := []struct {
		authority string
		kind      Kind
		reason    Reason
	}{
		{"routed.example:443", Allow, ReasonRuleAllow},
		{"routed.example", Allow, ReasonRuleAllow},
		{"routed.example:8443", Deny, ReasonPortNotAllowed},
		{"a.wild.example:443", Allow, ReasonRuleAllow},
		{"plain.example:443", Allow, ReasonRuleAllow},
		{"ports.example:8443", Allow, ReasonRuleAllow},
		{"ports.example:443", Deny, ReasonPortNotAllowed},
		{"blocked.example:443", Deny, ReasonRuleDeny},
		{"other.example:443", Deny, ReasonDefaultDeny},
	}
	for _, tt := range tests {
		hp, err := hostport.Parse(tt.authority)
		if err != nil {
			t.Fatal(err)
		}
		d := p.DecideConnection(hp)
		if d.Kind != tt.kind || d.Reason != tt.reason || d.Route != -1 || d.Path != "" {
			t.Errorf("DecideConnection(%s) = %v/%s route %d path %q, want %v/%s, no route", tt.authority, d.Kind, d.Reason, d.Route, d.Path, tt.kind, tt.reason)
		}
		if !hp.HasPort || hp.Port == DefaultPort {
			if got := p.AllowsHost(hp.Host); got != d.Allowed() {
				t.Errorf("%s: AllowsHost %v, DecideConnection allowed %v", tt.authority, got, d.Allowed())
			}
		}
		if d.Rule != nil && !p.Owns(d.Rule) {
			t.Errorf("%s: the policy does not own its own decision's rule", tt.authority)
		}
	}
	if d := (*Policy)(nil).DecideConnection(hostport.HostPort{Host: "plain.example"}); d.Allowed() {
		t.Error("a nil policy allowed a connection")
	}
	if d := p.DecideConnection(hostport.HostPort{}); d.Allowed() {
		t.Error("an empty host was allowed")
	}
}

// TestOwns: a rule of another compiled policy, even an equal one at the
// same index, is not owned.
func TestOwns(t *testing.T) {
	cfg := config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{{Host: "a.example", Action: config.ActionAllow}}}
	p1, p2 := mustCompile(t, cfg), mustCompile(t, cfg)
	d := p1.DecideConnection(hostport.HostPort{Host: "a.example"})
	if !p1.Owns(d.Rule) || p2.Owns(d.Rule) || p1.Owns(nil) || (*Policy)(nil).Owns(d.Rule) {
		t.Errorf("Owns: own %v, other %v, nil rule %v, nil policy %v", p1.Owns(d.Rule), p2.Owns(d.Rule), p1.Owns(nil), (*Policy)(nil).Owns(d.Rule))
	}
	forged := *d.Rule
	if p1.Owns(&forged) {
		t.Error("a copy of a rule is owned")
	}
}
