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
// # Host matching
//
// A rule's host is one of three kinds, and match picks at most one rule,
// most specific first (the precedence table in TestPrecedence):
//
//  1. exact: the rule's canonical host equals the target's (a map lookup);
//  2. wildcard "*.example.com": the target is a name with one or more labels
//     before the suffix (never the suffix itself); the longest matching
//     suffix wins. A suffix map is probed label by label from the longest
//     candidate ("a.b.example.com" tries "b.example.com", then
//     "example.com", then "com"), so the first hit is the longest;
//  3. CIDR "203.0.113.0/24": IP-literal targets only; the longest matching
//     prefix wins (the prefixes are kept sorted by length, longest first).
//
// An allow wildcard never matches a name under a public suffix deeper than
// its own ("*.amazonaws.com" and "bucket.s3.amazonaws.com":
// hostport.UnderDeeperPublicSuffix), so it never hands its rewrites to a
// tenant; the search goes on to shorter suffixes. An IPv6 literal that
// carries an IPv4 address (IPv4-compatible, NAT64, 6to4, Teredo: the forms
// of addrguard.Embedded, which the address guard judges as that IPv4) is
// judged under each reading, deny winning (matchIPv6).
//
// Hosts are compared on their canonical form (package hostport: lowercase,
// punycode, no trailing dot, canonical IP text), so case, a trailing dot or
// IDNA spelling cannot dodge a deny rule (reference §10.3 #3). So
// api.example.com (deny) beats *.example.com (allow), and
// *.internal.example.com (deny) beats *.example.com (allow). There is no
// deny-overrides across kinds: the most specific rule decides alone.
//
// # Routes
//
// After the host and port are allowed by a rule with routes, the target's
// Path (the request's escaped path) is canonicalised (package reqpath); an
// ambiguous path is denied with ReasonAmbiguousPath (the proxy answers
// 400) before any route is tried. Then the first route whose methods and
// path globs match decides: an allow route allows (ReasonRuleAllow), a deny
// route denies (ReasonRouteDeny); no matching route denies (ReasonNoRoute).
// An allow route matches the canonical path and the method byte for byte;
// a deny route matches their most permissive reading (reqpath.Fold: case,
// escapes, trailing dots and '/', extensions; methods in any case, GET
// covering HEAD), so a deny holds whatever the origin's parser. A request
// carrying a method or path override (Target.Override) is denied with
// ReasonMethodOverride (400) before any route is tried.
// Decision.Path is the canonical path, the one the proxy must forward.
// A rule without routes never looks at the path, so reference configs
// decide exactly as before.
//
// # Extension points
//
// A report (shadow) mode is a flag on Policy: Decide still computes the real
// decision, and Decision gains a field telling the caller to forward while
// logging the would-be denial. Reason is a closed enum, so each addition is
// a new constant and metric/log label sets stay bounded.
//
// Two port-agnostic questions sit beside Decide: AllowsHost (port 443, the
// TLS interception authorizer's question about an SNI name) and AllowsName
// (any port, the DNS guard's question), and RuleForName tells which rule
// (any port) names a host, for its address guard exceptions. They
// canonicalise their argument, so callers never hand-build a Target.
//
// The package does not parse Host headers (package hostport does), apply
// header rewrites (package rewrite does, for Decision.Rule), or log.
//
// Typical use:
//
//	p, err := policy.Compile(cfg.Policy) // at load
//	...
//	hp, err := hostport.Parse(r.Host)
//	d := p.Decide(policy.Target{Host: hp, Method: r.Method, Path: r.URL.EscapedPath()})
//	if !d.Allowed() { /* 403, reason d.Reason */ }
//	...
//	p.AllowsName("api.openai.com") // DNS guard: may this name resolve at all?
package policy

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/botbox/botbox/internal/addrguard"
	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/reqpath"
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
	// ReasonRouteDeny: the rule allows host and port, and its first
	// matching route is a deny route (403 route not allowed).
	ReasonRouteDeny Reason = "route_deny"
	// ReasonNoRoute: the rule allows host and port, but none of its routes
	// matches the method and path (403 route not allowed).
	ReasonNoRoute Reason = "no_route"
	// ReasonAmbiguousPath: the rule has routes and the request path has
	// more than one reading (package reqpath); the proxy answers 400.
	ReasonAmbiguousPath Reason = "ambiguous_path"
	// ReasonMethodOverride: the rule has routes and the request carries a
	// method or path override (reqpath.Override: X-HTTP-Method-Override,
	// _method, ...), with which the origin may run what no route judged;
	// the proxy answers 400.
	ReasonMethodOverride Reason = "method_override"
)

