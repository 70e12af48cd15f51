package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/mitm"
)

const badConfig = `listen_port: http
egress_policy:
  rules:
    - host: https://api.openai.com/
      action: allow
`

// TestCheckValidatesTheNamedFile: `botbox check FILE` validates FILE, not
// ./config.yaml (which here is valid, so the old behaviour exited 0).
func TestCheckValidatesTheNamedFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "config.yaml", exampleConfig)
	bad := writeFile(t, dir, "bad.yaml", badConfig)
	t.Chdir(dir)

	code, out, errOut := runArgs(t, nil, "check", "bad.yaml")
	if code != 1 {
		t.Fatalf("check bad.yaml: exit %d, want 1; stdout %q stderr %q", code, out, errOut)
	}
	for _, want := range []string{
		"bad.yaml: invalid configuration (2 problems):",
		`line 1: listen_port: expected an integer, got a string "http"`,
		"(write the bare host: api.openai.com)",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	// The same file through -c, and a flag after the path.
	if code, _, _ := runArgs(t, nil, "check", "-c", bad); code != 1 {
		t.Errorf("check -c bad.yaml: exit %d, want 1", code)
	}
	code, out, errOut = runArgs(t, nil, "check", "config.yaml", "--files=false")
	if code != 0 || !strings.Contains(out, "host: api.openai.com") || !strings.Contains(errOut, "config.yaml: the configuration is valid") {
		t.Errorf("check config.yaml --files=false: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
}

func TestCheckMissingFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "absent.yaml")
	code, _, errOut := runArgs(t, nil, "check", p)
	if code != 1 || errOut != "botbox check: config file not found: "+p+"\n" {
		t.Errorf("exit %d stderr %q, want 1 and only %q", code, errOut, "botbox check: config file not found: "+p)
	}
}

// TestExtraArgumentsAreUsageErrors: every subcommand either takes its
// positional arguments or refuses extra ones with exit 2 and a usage line;
// none silently ignores them.
func TestExtraArgumentsAreUsageErrors(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "config.yaml", exampleConfig)
	ipv6 := map[string]string{"BOTBOX_ENABLE_IPV6": "0"}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string // in stderr
	}{
		{"run", nil, []string{"run", "-c", p, "extra"}, `unexpected argument "extra"`},
		{"default run", nil, []string{"-c", p, "extra"}, `unexpected argument "extra"`},
		{"check two paths", nil, []string{"check", p, "extra"}, "botbox check: unexpected argument \"extra\"\nusage: botbox check [--files] [-c PATH | PATH]"},
		{"check path twice", nil, []string{"check", "-c", p, filepath.Join(dir, "other.yaml")}, "config path given twice"},
		{"check unknown flag", nil, []string{"check", "--nope", p}, "flag provided but not defined: -nope"},
		{"explain two urls", nil, []string{"explain", "-c", p, "http://a.example/", "http://b.example/"}, "usage: botbox explain"},
		{"netfilter", ipv6, []string{"netfilter", "print", "extra"}, `unexpected argument "extra"`},
		{"ca without new", nil, []string{"ca", "old"}, "usage: botbox ca new"},
		{"ca new", nil, []string{"ca", "new", "--out", filepath.Join(dir, "ca"), "extra"}, "botbox ca new: unexpected argument \"extra\"\nusage: botbox ca new"},
		{"version", nil, []string{"version", "extra"}, "botbox version: unexpected argument \"extra\"\nusage: botbox version"},
		{"--version", nil, []string{"--version", "extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runArgs(t, tt.env, tt.args...)
			if code != exitUsage || !strings.Contains(errOut, tt.want) {
				t.Errorf("%v: exit %d stderr %q, want 2 and %q (stdout %q)", tt.args, code, errOut, tt.want, out)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "ca")); err == nil {
		t.Error("ca new wrote files despite the usage error")
	}
}

// TestFlagsAfterArguments: flags may follow the positional argument.
func TestFlagsAfterArguments(t *testing.T) {
	p := writeFile(t, t.TempDir(), "config.yaml", exampleConfig)
	code, out, errOut := runArgs(t, nil, "explain", "http://api.openai.com/v1", "-c", p)
	// The example's secret file does not exist here, so explain reports the
	// 500 (exit 1); what matters is that -c after the URL was read.
	if code == exitUsage || !strings.Contains(out, "rule:     egress_policy.rules[0]") {
		t.Errorf("explain URL -c PATH: exit %d\n%s%s", code, out, errOut)
	}
	// "--" ends the flags: what follows is an argument even if it looks like one.
	code, _, errOut = runArgs(t, nil, "check", "--", "-c")
	if code != 1 || !strings.Contains(errOut, "config file not found: -c") {
		t.Errorf("check -- -c: exit %d %q, want the file named -c", code, errOut)
	}
}

func TestSubcommandHelpShowsUsageLine(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "-h"}, "usage: botbox check [--files] [-c PATH | PATH]\n\nFlags:\n  -c PATH\n"},
		{[]string{"check", "-h"}, "  --config PATH\n    \tPATH of the configuration file (default \"config.yaml\")\n"},
		{[]string{"run", "--help"}, "usage: botbox run [flags]\n"},
		{[]string{"version", "--help"}, "usage: botbox version\n"},
		{[]string{"ca", "new", "-h"}, "  --days N\n    \tvalidity in days, N from 1 to 3650 (default 365)\n"},
	} {
		code, _, errOut := runArgs(t, nil, tt.args...)
		if code != 0 || !strings.Contains(errOut, tt.want) || !strings.Contains(errOut, "`botbox help` lists every command.") {
			t.Errorf("%v: exit %d, stderr %q, want %q", tt.args, code, errOut, tt.want)
		}
	}
	if code, out, _ := runArgs(t, nil, "-v"); code != 0 || !strings.HasPrefix(out, "botbox ") {
		t.Errorf("-v: exit %d %q, want the version", code, out)
	}
}

