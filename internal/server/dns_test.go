package server

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/logcapture"
)

// dnsRecorder is an upstream resolver on loopback that records the names
// asked and answers A 203.0.113.7.
type dnsRecorder struct {
	addr  string
	mu    sync.Mutex
	names []string
}

func newDNSRecorder(t *testing.T) *dnsRecorder {
	t.Helper()
	r := &dnsRecorder{}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = pc.LocalAddr().String()
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		r.mu.Lock()
		r.names = append(r.names, q.Question[0].Name)
		r.mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(q)
		if q.Question[0].Qtype == dns.TypeA {
			rr, _ := dns.NewRR(q.Question[0].Name + " 30 IN A 203.0.113.7")
			m.Answer = append(m.Answer, rr)
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return r
}

func (r *dnsRecorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.names...)
}

func ephemeralPacket(network, addr string) (net.PacketConn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	return net.ListenPacket(network, net.JoinHostPort(host, "0"))
}

// TestDNSGuardServed: with dns_guard enabled the server binds the guard on
// UDP and TCP at 127.0.0.1 and [::1] (where ip6tables REDIRECT delivers),
// forwards allowed names to dns_guard.upstream, answers
// NXDOMAIN for the rest without asking, counts both in
// botbox_dns_queries_total, and closes the sockets at shutdown.
func TestDNSGuardServed(t *testing.T) {
	up := newDNSRecorder(t)
	dir := t.TempDir()
	cfg, err := config.Parse([]byte("secrets_dir: " + dir + "\negress_policy:\n  rules:\n    - host: api.example.test\n      action: allow\ndns_guard:\n  enabled: true\n  upstream: [\"" + up.addr + "\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logcapture.Buffer{}
	metrics := telemetry.NewMetrics()
	srv, err := New(cfg, Options{Logger: telemetry.NewLogger(logs, nil), Metrics: metrics,
		Listen: ephemeral, ListenPacket: ephemeralPacket, ResolvConf: filepath.Join(dir, "absent")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	addrs, err := srv.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs.DNSUDP) == 0 || len(addrs.DNSUDP) != len(addrs.DNSTCP) {
		t.Fatalf("DNS sockets %v / %v", addrs.DNSUDP, addrs.DNSTCP)
	}
	if hasIPv6Loopback() && len(addrs.DNSUDP) != 2 {
		t.Errorf("DNS guard bound on %v, want 127.0.0.1 and [::1]", addrs.DNSUDP)
	}
	var targets []struct{ network, addr string }
	for i := range addrs.DNSUDP {
		targets = append(targets, struct{ network, addr string }{"udp", addrs.DNSUDP[i].String()}, struct{ network, addr string }{"tcp", addrs.DNSTCP[i].String()})
	}
	for _, tg := range targets {
		c := dns.Client{Net: tg.network, Timeout: 30 * time.Second}
		for name, want := range map[string]int{"api.example.test.": dns.RcodeSuccess, "leak.exfil.test.": dns.RcodeNameError} {
			m := new(dns.Msg)
			m.SetQuestion(name, dns.TypeA)
			r, _, err := c.Exchange(m, tg.addr)
			if err != nil {
				t.Fatalf("%s %s: %v", tg.network, tg.addr, err)
			}
			if r.Rcode != want {
				t.Errorf("%s %s %s: rcode %s", tg.network, tg.addr, name, dns.RcodeToString[r.Rcode])
			}
		}
	}
	for _, n := range up.seen() {
		if n != "api.example.test." {
			t.Errorf("upstream was asked %q", n)
		}
	}
	if len(up.seen()) == 0 {
		t.Errorf("upstream never asked")
	}
	if got := testutil.ToFloat64(srv.dns.Metrics().Denied); got != float64(len(targets)) {
		t.Errorf("denied = %v, want %d", got, len(targets))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", addrs.DNSTCP[0].String()); err == nil {
		c.Close()
		t.Errorf("DNS TCP socket still open after shutdown")
	}
	if !strings.Contains(logs.String(), "DNS guard listening") {
		t.Errorf("no listening line:\n%s", logs.String())
	}
}

// TestDNSGuardNoResolver: an empty upstream list and a resolv.conf without
// nameserver is a start-up error naming the fix.
func TestDNSGuardNoResolver(t *testing.T) {
	dir := t.TempDir()
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("search x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte("secrets_dir: " + dir + "\negress_policy:\n  rules: []\ndns_guard:\n  enabled: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(cfg, Options{Logger: telemetry.NewLogger(&logcapture.Buffer{}, nil), ResolvConf: resolv})
	if err == nil || !strings.Contains(err.Error(), "dns_guard.upstream") {
		t.Errorf("New = %v, want an error naming dns_guard.upstream", err)
	}
}

func hasIPv6Loopback() bool {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// TestResolvConfServers: the default upstreams are the nameserver lines of
// resolv.conf, port 53, in order, unusable entries skipped.
func TestResolvConfServers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(path, []byte("search default.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\nnameserver fd00:10::a\nnameserver 0.0.0.0\noptions ndots:5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := resolvConfServers(path)
	if err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprint(got); s != "[10.96.0.10:53 [fd00:10::a]:53]" {
		t.Errorf("servers %s", s)
	}
	if _, err := resolvConfServers(filepath.Join(t.TempDir(), "absent")); err == nil || !strings.Contains(err.Error(), "dns_guard.upstream") {
		t.Errorf("absent file: %v", err)
	}
}

// TestDNSTripwire: with placeholders on, a query name carrying a
// placeholder is refused (NXDOMAIN) even under an allowed wildcard, the
// upstream is never asked, botbox_secret_tripwire_total counts it and an
// ERROR secret_tripwire line names the secret_ref but not the query name.
// An ordinary name under the same wildcard is still forwarded.
func TestDNSTripwire(t *testing.T) {
	up := newDNSRecorder(t)
	dir := t.TempDir()
	secretsDir := filepath.Join(dir, "secrets")
	phDir := filepath.Join(dir, "placeholders")
	if err := os.Mkdir(secretsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	const value = "sk-test-Zq8wK2mNp4Rt6Vx9Bc3Df5Gh7Jk1Ls0A"
	if err := os.WriteFile(filepath.Join(secretsDir, "api-key"), []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`secrets_dir: %s
placeholders:
  enabled: true
  dir: %s
egress_policy:
  rules:
    - host: api.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
    - host: "*.exfil.test"
      action: allow
dns_guard:
  enabled: true
  upstream: ["%s"]
`, secretsDir, phDir, up.addr)))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logcapture.Buffer{}
	metrics := telemetry.NewMetrics()
	addrs := runDNSServer(t, cfg, Options{Logger: telemetry.NewLogger(logs, nil), Metrics: metrics})
	ph, err := os.ReadFile(filepath.Join(phDir, "api-key"))
	if err != nil {
		t.Fatal(err)
	}
	if string(ph) == value || len(ph) != len(value) {
		t.Fatalf("placeholder does not have the value's shape")
	}
	c := dns.Client{Net: "udp", Timeout: 30 * time.Second}
	ask := func(name string) int {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, _, err := c.Exchange(m, addrs.DNSUDP[0].String())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r.Rcode
	}
	if rc := ask("ok.exfil.test."); rc != dns.RcodeSuccess {
		t.Fatalf("ok.exfil.test: rcode %s, want NOERROR", dns.RcodeToString[rc])
	}
	smuggled := strings.ToUpper(string(ph)) + ".exfil.test."
	if rc := ask(smuggled); rc != dns.RcodeNameError {
		t.Errorf("placeholder name: rcode %s, want NXDOMAIN", dns.RcodeToString[rc])
	}
	for _, n := range up.seen() {
		if n != "ok.exfil.test." {
			t.Errorf("upstream was asked %q", n)
		}
	}
	if got := testutil.ToFloat64(metrics.SecretTripwire.WithLabelValues("api-key")); got != 1 {
		t.Errorf("botbox_secret_tripwire_total{secret_ref=api-key} = %v, want 1", got)
	}
	var alarm bool
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"event":"secret_tripwire"`) {
			alarm = true
			for _, want := range []string{`"level":"ERROR"`, `"secret_ref":["api-key"]`, `"listener":"dns"`, `"found_in":"dns_query"`} {
				if !strings.Contains(line, want) {
					t.Errorf("tripwire line lacks %s: %s", want, line)
				}
			}
		}
		if strings.Contains(strings.ToLower(line), strings.ToLower(string(ph))) {
			t.Errorf("a log line carries the smuggled name: %s", line)
		}
		if strings.Contains(line, value) {
			t.Fatalf("a log line carries the secret value")
		}
	}
	if !alarm {
		t.Errorf("no secret_tripwire line:\n%s", logs.String())
	}
}

// TestDNSGuardFiltersRefusedAddresses: the DNS guard removes from an
// allowed name's answer every address the address guard refuses (loopback,
// metadata, private), keeps public ones, and keeps a private one when the
// rule opts in with allow_private_addresses.
func TestDNSGuardFiltersRefusedAddresses(t *testing.T) {
	answers := map[string][]string{
		"mixed.example.test.":    {"127.0.0.1", "169.254.169.254", "10.1.2.3", "203.0.113.9"},
		"internal.example.test.": {"10.1.2.3", "127.0.0.1"},
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		if q.Question[0].Qtype == dns.TypeA {
			for _, ip := range answers[strings.ToLower(q.Question[0].Name)] {
				rr, _ := dns.NewRR(q.Question[0].Name + " 30 IN A " + ip)
				m.Answer = append(m.Answer, rr)
			}
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	up.NotifyStartedFunc = func() { close(started) }
	go func() { _ = up.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = up.Shutdown() })

	dir := t.TempDir()
	cfg, err := config.Parse([]byte("secrets_dir: " + dir + `
egress_policy:
  rules:
    - host: mixed.example.test
      action: allow
    - host: internal.example.test
      action: allow
      allow_private_addresses: true
dns_guard:
  enabled: true
  upstream: ["` + pc.LocalAddr().String() + `"]
`))
	if err != nil {
		t.Fatal(err)
	}
	addrs := runDNSServer(t, cfg, Options{Logger: telemetry.NewLogger(&logcapture.Buffer{}, nil), Metrics: telemetry.NewMetrics()})
	c := dns.Client{Net: "udp", Timeout: 30 * time.Second}
	for name, want := range map[string][]string{
		"mixed.example.test.":    {"203.0.113.9"},
		"internal.example.test.": {"10.1.2.3"},
	} {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, _, err := c.Exchange(m, addrs.DNSUDP[0].String())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got []string
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				got = append(got, a.A.String())
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: answer %v, want %v", name, got, want)
		}
	}
}

// runDNSServer runs a server for cfg on ephemeral loopback ports, without a
// resolv.conf, until the test ends, and returns its addresses.
func runDNSServer(t *testing.T, cfg *config.Config, o Options) Addrs {
	t.Helper()
	o.Listen, o.ListenPacket, o.ResolvConf = ephemeral, ephemeralPacket, filepath.Join(t.TempDir(), "absent")
	srv, err := New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	addrs, err := srv.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}
