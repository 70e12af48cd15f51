// Command runner is the orchestrator behind bench/run.sh: it makes the
// benchmark PKI, writes the BotBox and nginx configurations, starts the
// origin, BotBox, nginx and the Go floor (each proxy pinned to CPU 0, load
// generators and the origin to CPU 1), runs every scenario interleaved and
// repeated, and prints the table. It is not meant to be run by hand; see
// bench/run.sh for the environment variables.
package main

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
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
	floorPort       = 38080
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

type proc struct {
	name string
	cmd  *exec.Cmd
	out  *os.File
	once sync.Once // stop runs once (the signal handler may race the normal path)
}

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
	// processes with extra environment to the small-request scenario.
	if s := os.Getenv("BOTBOX_VARIANTS"); s != "" {
		for _, v := range strings.Split(s, ";") {
			name, env, _ := strings.Cut(v, "=")
			r.variants = append(r.variants, variant{"botbox-" + name, env})
		}
	}
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

// ---------------------------------------------------------------- setup

func (r *runner) path(name string) string { return filepath.Join(r.work, name) }

func (r *runner) setup() error {
	if err := r.pki(); err != nil {
		return err
	}
	if err := os.MkdirAll(r.path("secrets"), 0o700); err != nil {
		return err
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
		"-listen", listen, "-cert", r.path("origin.crt"), "-key", r.path("origin.key"), "-token", token)
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
	cfg := fmt.Sprintf(`listen_addr: 127.0.0.1
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
	file := r.path(name + ".yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		return err
	}
	var envs []string
	if env != "" {
		envs = strings.Split(env, ",")
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

func (r *runner) start(name, cpu string, env []string, port int, prog string, args ...string) (*proc, error) {
	out, err := os.Create(r.path(name + ".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("taskset", append([]string{"-c", cpu, prog}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	// BotBox logs one line per request: into /dev/null, so that disk speed
	// does not enter the measurement (stderr is kept).
	if name == "origin" || name == "floor" || name == "nginx" {
		cmd.Stdout = out
	}
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, out: out}
	r.stopMu.Lock()
	r.procs = append(r.procs, p)
	r.stopMu.Unlock()
	if err := waitPort(port, 15*time.Second); err != nil {
		log, _ := os.ReadFile(out.Name())
		return nil, fmt.Errorf("%s did not listen on %d: %w\n%s", name, port, err, log)
	}
	return p, nil
}

func (r *runner) stop(p *proc) {
	if p == nil {
		return
	}
	p.once.Do(func() { r.stopNow(p) })
}

func (r *runner) stopNow(p *proc) {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	_ = p.out.Close()
}

func (r *runner) stopAll() {
	r.stopMu.Lock()
	procs := slices.Clone(r.procs)
	r.stopMu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		r.stop(procs[i])
	}
}

func waitPort(port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pki writes a bench CA, the origin's certificate (IP SANs 127.0.0.1 and
// ::1, DNS SAN localhost) and nginx's static interception leaf (localhost),
// all ECDSA P-256 like BotBox's issued leaves.
func (r *runner) pki() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "botbox-bench-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	if err := writePEM(r.path("ca.crt"), "CERTIFICATE", caDER); err != nil {
		return err
	}
	leaf := func(name string, serial int64, ips ...net.IP) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "localhost"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
			DNSNames: []string{"localhost"}, IPAddresses: ips,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		// nginx serves the chain leaf+CA like a real intercepting proxy would not
		// need to; the leaf alone is what BotBox sends too.
		if err := writePEM(r.path(name+".crt"), "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(r.path(name+".key"), "PRIVATE KEY", keyDER)
	}
	if err := leaf("origin", 2, net.ParseIP("127.0.0.1"), net.ParseIP("::1")); err != nil {
		return err
	}
	return leaf("nginx-leaf", 3)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// ---------------------------------------------------------------- /proc

// tree returns pid and its descendants (nginx's worker).
func tree(pid int) []int {
	pids := []int{pid}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid(child) == pid {
			pids = append(pids, tree(child)...)
		}
	}
	return pids
}

func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+2:]) // fields from 3 (state) on
}

func ppid(pid int) int {
	f := statFields(pid)
	if len(f) < 2 {
		return -1
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// cpuTicks is utime+stime of the process tree, in clock ticks (1/100 s).
func cpuTicks(pids []int) int64 {
	var t int64
	for _, pid := range pids {
		f := statFields(pid)
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64) // field 14 utime
		s, _ := strconv.ParseInt(f[12], 10, 64) // field 15 stime
		t += u + s
	}
	return t
}

const clkTck = 100 // sysconf(_SC_CLK_TCK) on Linux

func statusKB(pids []int, key string) int64 {
	var kb int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, key+":"); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				kb += n
			}
		}
	}
	return kb
}

// resetPeak resets VmHWM (peak RSS) to the current RSS.
func resetPeak(pids []int) {
	for _, pid := range pids {
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	}
}

// cpuBusy returns busy and total jiffies of each CPU from /proc/stat.
func cpuBusy() map[string][2]int64 {
	b, _ := os.ReadFile("/proc/stat")
	m := map[string][2]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		var total, idle int64
		for i, v := range f[1:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			if i < 8 {
				total += n
			}
			if i == 3 || i == 4 { // idle, iowait
				idle += n
			}
		}
		m[strings.TrimPrefix(f[0], "cpu")] = [2]int64{total - idle, total}
	}
	return m
}

// meter measures one cell on a process tree.
type meter struct {
	pids, originPids []int
	ticks, oTicks    int64
	cpus             map[string][2]int64
	t0               time.Time
}

func (r *runner) begin(p *proc) *meter {
	m := &meter{pids: tree(p.cmd.Process.Pid), originPids: tree(r.origin.cmd.Process.Pid)}
	resetPeak(m.pids)
	m.ticks, m.oTicks, m.cpus, m.t0 = cpuTicks(m.pids), cpuTicks(m.originPids), cpuBusy(), time.Now()
	return m
}

func (m *meter) end(c *cell) {
	ticks := cpuTicks(m.pids) - m.ticks
	oTicks := cpuTicks(m.originPids) - m.oTicks
	cpus := cpuBusy()
	if c.requests > 0 {
		c.cpuUS = float64(ticks) * 1e6 / clkTck / float64(c.requests)
		c.originUS = float64(oTicks) * 1e6 / clkTck / float64(c.requests)
	}
	c.peakMiB = float64(statusKB(m.pids, "VmHWM")) / 1024
	busy := func(cpu string) float64 {
		a, b := m.cpus[cpu], cpus[cpu]
		if b[1] == a[1] {
			return 0
		}
		return 100 * float64(b[0]-a[0]) / float64(b[1]-a[1])
	}
	c.busy0, c.busy1 = busy(proxyCPU), busy(loadCPU)
}

// ---------------------------------------------------------------- cells

type cell struct {
	scenario, target string
	conns, rep       int
	requests         int64
	rps, p50, p99    float64 // req/s, µs
	cpuUS, originUS  float64 // CPU µs per request (proxy tree, origin)
	peakMiB          float64
	mibps            float64 // stream throughput
	extra            string
	bad              string // non-2xx or errors: the cell does not score
	busy0, busy1     float64
}

func (r *runner) record(c cell) {
	r.cells = append(r.cells, c)
	line := fmt.Sprintf("scenario=%s target=%s conns=%d rep=%d requests=%d rps=%.1f p50_us=%.1f p99_us=%.1f cpu_us_per_req=%.2f origin_us_per_req=%.2f peak_rss_mib=%.1f mib_s=%.1f cpu0_busy=%.0f%% cpu1_busy=%.0f%%",
		c.scenario, c.target, c.conns, c.rep, c.requests, c.rps, c.p50, c.p99, c.cpuUS, c.originUS, c.peakMiB, c.mibps, c.busy0, c.busy1)
	if c.extra != "" {
		line += " " + c.extra
	}
	if c.bad != "" {
		line += " INVALID=" + strconv.Quote(c.bad)
	}
	r.raw.WriteString(line + "\n")
	fmt.Fprintln(os.Stderr, line)
}

func (r *runner) smallTargets() []string {
	t := []string{"botbox", "nginx", "floor", "direct"}
	for _, v := range r.variants {
		t = append(t, v.name)
	}
	if s := os.Getenv("TARGETS"); s != "" {
		t = strings.Split(s, ",")
	}
	return t
}

// rotate returns ts rotated by k, so that no target always runs first.
func rotate(ts []string, k int) []string {
	k %= len(ts)
	return append(slices.Clone(ts[k:]), ts[:k]...)
}

func (r *runner) port(target string) int {
	switch target {
	case "botbox":
		return botboxPort
	case "nginx":
		return nginxPort
	case "floor":
		return floorPort
	}
	for i, v := range r.variants {
		if v.name == target {
			return variantBasePort + 10*i
		}
	}
	return originPort
}

// wrkArgs returns the URL and headers of the plain-mode scenarios: through a
// proxy, plain HTTP with the origin in Host and a wrong credential the
// proxy must replace; direct, HTTPS with the right credential.
func (r *runner) wrkArgs(target, path string) []string {
	if target == "direct" {
		return []string{"-H", "Authorization: Bearer " + token, fmt.Sprintf("https://127.0.0.1:%d%s", originPort, path)}
	}
	return []string{"-H", fmt.Sprintf("Host: 127.0.0.1:%d", originPort), "-H", "Authorization: " + clientAuth,
		fmt.Sprintf("http://127.0.0.1:%d%s", r.port(target), path)}
}

func (r *runner) curl(target, path string) string {
	args := []string{"-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", r.path("ca.crt")}
	w := r.wrkArgs(target, path)
	for i := 0; i+1 < len(w); i += 2 {
		args = append(args, w[i], w[i+1])
	}
	out, _ := exec.Command("curl", append(args, w[len(w)-1])...).Output()
	return string(out)
}

var (
	reReqs  = regexp.MustCompile(`(\d+) requests in`)
	reRPS   = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	reP50   = regexp.MustCompile(`\s50%\s+([\d.]+)(us|ms|s)`)
	reP99   = regexp.MustCompile(`\s99%\s+([\d.]+)(us|ms|s)`)
	reNon2  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	reSockE = regexp.MustCompile(`Socket errors: (.*)`)
)

func toUS(m []string) float64 {
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	switch m[2] {
	case "ms":
		v *= 1e3
	case "s":
		v *= 1e6
	}
	return v
}

// wrk runs wrk pinned to the load CPU and parses its report.
func (r *runner) wrk(c *cell, conns int, dur time.Duration, args []string) error {
	full := append([]string{"-c", loadCPU, "wrk", "-t1", "-c", strconv.Itoa(conns), "-d", fmt.Sprintf("%.0fs", dur.Seconds()), "--latency", "--timeout", "5s"}, args...)
	out, err := exec.Command("taskset", full...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("wrk: %v: %s", err, out)
	}
	s := string(out)
	if m := reReqs.FindStringSubmatch(s); m != nil {
		c.requests, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := reRPS.FindStringSubmatch(s); m != nil {
		c.rps, _ = strconv.ParseFloat(m[1], 64)
	}
	c.p50, c.p99 = toUS(reP50.FindStringSubmatch(s)), toUS(reP99.FindStringSubmatch(s))
	var bad []string
	if m := reNon2.FindStringSubmatch(s); m != nil {
		bad = append(bad, m[1]+" non-2xx")
	}
	if m := reSockE.FindStringSubmatch(s); m != nil {
		bad = append(bad, "socket errors: "+m[1])
	}
	if c.requests == 0 {
		bad = append(bad, "no requests")
	}
	c.bad = strings.Join(bad, "; ")
	return nil
}

// ---------------------------------------------------------------- scenarios

func (r *runner) small() error {
	conns := []int{1, 16, 128}
	if s := os.Getenv("CONNS"); s != "" {
		conns = nil
		for _, x := range strings.Split(s, ",") {
			n, err := strconv.Atoi(x)
			if err != nil {
				return fmt.Errorf("CONNS: %w", err)
			}
			conns = append(conns, n)
		}
	}
	warmed := map[string]bool{}
	for rep := range r.repeats {
		for _, n := range conns {
			for _, t := range rotate(r.smallTargets(), rep+n) {
				args := r.wrkArgs(t, "/small")
				if key := fmt.Sprint(t, n); !warmed[key] {
					warmed[key] = true
					var w cell
					if err := r.wrk(&w, n, time.Second, args); err != nil {
						return err
					}
				}
				c := cell{scenario: "small", target: t, conns: n, rep: rep}
				m := r.begin(r.targets[t])
				if err := r.wrk(&c, n, r.dur, args); err != nil {
					return err
				}
				m.end(&c)
				r.record(c)
			}
		}
	}
	return nil
}

// post is the agent's usual call: a POST with a 1 KiB JSON body, 16
// connections, the same targets as small.
func (r *runner) post() error {
	body := `{"model":"bench","messages":[{"role":"user","content":"` + strings.Repeat("x", 950) + `"}]}`
	script := r.path("post.lua")
	lua := fmt.Sprintf("wrk.method = \"POST\"\nwrk.body = %q\nwrk.headers[\"Content-Type\"] = \"application/json\"\n", body)
	if err := os.WriteFile(script, []byte(lua), 0o644); err != nil {
		return err
	}
	for rep := range r.repeats {
		for _, t := range rotate(r.smallTargets(), rep+1) {
			args := append([]string{"-s", script}, r.wrkArgs(t, "/small")...)
			if rep == 0 {
				var w cell
				if err := r.wrk(&w, 16, time.Second, args); err != nil {
					return err
				}
			}
			c := cell{scenario: "post", target: t, conns: 16, rep: rep}
			m := r.begin(r.targets[t])
			if err := r.wrk(&c, 16, r.dur, args); err != nil {
				return err
			}
			m.end(&c)
			r.record(c)
		}
	}
	return nil
}

func (r *runner) stream() error {
	targets := []string{"botbox", "nginx", "floor", "direct"}
	for _, v := range r.variants {
		targets = append(targets, v.name)
	}
	for rep := range r.repeats {
		for _, t := range rotate(targets, rep) {
			w := r.wrkArgs(t, "/stream")
			args := []string{"-c", loadCPU, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download} %{time_total}", "--cacert", r.path("ca.crt")}
			for i := 0; i+1 < len(w); i += 2 {
				args = append(args, w[i], w[i+1])
			}
			args = append(args, w[len(w)-1])
			c := cell{scenario: "stream", target: t, conns: 1, rep: rep, requests: 1}
			m := r.begin(r.targets[t])
			out, err := exec.Command("taskset", args...).Output()
			if err != nil {
				return fmt.Errorf("curl stream via %s: %v", t, err)
			}
			m.end(&c)
			var code string
			var size, secs float64
			_, _ = fmt.Sscanf(string(out), "%s %f %f", &code, &size, &secs)
			if code != "200" || size != 256<<20 {
				c.bad = fmt.Sprintf("HTTP %s, %.0f bytes", code, size)
			}
			if secs > 0 {
				c.mibps = size / (1 << 20) / secs
			}
			c.cpuUS /= 256 // per MiB
			c.originUS /= 256
			c.extra = "cpu_per=MiB"
			r.record(c)
		}
	}
	return nil
}

func (r *runner) interceptKeepAlive() error {
	targets := []string{"botbox", "nginx"}
	for rep := range r.repeats {
		for _, n := range []int{16, 128} {
			for _, t := range rotate(targets, rep+n) {
				port := map[string]int{"botbox": botboxIcptPort, "nginx": nginxTLSPort}[t]
				args := []string{"-H", "Host: localhost", "-H", "Authorization: " + clientAuth, fmt.Sprintf("https://localhost:%d/small", port)}
				if rep == 0 {
					var w cell
					if err := r.wrk(&w, n, time.Second, args); err != nil {
						return err
					}
				}
				c := cell{scenario: "intercept-keepalive", target: t, conns: n, rep: rep}
				m := r.begin(r.targets[t])
				if err := r.wrk(&c, n, r.dur, args); err != nil {
					return err
				}
				m.end(&c)
				r.record(c)
			}
		}
	}
	return nil
}

var reKV = regexp.MustCompile(`(\w+)=([\d.]+)`)

func kv(s string) map[string]float64 {
	m := map[string]float64{}
	for _, x := range reKV.FindAllStringSubmatch(s, -1) {
		m[x[1]], _ = strconv.ParseFloat(x[2], 64)
	}
	return m
}

func (r *runner) loadclient(args ...string) (string, error) {
	cmd := exec.Command("taskset", append([]string{"-c", loadCPU, filepath.Join(r.bin, "loadclient")}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("loadclient %s: %v: %s", args[0], err, stderr.String())
	}
	if stderr.Len() > 0 {
		r.logf("loadclient %s: %s", args[0], strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func (r *runner) interceptNewConn() error {
	cas := r.path("ca.crt") + "," + r.path("icpt-ca/ca.crt")
	targets := []string{"botbox", "nginx", "direct"}
	for rep := range r.repeats {
		for _, t := range rotate(targets, rep) {
			addr := map[string]string{"botbox": fmt.Sprint("127.0.0.1:", botboxIcptPort), "nginx": fmt.Sprint("127.0.0.1:", nginxTLSPort), "direct": fmt.Sprint("127.0.0.1:", originPort)}[t]
			auth := clientAuth
			if t == "direct" {
				auth = "Bearer " + token
			}
			c := cell{scenario: "intercept-newconn", target: t, conns: 16, rep: rep}
			m := r.begin(r.targets[t])
			out, err := r.loadclient("newconn", "-addr", addr, "-sni", "localhost", "-host", "localhost", "-auth", auth, "-ca", cas, "-verify=false", "-c", "16", "-d", r.dur.String())
			if err != nil {
				return err
			}
			v := kv(out)
			c.requests, c.rps, c.p50, c.p99 = int64(v["requests"]), v["rps"], v["p50_us"], v["p99_us"]
			m.end(&c)
			if v["errors"] > 0 || v["non2xx"] > 0 || c.requests == 0 {
				c.bad = strings.TrimSpace(out)
			}
			r.record(c)
		}
	}
	return nil
}

func (r *runner) firstSeenSNI() error {
	if err := r.startBotbox("botbox-sni", "", sniPort, sniMetrics, sniIcptPort, true); err != nil {
		return err
	}
	defer r.stop(r.targets["botbox-sni"])
	n := map[bool]string{true: "100", false: "200"}[r.quick]
	cas := r.path("icpt-ca/ca.crt")
	for rep := range r.repeats {
		c := cell{scenario: "first-seen-sni", target: "botbox", conns: 1, rep: rep}
		m := r.begin(r.targets["botbox-sni"])
		out, err := r.loadclient("sni", "-addr", fmt.Sprint("127.0.0.1:", sniIcptPort), "-host", "localhost", "-ca", cas, "-n", n)
		if err != nil {
			return err
		}
		v := kv(out)
		c.requests = int64(v["fresh"] + v["cached"])
		c.p50, c.p99 = v["fresh_p50_us"], v["fresh_p99_us"]
		m.end(&c)
		c.extra = strings.TrimSpace(out)
		if v["errors"] > 0 {
			c.bad = "errors"
		}
		r.record(c)
	}
	return nil
}

func (r *runner) idle() error {
	n := "10000"
	for _, t := range []string{"botbox", "nginx", "floor"} {
		p := r.targets[t]
		pids := tree(p.cmd.Process.Pid)
		before := statusKB(pids, "VmRSS")
		cmd := exec.Command("taskset", "-c", loadCPU, filepath.Join(r.bin, "loadclient"), "idle",
			"-addr", fmt.Sprint("127.0.0.1:", r.port(t)), "-host", fmt.Sprintf("127.0.0.1:%d", originPort), "-n", n)
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		time.Sleep(2 * time.Second) // let the server settle (GC, idle state)
		after := statusKB(pids, "VmRSS")
		_, _ = io.WriteString(stdin, "done\n")
		_ = stdin.Close()
		_ = cmd.Wait()
		v := kv(line)
		c := cell{scenario: "idle-10k", target: t, conns: int(v["n"]), peakMiB: float64(statusKB(pids, "VmHWM")) / 1024,
			extra: fmt.Sprintf("rss_before_kib=%d rss_after_kib=%d kib_per_conn=%.2f", before, after, float64(after-before)/max(v["n"], 1))}
		if v["errors"] > 0 || !strings.HasPrefix(line, "READY") {
			c.bad = strings.TrimSpace(line + " " + stderr.String())
		}
		r.record(c)
		time.Sleep(time.Second)
	}
	return nil
}

// ---------------------------------------------------------------- table

type stat struct{ min, med, max float64 }

func stats(v []float64) stat {
	if len(v) == 0 {
		return stat{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{s[0], med, s[len(s)-1]}
}

func (s stat) String() string {
	if s.min == s.max {
		return trim(s.med)
	}
	return fmt.Sprintf("%s [%s–%s]", trim(s.med), trim(s.min), trim(s.max))
}

func trim(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// group selects the valid cells of a scenario/target/conns.
func (r *runner) group(scn, target string, conns int) []cell {
	var g []cell
	for _, c := range r.cells {
		if c.scenario == scn && c.target == target && c.conns == conns && c.bad == "" {
			g = append(g, c)
		}
	}
	return g
}

func field(g []cell, f func(cell) float64) stat {
	v := make([]float64, len(g))
	for i, c := range g {
		v[i] = f(c)
	}
	return stats(v)
}

// ratio is the median over repeats of the paired ratio target/ref (same
// repeat, adjacent in time), with min and max.
func (r *runner) ratio(scn, target, ref string, conns int, f func(cell) float64) string {
	a, b := r.group(scn, target, conns), r.group(scn, ref, conns)
	var v []float64
	for _, x := range a {
		for _, y := range b {
			if x.rep == y.rep && f(y) > 0 {
				v = append(v, f(x)/f(y))
			}
		}
	}
	if len(v) == 0 {
		return "-"
	}
	s := stats(v)
	if s.min == s.max {
		return fmt.Sprintf("%.2f×", s.med)
	}
	return fmt.Sprintf("%.2f× [%.2f–%.2f]", s.med, s.min, s.max)
}

func (r *runner) invalid() []string {
	var out []string
	for _, c := range r.cells {
		if c.bad != "" {
			out = append(out, fmt.Sprintf("%s/%s/c=%d rep %d: %s", c.scenario, c.target, c.conns, c.rep, c.bad))
		}
	}
	return out
}

func (r *runner) table() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "\nBotBox benchmark — median [min–max] over %d repeat(s); ratios are paired per repeat.\n", r.repeats)
	fmt.Fprintf(&b, "CPU = proxy process CPU time per request (µs, utime+stime); origin = origin CPU per request; RSS = peak (VmHWM) in the cell.\n")
	rps := func(c cell) float64 { return c.rps }
	cpu := func(c cell) float64 { return c.cpuUS }
	section := func(title, scn string, conns []int, targets []string, withDirect bool) {
		if len(r.cells) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n## %s\n", title)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "conns\ttarget\treq/s\tp50 µs\tp99 µs\tCPU µs/req\torigin µs/req\tpeak RSS MiB\treq/s ×nginx\tCPU ×nginx\treq/s ×direct\tload CPU busy %\t")
		for _, n := range conns {
			for _, t := range targets {
				g := r.group(scn, t, n)
				if len(g) == 0 {
					continue
				}
				dr := "-"
				if withDirect && t != "direct" {
					dr = r.ratio(scn, t, "direct", n, rps)
				}
				xn, xc := "-", "-"
				if t != "nginx" {
					xn = r.ratio(scn, t, "nginx", n, rps)
				}
				if t != "nginx" && t != "direct" { // direct's CPU column is the origin's
					xc = r.ratio(scn, t, "nginx", n, cpu)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", n, t,
					field(g, rps), trim(field(g, func(c cell) float64 { return c.p50 }).med), trim(field(g, func(c cell) float64 { return c.p99 }).med),
					field(g, cpu), trim(field(g, func(c cell) float64 { return c.originUS }).med),
					trim(field(g, func(c cell) float64 { return c.peakMiB }).max), xn, xc, dr,
					trim(field(g, func(c cell) float64 { return c.busy1 }).med))
			}
		}
		_ = tw.Flush()
	}
	small := r.smallTargets()
	section("Small JSON requests, keep-alive (wrk)", "small", []int{1, 16, 128}, small, true)
	section("POST with a 1 KiB JSON body, keep-alive (wrk)", "post", []int{16}, small, true)
	if len(r.group("small", "floor", 16)) > 0 {
		fmt.Fprintf(&b, "\nBotBox vs Go floor (req/s): c=16 %s, c=128 %s; CPU/req: c=16 %s, c=128 %s\n",
			r.ratio("small", "botbox", "floor", 16, rps), r.ratio("small", "botbox", "floor", 128, rps),
			r.ratio("small", "botbox", "floor", 16, cpu), r.ratio("small", "botbox", "floor", 128, cpu))
	}

	if g := r.group("stream", "botbox", 1); len(g) > 0 {
		fmt.Fprintf(&b, "\n## 256 MiB stream (curl, one connection)\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "target\tMiB/s\tCPU µs/MiB\tpeak RSS MiB\tMiB/s ×nginx\tMiB/s ×direct\t")
		mib := func(c cell) float64 { return c.mibps }
		streamTargets := []string{"botbox", "nginx", "floor", "direct"}
		for _, v := range r.variants {
			streamTargets = append(streamTargets, v.name)
		}
		for _, t := range streamTargets {
			g := r.group("stream", t, 1)
			if len(g) == 0 {
				continue
			}
			xn, dr := "-", "-"
			if t != "nginx" {
				xn = r.ratio("stream", t, "nginx", 1, mib)
			}
			if t != "direct" {
				dr = r.ratio("stream", t, "direct", 1, mib)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", t, field(g, mib), field(g, cpu), trim(field(g, func(c cell) float64 { return c.peakMiB }).max), xn, dr)
		}
		_ = tw.Flush()
	}
	section("HTTPS interception, keep-alive (wrk over TLS; nginx = static leaf)", "intercept-keepalive", []int{16, 128}, []string{"botbox", "nginx"}, false)
	section("HTTPS interception, new TLS connection per request (loadclient, 16 workers, full handshakes)", "intercept-newconn", []int{16}, []string{"botbox", "nginx", "direct"}, true)

	if g := r.group("first-seen-sni", "botbox", 1); len(g) > 0 {
		fmt.Fprintf(&b, "\n## First-seen SNI (new connection each; fresh SNI vs cached SNI, alternated)\n")
		fresh := field(g, func(c cell) float64 { return kv(c.extra)["fresh_p50_us"] })
		cached := field(g, func(c cell) float64 { return kv(c.extra)["cached_p50_us"] })
		delta := field(g, func(c cell) float64 { return kv(c.extra)["delta_p50_us"] })
		fmt.Fprintf(&b, "p50 fresh SNI %s µs, cached SNI %s µs, added by leaf issuance %s µs (target ≤ 1000 µs)\n", fresh, cached, delta)
	}
	var idle []cell
	for _, c := range r.cells {
		if c.scenario == "idle-10k" {
			idle = append(idle, c)
		}
	}
	if len(idle) > 0 {
		fmt.Fprintf(&b, "\n## 10,000 idle keep-alive client connections (one request each, then idle)\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "target\tconns\tRSS before MiB\tRSS after MiB\tKiB per conn\t")
		for _, c := range idle {
			v := kv(c.extra)
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t\n", c.target, c.conns, v["rss_before_kib"]/1024, v["rss_after_kib"]/1024, v["kib_per_conn"])
		}
		_ = tw.Flush()
	}
	b.WriteString(r.targetsSummary())
	if bad := r.invalid(); len(bad) > 0 {
		fmt.Fprintf(&b, "\nINVALID cells (excluded from the table):\n  %s\n", strings.Join(bad, "\n  "))
	}
	return b.String()
}

// targetsSummary checks the targets of issue 5 on this run's medians of
// paired ratios.
func (r *runner) targetsSummary() string {
	var b strings.Builder
	b.WriteString("\n## Targets (issue 5), from this run\n")
	med := func(scn, t, ref string, conns int, f func(cell) float64) (float64, bool) {
		a, bb := r.group(scn, t, conns), r.group(scn, ref, conns)
		var v []float64
		for _, x := range a {
			for _, y := range bb {
				if x.rep == y.rep && f(y) > 0 {
					v = append(v, f(x)/f(y))
				}
			}
		}
		if len(v) == 0 {
			return 0, false
		}
		return stats(v).med, true
	}
	check := func(name string, v float64, ok bool, want string, met bool) {
		if !ok {
			return
		}
		verdict := "NOT MET"
		if met {
			verdict = "met"
		}
		fmt.Fprintf(&b, "  %-55s %8.2f  (%s)  %s\n", name, v, want, verdict)
	}
	rps := func(c cell) float64 { return c.rps }
	p99 := func(c cell) float64 { return c.p99 }
	for _, n := range []int{16, 128} {
		v, ok := med("small", "botbox", "floor", n, rps)
		check(fmt.Sprintf("small c=%d: req/s BotBox / Go floor", n), v, ok, "≥ 1.5", v >= 1.5)
		v, ok = med("small", "botbox", "nginx", n, rps)
		check(fmt.Sprintf("small c=%d: req/s BotBox / nginx", n), v, ok, "goal ≥ 1.0", v >= 1.0)
		v, ok = med("small", "botbox", "nginx", n, p99)
		check(fmt.Sprintf("small c=%d: p99 BotBox / nginx", n), v, ok, "goal ≤ 1.0", v <= 1.0)
	}
	v, ok := med("stream", "botbox", "nginx", 1, func(c cell) float64 { return c.mibps })
	check("256 MiB stream: MiB/s BotBox / nginx", v, ok, "≥ 0.8", v >= 0.8)
	if g := r.group("stream", "botbox", 1); len(g) > 0 {
		peak := field(g, func(c cell) float64 { return c.peakMiB }).max
		check("256 MiB stream: BotBox peak RSS (MiB)", peak, true, "≤ 32", peak <= 32)
	}
	v, ok = med("intercept-newconn", "botbox", "nginx", 16, rps)
	check("interception, new conn/request: req/s BotBox / nginx", v, ok, "≥ 1.0", v >= 1.0)
	v, ok = med("intercept-newconn", "botbox", "nginx", 16, func(c cell) float64 { return c.cpuUS })
	check("interception, new conn/request: CPU/req BotBox / nginx", v, ok, "info", true)
	if g := r.group("first-seen-sni", "botbox", 1); len(g) > 0 {
		d := field(g, func(c cell) float64 { return kv(c.extra)["delta_p50_us"] }).med
		check("first-seen SNI: added p50 (µs)", d, true, "≤ 1000", d <= 1000)
	}
	for _, c := range r.cells {
		if c.scenario == "idle-10k" && c.target == "botbox" && c.bad == "" {
			check("10k idle keep-alive conns: BotBox KiB per connection", kv(c.extra)["kib_per_conn"], true, "reported", true)
		}
	}
	return b.String()
}
