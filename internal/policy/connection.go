package policy

import "github.com/botbox/botbox/internal/hostport"

// DecideConnection decides a connection to t's host and port before any
// request on it is known: a CONNECT tunnel that BotBox intercepts, and the
// re-decision of an open tunnel at reload. It applies host matching and the
// port check exactly as Decide, never the routes: those need a method and a
// path, and every request inside an intercepted connection is decided on
// its own with Decide. For a rule without routes it equals Decide; for a
// host with port 443 and no port, Allowed() equals AllowsHost
// (TestDecideConnectionMatchesAllowsHost).
func (p *Policy) DecideConnection(t hostport.HostPort) Decision {
	port := t.PortOr(DefaultPort)
	if p == nil || t.Host == "" {
		return Decision{Kind: Deny, Reason: ReasonDefaultDeny, Port: port, Route: -1}
	}
	return p.verdict(p.match(t.Host), port)
}

// Owns reports whether r is one of p's rules (the very rule, not an equal
// one of another compiled policy). A decision made with another policy
// names a rule p does not own, whatever its index.
func (p *Policy) Owns(r *Rule) bool {
	if p == nil || r == nil {
		return false
	}
	i := r.Index
	return i >= 0 && i < len(p.rules) && &p.rules[i] == r
}
