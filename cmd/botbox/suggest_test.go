package main

import (
	"encoding/json"
	"flag"
	"net"
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

var updateSuggest = flag.Bool("update-suggest", false, "rewrite testdata/suggest/*.golden.yaml")

// TestSuggestGolden feeds a fixed decision log (allow, report_deny, deny
// and non-decision lines) and compares the proposal with the golden files;
// each proposal must load with config.Parse and allow every host that was
// observed (and no denied-only host).
func TestSuggestGolden(t *testing.T) {
	log := filepath.Join("testdata", "suggest", "decisions.log")
	cases := []struct {
		name  string
		args  []string
		hosts []string
	}{
		{"full", nil, []string{"api.github.com", "api.openai.com", "cdn.example.com", "internal.example.com", "once.example.com", "registry.npmjs.org"}},
		{"min2-noroutes", []string{"--min-count", "2", "--no-routes"}, []string{"api.github.com", "api.openai.com", "cdn.example.com", "internal.example.com"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runArgs(t, nil, append([]string{"suggest", "--log", log}, c.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			golden := filepath.Join("testdata", "suggest", c.name+".golden.yaml")
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
			// The summary line (repeated, no path) widens nothing, and the
			// deny line (blocked.example.com) proposes nothing.
			if strings.Contains(out, "DELETE") || strings.Contains(out, `"/**"`) || strings.Contains(out, "blocked.example.com") {
				t.Errorf("proposal widened by a summary or deny line:\n%s", out)
			}
			// Deterministic: a second run prints the same bytes.
			if _, again, _ := runArgs(t, nil, append([]string{"suggest", "--log", log}, c.args...)...); again != out {
				t.Error("two runs differ")
			}
			// The proposal loads as it is, and loaded back it allows every
			// request the log observed (with --min-count 1) and nothing that
			// was only ever denied.
			cfg, err := config.Parse([]byte(out))
			if err != nil {
				t.Fatalf("proposal does not load: %v", err)
			}
			if len(c.args) == 0 {
				assertAllowsObserved(t, cfg, log)
			}
			var hosts []string
			for _, r := range cfg.Policy.Rules {
				if r.Action != config.ActionAllow {
					t.Errorf("rule %s: action %s", r.Host, r.Action)
				}
				hosts = append(hosts, r.Host)
				if r.Host == "internal.example.com" && !slices.Equal(r.AllowedPorts, []uint16{443, 8443}) {
					t.Errorf("internal.example.com ports %v, want [443 8443]", r.AllowedPorts)
				}
			}
			if !slices.Equal(hosts, c.hosts) {
				t.Errorf("hosts %v, want %v", hosts, c.hosts)
			}
		})
	}
}

// assertAllowsObserved decides every allow/report_deny line of the log
// with the proposal's policy and fails on any it would refuse (but for
// the hosts in except).
func assertAllowsObserved(t *testing.T, cfg *config.Config, logPath string, except ...string) {
	t.Helper()
	pol, err := policy.Compile(cfg.Policy)
	if err != nil {
		t.Fatalf("compiling the proposal: %v", err)
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		var rec struct {
			Message, Host, Method, Path, Decision string
			Port                                  int
			Repeated                              int
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Message != "proxy decision" || rec.Repeated > 0 {
			continue
		}
		if rec.Decision != "allow" && rec.Decision != "report_deny" || slices.Contains(except, rec.Host) {
			continue
		}
		hp, err := hostport.Parse(net.JoinHostPort(rec.Host, strconv.Itoa(rec.Port)))
		if err != nil {
			t.Fatalf("log host %q: %v", rec.Host, err)
		}
		d := pol.Decide(policy.Target{Host: hp, Method: rec.Method, Path: rec.Path})
		if !d.Allowed() {
			t.Errorf("the proposal refuses an observed request %s %s:%d%s (%s)", rec.Method, rec.Host, rec.Port, rec.Path, d.Reason)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no observed request in the log")
	}
}

func TestTemplatePath(t *testing.T) {
	for in, want := range map[string]string{
		"/":                         "/",
		"/user":                     "/user",
		"/repos/acme/app/pulls/123": "/repos/acme/app/pulls/*",
		"/v1/files/3f2b8c1e-aaaa-4bbb-8ccc-0123456789ab": "/v1/files/*",
		"/commits/0123abcd4567":                          "/commits/*",
		"/objects/deadbeefcafe":                          "/objects/deadbeefcafe", // hex letters only: a word
		"/t/AbC123dEf456GhI789":                          "/t/*",
		"/a b/c":                                         "/*/c",
		"/**/x":                                          "/*/x",
		"relative":                                       "/",
	} {
		if got := templatePath(in); got != want {
			t.Errorf("templatePath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCollapseBoundsPaths(t *testing.T) {
	var paths []string
	for i := range 30 {
		paths = append(paths, "/a/b"+string(rune('a'+i%26))+"/c"+strings.Repeat("x", i))
	}
	got := collapse(paths)
	if len(got) > suggestMaxPaths {
		t.Fatalf("collapse left %d paths: %v", len(got), got)
	}
	for _, p := range paths {
		ok := false
		for _, g := range got {
			ok = ok || g == p || covered(g, p)
		}
		if !ok {
			t.Errorf("%s not covered by %v", p, got)
		}
	}
}

func TestSuggestUsage(t *testing.T) {
	if code, _, _ := runArgs(t, nil, "suggest"); code != exitUsage {
		t.Errorf("without --log: exit %d, want %d", code, exitUsage)
	}
	if code, _, _ := runArgs(t, nil, "suggest", "--log", "x", "--min-count", "0"); code != exitUsage {
		t.Errorf("--min-count 0: exit %d, want %d", code, exitUsage)
	}
	if code, _, _ := runArgs(t, nil, "suggest", "--log", filepath.Join(t.TempDir(), "missing")); code != exitError {
		t.Errorf("missing file: exit %d, want %d", code, exitError)
	}
}

// FuzzTemplatePath: no panic; an absolute path gives an absolute glob of
// unreserved segments and "*", and templating it again changes nothing.
func FuzzTemplatePath(f *testing.F) {
	for _, s := range []string{"/", "/user", "/a/123/b", "/a b", "//x", "/**", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		g := templatePath(p)
		if !strings.HasPrefix(g, "/") {
			t.Fatalf("templatePath(%q) = %q: not absolute", p, g)
		}
		if !strings.HasPrefix(p, "/") {
			return
		}
		for _, s := range strings.Split(g[1:], "/") {
			if s != "" && s != "*" && !plainSeg.MatchString(s) {
				t.Fatalf("templatePath(%q) = %q: segment %q", p, g, s)
			}
		}
		if again := templatePath(g); again != g {
			t.Fatalf("templatePath not idempotent: %q -> %q -> %q", p, g, again)
		}
	})
}

// TestCheckSaysReportMode: `botbox check` warns loudly about report mode
// and shows it in the effective configuration.
func TestCheckSaysReportMode(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "report.yaml", "egress_policy:\n  mode: report\n  rules: []\n")
	code, out, errOut := runArgs(t, nil, "check", p)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "warning: egress_policy.mode:") || !strings.Contains(errOut, "FORWARDED") {
		t.Errorf("no report-mode warning on stderr: %q", errOut)
	}
	if !strings.Contains(out, "mode: report") {
		t.Errorf("effective config does not show mode: report:\n%s", out)
	}
}
