package flood

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/testutil/eventually"
	"github.com/botbox/botbox/internal/testutil/testpki"
)

const (
	memoryLimit   = 256 << 20 // deploy/kubernetes/deployment.yaml, botbox container
	adminFlood    = 10_500
	h2Connections = 48  // the red-team run that OOM-killed BotBox
	h2Streams     = 100 // per connection, BotBox's default http2_max_concurrent_streams
	originPort    = 443 // the interception listener forwards to port 443 only
	// requestBudget is max_concurrent_requests with the default
	// max_connections (1024).
	requestBudget = 1024
	// upstreamPerHost is the default upstream_max_conns_per_host: toward
	// this HTTP/1.1 origin at most that many requests are in flight; the
	// rest of the budget waits in BotBox for a free upstream connection.
	upstreamPerHost = 512
	// heldAtOrigin is what the origin holds once the flood is at its peak.
	heldAtOrigin = min(requestBudget, upstreamPerHost)
)

// envInNetns marks the copy of the test binary that runs inside its own
// network namespace.
const envInNetns = "BOTBOX_FLOOD_IN_NETNS"

// reexecInNetns runs this test again in a new network namespace (only lo,
// brought up), so that its fixed port 443 and its 10,000 connections never
// meet another test or session on the machine.
func reexecInNetns(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		prerequisite(t, "unshare(1) is needed to isolate the flood in a network namespace: %v", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		prerequisite(t, "ip(8) is needed to bring up lo in the flood's network namespace: %v", err)
	}
	cmd := exec.Command("unshare", "--net", "sh", "-c", `ip link set lo up && exec "$0" "$@"`,
		os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v")
	cmd.Env = append(os.Environ(), envInNetns+"=1")
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		t.Log(line)
	}
	if err != nil {
		t.Fatalf("flood test in its network namespace: %v", err)
	}
	if strings.Contains(string(out), "--- SKIP") {
		t.Skip("skipped inside the network namespace (see above)")
	}
}

// prerequisite fails under CI and skips otherwise.
func prerequisite(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("CI is set but %s", msg)
	}
	t.Skip(msg)
}

// memCgroup is a memory cgroup created for the test, v1 or v2.
type memCgroup struct {
	dir string
	v2  bool
}

// newMemCgroup creates a child of this process's own memory cgroup with a
// limit of limit bytes.
func newMemCgroup(t *testing.T, limit int64) *memCgroup {
	t.Helper()
	name := fmt.Sprintf("botbox-flood-%d", os.Getpid())
	own, _ := os.ReadFile("/proc/self/cgroup")
	var cg *memCgroup
	for _, line := range strings.Split(string(own), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[1] == "memory":
			if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
				cg = &memCgroup{dir: filepath.Join("/sys/fs/cgroup/memory", parts[2], name)}
			}
		case parts[0] == "0" && parts[1] == "" && cg == nil:
			ctrl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
			if err == nil && strings.Contains(string(ctrl), "memory") {
				cg = &memCgroup{dir: filepath.Join("/sys/fs/cgroup", parts[2], name), v2: true}
			}
		}
	}
	if cg == nil {
		prerequisite(t, "no memory cgroup controller (v1 /sys/fs/cgroup/memory or v2 with memory) is available")
	}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		prerequisite(t, "cannot create a memory cgroup: %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(cg.dir) })
	file := "memory.limit_in_bytes"
	if cg.v2 {
		file = "memory.max"
	}
	cg.write(t, file, strconv.FormatInt(limit, 10))
	if cg.v2 {
		cg.write(t, "memory.swap.max", "0")
	}
	return cg
}

func (c *memCgroup) write(t *testing.T, file, v string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(c.dir, file), []byte(v), 0o644); err != nil && !(file == "memory.swap.max" && errors.Is(err, os.ErrNotExist)) {
		t.Fatalf("cgroup %s: %v", file, err)
	}
}

