package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/testutil/testpki"
)

// explainConfig is exampleConfig with secrets_dir replaced and extra YAML
// appended.
func explainConfig(t *testing.T, secretsDir, extra string) string {
	t.Helper()
	return writeFile(t, t.TempDir(), "config.yaml", strings.Replace(exampleConfig, "/nonexistent", secretsDir, 1)+extra)
}

// secretsWith returns a secrets directory holding the given files.
func secretsWith(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for k, v := range files {
		writeFile(t, dir, k, v)
	}
	return dir
}

func TestExplain(t *testing.T) {
	sec := secretsWith(t, map[string]string{"openai-api-key": "sk-real\n"})
	p := explainConfig(t, sec, "")
	tests := []struct {
		args     []string
		want     []string
		wantCode int
	}{
		{[]string{"http://api.openai.com/v1/models"}, []string{
			"decision: allow", "status:   200", "reason:   rule_allow", "rules[0] (host api.openai.com, action allow)", "ports:    443 only",
			"upstream: https://api.openai.com/v1/models", `header:   Authorization (replaces any client value; from secret "openai-api-key")`,
			"removes:  X-Api-Key (deleted if the client sends it; never added)",
			"response: injected values masked wherever the origin reflects them (scrub_responses)",
			"address:  loopback, link-local (cloud metadata), private and other non-public addresses are refused at dial (403 address_guard)\n",
		}, 0},
		{[]string{"api.openai.com/v1"}, []string{"decision: allow", "listener: http"}, 0},
		{[]string{"http://API.OpenAI.com./v1"}, []string{"decision: allow", "host:     api.openai.com"}, 0},
		{[]string{"--method", "post", "http://api.openai.com/v1"}, []string{"request:  POST", "decision: allow"}, 0},
		{[]string{"http://api.openai.com:8443/"}, []string{"decision: deny", "status:   403", "reason:   port_not_allowed", "443 only"}, 1},
		{[]string{"http://internal.example.com:8443/"}, []string{"decision: allow", "allowed_ports [8443]", "upstream: https://internal.example.com:8443/", "headers:  none injected", "TCP to port 8443 is dropped"}, 0},
		{[]string{"http://blocked.example.com/"}, []string{"decision: deny", "reason:   rule_deny", "status:   403"}, 1},
		{[]string{"http://evil.test/"}, []string{"decision: deny", "reason:   default_deny"}, 1},
		{[]string{"http://x@api.openai.com/"}, []string{"decision: deny", "status:   400"}, 1},
		{[]string{"--method", "CONNECT", "api.openai.com:443"}, []string{"decision: deny", "status:   405"}, 1},
		// Interception off: the plain listener never sees https://.
		{[]string{"https://api.openai.com/v1"}, []string{"decision: deny", "status:   405", "https_interception is disabled", "Use http://api.openai.com/v1"}, 1},
	}
	for _, tt := range tests {
		code, out, errOut := runArgs(t, nil, append([]string{"explain", "-c", p}, tt.args...)...)
		if code != tt.wantCode {
			t.Errorf("explain %v: exit %d, want %d\n%s%s", tt.args, code, tt.wantCode, out, errOut)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("explain %v lacks %q:\n%s", tt.args, w, out)
			}
		}
	}
}

// TestExplainRoutes: explain names the route that decided, through the
// real handler's decision line.
func TestExplainRoutes(t *testing.T) {
	sec := secretsWith(t, map[string]string{"openai-api-key": "sk-real\n"})
	p := explainConfig(t, sec, `    - host: "*.github.example"
      action: allow
      routes:
        - methods: [GET, HEAD]
          paths: ["/repos/acme/**"]
        - methods: [DELETE]
          action: deny
`)
	for _, tt := range []struct {
		args     []string
		want     []string
		wantCode int
	}{
		{[]string{"http://api.github.example/repos/acme/app"}, []string{"decision: allow", "reason:   rule_allow",
			"rule:     egress_policy.rules[3] (host *.github.example, action allow)",
			"route:    egress_policy.rules[3].routes[0] (methods GET, HEAD; paths /repos/acme/**; action allow)"}, 0},
		{[]string{"--method", "DELETE", "http://api.github.example/repos/acme/app"}, []string{"decision: deny (denied_route)", "status:   403", "reason:   route_deny",
			"route:    egress_policy.rules[3].routes[1] (methods DELETE; paths any; action deny)"}, 1},
		{[]string{"--method", "POST", "http://api.github.example/repos/acme/app"}, []string{"decision: deny (denied_route)", "reason:   no_route",
			"route:    none of the rule's 2 routes decided"}, 1},
		{[]string{"http://api.github.example/repos/acme/%2e%2e/x"}, []string{"decision: deny (denied_path)", "status:   400", "reason:   ambiguous_path"}, 1},
		{[]string{"http://api.github.example/repos/acme/app;x=1"}, []string{"decision: deny (denied_path)", "status:   400", "reason:   ambiguous_path"}, 1},
		{[]string{"--method", "delete", "http://api.github.example/repos/acme/app"}, []string{"decision: deny (denied_route)", "reason:   route_deny"}, 1},
		{[]string{"http://api.github.example/repos/acme/app?_method=DELETE"}, []string{"decision: deny (denied_route)", "status:   400", "reason:   method_override"}, 1},
		{[]string{"http://github.example/"}, []string{"decision: deny", "reason:   default_deny"}, 1},
	} {
		code, out, errOut := runArgs(t, nil, append([]string{"explain", "-c", p}, tt.args...)...)
		if code != tt.wantCode {
			t.Errorf("explain %v: exit %d, want %d\n%s%s", tt.args, code, tt.wantCode, out, errOut)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("explain %v lacks %q:\n%s", tt.args, w, out)
			}
		}
	}
}

