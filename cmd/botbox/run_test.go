package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/admin"
	"github.com/botbox/botbox/internal/mitm"
	"github.com/prometheus/client_golang/prometheus"
)

func runArgs(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	lookupEnv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = run(ctx, args, lookupEnv, &out, &errb)
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const exampleConfig = `
secrets_dir: /nonexistent
egress_policy:
  default_action: deny
  rules:
    - host: api.openai.com
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: openai-api-key
      remove_headers: [X-Api-Key]
    - host: internal.example.com
      action: allow
      allowed_ports: [8443]
    - host: blocked.example.com
      action: deny
`

func TestCheckPrintsEffectiveConfig(t *testing.T) {
	p := writeFile(t, t.TempDir(), "config.yaml", exampleConfig)
	for _, flagName := range []string{"-c", "--config", "-config"} {
		code, out, errOut := runArgs(t, nil, "check", flagName, p)
		if code != 0 {
			t.Fatalf("%s: exit %d, stderr %s", flagName, code, errOut)
		}
		for _, want := range []string{"listen_port: 8080", "metrics_port: 9090", "max_connections: 1024", "host: api.openai.com"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: effective config lacks %q:\n%s", flagName, want, out)
			}
		}
	}
}

func TestCheckListsEveryProblemWithLine(t *testing.T) {
	bad := `listen_port: 9090
metrics_port: 9090
egress_policy:
  rules:
    - host: api.openai.com
      action: allow
      allowed_port: [443]
`
	p := writeFile(t, t.TempDir(), "config.yaml", bad)
	code, _, errOut := runArgs(t, nil, "check", "-c", p)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(errOut, "line 7") || !strings.Contains(errOut, "allowed_port") {
		t.Errorf("stderr does not name the mistyped key and its line:\n%s", errOut)
	}
}

func TestVersionAndHelp(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, _ := runArgs(t, nil, args...)
		if code != 0 || !strings.HasPrefix(out, "botbox ") {
			t.Errorf("%v: %d %q", args, code, out)
		}
	}
	code, out, _ := runArgs(t, nil, "--help")
	if code != 0 || !strings.Contains(out, "botbox explain") {
		t.Errorf("--help: %d %q", code, out)
	}
	if code, _, _ := runArgs(t, nil, "frobnicate"); code != 2 {
		t.Errorf("unknown command exit %d, want 2", code)
	}
}

func TestRunFailsFastOnBadConfig(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"typo.yaml":  "egress_policy:\n  rules: []\nhttps_intercept:\n  enabled: true\n",
		"empty.yaml": "",
		"ca.yaml":    "egress_policy:\n  rules: []\nhttps_interception:\n  enabled: true\n  ca_cert_path: " + dir + "/missing.crt\n  ca_key_path: " + dir + "/missing.key\n",
	} {
		p := writeFile(t, dir, name, content)
		code, _, errOut := runArgs(t, nil, "--config", p)
		if code != 1 || !strings.HasPrefix(errOut, "botbox run: ") {
			t.Errorf("%s: exit %d stderr %q, want 1 and a botbox run: line", name, code, errOut)
		}
	}
	if code, _, errOut := runArgs(t, nil, "-c", filepath.Join(dir, "absent.yaml")); code != 1 || !strings.Contains(errOut, "absent.yaml") {
		t.Errorf("missing file: %d %q", code, errOut)
	}
}

func TestCANew(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not-yet-created")
	code, _, errOut := runArgs(t, nil, "ca", "new", "--out", dir, "--days", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for name, mode := range map[string]os.FileMode{"ca.crt": 0o444, "ca.key": 0o400} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s mode %v, want %v", name, st.Mode().Perm(), mode)
		}
	}
	pemBytes, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	blk, _ := pem.Decode(pemBytes)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.IsCA || cert.Subject.CommonName != "botbox-pod-ca" || cert.NotAfter.Sub(cert.NotBefore) > 49*time.Hour {
		t.Errorf("unexpected CA: CA=%v CN=%q validity=%v", cert.IsCA, cert.Subject.CommonName, cert.NotAfter.Sub(cert.NotBefore))
	}
	if os.Getuid() != 0 { // root can read 0400 files of others anyway
		if _, err := mitm.LoadCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"), nil); err != nil {
			t.Errorf("LoadCA of the new CA: %v", err)
		}
	}
	// Refuses to overwrite; --if-missing makes a re-run a no-op.
	if code, _, _ := runArgs(t, nil, "ca", "new", "--out", dir); code != 1 {
		t.Errorf("overwrite: exit %d, want 1", code)
	}
	if code, _, errOut := runArgs(t, nil, "ca", "new", "--out", dir, "--if-missing"); code != 0 {
		t.Errorf("--if-missing: exit %d %s", code, errOut)
	}
	if err := os.Remove(filepath.Join(dir, "ca.crt")); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := runArgs(t, nil, "ca", "new", "--out", dir, "--if-missing"); code != 1 {
		t.Errorf("half a CA with --if-missing: exit %d, want 1", code)
	}
	// Separate paths, as the Kubernetes example uses them.
	d2 := t.TempDir()
	code, _, errOut = runArgs(t, nil, "ca", "new", "--cert-out", filepath.Join(d2, "c.pem"), "--key-out", filepath.Join(d2, "k.pem"))
	if code != 0 {
		t.Fatalf("--cert-out/--key-out: %d %s", code, errOut)
	}
	if code, _, _ := runArgs(t, nil, "ca", "new", "--out", t.TempDir(), "--days", "0"); code != 2 {
		t.Errorf("--days 0: exit %d, want 2", code)
	}
}

