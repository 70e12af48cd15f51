// Command runner is the orchestrator behind bench/run.sh: it makes the
// benchmark PKI, writes the BotBox and nginx configurations, starts the
// origin, BotBox, nginx and the Go floor (each proxy pinned to CPU 0, load
// generators and the origin to CPU 1), runs every scenario interleaved and
// repeated, and prints the table. It is not meant to be run by hand; see
// bench/run.sh for the environment variables.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Fixed loopback ports (see docs/performance.md).
const (
	originPort      = 18443 // origin, plain-mode upstream (rule 127.0.0.1, allowed_ports)
	botboxPort      = 18080 // BotBox plain listener
	botboxIcptPort  = 18444 // BotBox interception listener
	botboxMetrics   = 19090
	sniPort         = 18081 // BotBox instance of the first-seen SNI scenario
	sniIcptPort     = 18445
	sniMetrics      = 19091
	nginxPort       = 28080 // nginx plain proxy
	nginxTLSPort    = 28443 // nginx TLS anchor of the interception scenarios
	floorPort       = 28090 // below the ephemeral range (32768-60999), as every fixed port here: a busy host's outgoing connections took 38080
	variantBasePort = 18100 // BotBox variants: 18100+10*i (plain), +1 metrics
	token           = "bench-secret-token-0123456789abcdef"
	clientAuth      = "Bearer client-supplied-junk" // what the agent sends; proxies must replace it
	proxyCPU        = "0"
	loadCPU         = "1"
)

type runner struct {
	bin, work, out string
	repeats        int
	dur            time.Duration
	quick          bool
	only           map[string]bool
	variants       []variant
	raw            *bytes.Buffer
	cells          []cell
	procs          []*proc
	origin         *proc
	targets        map[string]*proc
	stopMu         sync.Mutex
}

type variant struct{ name, env string }

func main() {
	r := &runner{raw: &bytes.Buffer{}, targets: map[string]*proc{}}
	flag.StringVar(&r.bin, "bin", "", "directory with botbox, origin, floor, loadclient")
	flag.StringVar(&r.out, "out", "", "results file")
	flag.Parse()
	r.quick = os.Getenv("QUICK") == "1"
	r.repeats = envInt("REPEATS", map[bool]int{true: 1, false: 3}[r.quick])
	r.dur = time.Duration(envInt("DURATION", map[bool]int{true: 3, false: 4}[r.quick])) * time.Second
	if s := os.Getenv("ONLY"); s != "" {
		r.only = map[string]bool{}
		for _, x := range strings.Split(s, ",") {
			r.only[x] = true
		}
	}
	// BOTBOX_VARIANTS="h1=GODEBUG=http2client=0;gogc400=GOGC=400" adds BotBox
	// processes with extra environment to the small-request scenario; the
	// element policy=v2 (policyV2Env) runs the 20-rule policy instead.
	if s := os.Getenv("BOTBOX_VARIANTS"); s != "" {
		for _, v := range strings.Split(s, ";") {
			name, env, _ := strings.Cut(v, "=")
			r.variants = append(r.variants, variant{"botbox-" + name, env})
		}
	}
	// Response scrubbing (issue 13) is on in "botbox" (its rules inject
	// a secret); this variant is the same build with scrub_responses:
	// false, side by side in small, post and stream, for issue 13's budget
	// cells (the scrub lines under "Targets", docs/performance.md).
	r.variants = append(r.variants, variant{scrubOffName, scrubOffEnv})
	// The servers run in their own process groups (so that a terminal's ^C
	// does not kill them mid-cell): stop them on SIGINT/SIGTERM too.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		r.stopAll()
		if r.work != "" {
			_ = os.RemoveAll(r.work)
		}
		os.Exit(130)
	}()
	err := r.run()
	r.stopAll()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

func (r *runner) want(s string) bool { return r.only == nil || r.only[s] }

func (r *runner) logf(format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	fmt.Fprintln(os.Stderr, line)
	r.raw.WriteString("# " + line + "\n")
}

