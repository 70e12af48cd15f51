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
    - host: "*.githubusercontent.com"
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