// Target is what a decision is about.
type Target struct {
	// Host is the canonical host and optional port, as returned by
	// hostport.Parse. A hand-built, non-canonical Host matches no rule.
	Host hostport.HostPort
	// Method is the request method, compared byte for byte with a route's
	// methods (methods are case-sensitive).
	Method string
	// Path is the request's escaped path (url.URL.EscapedPath: no query).
	// Only a rule with routes looks at it, after canonicalising it.
	Path string
	// Override is reqpath.Override of the request's headers and query: the
	// name of a method or path override it carries, "" for none. Only a
	// rule with routes looks at it (and refuses the request).
	Override string
}

// Rule is one compiled rule: the configured rule (its canonical Host, its
// Index in egress_policy.rules, Action, AllowedPorts, HeaderRewrites). It
// belongs to its Policy and must not be modified (slices included).
type Rule struct {
	config.Rule
	routes []route
}

// route is a compiled config.Route.
type route struct {
	methods []string // nil: any
	paths   []reqpath.Pattern
	anyPath bool
	allow   bool
}

// matches reports whether an allow route admits method and the canonical
// path: byte-exact, since a narrower reading than the origin's can only
// refuse more.
func (rt *route) matches(method, path string) bool {
	if rt.methods != nil && !slices.Contains(rt.methods, method) {
		return false
	}
	if rt.anyPath {
		return true
	}
	for i := range rt.paths {
		if rt.paths[i].Match(path) {
			return true
		}
	}
	return false
}

// denies reports whether a deny route matches method and the folded path
// under the most permissive reading an origin may make: methods compared
// case-insensitively, a GET also denying HEAD (which origins serve with
// the GET handler), paths by reqpath.Pattern.MatchFolded (case, escapes,
// trailing dots and '/', extensions). TestDenyRouteHoldsUnderOriginReadings.
func (rt *route) denies(method string, path reqpath.Folded) bool {
	if rt.methods != nil && !slices.ContainsFunc(rt.methods, func(m string) bool {
		return strings.EqualFold(m, method) || m == "GET" && strings.EqualFold(method, "HEAD")
	}) {
		return false
	}
	if rt.anyPath {
		return true
	}
	for i := range rt.paths {
		if rt.paths[i].MatchFolded(path) {
			return true
		}
	}
	return false
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
	// Route is the index in Rule.Routes of the route that decided, -1 when
	// none did (no routes on the rule, no route matched, or the decision
	// was made before routes were tried).
	Route int
	// Path is the canonical request path when the rule's routes were tried
	// (the path the proxy must forward), "" otherwise.
	Path string
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
	// exact indexes exact-host rules by canonical host (match stage 1).
	exact map[string]*Rule
	// exactAddr indexes the exact-host rules whose host is an IP literal
	// by address, for the IPv4 readings of an IPv6 literal (matchIPv6).
	exactAddr map[netip.Addr]*Rule
	// wild indexes wildcard rules by canonical suffix (stage 2).
	wild map[string]*Rule
	// cidrs holds CIDR rules, longest prefix first (stage 3).
	cidrs []cidrRule
}

type cidrRule struct {
	prefix netip.Prefix
	rule   *Rule
}