// TestCheckFiles: --files opens what the config names, reports each
// problem, and never prints a secret value.
func TestCheckFiles(t *testing.T) {
	dir := t.TempDir()
	sec := filepath.Join(dir, "secrets")
	if err := os.Mkdir(sec, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, sec, "good-key", "CANARY-good-7c1\n")
	writeFile(t, sec, "crlf-key", "CANARY-bad-\r\nInjected: 1\n")
	if err := os.WriteFile(filepath.Join(sec, "binary-key"), []byte("CANARY-bin-\xff\xfe"), 0o600); err != nil {
		t.Fatal(err)
	}
	caDir := filepath.Join(dir, "ca")
	certPEM, keyPEM, err := mitm.NewCA("", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := mitm.WriteCA(filepath.Join(caDir, "ca.crt"), filepath.Join(caDir, "ca.key"), certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	rule := func(host, ref string) string {
		return "    - host: " + host + "\n      action: allow\n      header_rewrites:\n        - {name: Authorization, value: \"Bearer {value}\", secret_ref: " + ref + "}\n"
	}
	base := "secrets_dir: " + sec + "\negress_policy:\n  rules:\n" + rule("a.example", "good-key")
	ca := func(cert, key string) string {
		return "https_interception:\n  enabled: true\n  ca_cert_path: " + filepath.Join(caDir, cert) + "\n  ca_key_path: " + filepath.Join(caDir, key) + "\n"
	}

	good := writeFile(t, dir, "good.yaml", base+ca("ca.crt", "ca.key"))
	code, _, errOut := runArgs(t, nil, "check", "--files", good)
	if code != 0 || !strings.Contains(errOut, "the configuration is valid; found and usable: 1 secret, the interception CA") {
		t.Fatalf("good files: exit %d\n%s", code, errOut)
	}

	bad := writeFile(t, dir, "bad.yaml", base+rule("b.example", "missing-key")+rule("c.example", "crlf-key")+rule("d.example", "binary-key")+
		"upstream_ca_file: "+filepath.Join(dir, "nope.pem")+"\n"+ca("ca.key", "ca.crt"))
	code, out, errOut := runArgs(t, nil, "check", bad, "--files")
	if code != 1 {
		t.Fatalf("bad files: exit %d, want 1\n%s", code, errOut)
	}
	for _, want := range []string{
		"the configuration is valid, but the files it names have 6 problems:",
		`secret_ref "missing-key" (egress_policy.rules[1].header_rewrites[0]): no usable file ` + filepath.Join(sec, "missing-key"),
		`secret_ref "binary-key" (egress_policy.rules[3].header_rewrites[0]): no usable file`,
		"secrets_dir: skipping secret file that is not valid UTF-8: key=binary-key",
		"egress_policy.rules[2] (host c.example): ",
		"https_interception: failed to decode CA cert PEM from '" + filepath.Join(caDir, "ca.key") + "'",
		"are ca_cert_path and ca_key_path swapped?",
		"upstream_ca_file: reading upstream_ca_file",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(out+errOut, "CANARY") {
		t.Errorf("check --files printed a secret value:\n%s%s", out, errOut)
	}

	// Without --files nothing is opened: the same config is valid.
	if code, _, errOut := runArgs(t, nil, "check", bad); code != 0 {
		t.Errorf("check without --files: exit %d\n%s", code, errOut)
	}
	// A missing secrets_dir is one clear line.
	noDir := writeFile(t, dir, "nodir.yaml", strings.Replace(base, sec, filepath.Join(dir, "absent"), 1))
	if code, _, errOut := runArgs(t, nil, "check", "--files", noDir); code != 1 || !strings.Contains(errOut, "secrets_dir: directory "+filepath.Join(dir, "absent")+" does not exist (needed for good-key)") {
		t.Errorf("missing secrets_dir: exit %d\n%s", code, errOut)
	}
}

func TestCANewTwiceSuggestsIfMissing(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := runArgs(t, nil, "ca", "new", "--out", dir); code != 0 {
		t.Fatalf("first: exit %d %s", code, errOut)
	}
	code, _, errOut := runArgs(t, nil, "ca", "new", "--out", dir)
	if code != 1 || !strings.Contains(errOut, "refusing to overwrite existing") || !strings.Contains(errOut, "--if-missing") {
		t.Errorf("second: exit %d %q", code, errOut)
	}
}

// TestCANewBundleOut: ca-init's command line as the injector writes it
// makes the bundle on the first run and again (for the CA already there)
// with --if-missing; the bundle ends with the CA certificate.
func TestCANewBundleOut(t *testing.T) {
	dir := t.TempDir()
	cert, key, bundle := filepath.Join(dir, "c", "ca.crt"), filepath.Join(dir, "k", "ca.key"), filepath.Join(dir, "c", "ca-bundle.crt")
	args := []string{"ca", "new", "--cert-out", cert, "--key-out", key, "--days", "365", "--if-missing", "--bundle-out", bundle}
	for i := range 2 {
		if code, out, errOut := runArgs(t, nil, args...); code != exitOK || !strings.Contains(out, "wrote "+bundle) {
			t.Fatalf("run %d: exit %d, stdout %q, stderr %q", i, code, out, errOut)
		}
		b, _ := os.ReadFile(bundle)
		c, _ := os.ReadFile(cert)
		if !strings.HasSuffix(string(b), string(c)) || strings.Count(string(b), "BEGIN CERTIFICATE") < 100 {
			t.Errorf("run %d: the bundle is not the roots followed by the CA", i)
		}
	}
}

// TestErrorsNameTheCommand: every subcommand's error line starts with
// "botbox CMD:" (on ee87e5f most said "Error:").
func TestErrorsNameTheCommand(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "absent.yaml")
	blocker := writeFile(t, dir, "a-file", "") // ca new cannot make a directory under it
	for _, tc := range []struct {
		args   []string
		prefix string
	}{
		{[]string{"--config", missing}, "botbox run: config file not found"},
		{[]string{"run", "extra"}, "botbox run: unexpected argument"},
		{[]string{"check", missing}, "botbox check: "},
		{[]string{"explain", "-c", missing, "http://example.com/"}, "botbox explain: "},
		{[]string{"placeholders", "print", "-c", missing}, "botbox placeholders print: "},
		{[]string{"suggest", "--log", missing}, "botbox suggest: "},
		{[]string{"ca", "new", "--out", filepath.Join(blocker, "ca")}, "botbox ca new: "},
	} {
		code, _, errOut := runArgs(t, nil, tc.args...)
		if code == exitOK || !strings.HasPrefix(errOut, tc.prefix) {
			t.Errorf("%q: exit %d, stderr %q; want it to start with %q", tc.args, code, errOut, tc.prefix)
		}
	}
	if _, _, errOut := runArgs(t, nil, "--config", missing); !strings.Contains(errOut, "--config PATH") {
		t.Errorf("a missing config gives no usage hint: %q", errOut)
	}
}