// TestProbe is the issue 8 §3 squat case: a process answering 200 on the
// admin port without BotBox's per-start key never passes the probe; BotBox's
// own admin handler, holding the key, passes when ready and fails when not.
func TestProbe(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "probe.key")
	key, err := admin.NewProbeKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.WriteProbeKey(keyFile, key); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"BOTBOX_PROBE_KEY_FILE": keyFile}

	squatter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Echoing whatever it can see is all a squatter can do.
		w.Header().Set(admin.ProbeAuthHeader, r.Header.Get(admin.ProbeNonceHeader))
		_, _ = io.WriteString(w, "ok")
	}))
	defer squatter.Close()
	if code, _, errOut := runArgs(t, env, "probe", squatter.URL+"/healthz"); code != 1 || !strings.Contains(errOut, "another process may hold the port") {
		t.Errorf("squatter: exit %d %q, want 1 naming the squat", code, errOut)
	}

	var ready atomic.Bool
	real := httptest.NewServer(admin.NewHandler(prometheus.NewRegistry(), ready.Load, key))
	defer real.Close()
	if code, out, _ := runArgs(t, env, "probe", real.URL+"/healthz"); code != 1 || !strings.Contains(out, "503") {
		t.Errorf("not ready: exit %d %q, want 1 reporting 503", code, out)
	}
	ready.Store(true)
	if code, _, errOut := runArgs(t, env, "probe", real.URL+"/healthz"); code != 0 {
		t.Errorf("ready: exit %d %s, want 0", code, errOut)
	}
	if code, _, _ := runArgs(t, env, "probe", "--key-file", keyFile, real.URL+"/metrics"); code != 0 {
		t.Errorf("/metrics with --key-file: exit %d, want 0", code)
	}
	// Another start's key (a stale file, another instance) does not verify.
	other := filepath.Join(t.TempDir(), "other.key")
	otherKey, _ := admin.NewProbeKey()
	if _, err := admin.WriteProbeKey(other, otherKey); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := runArgs(t, nil, "probe", "--key-file", other, real.URL+"/healthz"); code != 1 {
		t.Errorf("wrong key: exit %d, want 1", code)
	}
	if code, _, _ := runArgs(t, nil, "probe", "--key-file", filepath.Join(t.TempDir(), "missing"), real.URL+"/healthz"); code != 1 {
		t.Errorf("no key file: exit %d, want 1", code)
	}
	if code, _, _ := runArgs(t, env, "probe", "--timeout", "200ms", "http://127.0.0.1:1/healthz"); code != 1 {
		t.Errorf("refused: exit %d, want 1", code)
	}
}

func TestNetfilterPrintDefaults(t *testing.T) {
	// The backend is explicit: with auto, what print shows depends on the
	// machine (nftables when root on an nf_tables kernel).
	for backend, wants := range map[string][]string{
		"iptables": {"EGRESS_REDIRECT", "EGRESS_FILTER", "--to-ports 8080", "--uid-owner 1337"},
		"nftables": {"table ip botbox {", "EGRESS_REDIRECT", "EGRESS_FILTER", "redirect to :8080", "meta skuid 1337"},
	} {
		code, out, errOut := runArgs(t, map[string]string{"BOTBOX_ENABLE_IPV6": "0", "BOTBOX_NETFILTER_BACKEND": backend}, "netfilter", "print")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", backend, code, errOut)
		}
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("%s: print lacks %q:\n%s", backend, want, out)
			}
		}
	}
	if code, _, errOut := runArgs(t, nil, "netfilter", "print"); code != 1 || !strings.Contains(errOut, "BOTBOX_ENABLE_IPV6 is not set") {
		t.Errorf("unset IPv6 variable: %d %q", code, errOut)
	}
	// Set but empty is "set" for the reference script: it fails the 0-or-1 check.
	if code, _, errOut := runArgs(t, map[string]string{"BOTBOX_ENABLE_IPV6": ""}, "netfilter", "print"); code != 1 || !strings.Contains(errOut, "must be 0 or 1 (got '')") {
		t.Errorf("empty IPv6 variable: %d %q", code, errOut)
	}
}