// Compile checks and compiles p. It refuses what config validation should
// already have refused (an unknown action, a non-canonical or duplicate
// host, an empty allowed_ports list, port 0), so a policy built from a
// hand-made config fails loudly instead of silently never matching. The
// compiled policy shares no memory with p.
func Compile(p config.Policy) (*Policy, error) {
	c := &Policy{
		rules:     make([]Rule, len(p.Rules)),
		exact:     make(map[string]*Rule, len(p.Rules)),
		exactAddr: make(map[netip.Addr]*Rule),
		wild:      make(map[string]*Rule),
	}
	switch p.DefaultAction {
	case config.ActionAllow:
		c.defaultAllow = true
	case config.ActionDeny:
	default:
		return nil, fmt.Errorf("egress_policy.default_action: unknown action %q", p.DefaultAction)
	}
	seen := make(map[string]int, len(p.Rules))
	for i, r := range p.Rules {
		if err := checkRule(r); err != nil {
			return nil, fmt.Errorf("egress_policy.rules[%d]: %w", i, err)
		}
		if prev, dup := seen[r.Host]; dup {
			return nil, fmt.Errorf("egress_policy.rules[%d]: duplicate host %q (also rules[%d])", i, r.Host, prev)
		}
		seen[r.Host] = i
		cfg := r
		cfg.Index = i
		cfg.AllowedPorts = slices.Clone(r.AllowedPorts)
		cfg.HeaderRewrites = slices.Clone(r.HeaderRewrites)
		cfg.QueryRewrites = slices.Clone(r.QueryRewrites)
		cfg.Routes = nil
		for _, rt := range r.Routes {
			cfg.Routes = append(cfg.Routes, config.Route{Methods: slices.Clone(rt.Methods), Paths: slices.Clone(rt.Paths), Action: rt.Action})
		}
		routes, err := compileRoutes(r.Routes)
		if err != nil {
			return nil, fmt.Errorf("egress_policy.rules[%d]: %w", i, err)
		}
		c.rules[i] = Rule{Rule: cfg, routes: routes}
		rule := &c.rules[i]
		switch {
		case strings.HasPrefix(r.Host, hostport.WildcardPrefix):
			c.wild[strings.TrimPrefix(r.Host, hostport.WildcardPrefix)] = rule
		case hostport.IsCIDR(r.Host):
			pfx, _, _ := hostport.ParseCIDR(r.Host) // checked by checkRule
			c.cidrs = append(c.cidrs, cidrRule{prefix: pfx, rule: rule})
		default:
			c.exact[r.Host] = rule
			if a, err := netip.ParseAddr(r.Host); err == nil {
				c.exactAddr[a] = rule
			}
		}
	}
	// Longest prefix first; equal lengths keep file order (they cannot
	// overlap unless equal, and equal prefixes are duplicates).
	slices.SortStableFunc(c.cidrs, func(a, b cidrRule) int { return cmp.Compare(b.prefix.Bits(), a.prefix.Bits()) })
	return c, nil
}

func compileRoutes(rs []config.Route) ([]route, error) {
	if rs != nil && len(rs) == 0 {
		return nil, errors.New("routes is empty (omit it to allow every method and path)")
	}
	out := make([]route, 0, len(rs))
	for j, rt := range rs {
		cr := route{methods: slices.Clone(rt.Methods), anyPath: rt.Paths == nil}
		switch rt.Action {
		case config.ActionAllow:
			cr.allow = true
		case config.ActionDeny:
		default:
			return nil, fmt.Errorf("routes[%d]: unknown action %q", j, rt.Action)
		}
		if rt.Methods != nil && len(rt.Methods) == 0 {
			return nil, fmt.Errorf("routes[%d]: methods is empty (omit it for any method)", j)
		}
		if rt.Paths != nil && len(rt.Paths) == 0 {
			return nil, fmt.Errorf("routes[%d]: paths is empty (omit it for any path)", j)
		}
		for _, ps := range rt.Paths {
			g, err := reqpath.ParsePattern(ps)
			if err != nil {
				return nil, fmt.Errorf("routes[%d]: %w", j, err)
			}
			if g.String() != ps {
				return nil, fmt.Errorf("routes[%d]: path %q is not canonical (want %q)", j, ps, g.String())
			}
			cr.paths = append(cr.paths, g)
		}
		out = append(out, cr)
	}
	if rs == nil {
		return nil, nil
	}
	return out, nil
}

func checkRule(r config.Rule) error {
	switch r.Action {
	case config.ActionAllow, config.ActionDeny:
	default:
		return fmt.Errorf("unknown action %q", r.Action)
	}
	var canon string
	var err error
	switch {
	case hostport.IsWildcard(r.Host):
		var suffix string
		canon, suffix, err = hostport.ParseWildcard(r.Host)
		if err == nil && r.Action == config.ActionAllow {
			err = hostport.CheckWildcardAllow(suffix)
		}
	case hostport.IsCIDR(r.Host):
		var pfx netip.Prefix
		pfx, canon, err = hostport.ParseCIDR(r.Host)
		if err == nil && r.Action == config.ActionAllow && (pfx.Addr().Is4() && pfx.Bits() < 8 || pfx.Addr().Is6() && pfx.Bits() < 32) {
			return fmt.Errorf("CIDR %s is too wide for an allow rule", r.Host)
		}
	default:
		canon, err = hostport.ParseHost(r.Host)
	}
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
	if r.Routes != nil && r.Action != config.ActionAllow {
		return errors.New("routes on a deny rule")
	}
	return nil
}