// TestExplainQueryRewrites: explain names the query parameter a rule's
// query_rewrites set and the Basic header template, with their secret
// refs and never a value; a missing query secret is named.
func TestExplainQueryRewrites(t *testing.T) {
	extra := `    - host: maps.example.test
      action: allow
      query_rewrites:
        - name: key
          value: "{value}"
          secret_ref: google-api-key
    - host: git.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "{basic:x-access-token}"
          secret_ref: github-token
`
	sec := secretsWith(t, map[string]string{"openai-api-key": "sk-real\n", "google-api-key": "AIza-real-value\n", "github-token": "ghp_real\n"})
	p := explainConfig(t, sec, extra)
	code, out, errOut := runArgs(t, nil, "explain", "-c", p, "http://maps.example.test/geo?key=mine&q=1")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, w := range []string{`query:    key (replaces every key parameter the client sent; from secret "google-api-key")`,
		"upstream: https://maps.example.test/geo?q=1&key=", "response: injected values masked"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	all := out
	code, out, _ = runArgs(t, nil, "explain", "-c", p, "http://git.example.test/r.git/info/refs")
	if code != 0 || !strings.Contains(out, `header:   Authorization (replaces any client value; from secret "github-token")`) {
		t.Errorf("git: exit %d\n%s", code, out)
	}
	for _, v := range []string{"AIza-real-value", "ghp_real"} {
		if strings.Contains(all+out, v) {
			t.Errorf("explain prints %q", v)
		}
	}
	p = explainConfig(t, secretsWith(t, map[string]string{"openai-api-key": "x\n"}), extra)
	code, out, _ = runArgs(t, nil, "explain", "-c", p, "http://maps.example.test/geo")
	if code != 1 || !strings.Contains(out, `secret:   "google-api-key" for query parameter key: no file`) {
		t.Errorf("missing query secret: exit %d\n%s", code, out)
	}
}

// TestExplainMissingSecret: a rule whose secret file is absent is allowed by
// policy, but the real request gets 500 and is not forwarded: explain says
// so and exits 1.
func TestExplainMissingSecret(t *testing.T) {
	p := explainConfig(t, t.TempDir(), "")
	code, out, errOut := runArgs(t, nil, "explain", "-c", p, "http://api.openai.com/v1")
	if code != 1 {
		t.Errorf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, w := range []string{"decision: allow by policy, but the request fails", "status:   500", `secret:   "openai-api-key" for header Authorization: no file`} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "upstream:") {
		t.Errorf("explain claims the request leaves:\n%s", out)
	}
}

// TestExplainInterception: with interception on, an https:// URL runs
// through the interception handler (SNI = the URL's host).
func TestExplainInterception(t *testing.T) {
	sec := secretsWith(t, map[string]string{"openai-api-key": "sk-real"})
	ca := testpki.NewCA(t, "explain")
	certPath, keyPath := ca.WriteFiles(t, t.TempDir())
	p := explainConfig(t, sec, fmt.Sprintf("https_interception:\n  enabled: true\n  ca_cert_path: %s\n  ca_key_path: %s\n  deny_handshake_on_disallowed_sni: true\n", certPath, keyPath))
	tests := []struct {
		url      string
		want     []string
		wantCode int
	}{
		{"https://api.openai.com/v1/models?x=1", []string{"listener: https", "decision: allow", "upstream: https://api.openai.com/v1/models?x=1", "header:   Authorization"}, 0},
		{"https://evil.test/", []string{"listener: https", "decision: deny", "reason:   default_deny", "deny_handshake_on_disallowed_sni is on"}, 1},
		{"https://api.openai.com:8443/", []string{"listener: https", "decision: deny", "status:   403"}, 1},
		{"http://api.openai.com/", []string{"listener: http", "decision: allow"}, 0},
	}
	for _, tt := range tests {
		code, out, errOut := runArgs(t, nil, "explain", "-c", p, tt.url)
		if code != tt.wantCode {
			t.Errorf("explain %s: exit %d, want %d\n%s%s", tt.url, code, tt.wantCode, out, errOut)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("explain %s lacks %q:\n%s", tt.url, w, out)
			}
		}
	}
}