// oomKills reads the oom_kill counter (memory.oom_control on v1,
// memory.events on v2).
func (c *memCgroup) oomKills(t *testing.T) int {
	file := "memory.oom_control"
	if c.v2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		t.Fatalf("reading %s: %v", file, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// peakUsage is the cgroup's peak memory use (page cache included).
func (c *memCgroup) peakUsage() int64 {
	file := "memory.max_usage_in_bytes"
	if c.v2 {
		file = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		return -1
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// rss returns VmRSS of pid in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmRSS")
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// raiseNofile raises the soft RLIMIT_NOFILE to the hard limit (BotBox, a
// child, inherits it: the memory limit, not the fd limit, is under test)
// and requires at least n.
func raiseNofile(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < n {
		prerequisite(t, "RLIMIT_NOFILE %d (wanted %d): %v", lim.Cur, n, err)
	}
}

func TestFloodInMemoryLimitedCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("flood harness: not in -short")
	}
	if os.Geteuid() != 0 {
		prerequisite(t, "the flood harness needs root (cgroups, port 443)")
	}
	if os.Getenv(envInNetns) == "" {
		reexecInNetns(t)
		return
	}
	raiseNofile(t, adminFlood+4096)
	cg := newMemCgroup(t, memoryLimit)
	dir := t.TempDir()

	bin := filepath.Join(dir, "botbox")
	build := exec.Command("go", "build", "-o", bin, "./cmd/botbox")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// An HTTP/1.1-only TLS origin on 127.0.0.1:443 (the worst case of the
	// red-team report: one upstream connection per stream) whose /hold
	// answers only when the test releases it.
	originCA := testpki.NewCA(t, "flood-origin-ca")
	release := make(chan struct{})
	var held atomic.Int64
	originLn, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", originPort))
	if err != nil {
		prerequisite(t, "cannot bind the test origin on 127.0.0.1:%d: %v", originPort, err)
	}
	origin := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold" {
				held.Add(1)
				defer held.Add(-1)
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}
			io.WriteString(w, "ok")
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{originCA.Leaf(t, "localhost")}, NextProtos: []string{"http/1.1"}},
	}
	go origin.ServeTLS(originLn, "", "")
	t.Cleanup(func() { origin.Close() })
	originCAFile := filepath.Join(dir, "origin-ca.pem")
	if err := os.WriteFile(originCAFile, originCA.CertPEM, 0o444); err != nil {
		t.Fatal(err)
	}

	botboxCA := testpki.NewCA(t, "flood-botbox-ca")
	caCert, caKey := botboxCA.WriteFiles(t, dir)
	secrets := filepath.Join(dir, "secrets")
	if err := os.Mkdir(secrets, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secrets, "api-key"), []byte("flood-test-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	proxyPort, adminPort, icPort := freePort(t), freePort(t), freePort(t)
	cfg := fmt.Sprintf(`listen_addr: 127.0.0.1
listen_port: %d
metrics_port: %d
secrets_dir: %s
upstream_ca_file: %s
log_level: warn
address_guard:
  allowed_cidrs: ["127.0.0.0/8", "::1"]
egress_policy:
  default_action: deny
  rules:
    - host: localhost
      action: allow
      allowed_ports: [443]
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
https_interception:
  enabled: true
  listen_addr: 127.0.0.1
  listen_port: %d
  ca_cert_path: %s
  ca_key_path: %s
`, proxyPort, adminPort, secrets, originCAFile, icPort, caCert, caKey)
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}

	logFile, err := os.Create(filepath.Join(dir, "botbox.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "--config", cfgPath, "--probe-key-file", filepath.Join(dir, "probe.key"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	})
	if err := os.WriteFile(filepath.Join(cg.dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatalf("moving botbox into the cgroup: %v", err)
	}
	pid := cmd.Process.Pid
	logs := func() string { b, _ := os.ReadFile(logFile.Name()); return string(b) }

	adminAddr := fmt.Sprintf("127.0.0.1:%d", adminPort)
	healthz := func() (int, error) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + adminAddr + "/healthz")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	eventually.Eventually(t, 20*time.Second, func() bool { code, _ := healthz(); return code == 200 }, "botbox ready")
	base, _ := rss(pid)

	var peak atomic.Int64
	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Add(1)
	go func() {
		defer sampling.Done()
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			if r, err := rss(pid); err == nil && r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-tk.C:
			case <-stopSampling:
				return
			}
		}
	}()
	alive := func(stage string) {
		t.Helper()
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("%s: botbox exited (%v), oom_kill=%d\n%s", stage, err, cg.oomKills(t), logs())
		default:
		}
	}

	// 1. Admin flood: idle connections, each sending nothing.
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for i := 0; i < adminFlood; i++ {
		c, err := net.DialTimeout("tcp", adminAddr, 5*time.Second)
		if err != nil {
			t.Fatalf("admin flood connection %d: %v", i, err)
		}
		idle = append(idle, c)
	}
	afterAdmin, _ := rss(pid)
	alive("admin flood")
	if code, err := healthz(); code != 200 {
		t.Fatalf("/healthz during the admin flood: %d %v", code, err)
	}
	t.Logf("admin flood: %d idle connections, botbox RSS %d KiB (base %d KiB)", adminFlood, afterAdmin>>10, base>>10)

	// 2. Idle connections on the plain proxy listener, up to
	// max_connections (each sent one request and stays in keep-alive):
	// what one idle client connection costs.
	proxyAddr := fmt.Sprintf("127.0.0.1:%d", proxyPort)
	const proxyIdle = 1000
	var proxyConns []net.Conn
	for i := 0; i < proxyIdle; i++ {
		c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
		if err != nil {
			t.Fatalf("proxy idle connection %d: %v", i, err)
		}
		proxyConns = append(proxyConns, c)
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: denied.example\r\n\r\n")
	}
	for _, c := range proxyConns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("proxy idle connection: %v", err)
		}
		resp.Body.Close()
	}
	afterProxyIdle, _ := rss(pid)
	t.Logf("proxy idle: %d keep-alive connections, RSS %d KiB (%d KiB per connection)", proxyIdle, afterProxyIdle>>10, (afterProxyIdle-afterAdmin)/proxyIdle>>10)
	for _, c := range proxyConns {
		c.Close()
	}

	// 3. HTTP/2 stream flood on the interception listener: many connections
	// each opening as many streams as allowed, all held by the origin.
	icAddr := fmt.Sprintf("127.0.0.1:%d", icPort)
	var clients []*http.Client
	var wg sync.WaitGroup
	var statuses sync.Map
	for range h2Connections {
		tr := &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: botboxCA.Pool(), ServerName: "localhost"},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, icAddr)
			},
			MaxConnsPerHost:   1,
			ForceAttemptHTTP2: true,
		}
		c := &http.Client{Transport: tr}
		clients = append(clients, c)
		for range h2Streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := c.Get("https://localhost/hold")
				if err != nil {
					statuses.Store("error: "+err.Error(), true)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				n, _ := statuses.LoadOrStore(resp.StatusCode, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			}()
		}
	}
	// Wait until the budget is full (the origin holds as many as the
	// upstream per-host cap lets through, the rest of the budget waits for
	// a connection) and the excess beyond the budget has been shed.
	eventually.Eventually(t, 30*time.Second, func() bool {
		v, ok := statuses.Load(http.StatusServiceUnavailable)
		return held.Load() == heldAtOrigin && ok && v.(*atomic.Int64).Load() > 0
	}, "stream flood: the origin holds the per-host cap of requests and the excess beyond the budget is shed")
	atHeld := held.Load()
	duringH2, _ := rss(pid)
	if atHeld > heldAtOrigin {
		t.Errorf("%d requests held at the origin, at most %d (min of the budget %d and the per-host cap %d)", atHeld, heldAtOrigin, requestBudget, upstreamPerHost)
	}
	alive("h2 flood")
	if code, err := healthz(); code != 200 {
		t.Fatalf("/healthz during the h2 flood: %d %v", code, err)
	}
	close(release)
	wg.Wait()
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	close(stopSampling)
	sampling.Wait()
	alive("after the floods")

	// A fresh client is served.
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", proxyPort))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "GET /fresh HTTP/1.1\r\nHost: localhost:443\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("fresh client after the floods: %v %v\n%s", resp, err, logs())
	}
	if n := cg.oomKills(t); n != 0 {
		t.Errorf("oom_kill = %d", n)
	}
	if p := peak.Load(); p >= memoryLimit {
		t.Errorf("peak RSS %d KiB reached the %d MiB limit", p>>10, memoryLimit>>20)
	}
	var summary []string
	statuses.Range(func(k, v any) bool {
		if n, ok := v.(*atomic.Int64); ok {
			summary = append(summary, fmt.Sprintf("%v×%d", k, n.Load()))
		} else {
			summary = append(summary, fmt.Sprint(k))
		}
		return true
	})
	t.Logf("h2 flood: %d connections × %d streams, %d held at the origin at once, RSS %d KiB (%d KiB per held request); statuses %v", h2Connections, h2Streams, atHeld, duringH2>>10, (duringH2-afterAdmin)/atHeld>>10, summary)
	t.Logf("peak RSS %d KiB (base %d KiB), cgroup peak %d KiB, limit %d MiB", peak.Load()>>10, base>>10, cg.peakUsage()>>10, memoryLimit>>20)
}
