package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/policy"
)

// goldenCompare compares out with testdata/suggest/name (rewritten with
// -update-suggest).
func goldenCompare(t *testing.T, name, out string) {
	t.Helper()
	golden := filepath.Join("testdata", "suggest", name)
	if *updateSuggest {
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("output differs from %s (run with -update-suggest):\n%s", golden, out)
	}
}

// TestSuggestPathlessRequests: redteam-2026-12-01 §10. Four ordinary
// requests and one "DELETE http://host" (logged with path "" at ee87e5f,
// "/" since) propose DELETE on "/" only, never "/**", and never merge
// DELETE into the other routes; "OPTIONS *" and CONNECT lines name no
// route and are reported.
func TestSuggestPathlessRequests(t *testing.T) {
	code, out, errOut := runArgs(t, nil, "suggest", "--log", filepath.Join("testdata", "suggest", "pathless.log"))
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	goldenCompare(t, "pathless.golden.yaml", out)
	if strings.Contains(out, `/**"`) || strings.Contains(out, `/*"`) {
		t.Errorf("proposal widened to a glob:\n%s", out)
	}
	if !strings.Contains(errOut, "2 decision lines without a path a route can name") {
		t.Errorf("stderr %q does not report the pathless lines", errOut)
	}
	cfg, err := config.Parse([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Compile(cfg.Policy)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := hostport.Parse("api.example.test")
	for _, tc := range []struct {
		method, path string
		allowed      bool
	}{
		{"DELETE", "/", true},
		{"DELETE", "/v1/models", false},
		{"DELETE", "/v1/chat/completions", false},
		{"GET", "/v1/models", true},
		{"GET", "/", false},
		{"POST", "/v1/models", false},
	} {
		if d := pol.Decide(policy.Target{Host: host, Method: tc.method, Path: tc.path}); d.Allowed() != tc.allowed {
			t.Errorf("%s %s: allowed %v, want %v", tc.method, tc.path, d.Allowed(), tc.allowed)
		}
	}
}

// TestSuggestNoDecisionLines: a log without any decision line (the wrong
// file, an empty file) is an error, not an empty policy.
func TestSuggestNoDecisionLines(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"empty.log":    "",
		"other.log":    `{"message":"configuration reloaded"}` + "\nnot json\n",
		"access.log":   "127.0.0.1 - - [01/Dec/2026] \"GET / HTTP/1.1\" 200 2\n",
		"decision.txt": "proxy decision\n",
	} {
		code, out, errOut := runArgs(t, nil, "suggest", "--log", writeFile(t, dir, name, content))
		if code != exitError || out != "" || !strings.Contains(errOut, `has no "proxy decision" lines`) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want an error", name, code, out, errOut)
		}
	}
}

// logLine is one decision line for synthetic logs.
func logLine(decision, host string, port int, method, path string) string {
	return fmt.Sprintf(`{"message":"proxy decision","decision":%q,"host":%q,"port":%d,"method":%q,"path":%q}`, decision, host, port, method, path)
}

// TestSuggestMinCountOnlyNarrows: a higher --min-count never allows a
// request a lower one refuses, and never leaves a kept host without
// routes (at ee87e5f a host seen often on many rare paths was proposed
// with no routes at all: every method and path). Every request the log
// shows, and probes beside them, are decided under each proposal.
func TestSuggestMinCountOnlyNarrows(t *testing.T) {
	var lines []string
	for i := range 12 {
		// cdn: seen 12 times, each path once.
		lines = append(lines, logLine("allow", "cdn.example.test", 443, "GET", fmt.Sprintf("/img/%c/x.png", 'a'+i)))
	}
	for range 3 {
		lines = append(lines, logLine("allow", "api.example.test", 443, "GET", "/v1/models"))
	}
	lines = append(lines, logLine("allow", "api.example.test", 443, "POST", "/v1/chat"),
		logLine("report_deny", "api.example.test", 8443, "DELETE", "/v1/models"),
		logLine("allow", "rare.example.test", 443, "GET", "/x"))
	probes := [][3]string{
		{"cdn.example.test", "GET", "/img/a/x.png"}, {"cdn.example.test", "DELETE", "/img/a/x.png"}, {"cdn.example.test", "GET", "/other"},
		{"api.example.test", "GET", "/v1/models"}, {"api.example.test", "POST", "/v1/chat"}, {"api.example.test", "DELETE", "/v1/models"},
		{"api.example.test:8443", "DELETE", "/v1/models"}, {"api.example.test", "PUT", "/anything"}, {"rare.example.test", "GET", "/x"},
	}
	log := writeFile(t, t.TempDir(), "d.log", strings.Join(lines, "\n")+"\n")
	var prev *policy.Policy
	for k := 1; k <= 4; k++ {
		code, out, errOut := runArgs(t, nil, "suggest", "--log", log, "--min-count", strconv.Itoa(k))
		if code != exitOK {
			t.Fatalf("--min-count %d: exit %d: %s", k, code, errOut)
		}
		cfg, err := config.Parse([]byte(out))
		if err != nil {
			t.Fatalf("--min-count %d: %v\n%s", k, err, out)
		}
		for _, r := range cfg.Policy.Rules {
			if r.Routes == nil {
				t.Errorf("--min-count %d: %s proposed without routes:\n%s", k, r.Host, out)
			}
		}
		pol, err := policy.Compile(cfg.Policy)
		if err != nil {
			t.Fatal(err)
		}
		if prev != nil {
			for _, pr := range probes {
				hp, err := hostport.Parse(pr[0])
				if err != nil {
					t.Fatal(err)
				}
				tg := policy.Target{Host: hp, Method: pr[1], Path: pr[2]}
				if pol.Decide(tg).Allowed() && !prev.Decide(tg).Allowed() {
					t.Errorf("--min-count %d allows %v, which --min-count %d refuses", k, pr, k-1)
				}
			}
		}
		prev = pol
		if k == 2 && (strings.Contains(out, `host: "cdn.example.test"`) || !strings.Contains(errOut, "cdn.example.test: left out")) {
			t.Errorf("--min-count 2: cdn.example.test (no route seen twice) should be left out and reported:\n%s\n%s", out, errOut)
		}
	}
}

