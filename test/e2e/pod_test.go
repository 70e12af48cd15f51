package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/testutil/testpki"
	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// Names the pod's /etc/hosts maps to the origin. hostV6 resolves to the
// origin's IPv6 address only; the others to its IPv4 address only.
const (
	hostAPI     = "api.example.test"     // allowed, with a credential injected
	hostOther   = "other.example.test"   // no rule: denied by default
	hostBlocked = "blocked.example.test" // explicit deny rule
	hostV6      = "v6.example.test"      // allowed, IPv6 only
)

// UIDs of the Pod's containers.
const (
	uidRoot   = 0
	uidApp    = 1000 // the agent
	uidBotBox = 1337 // BotBox, exempted by the owner match
)

// Timing. debounce is the config's secrets_reload_debounce_ms; the margins
// are generous because CI runs this package next to race-enabled tests.
const (
	debounce       = 300 * time.Millisecond
	reloadMargin   = 3 * time.Second
	startupTimeout = 20 * time.Second
	eventTimeout   = 5 * time.Second
	commandTimeout = 30 * time.Second
)

// rulesDefault is the policy of most tests: api and v6 allowed with an
// injected Authorization, blocked explicitly denied, everything else denied
// by default.
const rulesDefault = `
    - host: api.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
    - host: blocked.example.test
      action: deny
    - host: v6.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
`

// podConfig describes one scenario.
type podConfig struct {
	// backend is BOTBOX_NETFILTER_BACKEND for the init step ("": unset,
	// so auto). Containment tests run once per backend (forEachBackend).
	backend string
	// ipv6 is BOTBOX_ENABLE_IPV6 for the init step.
	ipv6 bool
	// interception enables https_interception in BotBox's config and
	// BOTBOX_ENABLE_HTTPS_INTERCEPTION=1 for the init step.
	interception bool
	// denyHandshake is https_interception.deny_handshake_on_disallowed_sni.
	denyHandshake bool
	// rules is the YAML list under egress_policy.rules (default rulesDefault).
	rules string
	// defaultAllow sets egress_policy.default_action: allow (default deny).
	defaultAllow bool
	// secrets is the initial content of the Secret volume (nil: no keys).
	secrets map[string]string
	// plainSecrets lays the secrets out as plain files replaced by rename
	// (default: a Kubernetes Secret volume with its ..data symlink swap).
	plainSecrets bool
	// installEnv adds variables to the init step's environment; it is a
	// function because values may depend on the pod's random addresses.
	installEnv func(p *pod) []string
	// botboxEnv adds variables to BotBox's environment.
	botboxEnv []string
	// noInstall skips `botbox netfilter install`.
	noInstall bool
	// noBotBox does not start BotBox.
	noBotBox bool
	// mldGroups are IPv6 groups whose MLD reports the origin records
	// (e2e-origin -mld-group).
	mldGroups []string
	// icmp6 makes the origin record ICMPv6 destination-unreachable and
	// echo-request messages (e2e-origin -icmp6).
	icmp6 bool
	// capture are addresses whose every packet arriving in the net
	// namespace the origin records (e2e-origin -capture, wire.KindWire).
	capture []netip.Addr
	// addressGuard is BotBox's address_guard block. Empty: the suite's
	// opt-in, allowed_cidrs naming the two subnets of the net namespace
	// (its origins are at private and ULA addresses, which the guard
	// refuses by default); guardDefaults: no block, the defaults.
	addressGuard string
	// extraAddrs are more addresses of the net namespace, served by the
	// origin and in its certificate (e.g. 169.254.169.254).
	extraAddrs []netip.Addr
	// originNames are more DNS names in the origin's certificate.
	originNames []string
	// originArgs, if set, returns more e2e-origin flags; it runs once
	// p.dir exists, before the origin starts (git_test.go makes its
	// repository there).
	originArgs func(t *testing.T, p *pod) []string
	// extraHosts returns lines appended to the pod's /etc/hosts.
	extraHosts func(p *pod) string
	// nameserver, when valid, is the pod's resolv.conf nameserver (an
	// address of the net namespace, added to it, not served by the
	// origin); default: the origin's address, where nothing answers DNS.
	nameserver netip.Addr
	// extraConfig is appended to the top level of BotBox's config.
	extraConfig string
	// placeholders turns placeholders on, in <dir>/placeholders.
	placeholders bool
	// dnsServer makes the origin a DNS server on port 53 of its addresses
	// (e2e-origin -dns), answering api.example.test and recording every
	// query; the pod's resolv.conf already names it.
	dnsServer bool
	// dnsGuard enables dns_guard in BotBox's config (listen_port
	// dnsGuardPort, upstream: the pod's resolv.conf) and sets
	// BOTBOX_DNS_GUARD_PORT for the init step.
	dnsGuard bool
}

