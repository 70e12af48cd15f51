// Package generation owns the policy generation in force: the compiled
// egress policy, the compiled header rewrites and removals of each rule, the
// rules' response-header timeouts, and the interception flags that may
// change while BotBox runs.
//
// A Generation is immutable, with one exception: the token buckets of its
// rate limits (Limits.Rate) count tokens, and an unchanged rule's bucket is
// carried over to the next generation. A Current publishes one through an
// atomic.Pointer: readers (the proxy's handlers, the TLS interception
// authorizer, the coming DNS guard) call Load once per request or handshake
// and use that generation throughout, so a request never sees half of a
// reload. Store is the only way to change it: it compiles and checks
// everything first and swaps only on success, so a bad configuration leaves
// the previous generation in force (keep-last-good).
//
// What a generation carries is exactly what can change at reload, the
// address guard included (its allowed_cidrs and each rule's exceptions,
// AddrOpts). Listener
// addresses, the interception CA, deny_handshake_on_disallowed_sni (read by
// mitm at start-up), timeouts and connection limits are not in it: changing
// them needs a restart; a rule's response_header_timeout_ms and its limits
// are in it (they belong to the rule), the global
// upstream_response_header_timeout_ms is not (the upstream transport
// enforces it). The secrets' required set is not either: whoever reloads
// prepares the generation (Prepare), sets the required set and whatever
// else depends on the new configuration, and publishes the generation last
// (Swap), so that nothing sees the new policy before the rest is in place.
//
// The package does no I/O, does not log and does not watch files (the
// caller reloads, e.g. with package volwatch).
//
// Typical use:
//
//	cur, err := generation.New(cfg) // at start-up
//	...
//	g := cur.Load() // per request
//	d := g.Policy.Decide(target)
//	set := g.Rewrites(d)
//	if t := g.ResponseHeaderTimeout(d); t > 0 {
//		ctx = upstream.WithResponseHeaderTimeout(ctx, t)
//	}
//	...
//	if err := cur.Store(newCfg); err != nil { /* old generation still in force */ }
package generation

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botbox/botbox/internal/addrguard"
	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/policy"
	"github.com/botbox/botbox/internal/rewrite"
)

// Generation is one immutable, compiled policy generation. Its fields must
// not be modified.
type Generation struct {
	// Seq numbers the generations of one Current: 1 for the first, +1 per
	// successful Store.
	Seq uint64
	// Policy is the compiled egress policy (never nil).
	Policy *policy.Policy
	// Interception holds the interception flags that may change at reload.
	Interception Interception
	// Report is egress_policy.mode: report: what the policy or a limit
	// would refuse is forwarded without header rewrites and logged as
	// report_deny (package proxy).
	Report bool
	// AddrGuard is the address guard of this generation (address_guard:
	// allowed_cidrs), never nil. It judges only when AddrGuardOff is false.
	AddrGuard *addrguard.Guard
	// AddrGuardOff is address_guard.enabled: false: no address is refused.
	AddrGuardOff bool
	// rewrites holds, by rule index, the rule's compiled header rewrites
	// and removals; nil for a rule without any.
	rewrites []*rewrite.Set
	// headerTimeouts holds, by rule index, the rule's
	// response_header_timeout_ms; 0 when the rule has none.
	headerTimeouts []time.Duration
	// limits holds, by rule index, the rule's limits; nil for a rule
	// without any.
	limits []*Limits
	// addrOpts holds, by rule index, the address guard exceptions the rule
	// grants (see AddrOpts).
	addrOpts []addrguard.Opts
}

// AddrOpts returns the address guard exceptions of the rule that allowed
// d: its allow_private_addresses, and for a rule whose host is an IP
// literal or a CIDR, that address or prefix (naming an address is the
// opt-in). The zero Opts (no exception) when d is not an Allow by a rule of
// this generation: a DefaultAllow, a Deny, or a decision from another
// generation's policy.
func (g *Generation) AddrOpts(d policy.Decision) addrguard.Opts {
	if !g.ruleAllowed(d) {
		return addrguard.Opts{}
	}
	return g.addrOpts[d.Rule.Index]
}

// Interception is the part of https_interception that a reload may change.
type Interception struct {
	// EnforceSNIHostMatch: the interception handler refuses a request whose
	// Host differs from the TLS SNI (https_interception.enforce_sni_host_match).
	EnforceSNIHostMatch bool
}

// Rewrites returns the header rewrites and removals to apply for decision
// d: the rule's compiled set (header_rewrites and remove_headers) when d is
// an Allow by a rule that has either; nil otherwise (a Deny, a
// DefaultAllow, a rule without rewrites or removals, or a decision from
// another generation's policy).
func (g *Generation) Rewrites(d policy.Decision) *rewrite.Set {
	if !g.ruleAllowed(d) {
		return nil
	}
	return g.rewrites[d.Rule.Index]
}

// ResponseHeaderTimeout returns the response-header timeout of the rule
// that allowed d (its response_header_timeout_ms), or 0 when the global
// upstream_response_header_timeout_ms applies: d is not an Allow by a rule,
// the rule sets none, or d comes from another generation's policy. The
// proxy passes a non-zero value to upstream.WithResponseHeaderTimeout.
func (g *Generation) ResponseHeaderTimeout(d policy.Decision) time.Duration {
	if !g.ruleAllowed(d) {
		return 0
	}
	return g.headerTimeouts[d.Rule.Index]
}

// ruleAllowed reports whether d is an Allow by a rule of this generation's
// own policy: a decision made with another generation's policy names a rule
// this one does not own, even when the index is in range
// (TestDecisionFromOtherGeneration).
func (g *Generation) ruleAllowed(d policy.Decision) bool {
	return d.Kind == policy.Allow && g.Policy.Owns(d.Rule)
}