// TestExplainConnect: with interception on, --method CONNECT models an
// HTTPS_PROXY agent: the CONNECT is decided on host and port only, and the
// URL's path is the request inside the tunnel, decided on its route (review
// D1: a rule with routes is reachable through CONNECT); a refused CONNECT
// is the handler's own 405. Without interception every CONNECT is 405
// (TestExplain).
func TestExplainConnect(t *testing.T) {
	sec := secretsWith(t, map[string]string{"openai-api-key": "sk-real"})
	ca := testpki.NewCA(t, "explain")
	certPath, keyPath := ca.WriteFiles(t, t.TempDir())
	p := explainConfig(t, sec, `    - host: "*.github.example"
      action: allow
      routes:
        - methods: [GET]
          paths: ["/repos/acme/**"]
`+fmt.Sprintf("https_interception:\n  enabled: true\n  ca_cert_path: %s\n  ca_key_path: %s\n", certPath, keyPath))
	tests := []struct {
		url      string
		want     []string
		wantCode int
	}{
		{"https://api.github.example/repos/acme/app", []string{"listener: connect", "connect:  CONNECT api.github.example:443 answered 200, allowed on host and port",
			"decision: allow", "route:    egress_policy.rules[3].routes[0]", "upstream: https://api.github.example/repos/acme/app"}, 0},
		{"https://api.github.example/admin", []string{"listener: connect", "answered 200", "decision: deny (denied_route)", "reason:   no_route"}, 1},
		{"api.openai.com:443", []string{"listener: connect", "decision: allow", "header:   Authorization"}, 0},
		{"https://evil.test/", []string{"listener: http", "decision: deny (denied_connect)", "status:   405", "reason:   default_deny"}, 1},
		{"api.openai.com:8443", []string{"listener: http", "decision: deny (denied_connect)", "status:   405", "reason:   connect_port"}, 1},
	}
	for _, tt := range tests {
		code, out, errOut := runArgs(t, nil, "explain", "-c", p, "--method", "CONNECT", tt.url)
		if code != tt.wantCode {
			t.Errorf("explain CONNECT %s: exit %d, want %d\n%s%s", tt.url, code, tt.wantCode, out, errOut)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("explain CONNECT %s lacks %q:\n%s", tt.url, w, out)
			}
		}
	}
}

func TestExplainUsage(t *testing.T) {
	p := explainConfig(t, t.TempDir(), "")
	for _, args := range [][]string{
		{"explain", "-c", p},
		{"explain", "-c", p, "http://a.example/", "http://b.example/"},
		{"explain", "-c", p, "ftp://a.example/"},
		{"explain", "-c", p, "http://"},
		{"explain", "-c", p, "--method", "GE T", "http://a.example/"},
		{"explain", "--bogus", "http://a.example/"},
		{"explain", "-c", filepath.Join(t.TempDir(), "missing.yaml"), "http://a.example/"},
	} {
		if code, out, errOut := runArgs(t, nil, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s%s", args, code, out, errOut)
		}
	}
}

// TestExplainNeverReadsSecretValues: the real secret value appears nowhere,
// and the outbound request carried only the placeholder.
func TestExplainNeverReadsSecretValues(t *testing.T) {
	sec := secretsWith(t, map[string]string{"openai-api-key": "CANARY-explain-99\n"})
	p := explainConfig(t, sec, "")
	code, out, errOut := runArgs(t, nil, "explain", "-c", p, "http://api.openai.com/")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if strings.Contains(out+errOut, "CANARY") || strings.Contains(out+errOut, explainPlaceholder) {
		t.Errorf("explain printed a secret value or the placeholder:\n%s%s", out, errOut)
	}
	// An unreadable file still counts as present: explain never opens it.
	if err := os.Chmod(filepath.Join(sec, "openai-api-key"), 0); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runArgs(t, nil, "explain", "-c", p, "http://api.openai.com/"); code != 0 {
		t.Errorf("unreadable secret file: exit %d, want 0 (presence only)\n%s", code, out)
	}
}

