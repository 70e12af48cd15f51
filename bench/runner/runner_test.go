package main

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/policy"
)

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestParseWrk reads recorded wrk --latency reports (testdata/wrk-*.txt). A
// parsing bug here would silently corrupt every published ratio.
func TestParseWrk(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		want cell
	}{
		{"wrk-ok.txt", cell{requests: 117093, rps: 39006.77, p50: 380, p99: 1080}},
		{"wrk-errors.txt", cell{requests: 30117, rps: 10036.41, p50: 12350, p99: 24660,
			bad: "42 non-2xx; socket errors: connect 0, read 12, write 0, timeout 3"}},
		// Minutes and hours: wrk's format_time_us switches to "m" and "h" at 60 s.
		{"wrk-slow.txt", cell{requests: 1, rps: 0.01, p50: 90e6, p99: 1.02 * 3600e6}},
		{"wrk-none.txt", cell{bad: "socket errors: connect 16, read 0, write 0, timeout 0; no requests"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			var got cell
			parseWrk(readTestdata(t, tt.file), &got)
			if d := cmp.Diff(tt.want, got, cmp.AllowUnexported(cell{})); d != "" {
				t.Errorf("parseWrk (-want +got):\n%s", d)
			}
		})
	}
}

func TestParseStat(t *testing.T) {
	t.Parallel()
	// A command name with spaces and ')' (the kernel does not escape it).
	const line = "4242 (bot) box (x)) S 4200 4242 4200 0 -1 4194560 1234 0 0 0 150 37 0 0 20 0 9 0 12345 1281937408 5120 18446744073709551615\n"
	f := parseStat(line)
	if len(f) < 13 || f[0] != "S" || f[1] != "4200" || f[11] != "150" || f[12] != "37" {
		t.Fatalf("parseStat = %q, want state S, ppid 4200, utime 150, stime 37 at indexes 0, 1, 11, 12", f)
	}
	for _, bad := range []string{"", "4242 no-paren S 1", "4242 (x)"} {
		if f := parseStat(bad); len(f) != 0 {
			t.Errorf("parseStat(%q) = %q, want none", bad, f)
		}
	}
}

func TestParseStatusKB(t *testing.T) {
	t.Parallel()
	status := readTestdata(t, "pid-status.txt")
	for key, want := range map[string]int64{"VmHWM": 23456, "VmRSS": 20480, "VmPeak": 1252040, "VmSwap": 0, "Vm": 0} {
		if got := parseStatusKB(status, key); got != want {
			t.Errorf("parseStatusKB(%s) = %d, want %d", key, got, want)
		}
	}
}

func TestParseCPUBusy(t *testing.T) {
	t.Parallel()
	got := parseCPUBusy(readTestdata(t, "proc-stat.txt"))
	// cpu0: total of 8 columns = 1132+34+1441+11311718+3675+127+438+0 = 11318565; idle+iowait = 11315393.
	want := map[string][2]int64{
		"0": {11318565 - 11315393, 11318565},
		"1": {1123 + 849 + 18, 1123 + 849 + 11313845 + 2615 + 18},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("parseCPUBusy (-want +got):\n%s", d)
	}
}

func TestTrimAndStats(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{39006.77: "39007", 1000: "1000", 999.6: "1000", 380.4: "380", 100: "100", 99.94: "99.9", 12.35: "12.3", 9.999: "10.00", 1.084: "1.08", 0: "0.00"} {
		if got := trim(v); got != want {
			t.Errorf("trim(%v) = %q, want %q", v, got, want)
		}
	}
	if got := stats([]float64{3, 1, 2}); got != (stat{1, 2, 3}) {
		t.Errorf("stats odd = %+v", got)
	}
	if got := stats([]float64{4, 1, 2, 3}); got != (stat{1, 2.5, 4}) {
		t.Errorf("stats even = %+v", got)
	}
	if got := (stat{1, 2.5, 4}).String(); got != "2.50 [1.00–4.00]" {
		t.Errorf("stat.String() = %q", got)
	}
}

func TestKV(t *testing.T) {
	t.Parallel()
	got := kv("fresh=200 cached=200 errors=0 fresh_p50_us=1330.3 delta_p50_us=222.9 name=x")
	want := map[string]float64{"fresh": 200, "cached": 200, "errors": 0, "fresh_p50_us": 1330.3, "delta_p50_us": 222.9}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("kv (-want +got):\n%s", d)
	}
}