// Compile compiles cfg into a generation with Seq 0. It fails, naming the
// rule, if the policy or any rule's header rewrites or removals do not
// compile. Every rate-limit bucket starts full.
func Compile(cfg *config.Config) (*Generation, error) {
	return compile(cfg, nil)
}

// compile is Compile; rate-limit buckets of rules unchanged from prev
// (non-nil) carry over (see compileLimits).
func compile(cfg *config.Config, prev *Generation) (*Generation, error) {
	if cfg == nil {
		return nil, errors.New("generation: no configuration")
	}
	pol, err := policy.Compile(cfg.Policy)
	if err != nil {
		return nil, fmt.Errorf("compiling egress policy: %w", err)
	}
	g := &Generation{
		Policy:         pol,
		Interception:   Interception{EnforceSNIHostMatch: cfg.Interception.EnforceSNIHostMatch},
		Report:         cfg.Policy.Mode == config.ModeReport,
		AddrGuard:      addrguard.New(cfg.AddressGuard.AllowedCIDRs),
		AddrGuardOff:   cfg.AddressGuard.Disabled,
		addrOpts:       make([]addrguard.Opts, len(cfg.Policy.Rules)),
		rewrites:       make([]*rewrite.Set, len(cfg.Policy.Rules)),
		headerTimeouts: make([]time.Duration, len(cfg.Policy.Rules)),
	}
	for i, r := range cfg.Policy.Rules {
		g.headerTimeouts[i] = max(r.ResponseHeaderTimeout, 0)
		s, err := rewrite.CompileRule(r)
		if err != nil {
			return nil, fmt.Errorf("egress_policy.rules[%d] (%s): %w", i, r.Host, err)
		}
		g.rewrites[i] = s
		g.addrOpts[i] = RuleAddrOpts(r)
	}
	g.limits = compileLimits(cfg, prev)
	return g, nil
}

// Current owns the generation in force. The zero value is not usable: make
// one with New. It is safe for concurrent use.
type Current struct {
	p atomic.Pointer[Generation]
	// mu serialises Store, so that Seq follows the order of the swaps.
	mu sync.Mutex
}

// New compiles cfg and returns a Current holding it as generation 1.
func New(cfg *config.Config) (*Current, error) {
	g, err := Compile(cfg)
	if err != nil {
		return nil, err
	}
	g.Seq = 1
	c := &Current{}
	c.p.Store(g)
	return c, nil
}

// Load returns the generation in force (never nil). Take it once per
// request and use it throughout.
func (c *Current) Load() *Generation { return c.p.Load() }

// Store compiles cfg and, only if everything compiles, makes it the
// generation in force and returns it: Prepare, then Swap. On error the
// previous generation stays in force and the error says what failed.
// Requests that already loaded the previous generation finish with it. A
// rule whose host and rate_limit are unchanged keeps its rate-limit bucket,
// tokens included (TestStoreKeepsUnchangedBuckets); a new or changed one
// starts full.
func (c *Current) Store(cfg *config.Config) (*Generation, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, err := compile(cfg, c.p.Load())
	if err != nil {
		return nil, err
	}
	c.swapLocked(g)
	return g, nil
}

// Prepare compiles cfg into the generation that Swap would publish, with
// no effect on the generation in force: a reload checks everything else it
// needs (secrets, placeholders) against it before committing. Buckets of
// unchanged rules are taken over from the generation in force now, so a
// caller that prepares and swaps must serialise its reloads (one reloader).
func (c *Current) Prepare(cfg *config.Config) (*Generation, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return compile(cfg, c.p.Load())
}

// ErrAlreadySwapped is Swap's error for a generation that is or was in
// force already (one made by New, Store or an earlier Swap).
var ErrAlreadySwapped = errors.New("generation: already published (prepare a new one with Prepare)")

// Swap makes g, from Prepare, the generation in force, numbering it after
// the one it replaces; nothing is compiled again. A nil g, or one already
// published, is refused and nothing changes.
func (c *Current) Swap(g *Generation) error {
	if g == nil || g.Policy == nil {
		return errors.New("generation: Swap of a generation that Prepare did not make")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if g.Seq != 0 {
		return ErrAlreadySwapped
	}
	c.swapLocked(g)
	return nil
}

func (c *Current) swapLocked(g *Generation) {
	g.Seq = c.p.Load().Seq + 1
	c.p.Store(g)
}

// NameAddrOpts returns the address guard exceptions that apply to the
// DNS answers for name: those of the allow rule naming it, whatever the
// port (policy.RuleForName); none for a deny rule, no rule, or a rule of
// another generation.
func (g *Generation) NameAddrOpts(name string) addrguard.Opts {
	r := g.Policy.RuleForName(name)
	if r == nil || r.Action != config.ActionAllow || !g.Policy.Owns(r) {
		return addrguard.Opts{}
	}
	return g.addrOpts[r.Index]
}

// RuleAddrOpts is the address guard exceptions of allow rule r (none for a
// deny rule): allow_private_addresses, and the range an IP or CIDR rule
// names. The DNS guard filters an allowed name's answers with them.
func RuleAddrOpts(r config.Rule) addrguard.Opts {
	if r.Action != config.ActionAllow {
		return addrguard.Opts{}
	}
	o := addrguard.Opts{AllowPrivate: r.AllowPrivateAddresses}
	if p, err := netip.ParsePrefix(r.Host); err == nil {
		o.Rule = p.Masked()
	} else if a, err := netip.ParseAddr(r.Host); err == nil {
		o.Rule = netip.PrefixFrom(a, a.BitLen())
	}
	return o
}
