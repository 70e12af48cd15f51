// Package policy is BotBox's compiled egress allowlist: it decides, for a
// canonical request target, whether the request may leave, under which rule
// and why.
//
// Compile turns the validated config.Policy into an immutable *Policy once,
// at load time; Decide is then a map lookup and a short port scan, with no
// I/O, no logging and no allocation, safe for concurrent use. Hot reload
// swaps the whole *Policy (one snapshot per request), never mutates one.
//
// Semantics (reference §3.3 step 5), with port = Target.Host.PortOr(443):
//
//   - a rule names the host, action allow: Allow (ReasonRuleAllow) iff port
//     is in the rule's allowed_ports, or port == 443 when allowed_ports is
//     omitted; otherwise Deny (ReasonPortNotAllowed);
//   - a rule names the host, action deny: Deny (ReasonRuleDeny), even under
//     default allow;
//   - no rule, default allow: DefaultAllow (ReasonDefaultAllow, no rule, so
//     no header rewrites) iff port == 443, else Deny (ReasonPortNotAllowed);
//   - no rule, default deny: Deny (ReasonDefaultDeny).
//
// Hosts match exactly on their canonical form (package hostport: lowercase,
// punycode, no trailing dot, canonical IP text), so case, a trailing dot or
// IDNA spelling cannot dodge a deny rule (reference §10.3 #3).
//
// # Extension points
//
// Decide is written as two stages so that the roadmap's richer policy (SPEC
// §5.4) extends it instead of rewriting it:
//
//  1. match(Target) finds the candidate rule. Today it is one stage, the
//     exact-host index (a map keyed by canonical host). Further stages slot
//     in after it, most specific first: wildcard hosts ("*.example.com", a
//     suffix index walked label by label, longest suffix first) and, for IP
//     literals, CIDR rules (netip.Prefix, longest prefix first). With
//     deny-overrides, match collects every matching rule and a deny among
//     them wins.
//  2. verdict(rule, port) applies the rule's conditions. Today that is the
//     action and allowed_ports; per-rule methods and paths become further
//     conditions on Rule, checked against the Target (which already carries
//     Method and Path), each with its own Reason.
//
// A report (shadow) mode is a flag on Policy: Decide still computes the real
// decision, and Decision gains a field telling the caller to forward while
// logging the would-be denial. Reason is a closed enum, so each addition is
// a new constant and metric/log label sets stay bounded.
//
// Only exact hosts are implemented now; Compile refuses anything else.
//
// Two port-agnostic questions sit beside Decide: AllowsHost (port 443, the
// TLS interception authorizer's question about an SNI name) and AllowsName
// (any port, the DNS guard's question). Both canonicalise their argument, so
// callers never hand-build a Target.
//
// The package does not parse Host headers (package hostport does), apply
// header rewrites (package rewrite does, for Decision.Rule), or log.
//
// Typical use:
//
//	p, err := policy.Compile(cfg.Policy) // at load
//	...
//	hp, err := hostport.Parse(r.Host)
//	d := p.Decide(policy.Target{Host: hp, Method: r.Method, Path: r.URL.Path})
//	if !d.Allowed() { /* 403, reason d.Reason */ }
//	...
//	p.AllowsName("api.openai.com") // DNS guard: may this name resolve at all?
package policy

import (
	"errors"
	"fmt"
	"slices"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/hostport"
)

// DefaultPort is the port a target without an explicit port is evaluated
// on, and the only port allowed when a rule omits allowed_ports and under
// default allow (reference: the proxy always originates TLS).
const DefaultPort = 443

// Kind is the outcome of a decision. The zero value is Deny, so a zero
// Decision never allows anything.
type Kind int

// The decision kinds.
const (
	// Deny: the request must not leave (403 host not allowed).
	Deny Kind = iota
	// Allow: a rule names the host and allows the port; the rule's header
	// rewrites apply.
	Allow
	// DefaultAllow: no rule names the host, default_action is allow and the
	// port is 443; no header rewrites apply.
	DefaultAllow
)