// dnsGuardPort is dns_guard.listen_port and BOTBOX_DNS_GUARD_PORT.
const dnsGuardPort = 8053

// guardDefaults as podConfig.addressGuard leaves address_guard at its
// defaults (a YAML comment, so the config has no block).
const guardDefaults = "# address_guard: defaults\n"

// pod is one "pod" namespace and its "net" namespace, with everything
// running in them.
type pod struct {
	bins binaries
	cfg  podConfig
	id   string

	podNS, netNS string
	// netIP4, netIP6: the origin; netIP4b: a second origin address (a
	// different "DNS server" for the port-53 tests); podIP4, podIP6: the pod.
	netIP4, netIP4b, netIP6 netip.Addr
	podIP4, podIP6          netip.Addr

	dir        string // per-test directory, readable by every UID
	secrets    *secretVolume
	configPath string
	originCA   string // upstream_ca_file: the origin's CA
	botboxCA   string // the interception CA certificate (botbox ca new)

	origin  *proc
	control *http.Client // the origin's control socket
	botbox  *proc
}

// netfilterBackends are the values of BOTBOX_NETFILTER_BACKEND the
// containment tests run with.
func netfilterBackends() []string { return []string{"iptables", "nftables"} }

// forEachBackend runs test once per netfilter backend, as the subtests
// "iptables" and "nftables": every containment property is proved with
// real packets for both ways the rules reach the kernel (issue 14). The
// two subtests run in parallel: each builds its own pod (newPod).
func forEachBackend(t *testing.T, test func(t *testing.T, backend string)) {
	t.Helper()
	for _, b := range netfilterBackends() {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			test(t, b)
		})
	}
}

// newPod builds the topology of e2e.md for one test and registers its
// teardown: processes killed by process group, namespaces and /etc/netns
// entries deleted, files removed — also when the test fails.
func newPod(t *testing.T, cfg podConfig) *pod {
	t.Helper()
	bins := requireRoot(t)
	if cfg.rules == "" {
		cfg.rules = rulesDefault
	}
	p := &pod{bins: bins, cfg: cfg, id: randomHex(t, 3)}
	p.podNS, p.netNS = "bbpod-"+p.id, "bbnet-"+p.id

	// Random 10.<231-250>.<0-255>.0/24 and fd00:b07:<x>::/64.
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		t.Fatal(err)
	}
	b, c := 231+r[0]%20, r[1]
	p.netIP4 = netip.AddrFrom4([4]byte{10, b, c, 1})
	p.podIP4 = netip.AddrFrom4([4]byte{10, b, c, 2})
	p.netIP4b = netip.AddrFrom4([4]byte{10, b, c, 53})
	x := binary.BigEndian.Uint16(r[2:])
	p.netIP6 = netip.MustParseAddr(fmt.Sprintf("fd00:b07:%x::1", x))
	p.podIP6 = netip.MustParseAddr(fmt.Sprintf("fd00:b07:%x::2", x))

	dir, err := os.MkdirTemp("", "botbox-e2e-"+p.id+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p.dir = dir

	p.setupNetwork(t)
	p.startOrigin(t)
	if !cfg.noInstall {
		p.install(t)
	}
	p.secrets = newSecretVolume(t, filepath.Join(dir, "secrets"), cfg.plainSecrets)
	if cfg.secrets != nil {
		p.secrets.write(t, cfg.secrets)
	}
	if cfg.interception {
		p.makeCA(t)
	}
	p.writeConfig(t)
	if !cfg.noBotBox {
		p.startBotBox(t)
	}
	t.Cleanup(func() {
		if t.Failed() {
			p.dumpLogs(t)
		}
	})
	return p
}