// TestPKI: the origin's certificate verifies against the bench CA for
// 127.0.0.1, ::1 and localhost, in a real TLS handshake on loopback.
func TestPKI(t *testing.T) {
	t.Parallel()
	r := &runner{work: t.TempDir()}
	if err := r.pki(); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(r.path("origin.crt"), r.path("origin.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(r.path("nginx-leaf.crt"), r.path("nginx-leaf.key")); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(r.path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(client.CloseIdleConnections)
	for _, name := range []string{"127.0.0.1", "localhost"} {
		client.Transport.(*http.Transport).TLSClientConfig.ServerName = name
		resp, err := client.Get("https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + "/")
		if err != nil {
			t.Fatalf("TLS as %s: %v", name, err)
		}
		resp.Body.Close()
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.VerifyHostname("::1"); err != nil {
		t.Errorf("origin certificate lacks ::1: %v", err)
	}
}

// TestAddPolicyV2: the policy=v2 variant's configuration has 20 rules, the
// hit rule keeps its credential and gains 5 routes admitting exactly the
// benchmark's requests, and the interception block survives.
func TestAddPolicyV2(t *testing.T) {
	t.Parallel()
	base := `secrets_dir: /s
egress_policy:
  default_action: deny
  rules:
    - host: 127.0.0.1
      action: allow
      allowed_ports: [18443]
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: origin-token
    - host: localhost
      action: allow
`
	cfg, err := config.Parse([]byte(addPolicyV2(base)))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, addPolicyV2(base))
	}
	if n := len(cfg.Policy.Rules); n != 20 {
		t.Errorf("%d rules, want 20", n)
	}
	p, err := policy.Compile(cfg.Policy)
	if err != nil {
		t.Fatal(err)
	}
	hp, _ := hostport.Parse("127.0.0.1:18443")
	for _, tc := range []struct {
		method, path string
		allowed      bool
	}{{"GET", "/small", true}, {"POST", "/small", true}, {"GET", "/stream", true}, {"DELETE", "/small", false}, {"GET", "/other", false}} {
		d := p.Decide(policy.Target{Host: hp, Method: tc.method, Path: tc.path})
		if d.Allowed() != tc.allowed || d.Rule == nil || len(d.Rule.HeaderRewrites) != 1 {
			t.Errorf("%s %s: %+v, want allowed=%v by the hit rule with its rewrite", tc.method, tc.path, d, tc.allowed)
		}
	}
}

// TestGuardOffVariant: the benchmark's BotBox runs with the address guard
// on and the loopback origin opened; the guard=off element turns it off and
// is not passed on as an environment variable.
func TestGuardOffVariant(t *testing.T) {
	t.Parallel()
	base := guardOn + "secrets_dir: /s\negress_policy:\n  rules: []\n"
	for _, tt := range []struct {
		envs     []string
		disabled bool
		rest     []string
	}{
		{nil, false, nil},
		{[]string{"GOGC=400"}, false, []string{"GOGC=400"}},
		{[]string{"GOGC=400", guardOffEnv}, true, []string{"GOGC=400"}},
	} {
		y, envs := applyGuardEnv(base, tt.envs)
		cfg, err := config.Parse([]byte(y))
		if err != nil {
			t.Fatalf("%v: %v\n%s", tt.envs, err, y)
		}
		if cfg.AddressGuard.Disabled != tt.disabled || !slices.Equal(envs, tt.rest) {
			t.Errorf("%v: disabled %v, envs %v; want %v, %v", tt.envs, cfg.AddressGuard.Disabled, envs, tt.disabled, tt.rest)
		}
		if !tt.disabled && len(cfg.AddressGuard.AllowedCIDRs) != 2 {
			t.Errorf("%v: allowed_cidrs %v, want the loopback ranges", tt.envs, cfg.AddressGuard.AllowedCIDRs)
		}
	}
}

// TestInjectOffVariants: inject=off makes the benchmark's rules send the
// token as a static value, injecting no secret; with scrub=all each rule
// asks for scrubbing as well (config.Rule.ScrubAlways); neither is passed
// on as an environment variable.
func TestInjectOffVariants(t *testing.T) {
	t.Parallel()
	base := "secrets_dir: /s\negress_policy:\n  rules:\n    - host: localhost\n      action: allow\n" + injectBlock
	for _, tt := range []struct {
		envs         []string
		inject, scrb bool
	}{
		{[]string{"GOGC=400"}, true, false},
		{[]string{injectOffEnv, "GOGC=400"}, false, false},
		{[]string{injectOffEnv, scrubAllEnv, "GOGC=400"}, false, true},
	} {
		y, envs := applyInjectEnv(base, tt.envs)
		cfg, err := config.Parse([]byte(y))
		if err != nil {
			t.Fatalf("%v: %v\n%s", tt.envs, err, y)
		}
		r := cfg.Policy.Rules[0]
		if r.InjectsSecret() != tt.inject || r.ScrubAlways != tt.scrb || len(r.HeaderRewrites) != 1 || !slices.Equal(envs, []string{"GOGC=400"}) {
			t.Errorf("%v: injects %v, scrub always %v, rewrites %d, envs %v", tt.envs, r.InjectsSecret(), r.ScrubAlways, len(r.HeaderRewrites), envs)
		}
	}
}

// TestCredentialVariant: credential=sigv4 replaces every rule's token
// injection by the aws_sigv4 credential, and is not passed on as an
// environment variable.
func TestCredentialVariant(t *testing.T) {
	t.Parallel()
	base := "secrets_dir: /s\negress_policy:\n  rules:\n    - host: 127.0.0.1\n      action: allow\n" + injectBlock + "    - host: localhost\n      action: allow\n" + injectBlock
	y, envs := applyCredentialEnv(base, []string{credentialEnv, "GOGC=400"})
	cfg, err := config.Parse([]byte(y))
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	for _, r := range cfg.Policy.Rules {
		if r.Credential != "bench-aws" || len(r.HeaderRewrites) != 0 {
			t.Errorf("rule %s: credential %q, %d rewrites", r.Host, r.Credential, len(r.HeaderRewrites))
		}
	}
	if !slices.Equal(envs, []string{"GOGC=400"}) || cfg.Credential("bench-aws") == nil {
		t.Errorf("envs %v, credential %v", envs, cfg.Credential("bench-aws"))
	}
}