// String returns the log form: "deny", "allow" or "default_allow".
func (k Kind) String() string {
	switch k {
	case Deny:
		return "deny"
	case Allow:
		return "allow"
	case DefaultAllow:
		return "default_allow"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Reason says why a decision was made. It is a closed enum (the constants
// below), safe as a log value or metric label.
type Reason string

// The reasons.
const (
	// ReasonRuleAllow: an allow rule names the host and permits the port.
	ReasonRuleAllow Reason = "rule_allow"
	// ReasonRuleDeny: a deny rule names the host.
	ReasonRuleDeny Reason = "rule_deny"
	// ReasonDefaultAllow: no rule, default allow, port 443.
	ReasonDefaultAllow Reason = "default_allow"
	// ReasonDefaultDeny: no rule, default deny (also: an empty target host).
	ReasonDefaultDeny Reason = "default_deny"
	// ReasonPortNotAllowed: the host is allowed (by a rule or by default)
	// but not on this port.
	ReasonPortNotAllowed Reason = "port_not_allowed"
)

// Target is what a decision is about.
type Target struct {
	// Host is the canonical host and optional port, as returned by
	// hostport.Parse. A hand-built, non-canonical Host matches no rule.
	Host hostport.HostPort
	// Method and Path are the request's; no rule condition uses them yet
	// (reserved for per-rule methods and paths).
	Method, Path string
}

// Rule is one compiled rule: the configured rule (its canonical Host, its
// Index in egress_policy.rules, Action, AllowedPorts, HeaderRewrites). It
// belongs to its Policy and must not be modified (slices included).
type Rule struct {
	config.Rule
}

// AllowsPort reports whether the rule's port list permits port (the action
// is not considered).
func (r *Rule) AllowsPort(port uint16) bool {
	if r.AllowedPorts == nil {
		return port == DefaultPort
	}
	return slices.Contains(r.AllowedPorts, port)
}

// Decision is the result of Policy.Decide.
type Decision struct {
	// Kind is the outcome.
	Kind Kind
	// Rule is the rule that names the host, nil when none does (default
	// allow or default deny). It is set for a Deny too (a deny rule, or an
	// allow rule on a port it does not permit), so logs can name the rule.
	Rule *Rule
	// Reason says why.
	Reason Reason
	// Port is the effective port the decision was made for (443 when the
	// target had none).
	Port uint16
}

// Allowed reports whether the request may be forwarded (Allow or
// DefaultAllow).
func (d Decision) Allowed() bool {
	return d.Kind == Allow || d.Kind == DefaultAllow
}

// Policy is a compiled, immutable egress policy, safe for concurrent use.
type Policy struct {
	defaultAllow bool
	// rules holds every rule in file order; the indexes point into it.
	rules []Rule
	// exact indexes rules by canonical host (match stage 1).
	exact map[string]*Rule
}

// Compile checks and compiles p. It refuses what config validation should
// already have refused (an unknown action, a non-canonical or duplicate
// host, an empty allowed_ports list, port 0), so a policy built from a
// hand-made config fails loudly instead of silently never matching. The
// compiled policy shares no memory with p.
func Compile(p config.Policy) (*Policy, error) {
	c := &Policy{
		rules: make([]Rule, len(p.Rules)),
		exact: make(map[string]*Rule, len(p.Rules)),
	}
	switch p.DefaultAction {
	case config.ActionAllow:
		c.defaultAllow = true
	case config.ActionDeny:
	default:
		return nil, fmt.Errorf("egress_policy.default_action: unknown action %q", p.DefaultAction)
	}
	for i, r := range p.Rules {
		if err := checkRule(r); err != nil {
			return nil, fmt.Errorf("egress_policy.rules[%d]: %w", i, err)
		}
		if prev, dup := c.exact[r.Host]; dup {
			return nil, fmt.Errorf("egress_policy.rules[%d]: duplicate host %q (also rules[%d])", i, r.Host, prev.Index)
		}
		cfg := r
		cfg.Index = i
		cfg.AllowedPorts = slices.Clone(r.AllowedPorts)
		cfg.HeaderRewrites = slices.Clone(r.HeaderRewrites)
		c.rules[i] = Rule{Rule: cfg}
		c.exact[r.Host] = &c.rules[i]
	}
	return c, nil
}

func checkRule(r config.Rule) error {
	switch r.Action {
	case config.ActionAllow, config.ActionDeny:
	default:
		return fmt.Errorf("unknown action %q", r.Action)
	}
	canon, err := hostport.ParseHost(r.Host)
	if err != nil {
		return fmt.Errorf("host: %w", err)
	}
	if canon != r.Host {
		return fmt.Errorf("host %q is not canonical (want %q)", r.Host, canon)
	}
	if r.AllowedPorts != nil && len(r.AllowedPorts) == 0 {
		return errors.New("allowed_ports is empty (omit it to allow 443 only)")
	}
	if slices.Contains(r.AllowedPorts, 0) {
		return errors.New("allowed_ports contains port 0")
	}
	return nil
}

// Decide decides t. It never allocates. A nil *Policy, or a target with an
// empty host, is denied.
func (p *Policy) Decide(t Target) Decision {
	port := t.Host.PortOr(DefaultPort)
	if p == nil || t.Host.Host == "" {
		return Decision{Kind: Deny, Reason: ReasonDefaultDeny, Port: port}
	}
	return p.verdict(p.match(t), port)
}

// match finds the rule naming t's host, nil if none. Later stages
// (wildcards, CIDRs) go here; see the package doc.
func (p *Policy) match(t Target) *Rule {
	return p.exact[t.Host.Host]
}

// verdict applies rule r (nil: the default action) to port.
func (p *Policy) verdict(r *Rule, port uint16) Decision {
	switch {
	case r == nil && !p.defaultAllow:
		return Decision{Kind: Deny, Reason: ReasonDefaultDeny, Port: port}
	case r == nil && port != DefaultPort:
		return Decision{Kind: Deny, Reason: ReasonPortNotAllowed, Port: port}
	case r == nil:
		return Decision{Kind: DefaultAllow, Reason: ReasonDefaultAllow, Port: port}
	case r.Action != config.ActionAllow:
		return Decision{Kind: Deny, Rule: r, Reason: ReasonRuleDeny, Port: port}
	case !r.AllowsPort(port):
		return Decision{Kind: Deny, Rule: r, Reason: ReasonPortNotAllowed, Port: port}
	default:
		return Decision{Kind: Allow, Rule: r, Reason: ReasonRuleAllow, Port: port}
	}
}

// AllowsHost reports whether a request to host on port 443 is allowed: the
// interception case, where the SNI names the host and the port is the one
// the agent connected to. host is canonicalised first (hostport.ParseHost);
// a host that does not parse is not allowed. It equals
// Decide(Target{Host: <canonical host, no port>}).Allowed().
func (p *Policy) AllowsHost(host string) bool {
	canon, err := hostport.ParseHost(host)
	if err != nil {
		return false
	}
	return p.Decide(Target{Host: hostport.HostPort{Host: canon}}).Allowed()
}

// AllowsName reports whether any request to name, on any port, could be
// allowed: a rule naming it allows it (on at least one port: an allow rule
// always permits one), or no rule names it and the default action is allow.
// It is the DNS guard's question, where no port is known. name is
// canonicalised first (hostport.ParseHost, so case, one trailing dot and
// IDNA spelling cannot dodge a deny rule); a name that does not parse is not
// allowed. A nil *Policy allows nothing.
func (p *Policy) AllowsName(name string) bool {
	if p == nil {
		return false
	}
	canon, err := hostport.ParseHost(name)
	if err != nil {
		return false
	}
	if r := p.match(Target{Host: hostport.HostPort{Host: canon}}); r != nil {
		return r.Action == config.ActionAllow
	}
	return p.defaultAllow
}