// TestSuggestFlagsWideRoutes: a proposal that reaches "/**" or allows many
// methods on one route is flagged on stderr and in the output; a method
// seen on one path never gains the paths of another (each method is
// collapsed on its own).
func TestSuggestFlagsWideRoutes(t *testing.T) {
	var lines []string
	for i := range 12 {
		lines = append(lines, logLine("allow", "wide.example.test", 443, "GET", fmt.Sprintf("/p%d", i)))
	}
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		lines = append(lines, logLine("allow", "many.example.test", 443, m, "/item"))
	}
	lines = append(lines, logLine("allow", "wide.example.test", 443, "DELETE", "/p1"))
	code, out, errOut := runArgs(t, nil, "suggest", "--log", writeFile(t, t.TempDir(), "d.log", strings.Join(lines, "\n")+"\n"))
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		`wide.example.test: routes[1] reaches every path ("/**")`,
		"many.example.test: routes[0] allows 5 methods (DELETE, GET, PATCH, POST, PUT)",
	} {
		if !strings.Contains(errOut, "warning: "+want) || !strings.Contains(out, "# REVIEW: "+want) {
			t.Errorf("no flag %q:\nstderr %s\nstdout %s", want, errOut, out)
		}
	}
	if !strings.Contains(out, "- methods: [DELETE]\n          paths: [\"/p1\"]") {
		t.Errorf("DELETE should stay on /p1 alone:\n%s", out)
	}
}

// TestSuggestMergeGolden: --config merges the proposal into an existing
// configuration: header_rewrites, limits, scrub settings, deny routes,
// deny rules, unobserved rules and top-level settings are kept; observed
// hosts get the proposed ports and routes; a host a wildcard decided gets
// an exact copy of that rule, narrowed.
func TestSuggestMergeGolden(t *testing.T) {
	base := filepath.Join("testdata", "suggest", "base-config.yaml")
	code, out, errOut := runArgs(t, nil, "suggest", "--log", filepath.Join("testdata", "suggest", "decisions.log"), "--config", base)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	goldenCompare(t, "merged.golden.yaml", out)
	cfg, err := config.Parse([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxConnections != 512 || cfg.Policy.Mode != config.ModeReport {
		t.Errorf("top-level settings lost: max_connections %d, mode %v", cfg.MaxConnections, cfg.Policy.Mode)
	}
	byHost := map[string]config.Rule{}
	for _, r := range cfg.Policy.Rules {
		byHost[r.Host] = r
	}
	gh := byHost["api.github.com"]
	if len(gh.HeaderRewrites) != 1 || gh.MaxRequestBodyBytes != 1048576 || gh.RateLimit == nil || len(gh.Routes) == 0 ||
		gh.Routes[0].Action != config.ActionDeny || !slices.Equal(gh.Routes[0].Paths, []string{"/repos/acme/app/hooks/**"}) {
		t.Errorf("api.github.com lost its rewrites, limits or deny route: %+v", gh)
	}
	if slices.ContainsFunc(gh.Routes, func(r config.Route) bool { return slices.Contains(r.Paths, "/**") }) {
		t.Errorf("api.github.com kept the configured GET /** allow: %+v", gh.Routes)
	}
	if oa := byHost["api.openai.com"]; len(oa.HeaderRewrites) != 1 || oa.AllowedPorts != nil || len(oa.Routes) != 1 {
		t.Errorf("api.openai.com: %+v", oa)
	}
	if r := byHost["registry.npmjs.org"]; r.Action != config.ActionDeny || !strings.Contains(errOut, "registry.npmjs.org: kept as denied") {
		t.Errorf("deny rule turned or unreported: %+v, %s", r, errOut)
	}
	if _, ok := byHost["unobserved.example.org"]; !ok {
		t.Error("unobserved rule dropped")
	}
	if c := byHost["cdn.example.com"]; len(c.HeaderRewrites) != 1 || !c.ScrubResponses || len(c.Routes) == 0 {
		t.Errorf("cdn.example.com copy of *.example.com: %+v", c)
	}
	if _, ok := byHost["*.example.com"]; !ok {
		t.Error("wildcard rule dropped")
	}
	// Every observed request is still allowed by the merged policy, but
	// for the host the configuration denies.
	assertAllowsObserved(t, cfg, filepath.Join("testdata", "suggest", "decisions.log"), "registry.npmjs.org")
	// A configuration that does not load is refused before any merge.
	bad := writeFile(t, t.TempDir(), "bad.yaml", "egress_policy:\n  rules:\n    - host: \"*.workers.dev\"\n      action: allow\n")
	if code, _, errOut := runArgs(t, nil, "suggest", "--log", filepath.Join("testdata", "suggest", "decisions.log"), "--config", bad); code != exitError || !strings.Contains(errOut, "does not load") {
		t.Errorf("bad config: exit %d, %s", code, errOut)
	}
}