func (r *runner) run() error {
	var err error
	if r.work, err = os.MkdirTemp("", "botbox-bench-"); err != nil {
		return err
	}
	defer os.RemoveAll(r.work)
	start := time.Now()
	r.header()
	if err := r.setup(); err != nil {
		return err
	}
	if r.only["hold"] {
		// Debugging aid: ONLY=hold keeps the set-up running (work dir and
		// ports printed) until SIGINT/SIGTERM.
		fmt.Fprintf(os.Stderr, "holding; work dir %s; botbox :%d (icpt :%d), nginx :%d (tls :%d), floor :%d, origin :%d\n", r.work, botboxPort, botboxIcptPort, nginxPort, nginxTLSPort, floorPort, originPort)
		select {} // until SIGINT/SIGTERM (see main)
	}
	if r.want("small") {
		if err := r.small(); err != nil {
			return err
		}
	}
	if r.want("post") {
		if err := r.post(); err != nil {
			return err
		}
	}
	if r.want("stream") {
		if err := r.stream(); err != nil {
			return err
		}
	}
	if r.want("intercept") {
		if err := r.interceptKeepAlive(); err != nil {
			return err
		}
		if err := r.interceptNewConn(); err != nil {
			return err
		}
	}
	if r.want("sni") {
		if err := r.firstSeenSNI(); err != nil {
			return err
		}
	}
	if r.want("idle") {
		if err := r.idle(); err != nil {
			return err
		}
	}
	if r.want("dns") {
		if err := r.dnsGuard(); err != nil {
			return err
		}
	}
	table := r.table()
	fmt.Print(table)
	r.logf("total time %s", time.Since(start).Round(time.Second))
	if r.out != "" {
		var b bytes.Buffer
		b.WriteString(table)
		b.WriteString("\n# raw cells\n")
		b.Write(r.raw.Bytes())
		if err := os.WriteFile(r.out, b.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "results written to", r.out)
	}
	return nil
}