// setupNetwork creates the namespaces, the veth pair, addresses, routes
// and the pod's /etc/hosts.
func (p *pod) setupNetwork(t *testing.T) {
	t.Helper()
	etc := filepath.Join("/etc/netns", p.podNS)
	t.Cleanup(func() {
		for _, ns := range []string{p.podNS, p.netNS} {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
				t.Logf("ip netns del %s: %v: %s", ns, err, out)
			}
		}
		_ = os.RemoveAll(etc)
	})
	vpod, vnet := "bbp"+p.id, "bbn"+p.id // at most 15 characters
	for _, args := range [][]string{
		{"netns", "add", p.podNS},
		{"netns", "add", p.netNS},
		{"link", "add", vpod, "netns", p.podNS, "type", "veth", "peer", "name", vnet, "netns", p.netNS},
		{"-n", p.podNS, "link", "set", "lo", "up"},
		{"-n", p.netNS, "link", "set", "lo", "up"},
		{"-n", p.podNS, "link", "set", vpod, "up"},
		{"-n", p.netNS, "link", "set", vnet, "up"},
		{"-n", p.podNS, "addr", "add", p.podIP4.String() + "/24", "dev", vpod},
		{"-n", p.netNS, "addr", "add", p.netIP4.String() + "/24", "dev", vnet},
		{"-n", p.netNS, "addr", "add", p.netIP4b.String() + "/24", "dev", vnet},
		{"-n", p.podNS, "-6", "addr", "add", p.podIP6.String() + "/64", "dev", vpod, "nodad"},
		{"-n", p.netNS, "-6", "addr", "add", p.netIP6.String() + "/64", "dev", vnet, "nodad"},
		{"-n", p.podNS, "route", "add", "default", "via", p.netIP4.String()},
		{"-n", p.podNS, "-6", "route", "add", "default", "via", p.netIP6.String()},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	extra := slices.Clone(p.cfg.extraAddrs)
	if p.cfg.nameserver.IsValid() {
		extra = append(extra, p.cfg.nameserver)
	}
	for _, a := range extra {
		args := []string{"-n", p.netNS, "addr", "add", netip.PrefixFrom(a, a.BitLen()).String(), "dev", vnet}
		if a.Is6() {
			args = append(args, "nodad")
		}
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	// `ip netns exec POD` bind-mounts these over /etc/hosts and
	// /etc/resolv.conf. The resolver points at the origin's own address
	// (nothing answers there), so no lookup ever leaves the namespaces.
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	hosts := fmt.Sprintf("127.0.0.1 localhost\n::1 localhost\n%s %s %s %s\n%s %s\n",
		p.netIP4, hostAPI, hostOther, hostBlocked, p.netIP6, hostV6)
	if p.cfg.extraHosts != nil {
		hosts += p.cfg.extraHosts(p)
	}
	if err := os.WriteFile(filepath.Join(etc, "hosts"), []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	ns := p.netIP4
	if p.cfg.nameserver.IsValid() {
		ns = p.cfg.nameserver
	}
	resolv := fmt.Sprintf("nameserver %s\noptions timeout:1 attempts:1\n", ns)
	if err := os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte(resolv), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startOrigin makes the origin's PKI and starts cmd/e2e-origin in the net
// namespace.
func (p *pod) startOrigin(t *testing.T) {
	t.Helper()
	ca := testpki.NewCA(t, "e2e-origin-ca")
	names := []string{hostAPI, hostOther, hostBlocked, hostV6, p.netIP4.String(), p.netIP6.String()}
	names = append(names, p.cfg.originNames...)
	for _, a := range p.cfg.extraAddrs {
		names = append(names, a.String())
	}
	leaf := ca.Leaf(t, names...)
	var chain bytes.Buffer
	for _, der := range leaf.Certificate {
		_ = pem.Encode(&chain, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(leaf.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(p.dir, "origin.crt"), filepath.Join(p.dir, "origin.key")
	writeFile(t, certPath, chain.Bytes(), 0o444)
	writeFile(t, keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o400)
	p.originCA = filepath.Join(p.dir, "origin-ca.crt")
	writeFile(t, p.originCA, ca.CertPEM, 0o444)

	sock := filepath.Join(p.dir, "origin.sock")
	p.control = &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}},
	}
	argv := []string{"ip", "netns", "exec", p.netNS, p.bins.origin,
		"-addr", p.netIP4.String(), "-addr", p.netIP4b.String(), "-addr", p.netIP6.String(),
		"-cert", certPath, "-key", keyPath, "-control", sock}
	for _, a := range p.cfg.extraAddrs {
		argv = append(argv, "-addr", a.String())
	}
	for _, g := range p.cfg.mldGroups {
		argv = append(argv, "-mld-group", g)
	}
	if p.cfg.icmp6 {
		argv = append(argv, "-icmp6")
	}
	for _, a := range p.cfg.capture {
		argv = append(argv, "-capture", a.String())
	}
	if p.cfg.dnsServer {
		argv = append(argv, "-dns", "-dns-answer", hostAPI+"="+p.netIP4.String(), "-dns-answer", hostAPI+"="+p.netIP6.String())
	}
	if p.cfg.originArgs != nil {
		argv = append(argv, p.cfg.originArgs(t, p)...)
	}
	p.origin = startProc(t, "origin", p.dir, nil, argv...)
	deadline := time.Now().Add(startupTimeout)
	for {
		if _, err := p.fetchEvents(0); err == nil {
			return
		}
		if p.origin.exited() || time.Now().After(deadline) {
			t.Fatalf("origin did not start:\n%s", p.origin.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// installEnv is the init step's environment for this scenario.
func (p *pod) installEnv() []string {
	env := []string{"BOTBOX_ENABLE_IPV6=" + boolEnv(p.cfg.ipv6)}
	if p.cfg.backend != "" {
		env = append(env, "BOTBOX_NETFILTER_BACKEND="+p.cfg.backend)
	}
	if p.cfg.interception {
		env = append(env, "BOTBOX_ENABLE_HTTPS_INTERCEPTION=1")
	}
	if p.cfg.dnsGuard {
		env = append(env, "BOTBOX_DNS_GUARD_PORT="+strconv.Itoa(dnsGuardPort))
	}
	if p.cfg.installEnv != nil {
		env = append(env, p.cfg.installEnv(p)...)
	}
	return env
}

// install runs the init step as the init container would.
func (p *pod) install(t *testing.T) {
	t.Helper()
	out, errOut, code := p.run(t, p.podNS, uidRoot, p.installEnv(), p.bins.botbox, "netfilter", "install")
	if code != 0 {
		t.Fatalf("botbox netfilter install (env %v) exited %d:\nstdout:\n%s\nstderr:\n%s", p.installEnv(), code, out, errOut)
	}
	if b := p.cfg.backend; b != "" && !strings.Contains(out, "Installing BotBox "+b+" rules...") {
		t.Fatalf("botbox netfilter install with BOTBOX_NETFILTER_BACKEND=%s did not use it:\n%s\n%s", b, out, errOut)
	}
}

// makeCA runs `botbox ca new` and hands the key to UID 1337, as the CA init
// container of the example deployment does.
func (p *pod) makeCA(t *testing.T) {
	t.Helper()
	caDir := filepath.Join(p.dir, "ca")
	if err := os.Mkdir(caDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(p.bins.botbox, "ca", "new", "--out", caDir).CombinedOutput(); err != nil {
		t.Fatalf("botbox ca new --out %s: %v\n%s", caDir, err, out)
	}
	if err := os.Chown(filepath.Join(caDir, "ca.key"), uidBotBox, uidBotBox); err != nil {
		t.Fatal(err)
	}
	p.botboxCA = filepath.Join(caDir, "ca.crt")
}

// writeConfig writes BotBox's config for the scenario.
func (p *pod) writeConfig(t *testing.T) {
	t.Helper()
	p.configPath = filepath.Join(p.dir, "botbox.yaml")
	p.writeConfigTo(t, p.configPath)
}

// writeConfigTo writes BotBox's config for the scenario (p.cfg) to path.
func (p *pod) writeConfigTo(t *testing.T, path string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "listen_port: 8080\nmetrics_port: 9090\n")
	fmt.Fprintf(&b, "secrets_dir: %q\n", p.secrets.dir)
	fmt.Fprintf(&b, "secrets_reload_debounce_ms: %d\n", debounce.Milliseconds())
	fmt.Fprintf(&b, "upstream_ca_file: %q\n", p.originCA)
	fmt.Fprintf(&b, "upstream_connect_timeout_ms: 3000\nupstream_response_header_timeout_ms: 5000\n")
	b.WriteString(p.cfg.extraConfig)
	action := "deny"
	if p.cfg.defaultAllow {
		action = "allow"
	}
	switch p.cfg.addressGuard {
	case "":
		fmt.Fprintf(&b, "address_guard:\n  allowed_cidrs: [%q, %q]\n",
			netip.PrefixFrom(p.netIP4, 24).Masked(), netip.PrefixFrom(p.netIP6, 64).Masked())
	default:
		b.WriteString(p.cfg.addressGuard)
	}
	fmt.Fprintf(&b, "egress_policy:\n  default_action: %s\n  rules:%s", action, p.cfg.rules)
	if p.cfg.interception {
		caDir := filepath.Dir(p.botboxCA)
		fmt.Fprintf(&b, "https_interception:\n  enabled: true\n  ca_cert_path: %q\n  ca_key_path: %q\n  deny_handshake_on_disallowed_sni: %t\n",
			filepath.Join(caDir, "ca.crt"), filepath.Join(caDir, "ca.key"), p.cfg.denyHandshake)
	}
	if p.cfg.placeholders {
		// The shared emptyDir: created for the Pod, writable by BotBox,
		// readable by the app.
		phDir := filepath.Join(p.dir, "placeholders")
		if err := os.MkdirAll(phDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(phDir, uidBotBox, uidBotBox); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "placeholders:\n  enabled: true\n  dir: %q\n", filepath.Join(p.dir, "placeholders"))
	}
	if p.cfg.dnsGuard {
		// No upstream: the guard forwards to the pod's resolv.conf
		// nameserver (the origin's DNS server), as in a real Pod.
		fmt.Fprintf(&b, "dns_guard:\n  enabled: true\n  listen_port: %d\n", dnsGuardPort)
	}
	writeFile(t, path, []byte(b.String()), 0o644)
}

// startBotBox runs BotBox as UID 1337 in the pod and waits until every
// listener accepts connections.
func (p *pod) startBotBox(t *testing.T) {
	t.Helper()
	env := append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", p.probeKeyEnv(t)}, p.cfg.botboxEnv...)
	p.botbox = startProc(t, "botbox", p.dir, env, "ip", "netns", "exec", p.podNS,
		"setpriv", "--reuid", strconv.Itoa(uidBotBox), "--regid", strconv.Itoa(uidBotBox), "--clear-groups",
		p.bins.botbox, "--config", p.configPath)
	addrs := []string{"127.0.0.1:9090", "127.0.0.1:8080", "[::1]:8080"}
	if p.cfg.interception {
		addrs = append(addrs, "127.0.0.1:8443", "[::1]:8443")
	}
	if p.cfg.dnsGuard {
		// The TCP sockets are bound together with the UDP ones.
		for _, a := range []string{"127.0.0.1", "[::1]"} {
			addrs = append(addrs, a+":"+strconv.Itoa(dnsGuardPort))
		}
	}
	args := []string{"-timeout", "1s"}
	for _, a := range addrs {
		args = append(args, "-addr", a)
	}
	deadline := time.Now().Add(startupTimeout)
	for {
		r := p.client(t, uidRoot, "wait", args...)
		if r.Connected {
			break
		}
		if p.botbox.exited() {
			t.Fatalf("botbox exited during startup (%v):\n%s", p.botbox.waitErr, p.botbox.logs())
		}
		if time.Now().After(deadline) {
			t.Fatalf("botbox listeners %v not up after %v: %s\n%s", addrs, startupTimeout, r.Error, p.botbox.logs())
		}
	}
	if p.cfg.secrets == nil {
		return // readiness is the test's business (AT-001...)
	}
	// Ready, as the Pod's exec readiness probe sees it.
	for {
		out, errOut, code := p.probe(t)
		if code == 0 {
			return
		}
		if p.botbox.exited() || time.Now().After(deadline) {
			t.Fatalf("botbox probe never succeeded (exit %d: %s%s):\n%s", code, out, errOut, p.botbox.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// probe runs `botbox probe` against the health endpoint inside the pod, as
// the exec readiness probe of the deployment does: in BotBox's container
// (its UID), where the per-start probe key is readable.
func (p *pod) probe(t *testing.T) (stdout, stderr string, code int) {
	t.Helper()
	return p.run(t, p.podNS, uidBotBox, []string{p.probeKeyEnv(t)}, p.bins.botbox, "probe", "http://127.0.0.1:9090/healthz")
}

// probeKeyEnv names this pod's probe key file, in a directory only BotBox's
// UID can use (as BotBox's own container filesystem is in a real Pod).
func (p *pod) probeKeyEnv(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(p.dir, "botbox-run")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uidBotBox, uidBotBox); err != nil {
		t.Fatal(err)
	}
	return "BOTBOX_PROBE_KEY_FILE=" + filepath.Join(dir, "probe.key")
}

// dumpLogs shows what the processes said, for a failed test.
func (p *pod) dumpLogs(t *testing.T) {
	t.Helper()
	if p.botbox != nil {
		t.Logf("botbox output:\n%s", tail(p.botbox.logs(), 60))
	}
	if p.origin != nil {
		t.Logf("origin output:\n%s", tail(p.origin.logs(), 20))
	}
	if evs, err := p.fetchEvents(0); err == nil {
		var b strings.Builder
		for _, ev := range evs {
			fmt.Fprintf(&b, "  #%d %s %s <- %s %s %s %q\n", ev.Seq, ev.Kind, ev.Local, ev.Remote, ev.Method, ev.Path, ev.Payload)
		}
		t.Logf("origin events:\n%s", tail(b.String(), 40))
	}
}

// run executes argv in namespace ns as uid (0: root, no setpriv) and
// returns its output and exit status.
func (p *pod) run(t *testing.T, ns string, uid int, env []string, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	return p.runCaps(t, ns, uid, nil, env, argv...)
}

// runCaps is run with the given capabilities (e.g. "net_raw") kept as
// ambient capabilities across the UID change, as a container runtime that
// grants them would.
func (p *pod) runCaps(t *testing.T, ns string, uid int, caps []string, env []string, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	full := []string{"ip", "netns", "exec", ns}
	if uid != uidRoot {
		full = append(full, "setpriv", "--reuid", strconv.Itoa(uid), "--regid", strconv.Itoa(uid), "--clear-groups")
		for _, c := range caps {
			full = append(full, "--inh-caps", "+"+c, "--ambient-caps", "+"+c)
		}
	}
	full = append(full, argv...)
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("running %v: %v", full, err)
	}
	return o.String(), e.String(), code
}

// client runs cmd/e2e-client in the pod as uid and decodes its result.
func (p *pod) client(t *testing.T, uid int, mode string, args ...string) wire.Result {
	t.Helper()
	out, errOut, code := p.run(t, p.podNS, uid, nil, append([]string{p.bins.client, mode}, args...)...)
	var r wire.Result
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("e2e-client %s %v as UID %d: exit %d\nstdout: %s\nstderr: %s", mode, args, uid, code, out, errOut)
	}
	if r.UID != uid {
		t.Fatalf("e2e-client ran as UID %d, want %d", r.UID, uid)
	}
	return r
}

// clientCaps is client with ambient capabilities (see runCaps).
func (p *pod) clientCaps(t *testing.T, uid int, caps []string, mode string, args ...string) wire.Result {
	t.Helper()
	out, errOut, code := p.runCaps(t, p.podNS, uid, caps, nil, append([]string{p.bins.client, mode}, args...)...)
	var r wire.Result
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("e2e-client %s %v as UID %d with %v: exit %d\nstdout: %s\nstderr: %s", mode, args, uid, caps, code, out, errOut)
	}
	if r.UID != uid {
		t.Fatalf("e2e-client ran as UID %d, want %d", r.UID, uid)
	}
	return r
}

// app runs the client as the agent (UID 1000).
func (p *pod) app(t *testing.T, mode string, args ...string) wire.Result {
	t.Helper()
	return p.client(t, uidApp, mode, args...)
}

// healthz asks BotBox's health endpoint, as the app's exec probe would.
func (p *pod) healthz(t *testing.T) wire.Result {
	t.Helper()
	return p.app(t, "http", "-url", "http://127.0.0.1:9090/healthz", "-timeout", "2s")
}

// waitHealthz polls /healthz until it answers want or timeout passes, and
// returns the last answer and how long it took.
func (p *pod) waitHealthz(t *testing.T, want int, timeout time.Duration) (wire.Result, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		r := p.healthz(t)
		if r.Status == want || time.Since(start) > timeout {
			return r, time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fetchEvents returns the origin's events with Seq > since.
func (p *pod) fetchEvents(since int64) ([]wire.Event, error) {
	resp, err := p.control.Get("http://origin/events?since=" + strconv.FormatInt(since, 10))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var evs []wire.Event
	if err := json.NewDecoder(resp.Body).Decode(&evs); err != nil {
		return nil, err
	}
	return evs, nil
}

// events is fetchEvents for a test.
func (p *pod) events(t *testing.T, since int64) []wire.Event {
	t.Helper()
	evs, err := p.fetchEvents(since)
	if err != nil {
		t.Fatalf("reading the origin's record: %v", err)
	}
	return evs
}

// mark returns the origin's newest event number: "since now".
func (p *pod) mark(t *testing.T) int64 {
	t.Helper()
	evs := p.events(t, 0)
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

// waitEvents polls the origin until done accepts its events since mark.
func (p *pod) waitEvents(t *testing.T, since int64, what string, done func([]wire.Event) bool) []wire.Event {
	t.Helper()
	deadline := time.Now().Add(eventTimeout)
	for {
		evs := p.events(t, since)
		if done(evs) {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("origin: no %s within %v; events since #%d: %s", what, eventTimeout, since, describe(evs))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// httpEvent waits for the origin to have served a request for path since
// mark and returns it.
func (p *pod) httpEvent(t *testing.T, since int64, path string) wire.Event {
	t.Helper()
	evs := p.waitEvents(t, since, "HTTP request for "+path, func(evs []wire.Event) bool {
		return slices.ContainsFunc(evs, func(e wire.Event) bool { return e.Kind == wire.KindHTTP && e.Path == path })
	})
	i := slices.IndexFunc(evs, func(e wire.Event) bool { return e.Kind == wire.KindHTTP && e.Path == path })
	return evs[i]
}

// assertNoTCP asserts that no connection reached the origin's listener dst
// since mark. The barrier is a connection from the exempt UID 1337 to the
// same listener, made afterwards: a listener accepts in order, so anything
// that got through before it is recorded before it.
func (p *pod) assertNoTCP(t *testing.T, since int64, dst netip.AddrPort) {
	t.Helper()
	b := p.client(t, uidBotBox, "tcp", "-addr", dst.String(), "-connect-timeout", "3s")
	if !b.Connected {
		t.Fatalf("barrier: UID 1337 could not connect to %s: %s", dst, b.Error)
	}
	barrier := netip.MustParseAddrPort(b.Local)
	evs := p.waitEvents(t, since, "barrier connection to "+dst.String(), func(evs []wire.Event) bool {
		return slices.ContainsFunc(evs, func(e wire.Event) bool {
			return e.Kind == wire.KindTCP && e.LocalAddrPort() == dst && remote(e) == barrier
		})
	})
	for _, e := range evs {
		if e.Kind != wire.KindUDP && e.LocalAddrPort() == dst && remote(e) != barrier {
			t.Errorf("origin %s saw %s from %s (#%d), want nothing", dst, e.Kind, e.Remote, e.Seq)
		}
	}
}

// assertNoUDP asserts that no datagram reached the origin's UDP socket dst
// since mark, with a datagram from UID 1337 as the barrier.
func (p *pod) assertNoUDP(t *testing.T, since int64, dst netip.AddrPort) {
	t.Helper()
	token := "barrier-" + randomHex(t, 8)
	b := p.client(t, uidBotBox, "udp", "-addr", dst.String(), "-payload", token)
	if !b.Connected {
		t.Fatalf("barrier: UID 1337 could not send to %s: %s", dst, b.Error)
	}
	evs := p.waitEvents(t, since, "barrier datagram to "+dst.String(), func(evs []wire.Event) bool {
		return slices.ContainsFunc(evs, func(e wire.Event) bool { return e.Kind == wire.KindUDP && e.Payload == token })
	})
	for _, e := range evs {
		if e.Kind == wire.KindUDP && e.LocalAddrPort() == dst && e.Payload != token {
			t.Errorf("origin %s received datagram %q from %s (#%d), want nothing", dst, e.Payload, e.Remote, e.Seq)
		}
	}
}

// assertNoConnection asserts that a client result shows no connection was
// made: the connect attempt timed out (DROP) or was refused by the local
// filter, never answered by anybody.
func assertNoConnection(t *testing.T, what string, r wire.Result) {
	t.Helper()
	if r.Connected || r.Status != 0 {
		t.Errorf("%s: connected=%v status=%d body=%q, want no connection", what, r.Connected, r.Status, r.Body)
		return
	}
	if r.ErrorKind != wire.ErrTimeout && r.ErrorKind != wire.ErrEPERM {
		t.Errorf("%s: error %q (%s), want a connect timeout or EPERM from the packet filter", what, r.Error, r.ErrorKind)
	}
}

// assertStatus checks an HTTP result's status and exact body.
func assertStatus(t *testing.T, what string, r wire.Result, status int, body string) {
	t.Helper()
	if r.Status != status || strings.TrimSpace(r.Body) != body {
		t.Errorf("%s: got status %d body %q (error %q), want %d %q", what, r.Status, r.Body, r.Error, status, body)
	}
}

// netfilter runs `botbox netfilter ARGS` as root in the pod with env.
func (p *pod) netfilter(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return p.run(t, p.podNS, uidRoot, env, append([]string{p.bins.botbox, "netfilter"}, args...)...)
}

// save returns the pod's iptables-save (v6: ip6tables-save) output.
func (p *pod) save(t *testing.T, v6 bool) string {
	t.Helper()
	bin := "iptables-save"
	if v6 {
		bin = "ip6tables-save"
	}
	out, errOut, code := p.run(t, p.podNS, uidRoot, nil, bin)
	if code != 0 {
		t.Fatalf("%s: exit %d: %s", bin, code, errOut)
	}
	return out
}

// addr4 and addr6 are the origin's listeners.
func (p *pod) addr4(port uint16) netip.AddrPort { return netip.AddrPortFrom(p.netIP4, port) }
func (p *pod) addr6(port uint16) netip.AddrPort { return netip.AddrPortFrom(p.netIP6, port) }

// secretVolume is the secrets directory. By default it is laid out and
// updated like a Kubernetes Secret volume (kubelet's AtomicWriter): the data
// lives in a timestamped directory, "..data" points at it, each key is a
// symlink "key -> ..data/key", and an update swaps "..data" with one rename.
// With plain, each key is a regular file replaced by renaming a temporary
// dotfile over it (what most other secret agents do).
type secretVolume struct {
	dir   string
	plain bool
	gen   int
}

func newSecretVolume(t *testing.T, dir string, plain bool) *secretVolume {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	v := &secretVolume{dir: dir, plain: plain}
	v.write(t, map[string]string{})
	return v
}

// write atomically replaces the volume's content with data.
func (v *secretVolume) write(t *testing.T, data map[string]string) {
	t.Helper()
	v.gen++
	if v.plain {
		v.writePlain(t, data)
		return
	}
	ts := fmt.Sprintf("..%s.%d", time.Now().UTC().Format("2006_01_02_15_04_05"), v.gen)
	tsDir := filepath.Join(v.dir, ts)
	if err := os.Mkdir(tsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, val := range data {
		writeFile(t, filepath.Join(tsDir, k), []byte(val), 0o444)
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for k := range data {
		link := filepath.Join(v.dir, k)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	v.removeOthers(t, data)
	if old != "" {
		_ = os.RemoveAll(filepath.Join(v.dir, old))
	}
}

// writePlain renames a fresh dotfile over each key.
func (v *secretVolume) writePlain(t *testing.T, data map[string]string) {
	t.Helper()
	for k, val := range data {
		tmp := filepath.Join(v.dir, fmt.Sprintf(".%s.tmp%d", k, v.gen))
		writeFile(t, tmp, []byte(val), 0o444)
		if err := os.Rename(tmp, filepath.Join(v.dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	v.removeOthers(t, data)
}

// removeOthers deletes the visible keys that are not in data.
func (v *secretVolume) removeOthers(t *testing.T, data map[string]string) {
	t.Helper()
	entries, err := os.ReadDir(v.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, keep := data[e.Name()]; !keep && !strings.HasPrefix(e.Name(), ".") {
			_ = os.Remove(filepath.Join(v.dir, e.Name()))
		}
	}
}

// proc is a background process, in its own process group.
type proc struct {
	name       string
	cmd        *exec.Cmd
	done       chan struct{}
	waitErr    error
	stdoutPath string
	stderrPath string
}

// startProc starts argv with output to files in dir and registers its
// termination (SIGTERM to the process group, SIGKILL after 5 s).
func startProc(t *testing.T, name, dir string, env []string, argv ...string) *proc {
	t.Helper()
	p := &proc{
		name:       name,
		done:       make(chan struct{}),
		stdoutPath: filepath.Join(dir, name+".stdout"),
		stderrPath: filepath.Join(dir, name+".stderr"),
	}
	stdout, err := os.Create(p.stdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(p.stderrPath)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = env
	if env == nil {
		p.cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	p.cmd.Stdout, p.cmd.Stderr = stdout, stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.stop(5 * time.Second) })
	return p
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop terminates the process group: SIGTERM, then SIGKILL after grace.
// It reports whether the process ended within grace after SIGTERM.
func (p *proc) stop(grace time.Duration) bool {
	if p.exited() {
		return true
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
	return false
}

// logs returns the process's stdout and stderr.
func (p *proc) logs() string {
	out, _ := os.ReadFile(p.stdoutPath)
	errOut, _ := os.ReadFile(p.stderrPath)
	return fmt.Sprintf("--- %s stdout ---\n%s--- %s stderr ---\n%s", p.name, out, p.name, errOut)
}

// remote parses an event's peer address.
func remote(e wire.Event) netip.AddrPort {
	ap, _ := netip.ParseAddrPort(e.Remote)
	return ap
}

// describe renders events for a failure message.
func describe(evs []wire.Event) string {
	if len(evs) == 0 {
		return "none"
	}
	var parts []string
	for _, e := range evs {
		parts = append(parts, fmt.Sprintf("#%d %s %s<-%s %s %s", e.Seq, e.Kind, e.Local, e.Remote, e.Method, e.Path))
	}
	return strings.Join(parts, "; ")
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// randomHex returns 2n random hex digits.
func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// writeFile writes data with exactly mode (umask-proof).
func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// boolEnv renders b as "1" or "0".
func boolEnv(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