// Decide decides t. It does not allocate unless the rule has routes and
// the path is not canonical or a deny route is tried (Fold), or an allow
// wildcard matched (publicsuffix's one allocation). A nil *Policy, or a
// target with an empty host, is denied.
func (p *Policy) Decide(t Target) Decision {
	port := t.Host.PortOr(DefaultPort)
	if p == nil || t.Host.Host == "" {
		return Decision{Kind: Deny, Reason: ReasonDefaultDeny, Port: port, Route: -1}
	}
	d := p.verdict(p.match(t.Host.Host), port)
	if d.Kind != Allow || d.Rule.routes == nil {
		return d
	}
	return d.Rule.route(d, t)
}

// route applies r's routes to an Allow decision d for t: an ambiguous
// path or a method override is refused first; then the first route that
// matches decides, an allow route on the canonical path and method as
// written (route.matches), a deny route on their most permissive reading
// (route.denies).
func (r *Rule) route(d Decision, t Target) Decision {
	cp, err := reqpath.Canonical(t.Path)
	if err != nil {
		return Decision{Kind: Deny, Rule: r, Reason: ReasonAmbiguousPath, Port: d.Port, Route: -1}
	}
	if t.Override != "" {
		return Decision{Kind: Deny, Rule: r, Reason: ReasonMethodOverride, Port: d.Port, Route: -1}
	}
	d.Path = cp
	var folded reqpath.Folded // computed at the first deny route
	for i := range r.routes {
		rt := &r.routes[i]
		if rt.allow {
			if !rt.matches(t.Method, cp) {
				continue
			}
		} else {
			if folded.Path == "" {
				folded = reqpath.Fold(cp)
			}
			if !rt.denies(t.Method, folded) {
				continue
			}
			d.Kind, d.Reason = Deny, ReasonRouteDeny
		}
		d.Route = i
		return d
	}
	d.Kind, d.Reason = Deny, ReasonNoRoute
	return d
}

// match finds the rule for the canonical host h, nil if none: exact, then
// the longest wildcard suffix, then (IP literals) the longest CIDR. An
// IPv6 literal that carries an IPv4 address is matched by matchIPv6.
func (p *Policy) match(h string) *Rule {
	if strings.IndexByte(h, ':') >= 0 {
		return p.matchIPv6(h)
	}
	if r := p.exact[h]; r != nil {
		return r
	}
	if len(p.wild) > 0 {
		for i := strings.IndexByte(h, '.'); i >= 0; {
			suffix := h[i+1:]
			// i > 0: a wildcard needs a non-empty label before its suffix
			// (".example.com" is not under *.example.com), even for a raw,
			// hand-built target (FuzzDecide, testdata/fuzz/FuzzDecide).
			// An allow wildcard never admits a tenant of a public suffix
			// below its own (hostport.UnderDeeperPublicSuffix): the search
			// goes on to shorter suffixes, where a deny wildcard still
			// matches.
			if r := p.wild[suffix]; r != nil && i > 0 && (r.Action != config.ActionAllow || !hostport.UnderDeeperPublicSuffix(h, suffix)) {
				return r
			}
			j := strings.IndexByte(suffix, '.')
			if j < 0 {
				break
			}
			i += 1 + j
		}
	}
	if len(p.cidrs) > 0 {
		if a, err := netip.ParseAddr(h); err == nil {
			return p.matchCIDR(a)
		}
	}
	return nil
}

// matchCIDR returns the CIDR rule with the longest prefix containing a.
func (p *Policy) matchCIDR(a netip.Addr) *Rule {
	for _, c := range p.cidrs {
		if c.prefix.Contains(a) {
			return c.rule
		}
	}
	return nil
}

// matchAddr is match for an address with no other reading: the exact rule
// naming it, else the longest CIDR.
func (p *Policy) matchAddr(a netip.Addr) *Rule {
	if r := p.exactAddr[a]; r != nil {
		return r
	}
	return p.matchCIDR(a)
}