func (r *runner) header() {
	cmdOut := func(name string, args ...string) string {
		out, _ := exec.Command(name, args...).CombinedOutput()
		return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	r.logf("date %s", time.Now().UTC().Format(time.RFC3339))
	r.logf("host %s, %s CPUs, %s", cmdOut("uname", "-r"), cmdOut("nproc", "--all"), cmdOut("sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"))
	r.logf("go %s; %s; %s; curl %s", cmdOut("go", "version"), cmdOut("nginx", "-v"), cmdOut("wrk", "-v"), cmdOut("curl", "--version"))
	r.logf("botbox commit %s%s", cmdOut("git", "rev-parse", "--short", "HEAD"), map[bool]string{true: " (dirty tree)", false: ""}[cmdOut("git", "status", "--porcelain", "--", "internal", "cmd") != ""])
	r.logf("repeats %d, duration %s per cell, quick=%v; proxy on CPU %s, wrk/loadclient/origin on CPU %s", r.repeats, r.dur, r.quick, proxyCPU, loadCPU)
}

func (r *runner) path(name string) string { return filepath.Join(r.work, name) }

func (r *runner) setup() error {
	if err := r.pki(); err != nil {
		return err
	}
	if err := os.MkdirAll(r.path("secrets"), 0o700); err != nil {
		return err
	}
	// The aws_sigv4 variant's keys (credentialEnv).
	for name, v := range map[string]string{"bench-aws-key-id": sigv4KeyID, "bench-aws-secret": sigv4Secret} {
		if err := os.WriteFile(r.path("secrets/"+name), []byte(v+"\n"), 0o600); err != nil {
			return err
		}
	}
	if err := os.WriteFile(r.path("secrets/origin-token"), []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.MkdirAll(r.path("icpt-ca"), 0o700); err != nil {
		return err
	}
	out, err := exec.Command(filepath.Join(r.bin, "botbox"), "ca", "new", "--out", r.path("icpt-ca")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("botbox ca new: %v: %s", err, out)
	}
	// The origin also listens on port 443 of both loopbacks: an intercepted
	// request for "localhost" goes upstream to localhost:443, resolved by
	// /etc/hosts (no DNS or /etc/hosts edits needed).
	listen := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:443", originPort)
	if ln, err := net.Listen("tcp", "[::1]:0"); err == nil {
		_ = ln.Close()
		listen += ",[::1]:443"
	}
	r.origin, err = r.start("origin", loadCPU, nil, originPort, filepath.Join(r.bin, "origin"),
		"-listen", listen, "-cert", r.path("origin.crt"), "-key", r.path("origin.key"), "-token", token, "-sigv4-key-id", sigv4KeyID)
	if err != nil {
		return err
	}
	if err := r.startBotbox("botbox", "", botboxPort, botboxMetrics, botboxIcptPort, false); err != nil {
		return err
	}
	for i, v := range r.variants {
		if err := r.startBotbox(v.name, v.env, variantBasePort+10*i, variantBasePort+10*i+1, 0, false); err != nil {
			return err
		}
	}
	if err := r.startNginx(); err != nil {
		return err
	}
	r.targets["floor"], err = r.start("floor", proxyCPU, nil, floorPort, filepath.Join(r.bin, "floor"),
		"-listen", fmt.Sprintf("127.0.0.1:%d", floorPort), "-origin", fmt.Sprintf("https://127.0.0.1:%d", originPort),
		"-ca", r.path("ca.crt"), "-token", token)
	if err != nil {
		return err
	}
	r.targets["direct"] = r.origin
	// Smoke test: every path must answer 200 from the origin, and a request
	// with the wrong credential must not (the origin's own check).
	for _, t := range r.smallTargets() {
		if code := r.curl(t, "/small"); code != "200" {
			return fmt.Errorf("smoke test through %s: HTTP %s", t, code)
		}
	}
	if code, _ := exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", r.path("ca.crt"),
		"-H", "Authorization: "+clientAuth, fmt.Sprintf("https://127.0.0.1:%d/small", originPort)).Output(); string(code) != "401" {
		return fmt.Errorf("origin accepted a wrong credential (HTTP %s)", code)
	}
	return nil
}

func (r *runner) startBotbox(name, env string, port, metrics, icpt int, sni bool) error {
	cfg := fmt.Sprintf(guardOn+`listen_addr: 127.0.0.1
listen_port: %d
metrics_port: %d
secrets_dir: %s
max_connections: 20000
upstream_ca_file: %s
egress_policy:
  default_action: %s
  rules:
    - host: 127.0.0.1
      action: allow
      allowed_ports: [%d]
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: origin-token
    - host: localhost
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: origin-token
`, port, metrics, r.path("secrets"), r.path("ca.crt"), map[bool]string{true: "allow", false: "deny"}[sni], originPort)
	if icpt != 0 {
		cfg += fmt.Sprintf(`https_interception:
  enabled: true
  listen_addr: 127.0.0.1
  listen_port: %d
  ca_cert_path: %s
  ca_key_path: %s
`, icpt, r.path("icpt-ca/ca.crt"), r.path("icpt-ca/ca.key"))
		if sni {
			// Fresh SNIs name hosts that do not resolve; the request itself
			// goes to "localhost". default_action allow plus
			// deny_handshake_on_disallowed_sni keeps the policy check in the
			// handshake.
			cfg += "  enforce_sni_host_match: false\n  deny_handshake_on_disallowed_sni: true\n"
		}
	}
	var envs []string
	if env != "" {
		envs = strings.Split(env, ",")
	}
	cfg, envs = applyGuardEnv(cfg, envs)
	if i := slices.Index(envs, policyV2Env); i >= 0 {
		// Not an environment variable: this variant runs the 20-rule
		// policy (issue 11's budget cell), inserted before the
		// interception block.
		envs = slices.Delete(envs, i, i+1)
		rules, rest, _ := strings.Cut(cfg, "https_interception:")
		cfg = addPolicyV2(rules)
		if rest != "" {
			cfg += "https_interception:" + rest
		}
	}
	if i := slices.Index(envs, placeholdersEnv); i >= 0 {
		// Not an environment variable: this variant turns placeholders and
		// the tripwire on (issue 13's cost cell); the requests carry no
		// placeholder, so every request pays the full scan.
		envs = slices.Delete(envs, i, i+1)
		cfg += fmt.Sprintf("placeholders:\n  enabled: true\n  dir: %s\n", r.path(name+"-placeholders"))
	}
	if i := slices.Index(envs, scrubOffEnv); i >= 0 {
		// Not an environment variable either: every rule injecting the
		// token gets scrub_responses: false.
		envs = slices.Delete(envs, i, i+1)
		cfg = strings.ReplaceAll(cfg, "          secret_ref: origin-token\n", "          secret_ref: origin-token\n      scrub_responses: false\n")
	}
	cfg, envs = applyInjectEnv(cfg, envs)
	cfg, envs = applyCredentialEnv(cfg, envs)
	if i := slices.Index(envs, engineNetHTTPEnv); i >= 0 {
		// Not an environment variable: this variant serves HTTP/1.1 with
		// net/http instead of BotBox's engine (issue 24's A/B cell).
		envs = slices.Delete(envs, i, i+1)
		cfg += "http1_engine: net/http\n"
	}
	file := r.path(name + ".yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		return err
	}
	prog, args := filepath.Join(r.bin, "botbox"), []string{"--config", file}
	if len(envs) > 0 && strings.HasPrefix(envs[0], "@") {
		// A variant may name another botbox binary (A/B against a baseline build).
		prog, envs = envs[0][1:], envs[1:]
	}
	if dir := os.Getenv("PROFILE"); dir != "" && name == "botbox" {
		// Same server code, with pprof (bench/profile); written at exit.
		prog = filepath.Join(r.bin, "profile")
		args = append(args, "-cpuprofile", filepath.Join(dir, "cpu.prof"), "-memprofile", filepath.Join(dir, "allocs.prof"))
	}
	p, err := r.start(name, proxyCPU, envs, port, prog, args...)
	if err != nil {
		return err
	}
	r.targets[name] = p
	if icpt != 0 {
		return waitPort(icpt, 10*time.Second)
	}
	return nil
}

// guardOn opens the loopback origin to the address guard, which is on by
// default and refuses loopback: every BotBox of the benchmark runs with the
// guard on (the IP rule 127.0.0.1 opts in too), except a guardOffEnv
// variant.
const guardOn = "address_guard:\n  allowed_cidrs: [\"127.0.0.0/8\", \"::1\"]\n"

// guardOffEnv, as an element of a BOTBOX_VARIANTS environment list
// ("guardoff=guard=off"), runs that variant with address_guard disabled:
// the side-by-side cell showing what the guard costs.
const guardOffEnv = "guard=off"

// applyGuardEnv removes guardOffEnv from envs and, when it was there,
// turns cfg's address guard off.
func applyGuardEnv(cfg string, envs []string) (string, []string) {
	i := slices.Index(envs, guardOffEnv)
	if i < 0 {
		return cfg, envs
	}
	return strings.Replace(cfg, guardOn, "address_guard:\n  enabled: false\n", 1), slices.Delete(envs, i, i+1)
}

// placeholdersEnv, as an element of a BOTBOX_VARIANTS environment list
// ("ph=placeholders=on"), runs that variant with placeholders enabled.
const placeholdersEnv = "placeholders=on"

// scrubOffEnv, as an element of a variant's environment list, runs it
// with scrub_responses: false on every rule; scrubOffName is the variant
// the runner always adds.
const (
	scrubOffEnv  = "scrub=off"
	scrubOffName = "botbox-scrub-off"
)

// injectOffEnv, as an element of a BOTBOX_VARIANTS environment list
// ("noinject=inject=off"), runs that variant with rules that inject no
// secret (the token as a static value); with scrubAllEnv as well ("scruball=inject=off,scrub=all")
// each rule says scrub_responses: true, so every response is scrubbed
// for the secrets of the directory although nothing was injected.
const (
	injectOffEnv = "inject=off"
	scrubAllEnv  = "scrub=all"
	injectBlock  = "      header_rewrites:\n        - name: Authorization\n          value: \"Bearer {value}\"\n          secret_ref: origin-token\n"
)

// applyInjectEnv removes injectOffEnv and scrubAllEnv from envs and
// applies them to cfg: no rule injects a secret (the token goes as a
// static header value, as the origin wants it); with scrubAllEnv each
// rule says scrub_responses: true as well.
func applyInjectEnv(cfg string, envs []string) (string, []string) {
	i := slices.Index(envs, injectOffEnv)
	if i < 0 {
		return cfg, envs
	}
	envs = slices.Delete(slices.Clone(envs), i, i+1)
	// The origin wants the token: sent as a static value, not a secret.
	repl := "      header_rewrites:\n        - name: Authorization\n          value: \"Bearer " + token + "\"\n"
	if j := slices.Index(envs, scrubAllEnv); j >= 0 {
		envs = slices.Delete(envs, j, j+1)
		repl += "      scrub_responses: true\n"
	}
	return strings.ReplaceAll(cfg, injectBlock, repl), envs
}

// credentialEnv, as an element of a BOTBOX_VARIANTS environment list
// ("sigv4=credential=sigv4"), runs that variant with every rule's
// header_rewrites replaced by an aws_sigv4 credential (issue 21's budget
// cell): BotBox signs each unsigned request wrk sends with SigV4 (service
// bedrock: the body is buffered and hashed) instead of injecting the
// token; the origin accepts the signature's key ID (-sigv4-key-id).
const (
	credentialEnv = "credential=sigv4"
	sigv4KeyID    = "AKIABENCHBENCHBENCH1"
	sigv4Secret   = "benchSecretAccessKey0123456789abcdefghij"
)

// applyCredentialEnv removes credentialEnv from envs and applies it to cfg.
func applyCredentialEnv(cfg string, envs []string) (string, []string) {
	i := slices.Index(envs, credentialEnv)
	if i < 0 {
		return cfg, envs
	}
	envs = slices.Delete(slices.Clone(envs), i, i+1)
	cfg = strings.ReplaceAll(cfg, injectBlock, "      credential: bench-aws\n")
	cfg += "credentials:\n  bench-aws:\n    type: aws_sigv4\n    access_key_id_ref: bench-aws-key-id\n    secret_access_key_ref: bench-aws-secret\n    region: us-east-1\n    service: bedrock\n"
	return cfg, envs
}

// engineNetHTTPEnv, as an element of a BOTBOX_VARIANTS environment list
// ("nethttp=engine=net/http"), runs that variant with http1_engine:
// net/http: the same binary without BotBox's HTTP/1.1 engine.
const engineNetHTTPEnv = "engine=net/http"

// policyV2Env, as an element of a BOTBOX_VARIANTS environment list
// ("policyv2=policy=v2"), runs that variant under addPolicyV2's policy.
const policyV2Env = "policy=v2"

// addPolicyV2 turns the base configuration cfg (its last key being the
// rules list) into issue 11's budget cell: 20 rules with wildcards and
// CIDRs, the hit rule 127.0.0.1 carrying 5 routes whose fifth matches the
// scenarios' requests (GET /small, POST /small, GET /stream), so every
// request pays the exact lookup, path canonicalisation and the route scan.
func addPolicyV2(cfg string) string {
	hit := "    - host: 127.0.0.1\n"
	i := strings.Index(cfg, hit)
	if i < 0 {
		return cfg
	}
	// The hit rule's block ends at the next rule.
	j := strings.Index(cfg[i+len(hit):], "    - host:")
	end := len(cfg)
	if j >= 0 {
		end = i + len(hit) + j
	}
	var b strings.Builder
	b.WriteString(cfg[:end])
	b.WriteString(`      routes:
        - paths: ["/admin/**"]
          action: deny
        - methods: [DELETE]
          action: deny
        - methods: [GET, HEAD]
          paths: ["/v1/models", "/v1/models/*"]
        - methods: [POST]
          paths: ["/v1/chat/completions", "/v1/responses"]
        - methods: [GET, POST]
          paths: ["/small", "/stream", "/v1/embeddings"]
`)
	b.WriteString(cfg[end:])
	for k := range 8 {
		fmt.Fprintf(&b, "    - host: host-%d.example.org\n      action: allow\n", k)
	}
	for k := range 6 {
		fmt.Fprintf(&b, "    - host: \"*.cdn-%d.example.net\"\n      action: allow\n", k)
	}
	b.WriteString(`    - host: "*.internal.example.test"
      action: deny
    - host: "10.0.0.0/8"
      action: allow
    - host: "10.1.0.0/16"
      action: deny
    - host: "2001:db8::/32"
      action: allow
`)
	return b.String()
}

func (r *runner) startNginx() error {
	conf := fmt.Sprintf(`# Written by bench/runner: nginx doing BotBox's job.
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 30000;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 25000; }
http {
  # One write per request, like BotBox's canonical log line (to /dev/null
  # here, as BotBox's stdout is).
  access_log /dev/null;
  client_body_temp_path %[1]s/nginx-body;
  proxy_temp_path %[1]s/nginx-proxy;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  upstream origin {
    server 127.0.0.1:%[2]d;
    keepalive 256;
  }
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_set_header Host 127.0.0.1:%[2]d;
  # Replaces the client's Authorization header (never forwarded twice).
  proxy_set_header Authorization "Bearer %[3]s";
  proxy_ssl_verify on;
  proxy_ssl_trusted_certificate %[1]s/ca.crt;
  proxy_ssl_name localhost;
  proxy_ssl_server_name on;
  proxy_ssl_protocols TLSv1.3;
  proxy_ssl_session_reuse on;
  # Stream like BotBox does (no spooling to temp files), 32 KiB buffer.
  proxy_buffering off;
  proxy_buffer_size 32k;
  proxy_buffers 4 32k;
  proxy_busy_buffers_size 64k;
  server {
    listen 127.0.0.1:%[4]d backlog=4096;
    location / { proxy_pass https://origin; }
  }
  server {
    listen 127.0.0.1:%[5]d ssl backlog=4096;
    ssl_certificate %[1]s/nginx-leaf.crt;
    ssl_certificate_key %[1]s/nginx-leaf.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    location / { proxy_pass https://origin; }
  }
}
`, r.work, originPort, token, nginxPort, nginxTLSPort)
	if err := os.WriteFile(r.path("nginx.conf"), []byte(conf), 0o644); err != nil {
		return err
	}
	p, err := r.start("nginx", proxyCPU, nil, nginxPort, "nginx", "-c", r.path("nginx.conf"), "-e", r.path("nginx-error.log"))
	if err != nil {
		return err
	}
	r.targets["nginx"] = p
	return waitPort(nginxTLSPort, 10*time.Second)
}
