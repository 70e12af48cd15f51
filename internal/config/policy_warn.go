package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/reqpath"
)

// policyWarnings adds the warnings of issue 11 point 8 about a valid
// policy: routes that can never match, deny routes under a broader allow
// route (as strong as the origin's parser only), and wildcard allows that still admit
// what a deny rule seems to refuse. Rules themselves cannot shadow each
// other (exact hosts, longest suffix and longest prefix are each unique).
func (c *checker) policyWarnings(p Policy) {
	for _, r := range p.Rules {
		c.shadowedRoutes(r)
	}
	// The wildcard rule that would decide a name, by longest suffix.
	wildFor := func(name string) *Rule {
		var best *Rule
		for i := range p.Rules {
			suffix, ok := strings.CutPrefix(p.Rules[i].Host, hostport.WildcardPrefix)
			if ok && strings.HasSuffix(name, "."+suffix) && (best == nil || len(p.Rules[i].Host) > len(best.Host)) {
				best = &p.Rules[i]
			}
		}
		return best
	}
	for _, r := range p.Rules {
		if r.Action != ActionDeny || hostport.IsCIDR(r.Host) {
			continue
		}
		path := fmt.Sprintf("egress_policy.rules[%d].host", r.Index)
		if suffix, ok := strings.CutPrefix(r.Host, hostport.WildcardPrefix); ok {
			// "*.d" (deny) does not cover d itself.
			if slices.ContainsFunc(p.Rules, func(o Rule) bool { return o.Host == suffix }) {
				continue
			}
			if w := wildFor(suffix); w != nil && w.Action == ActionAllow {
				c.warn(path, fmt.Sprintf("deny rule %s does not cover %s itself, which %s (allow, rules[%d]) still allows; add a deny rule for %s if it should be denied too", r.Host, suffix, w.Host, w.Index, suffix))
			}
			continue
		}
		if _, err := netip.ParseAddr(r.Host); err == nil {
			continue // an IP literal has no subdomains
		}
		sub := "x." + r.Host
		if w := wildFor(sub); w != nil && w.Action == ActionAllow {
			c.warn(path, fmt.Sprintf("deny rule %s does not cover its subdomains: %s (allow, rules[%d]) still allows e.g. %s; add a deny rule *.%s if they should be denied too", r.Host, w.Host, w.Index, sub, r.Host))
		}
	}
}

// shadowedRoutes warns about a route that an earlier route of the same
// rule always matches first (reqpath.Pattern.Covers: sound, so a warning is
// never wrong, though some shadowed routes may go unreported), and about a
// deny route that carves an exception out of a broader allow route after
// it (denyUnderAllow).
func (c *checker) shadowedRoutes(r Rule) {
	shadowed := make([]bool, len(r.Routes))
	for j, later := range r.Routes {
		for i, earlier := range r.Routes[:j] {
			if !methodsCover(earlier.Methods, later.Methods) || !pathsCover(earlier.Paths, later.Paths) {
				continue
			}
			shadowed[j] = true
			c.warn(fmt.Sprintf("egress_policy.rules[%d].routes[%d]", r.Index, j),
				fmt.Sprintf("this route can never match: routes[%d] (action %s) matches every request it would", i, earlier.Action))
			break
		}
	}
	for i, deny := range r.Routes {
		if deny.Action != ActionDeny || shadowed[i] {
			continue
		}
		for j := i + 1; j < len(r.Routes); j++ {
			allow := r.Routes[j]
			if allow.Action != ActionAllow || shadowed[j] || !methodsOverlap(deny.Methods, allow.Methods) || !coversSomePath(allow.Paths, deny.Paths) {
				continue
			}
			c.warn(fmt.Sprintf("egress_policy.rules[%d].routes[%d]", r.Index, i),
				fmt.Sprintf("deny route under the broader allow routes[%d]: it holds only as far as the origin reads paths the way BotBox folds them (case, escapes, trailing dots and '/', extensions); prefer an allow-only route set that lists what may pass (docs/policy.md)", j))
			break
		}
	}
}

// methodsOverlap reports whether some method is in both lists (nil: any).
func methodsOverlap(a, b []string) bool {
	if a == nil || b == nil {
		return true
	}
	return slices.ContainsFunc(a, func(m string) bool { return slices.Contains(b, m) })
}

// coversSomePath reports whether the paths a (nil: any) cover at least one
// path of b (nil: any path, which only "/**" or any covers).
func coversSomePath(a, b []string) bool {
	if b == nil {
		return pathsCover(a, nil)
	}
	return slices.ContainsFunc(b, func(p string) bool { return pathsCover(a, []string{p}) })
}

func methodsCover(a, b []string) bool {
	if a == nil {
		return true
	}
	if b == nil {
		return false
	}
	for _, m := range b {
		if !slices.Contains(a, m) {
			return false
		}
	}
	return true
}

func pathsCover(a, b []string) bool {
	if a == nil {
		return true
	}
	if b == nil {
		return slices.Contains(a, "/**")
	}
	for _, bp := range b {
		hb, err := reqpath.ParsePattern(bp)
		if err != nil {
			return false
		}
		covered := false
		for _, ap := range a {
			if ha, err := reqpath.ParsePattern(ap); err == nil && ha.Covers(hb) {
				covered = true
				break
			}
		}
		if !covered {
			return false
		}
	}
	return true
}