// matchIPv6 matches the IPv6 literal h. One that carries IPv4 addresses
// (addrguard.Embedded: IPv4-compatible, NAT64, 6to4, Teredo; the address
// guard judges the same forms as the same IPv4) is judged under every
// reading, the IPv4 addresses it carries and the literal itself, deny
// winning: a deny rule matching any reading decides; else the rule of the
// first carried IPv4 that a rule names; else the literal's own rule (an
// IPv6 prefix rule such as 64:ff9b::/96 decides for IPv4 addresses no
// rule names). TestEmbeddedIPv4Readings.
func (p *Policy) matchIPv6(h string) *Rule {
	a, err := netip.ParseAddr(h)
	if err != nil {
		return p.exact[h]
	}
	own := p.matchAddr(a)
	form, carried := addrguard.Embedded(a)
	if form == "" {
		return own
	}
	var first *Rule
	for _, v4 := range carried {
		if !v4.IsValid() {
			continue
		}
		r := p.matchAddr(v4)
		if r != nil && r.Action != config.ActionAllow {
			return r
		}
		if first == nil {
			first = r
		}
	}
	if own != nil && own.Action != config.ActionAllow || first == nil {
		return own
	}
	return first
}

// verdict applies rule r (nil: the default action) to port, before routes.
func (p *Policy) verdict(r *Rule, port uint16) Decision {
	switch {
	case r == nil && !p.defaultAllow:
		return Decision{Kind: Deny, Reason: ReasonDefaultDeny, Port: port, Route: -1}
	case r == nil && port != DefaultPort:
		return Decision{Kind: Deny, Reason: ReasonPortNotAllowed, Port: port, Route: -1}
	case r == nil:
		return Decision{Kind: DefaultAllow, Reason: ReasonDefaultAllow, Port: port, Route: -1}
	case r.Action != config.ActionAllow:
		return Decision{Kind: Deny, Rule: r, Reason: ReasonRuleDeny, Port: port, Route: -1}
	case !r.AllowsPort(port):
		return Decision{Kind: Deny, Rule: r, Reason: ReasonPortNotAllowed, Port: port, Route: -1}
	default:
		return Decision{Kind: Allow, Rule: r, Reason: ReasonRuleAllow, Port: port, Route: -1}
	}
}

// AllowsHost reports whether some request to host on port 443 may be
// allowed: the interception case, where the SNI names the host and the
// port is the one the agent connected to; each request inside the
// connection is then decided on its own (routes included). host is
// canonicalised first (hostport.ParseHost); a host that does not parse is
// not allowed. It uses Decide's host matching (exact, wildcard, CIDR) and
// port check, not routes, so it equals Decide(Target{Host: <canonical
// host, no port>}).Allowed() for every rule without routes.
func (p *Policy) AllowsHost(host string) bool {
	if p == nil {
		return false
	}
	canon, err := hostport.ParseHost(host)
	if err != nil {
		return false
	}
	return p.verdict(p.match(canon), DefaultPort).Allowed()
}

// AllowsName reports whether any request to name, on any port, could be
// allowed: the rule matching it (exact, wildcard or CIDR, as Decide) allows
// it (on at least one port: an allow rule
// always permits one), or no rule names it and the default action is allow.
// It is the DNS guard's question, where no port is known. name is
// canonicalised first (hostport.ParseHost, so case, one trailing dot and
// IDNA spelling cannot dodge a deny rule); a name that does not parse is not
// allowed. A nil *Policy allows nothing.
func (p *Policy) AllowsName(name string) bool {
	_, ok := p.NameRule(name)
	return ok
}

// NameRule is AllowsName that also returns the rule matching name (nil
// when no rule names it, including when the default action allows it), so
// that the DNS guard can apply that rule's address opt-ins to the answer.
// allowed is exactly AllowsName(name) (TestNameRuleMatchesAllowsName).
func (p *Policy) NameRule(name string) (r *Rule, allowed bool) {
	if p == nil {
		return nil, false
	}
	canon, err := hostport.ParseHost(name)
	if err != nil {
		return nil, false
	}
	if r := p.match(canon); r != nil {
		return r, r.Action == config.ActionAllow
	}
	return nil, p.defaultAllow
}

// RuleForName returns the rule that names name (exact, wildcard or CIDR,
// as Decide matches, whatever the port), nil when none does, when name
// does not parse, or for a nil *Policy. It answers which rule's address
// guard exceptions apply to the DNS answers for name.
func (p *Policy) RuleForName(name string) *Rule {
	if p == nil {
		return nil
	}
	canon, err := hostport.ParseHost(name)
	if err != nil {
		return nil
	}
	return p.match(canon)
}
