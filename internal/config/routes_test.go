package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRoutes: routes are validated and normalised (methods "*" -> any,
// path globs canonical, action defaulting to allow).
func TestRoutes(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `egress_policy:
  rules:
    - host: api.github.com
      action: allow
      routes:
        - methods: [GET, HEAD]
          paths: ["/repos/acme/**", "/user"]
        - methods: ["*"]
          paths: ["/a/%7e/*"]
        - paths: ["/admin/**"]
          action: deny
        - methods: [POST]
    - host: "*.fastly.example-cdn.net"
      action: allow
`)
	want := []Route{
		{Methods: []string{"GET", "HEAD"}, Paths: []string{"/repos/acme/**", "/user"}, Action: ActionAllow},
		{Paths: []string{"/a/~/*"}, Action: ActionAllow},
		{Paths: []string{"/admin/**"}, Action: ActionDeny},
		{Methods: []string{"POST"}, Action: ActionAllow},
	}
	if d := cmp.Diff(want, c.Policy.Rules[0].Routes); d != "" {
		t.Errorf("Routes (-want +got):\n%s", d)
	}
	if c.Policy.Rules[1].Routes != nil {
		t.Errorf("omitted routes = %#v, want nil", c.Policy.Rules[1].Routes)
	}
}

func TestRouteErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ routes, action, want string }{
		{"[]", "allow", "egress_policy.rules[0].routes: routes cannot be empty for host 'a.example'"},
		{"[{paths: [/x]}]", "deny", "egress_policy.rules[0].routes: routes are only allowed on an allow rule"},
		{"[{methods: []}]", "allow", "egress_policy.rules[0].routes[0].methods: methods cannot be empty"},
		{"[{paths: []}]", "allow", "egress_policy.rules[0].routes[0].paths: paths cannot be empty"},
		{"[{methods: [get]}]", "allow", "egress_policy.rules[0].routes[0].methods[0]: method 'get' must be upper-case"},
		{"[{methods: [CONNECT]}]", "allow", "CONNECT cannot be allowed by a route"},
		{"[{methods: [\"GE T\"]}]", "allow", "invalid method 'GE T'"},
		{"[{action: maybe}]", "allow", "egress_policy.rules[0].routes[0].action: must be allow or deny, got 'maybe'"},
		{"[{paths: [repos]}]", "allow", "egress_policy.rules[0].routes[0].paths[0]: invalid path pattern: ambiguous request path \"repos\": the path must start with '/'"},
		{"[{paths: [/a/../b]}]", "allow", "'.' or '..' segment"},
		{"[{paths: [/a*]}]", "allow", "must be whole segments"},
		{"[{paths: [/a%2Fb]}]", "allow", "encoded slash"},
		{"[{paths: [//a]}]", "allow", "empty path segment"},
	} {
		src := "egress_policy:\n  rules:\n    - host: a.example\n      action: " + tt.action + "\n      routes: " + tt.routes + "\n"
		wantContains(t, parseErr(t, src), tt.want)
	}
}

// TestPolicyWarnings: check warns about routes that can never match and
// about wildcard allows that still admit what a deny rule seems to refuse.
func TestPolicyWarnings(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `egress_policy:
  rules:
    - host: "*.example.com"
      action: allow
    - host: api.example.com
      action: deny
    - host: "*.internal.example.com"
      action: deny
    - host: "*.ok.example.com"
      action: deny
    - host: ok.example.com
      action: deny
    - host: "10.0.0.1"
      action: deny
    - host: gh.example.org
      action: allow
      routes:
        - methods: [GET, HEAD]
          paths: ["/repos/**"]
        - methods: [GET]
          paths: ["/repos/acme/*", "/repos/x"]
        - methods: [GET, POST]
          paths: ["/repos/acme/*"]
        - paths: ["/**"]
          action: deny
        - methods: [DELETE]
    - host: gh2.example.org
      action: allow
      routes:
        - paths: ["/repos/acme/app/hooks/**", "/other"]
          action: deny
        - methods: [DELETE]
          paths: ["/x/**"]
          action: deny
        - methods: [GET, HEAD]
          paths: ["/repos/acme/**"]
        - methods: [POST]
          paths: ["/x/*"]
        - methods: [GET]
          paths: ["/**"]
`)
	var got []string
	for _, w := range c.Warnings {
		got = append(got, w.Path+": "+w.Message)
	}
	want := []string{
		"egress_policy.rules[6].routes[1]: this route can never match: routes[0] (action allow) matches every request it would",
		"egress_policy.rules[6].routes[4]: this route can never match: routes[3] (action deny) matches every request it would",
		"egress_policy.rules[7].routes[0]: deny route under the broader allow routes[2]: it holds only as far as the origin reads paths the way BotBox folds them (case, escapes, trailing dots and '/', extensions); prefer an allow-only route set that lists what may pass (docs/policy.md)",
		"egress_policy.rules[1].host: deny rule api.example.com does not cover its subdomains: *.example.com (allow, rules[0]) still allows e.g. x.api.example.com; add a deny rule *.api.example.com if they should be denied too",
		"egress_policy.rules[2].host: deny rule *.internal.example.com does not cover internal.example.com itself, which *.example.com (allow, rules[0]) still allows; add a deny rule for internal.example.com if it should be denied too",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Warnings (-want +got):\n%s", d)
	}
}