// TestExplainLimitsAndReportMode: explain names the limits of the rule that
// decided (only those set) and says when the policy is in report mode; in
// report mode a request enforce would deny is shown as report_deny,
// forwarded without any injected header (issue 11 point 8).
func TestExplainLimitsAndReportMode(t *testing.T) {
	sec := secretsWith(t, map[string]string{"openai-api-key": "sk-real\n"})
	limited := `    - host: uploads.example.com
      action: allow
      max_request_body_bytes: 1048576
      rate_limit: { requests_per_second: 2.5, burst: 10 }
      response_header_timeout_ms: 900000
      header_rewrites:
        - name: X-Key
          value: "{value}"
          secret_ref: openai-api-key
`
	enforce := explainConfig(t, sec, limited)
	withMode := strings.Replace(exampleConfig, "/nonexistent", sec, 1) + limited
	withMode = strings.Replace(withMode, "egress_policy:\n", "egress_policy:\n  mode: report\n", 1)
	report := writeFile(t, t.TempDir(), "config.yaml", withMode)
	limitLines := []string{
		"limit:    max_request_body_bytes 1048576 (a larger body gets 413",
		"limit:    rate_limit 2.5 requests/s, burst 10 (per rule; over it: 429",
		"limit:    response_header_timeout_ms 900000 (overrides upstream_response_header_timeout_ms",
	}
	tests := []struct {
		name     string
		cfg      string
		url      string
		want     []string
		wantNot  []string
		wantCode int
	}{
		{"limits named", enforce, "http://uploads.example.com/x",
			append([]string{"decision: allow", "rules[3] (host uploads.example.com", `header:   X-Key (replaces any client value; from secret "openai-api-key")`}, limitLines...),
			[]string{"mode:"}, 0},
		{"no limits set", enforce, "http://api.openai.com/v1", []string{"decision: allow"}, []string{"limit:", "mode:"}, 0},
		{"report mode allowed", report, "http://uploads.example.com/x",
			append([]string{"mode:     report (", "decision: allow", "header:   X-Key"}, limitLines...), nil, 0},
		{"report mode would deny", report, "http://evil.test/",
			[]string{"mode:     report (", "decision: report_deny (enforce mode would refuse it", "reason:   default_deny", "upstream: https://evil.test/", "headers:  none injected (report mode"},
			[]string{"decision: allow"}, 0},
		{"report mode rule deny", report, "http://blocked.example.com/",
			[]string{"mode:     report (", "decision: report_deny", "reason:   rule_deny", "headers:  none injected (report mode"}, []string{"decision: allow"}, 0},
	}
	for _, tt := range tests {
		code, out, errOut := runArgs(t, nil, "explain", "-c", tt.cfg, tt.url)
		if code != tt.wantCode {
			t.Errorf("%s: exit %d, want %d\n%s%s", tt.name, code, tt.wantCode, out, errOut)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", tt.name, w, out)
			}
		}
		for _, w := range tt.wantNot {
			if strings.Contains(out, w) {
				t.Errorf("%s: output has %q:\n%s", tt.name, w, out)
			}
		}
	}
}

// TestExplainGuards: explain names the rule's scrub_responses setting and
// the address guard's exceptions for the request.
func TestExplainGuards(t *testing.T) {
	sec := secretsWith(t, map[string]string{"openai-api-key": "sk-real\n"})
	p := explainConfig(t, sec, `    - host: echo.example.test
      action: allow
      scrub_responses: false
      allow_private_addresses: true
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: openai-api-key
address_guard:
  allowed_cidrs: ["192.168.7.0/24"]
`)
	code, out, errOut := runArgs(t, nil, "explain", "-c", p, "http://echo.example.test/")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, w := range []string{
		"response: NOT scrubbed (scrub_responses: false)",
		"allowed here: private, CGNAT, ULA and site-local (allow_private_addresses), 192.168.7.0/24 (address_guard.allowed_cidrs)",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("explain lacks %q:\n%s", w, out)
		}
	}
	off := explainConfig(t, sec, "address_guard:\n  enabled: false\n")
	_, out, _ = runArgs(t, nil, "explain", "-c", off, "http://api.openai.com/v1")
	if !strings.Contains(out, "address:  address_guard disabled") {
		t.Errorf("explain with the guard off lacks the warning:\n%s", out)
	}
}
