package dnsguard

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/generation"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/logcapture"
)

// testPolicy allows api.example.test, everything under *.allowed.test
// except deny.allowed.test, and nothing else.
const testPolicy = `
egress_policy:
  default_action: deny
  rules:
    - host: api.example.test
      action: allow
    - host: "*.allowed.test"
      action: allow
    - host: deny.allowed.test
      action: deny
`

func generationFor(t testing.TB, yaml string) *generation.Current {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	cur, err := generation.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

// recorder is a fake upstream resolver on loopback (UDP and TCP on the
// same port) that records every question it receives and answers with
// answer (default: one A record 203.0.113.7, TTL 3600, and one AAAA
// 2001:db8::7), or never when silent.
type recorder struct {
	addr netip.AddrPort

	mu      sync.Mutex
	queries []*dns.Msg
	answer  func(q *dns.Msg) *dns.Msg
	silent  bool
}

func newRecorder(t testing.TB) *recorder {
	t.Helper()
	r := &recorder{}
	// UDP and TCP on the same port: an ephemeral UDP port may be taken
	// for TCP, so try a few.
	var (
		pc   net.PacketConn
		ln   net.Listener
		port int
		err  error
	)
	for range 20 {
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		port = pc.LocalAddr().(*net.UDPAddr).Port
		if ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			break
		}
		_ = pc.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	r.addr = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: r}, {Listener: ln, Handler: r}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func() { _ = s.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	return r
}

func (r *recorder) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	r.mu.Lock()
	r.queries = append(r.queries, q.Copy())
	answer, silent := r.answer, r.silent
	r.mu.Unlock()
	if silent {
		return
	}
	if answer == nil {
		answer = defaultAnswer
	}
	if m := answer(q); m != nil {
		_ = w.WriteMsg(m)
	}
}

func defaultAnswer(q *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(q)
	name := q.Question[0].Name
	switch q.Question[0].Qtype {
	case dns.TypeA:
		m.Answer = append(m.Answer, mustRR(name+" 3600 IN A 203.0.113.7"))
	case dns.TypeAAAA:
		m.Answer = append(m.Answer, mustRR(name+" 3600 IN AAAA 2001:db8::7"))
	}
	if opt := q.IsEdns0(); opt != nil {
		m.SetEdns0(1232, opt.Do())
	}
	return m
}

func mustRR(s string) dns.RR {
	rr, err := dns.NewRR(s)
	if err != nil {
		panic(err)
	}
	return rr
}

// names returns the question names the recorder received.
func (r *recorder) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, q := range r.queries {
		out = append(out, q.Question[0].Name)
	}
	return out
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queries)
}

func (r *recorder) last() *dns.Msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queries) == 0 {
		return nil
	}
	return r.queries[len(r.queries)-1]
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// harness is a guard served on loopback UDP and TCP in front of a
// recorder.
type harness struct {
	g       *Guard
	up      *recorder
	udp     string
	tcp     string
	logs    *logcapture.Buffer
	reg     *prometheus.Registry
	metrics *telemetry.DNSMetrics
	clock   *fakeClock
	gen     *generation.Current
}

type harnessOpts struct {
	policy    string
	maxTTL    time.Duration
	timeout   time.Duration
	noCache   bool          // max TTL 0
	tcpIdle   time.Duration // 0: tcpIdleTimeout; also the read timeout
	pending   int           // 0: maxPending
	filter    AddrFilter
	inspector NameInspector
	peers     Peers // nil: the default (LocalAddrs)
}

func newHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	if o.policy == "" {
		o.policy = testPolicy
	}
	if o.maxTTL == 0 && !o.noCache {
		o.maxTTL = 60 * time.Second
	}
	h := &harness{up: newRecorder(t), logs: &logcapture.Buffer{}, reg: prometheus.NewRegistry(), clock: newFakeClock()}
	h.metrics = telemetry.NewDNSMetrics(h.reg)
	h.gen = generationFor(t, o.policy)
	g, err := New(Options{
		Policies:      h.gen,
		Upstreams:     []netip.AddrPort{h.up.addr},
		MaxTTL:        o.maxTTL,
		Timeout:       o.timeout,
		AddrFilter:    o.filter,
		NameInspector: o.inspector,
		Peers:         o.peers,
		Metrics:       h.metrics,
		Logger:        telemetry.NewLogger(h.logs, nil),
		Now:           h.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.g = g
	if o.tcpIdle > 0 {
		g.tcpIdle, g.ioWait = o.tcpIdle, o.tcpIdle
	}
	if o.pending > 0 {
		g.pending = make(chan struct{}, o.pending)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.udp, h.tcp = pc.LocalAddr().String(), ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, []net.PacketConn{pc}, []net.Listener{ln}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return h
}

// ask sends one query for name and type over network ("udp" or "tcp").
func (h *harness) ask(t testing.TB, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return h.exchange(t, network, m)
}

func (h *harness) exchange(t testing.TB, network string, m *dns.Msg) *dns.Msg {
	t.Helper()
	addr := h.udp
	if network == "tcp" {
		addr = h.tcp
	}
	c := dns.Client{Net: network, Timeout: 30 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s query %s: %v", network, m.Question[0].Name, err)
	}
	return r
}

func (h *harness) counter(result string) float64 {
	return testutil.ToFloat64(h.metrics.Queries.WithLabelValues(result))
}

// linesWith returns the log records whose message is msg.
func (h *harness) linesWith(msg string) []map[string]any {
	var out []map[string]any
	for _, r := range h.logs.Records() {
		if r["message"] == msg {
			out = append(out, r)
		}
	}
	return out
}

func rcode(m *dns.Msg) string { return dns.RcodeToString[m.Rcode] }