// TestCheckQueryRewrites: `botbox check` shows query_rewrites in the
// effective config (names and secret refs) and refuses bad ones with
// their line; --files names a missing query secret by its rewrite.
func TestCheckQueryRewrites(t *testing.T) {
	good := "egress_policy:\n  rules:\n    - host: maps.example.test\n      action: allow\n      query_rewrites:\n        - {name: key, value: \"{value}\", secret_ref: google-api-key}\n"
	p := writeFile(t, t.TempDir(), "config.yaml", good)
	code, out, errOut := runArgs(t, nil, "check", "-c", p)
	if code != 0 || !strings.Contains(out, "query_rewrites:\n        - name: key\n          value: '{value}'\n          secret_ref: google-api-key\n") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	bad := strings.Replace(good, "{name: key,", "{name: \"k&ey\",", 1) + "        - {name: key, value: \"{basic:u}\", secret_ref: x}\n"
	code, _, errOut = runArgs(t, nil, "check", "-c", writeFile(t, t.TempDir(), "config.yaml", bad))
	if code != 1 || !strings.Contains(errOut, "line 6: egress_policy.rules[0].query_rewrites[0].name: invalid query parameter name 'k&ey'") ||
		!strings.Contains(errOut, "line 7: egress_policy.rules[0].query_rewrites[1].value:") {
		t.Errorf("exit %d\n%s", code, errOut)
	}
	sec := t.TempDir()
	files := writeFile(t, t.TempDir(), "config.yaml", "secrets_dir: "+sec+"\n"+good)
	code, _, errOut = runArgs(t, nil, "check", "--files", files)
	if code != 1 || !strings.Contains(errOut, `secret_ref "google-api-key" (egress_policy.rules[0].query_rewrites[0])`) {
		t.Errorf("--files: exit %d\n%s", code, errOut)
	}
}

// TestAdmissionCommandsMoved: `botbox inject` and `botbox webhook` exit 2
// and name the binary that has them, whatever flags follow.
func TestAdmissionCommandsMoved(t *testing.T) {
	for _, args := range [][]string{{"inject", "-f", "x.yaml"}, {"webhook", "--tls-cert", "c", "--tls-key", "k"}, {"inject"}} {
		code, out, errb := runArgs(t, nil, args...)
		if code != exitUsage || out != "" || !strings.Contains(errb, "botbox "+args[0]+": moved to the botbox-admission binary") ||
			!strings.Contains(errb, "botbox-admission "+args[0]) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errb)
		}
	}
}

// TestProbeDefaultKeyFile: without --key-file or BOTBOX_PROBE_KEY_FILE,
// `botbox probe URL` reads the key `botbox run` writes for URL's port
// (TMPDIR/botbox-UID/probe-PORT.key, or under XDG_RUNTIME_DIR).
func TestProbeDefaultKeyFile(t *testing.T) {
	key, _ := admin.NewProbeKey()
	real := httptest.NewServer(admin.NewHandler(prometheus.NewRegistry(), nil, key))
	defer real.Close()
	u, _ := url.Parse(real.URL)
	port, _ := strconv.Atoi(u.Port())
	for _, env := range []map[string]string{
		{"TMPDIR": t.TempDir()},
		{"XDG_RUNTIME_DIR": t.TempDir(), "TMPDIR": "/nonexistent"},
	} {
		path := defaultProbeKeyFile(func(k string) string { return env[k] }, uint16(port))
		if err := admin.PrepareProbeKeyDir(filepath.Dir(path), os.Getuid()); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.WriteProbeKey(path, key); err != nil {
			t.Fatal(err)
		}
		if code, _, errOut := runArgs(t, env, "probe", real.URL+"/healthz"); code != 0 {
			t.Errorf("%v: exit %d %s", env, code, errOut)
		}
	}
	for _, tc := range []struct {
		url  string
		port uint16
		ok   bool
	}{
		{"http://127.0.0.1:9191/healthz", 9191, true},
		{"http://127.0.0.1/healthz", 80, true},
		{"https://localhost/healthz", 443, true},
		{"http://127.0.0.1:0/healthz", 0, false},
		{"ftp://127.0.0.1/x", 0, false},
	} {
		u, _ := url.Parse(tc.url)
		if p, err := probePort(u); p != tc.port || (err == nil) != tc.ok {
			t.Errorf("probePort(%s) = %d, %v", tc.url, p, err)
		}
	}
}
