package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// argv is the full command line of `botbox exec [flags] -- cmd...` as the
// local user in the pod, with a clean environment plus env.
func (l *local) argv(env, flags []string, cmd ...string) []string {
	full := []string{"ip", "netns", "exec", l.p.podNS,
		"setpriv", "--reuid", strconv.Itoa(l.uid), "--regid", strconv.Itoa(l.gid), "--clear-groups",
		"env", "-i", "PATH=" + appPATH, "HOME=" + l.home, "XDG_RUNTIME_DIR=" + l.runtime, "LANG=C.UTF-8"}
	full = append(full, env...)
	full = append(full, l.p.bins.botbox, "exec", "-c", l.p.configPath)
	full = append(full, flags...)
	return append(append(full, "--"), cmd...)
}

// execResult is how one botbox exec ended.
type execResult struct {
	stdout, stderr string
	code           int            // exit status (-1: killed by a signal)
	signal         syscall.Signal // the signal that ended it
}

// exec runs botbox exec to its end.
func (l *local) exec(t *testing.T, env, flags []string, cmd ...string) execResult {
	t.Helper()
	argv := l.argv(env, flags, cmd...)
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Env = []string{"PATH=" + appPATH}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
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
// directory under XDG_RUNTIME_DIR.
func (l *local) assertNoLeftovers(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir(l.runtime)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left behind in XDG_RUNTIME_DIR: %s", e.Name())
	}
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
		tcp(p.addr4(8443).String()),                                // 0
		tcp(p.addr6(8443).String()),                                // 1
		tcp(p.podIP4.String() + ":7777"),                           // 2
		tcp("127.0.0.1:7777"),                                      // 3: the command's own loopback
		tcp("[::1]:7777"),                                          // 4
		{"udp", "-addr", p.addr4(443).String(), "-payload", exfil}, // 5
		{"udp", "-addr", p.addr6(443).String(), "-payload", exfil}, // 6
		{"ping", "-addr", p.netIP4.String(), "-timeout", "2s"},     // 7
		{"ping", "-addr", p.netIP6.String(), "-timeout", "2s"},     // 8
		{"http", "-url", "http://" + hostV6 + "/local/v6"},         // 9
		dnsq(p.addr4(53).String(), hostAPI, "A", false),            // 10
		dnsq(p.addr6(53).String(), hostAPI, "AAAA", true),          // 11
		dnsq("127.0.0.53:53", exfil+".exfil.test", "TXT", false),   // 12
		dnsq(p.addr4(53).String(), hostOther, "A", true),           // 13
		dnsq("[::1]:53", exfil+"-v6.exfil.test", "AAAA", false),    // 14
	}
	res := l.clientBatch(t, probes)
	for i := 0; i <= 2; i++ {
		assertNoConnection(t, strings.Join(probes[i], " "), res[i])
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
	if logs := hostSrv.logs(); strings.Contains(logs, "connected") {
		t.Errorf("the machine's own listener saw a connection from the command:\n%s", logs)
	}
	l.assertNoLeftovers(t)
}
