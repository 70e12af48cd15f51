package dnsguard

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sync/singleflight"

	"github.com/botbox/botbox/internal/generation"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/policy"
	"github.com/botbox/botbox/internal/telemetry"
)

// Policies gives the policy generation in force; *generation.Current
// satisfies it. The guard loads it once per query, so a reload applies
// from the next query on.
type Policies interface {
	Load() *generation.Generation
}

// AddrFilter decides which addresses of an allowed name's answer the app
// may see. r is the rule that allowed the name (policy.NameRule), nil when
// default_action: allow did; a rule's per-rule opt-ins (such as
// allow_private_addresses) are read from it. Refused must be safe for
// concurrent use and must not block.
type AddrFilter interface {
	Refused(a netip.Addr, r *policy.Rule) bool
}

// AddrFilterFunc adapts a function to AddrFilter.
type AddrFilterFunc func(a netip.Addr, r *policy.Rule) bool

// Refused calls f.
func (f AddrFilterFunc) Refused(a netip.Addr, r *policy.Rule) bool { return f(a, r) }

// NameInspector looks at a query name (as the client sent it, in
// presentation format) before anything else; refuse means the name must
// not leave the Pod (it carries a placeholder credential, for instance).
// The inspector raises its own alarm; the guard answers NXDOMAIN and logs
// the decision without the name. It must be safe for concurrent use.
type NameInspector func(name string) (refuse bool)

// Defaults and bounds.
const (
	// DefaultTimeout is how long one query may wait for upstream answers,
	// all upstreams and a TCP retry included, before the client gets
	// SERVFAIL: below the 5 s glibc and musl wait before retrying.
	DefaultTimeout = 2 * time.Second
	// DefaultCacheSize is the number of cached answers kept at most.
	DefaultCacheSize = 4096
	// maxUpstreamInFlight bounds the upstream exchanges in flight; a
	// query that cannot get a slot before its deadline gets SERVFAIL.
	maxUpstreamInFlight = 256
	// maxPending bounds the queries waiting for an upstream answer (each
	// holds a goroutine for up to Timeout); one more gets SERVFAIL at
	// once, so a flood of uncached allowed names cannot pile up memory.
	maxPending = 1024
	// clientUDPSize is the largest UDP answer the guard sends to an EDNS0
	// client and announces upstream (the DNS flag day 2020 value, which
	// avoids IP fragmentation).
	clientUDPSize = 1232
)

// Options configure a Guard.
type Options struct {
	// Policies is the policy generation source (required).
	Policies Policies
	// Upstreams are the resolvers allowed queries go to, tried in order
	// (required, at least one).
	Upstreams []netip.AddrPort
	// MaxTTL caps every TTL served and how long an answer is cached; 0
	// serves TTL 0 and caches nothing.
	MaxTTL time.Duration
	// Timeout bounds the upstream wait of one query (default
	// DefaultTimeout).
	Timeout time.Duration
	// CacheSize bounds the cache (default DefaultCacheSize).
	CacheSize int
	// AddrFilter, when set, removes refused addresses from answers.
	AddrFilter AddrFilter
	// NameInspector, when set, can refuse a name before the policy is
	// asked.
	NameInspector NameInspector
	// Metrics counts answers (required).
	Metrics *telemetry.DNSMetrics
	// Peers decides which query sources are answered (default: a
	// LocalAddrs on net.InterfaceAddrs). A query from any other source is
	// dropped without an answer, counted and logged.
	Peers Peers
	// Logger receives the decision lines (required).
	Logger *slog.Logger
	// Now is the clock of the cache and of the log rate limit (default
	// time.Now).
	Now func() time.Time
}

// Guard answers DNS queries on the app's behalf. Create it with New.
type Guard struct {
	opts    Options
	log     *slog.Logger
	now     func() time.Time
	cache   *cache
	flight  singleflight.Group
	slots   chan struct{} // upstream exchanges in flight
	pending chan struct{} // queries waiting for an upstream answer
	limiter *logLimiter
	ctx     context.Context // cancelled by Close: aborts upstream waits
	cancel  context.CancelFunc
	tcpIdle time.Duration // tcpIdleTimeout; tests shorten it
	ioWait  time.Duration // ioTimeout; tests shorten it
}

var _ dns.Handler = (*Guard)(nil)

// New checks opts and builds a guard.
func New(opts Options) (*Guard, error) {
	switch {
	case opts.Policies == nil:
		return nil, errors.New("dnsguard: Policies is required")
	case len(opts.Upstreams) == 0:
		return nil, errors.New("dnsguard: no upstream resolver: set dns_guard.upstream or a nameserver in /etc/resolv.conf")
	case opts.Metrics == nil:
		return nil, errors.New("dnsguard: Metrics is required")
	case opts.Logger == nil:
		return nil, errors.New("dnsguard: Logger is required")
	case opts.MaxTTL < 0:
		return nil, errors.New("dnsguard: MaxTTL must not be negative")
	}
	for _, u := range opts.Upstreams {
		if !u.IsValid() || u.Port() == 0 {
			return nil, errors.New("dnsguard: upstream " + u.String() + " is not an address and port")
		}
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = DefaultCacheSize
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Peers == nil {
		opts.Peers = NewLocalAddrs(nil, nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Guard{
		opts:    opts,
		log:     opts.Logger,
		now:     opts.Now,
		cache:   newCache(opts.CacheSize),
		slots:   make(chan struct{}, maxUpstreamInFlight),
		pending: make(chan struct{}, maxPending),
		limiter: newLogLimiter(opts.Now),
		ctx:     ctx,
		cancel:  cancel,
		tcpIdle: tcpIdleTimeout,
		ioWait:  ioTimeout,
	}, nil
}

// ServeDNS answers one query (the dns.Handler of Serve's servers). A query
// whose source is not an address of the Pod (Options.Peers) gets no answer
// at all: the answer would go to that address, carrying the query's name,
// from the Pod's own address (issue 18 §1); a TCP connection from it is
// closed. TestForeignPeerGetsNoAnswer holds this.
func (g *Guard) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	_, udp := w.LocalAddr().(*net.UDPAddr)
	transport := "tcp"
	if udp {
		transport = "udp"
	}
	if peer, ok := addrIP(w.RemoteAddr()); !ok || !g.opts.Peers.Local(peer) {
		g.opts.Metrics.ForeignPeer.Inc()
		g.logForeignPeer(peer, transport)
		if !udp {
			_ = w.Close()
		}
		return
	}
	resp := g.answer(req, transport)
	if resp == nil {
		return
	}
	if udp {
		resp.Truncate(clientSize(req))
	}
	_ = w.WriteMsg(resp)
}

// clientSize is the largest UDP answer req's sender accepts.
func clientSize(req *dns.Msg) int {
	if opt := req.IsEdns0(); opt != nil {
		return max(dns.MinMsgSize, min(int(opt.UDPSize()), clientUDPSize))
	}
	return dns.MinMsgSize
}

// forwardedType reports whether queries of type t are forwarded for an
// allowed name: what a client needs to connect to it.
func forwardedType(t uint16) bool {
	switch t {
	case dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypeHTTPS, dns.TypeSVCB:
		return true
	}
	return false
}

// answer decides req and returns the answer to send, nil for none (a
// message that is not a query).
func (g *Guard) answer(req *dns.Msg, transport string) *dns.Msg {
	m := g.opts.Metrics
	if req.Response {
		return nil
	}
	if req.Opcode != dns.OpcodeQuery {
		m.Error.Inc()
		return g.local(req, dns.RcodeNotImplemented)
	}
	opt, ok := onlyOPT(req)
	if !ok || len(req.Question) != 1 || len(req.Answer) != 0 || len(req.Ns) != 0 {
		m.Error.Inc()
		return g.local(req, dns.RcodeFormatError)
	}
	if opt != nil && opt.Version() != 0 {
		m.Error.Inc()
		return g.local(req, dns.RcodeBadVers)
	}
	q := req.Question[0]
	qtype := dns.TypeToString[q.Qtype]
	if insp := g.opts.NameInspector; insp != nil && insp(q.Name) {
		m.Denied.Inc()
		g.logDecision("", qtype, transport, telemetry.DNSReasonInspector)
		return g.local(req, dns.RcodeNameError)
	}
	if q.Qclass != dns.ClassINET {
		m.Denied.Inc()
		g.logDecision(q.Name, qtype, transport, telemetry.DNSReasonType)
		return g.local(req, dns.RcodeRefused)
	}

	gen := g.opts.Policies.Load()
	name, rule, allowed := decideName(gen.Policy, q.Name)
	if !allowed {
		if !gen.Report || name == "" {
			m.Denied.Inc()
			g.logDecision(q.Name, qtype, transport, telemetry.DNSReasonNotAllowed)
			return g.local(req, dns.RcodeNameError)
		}
		g.logDecision(q.Name, qtype, transport, telemetry.DNSReasonReport)
	}
	if !forwardedType(q.Qtype) {
		m.Denied.Inc()
		g.logDecision(q.Name, qtype, transport, telemetry.DNSReasonType)
		return g.local(req, dns.RcodeSuccess)
	}

	var do bool
	if opt != nil {
		do = opt.Do()
	}
	key := cacheKey{name: name, qtype: q.Qtype, do: do, cd: req.CheckingDisabled}
	up, expires, err := g.resolve(key)
	if err != nil {
		m.Error.Inc()
		return g.local(req, dns.RcodeServerFailure)
	}
	m.Forwarded.Inc()
	return g.reply(req, up, expires, rule, do)
}

// decideName canonicalises a query name and asks the policy. name is the
// canonical name to forward ("" when the query name cannot be forwarded at
// all: it does not canonicalise to itself, or it is an IP literal).
func decideName(p *policy.Policy, qname string) (name string, rule *policy.Rule, allowed bool) {
	raw := strings.TrimSuffix(qname, ".")
	canon, err := hostport.ParseHost(raw)
	// What leaves must be exactly what the policy judged: a name that
	// canonicalises to something else than its own lower-case form (escaped
	// bytes, IDNA mappings) is refused rather than rewritten.
	if err != nil || canon != strings.ToLower(raw) || canon == "" {
		return "", nil, false
	}
	if _, err := netip.ParseAddr(canon); err == nil {
		return "", nil, false
	}
	rule, allowed = p.NameRule(canon)
	return canon, rule, allowed
}

// onlyOPT returns the request's OPT record; ok is false when the
// additional section holds anything else or more than one record.
func onlyOPT(req *dns.Msg) (opt *dns.OPT, ok bool) {
	switch len(req.Extra) {
	case 0:
		return nil, true
	case 1:
		opt, ok = req.Extra[0].(*dns.OPT)
		return opt, ok
	}
	return nil, false
}

// local builds an answer without upstream: rcode, the client's question,
// no records, and an OPT record when the client sent one.
func (g *Guard) local(req *dns.Msg, rcode int) *dns.Msg {
	resp := new(dns.Msg)
	resp.Id = req.Id
	resp.Response = true
	resp.Opcode = req.Opcode
	resp.RecursionDesired = req.RecursionDesired
	resp.RecursionAvailable = true
	if len(req.Question) == 1 {
		resp.Question = []dns.Question{req.Question[0]}
	}
	resp.Rcode = rcode
	if opt, _ := onlyOPT(req); opt != nil || rcode > 0xF {
		do := opt != nil && opt.Do()
		resp.SetEdns0(clientUDPSize, do)
	}
	return resp
}

// logDecision writes the decision line of a query answered locally (or
// forwarded by report mode), subject to the log rate limit. name is ""
// when it must not be logged.
func (g *Guard) logDecision(name, qtype, transport, reason string) {
	ok, suppressed := g.limiter.allow()
	if suppressed > 0 {
		g.logSuppressed(suppressed)
	}
	if !ok {
		return
	}
	decision := telemetry.DecisionDeny
	if reason == telemetry.DNSReasonReport {
		decision = telemetry.DecisionReportDeny
	}
	attrs := []slog.Attr{
		slog.String(telemetry.KeyDecision, decision),
		slog.String(telemetry.KeyReason, reason),
		slog.String(telemetry.KeyQType, qtype),
		slog.String(telemetry.KeyTransport, transport),
	}
	if name != "" {
		// A DNS name is at most 255 octets in wire form; its presentation
		// form, with \DDD escapes, stays below 1024 bytes.
		attrs = append(attrs, slog.String(telemetry.KeyHost, name))
	}
	g.log.LogAttrs(context.Background(), slog.LevelInfo, "dns decision", attrs...)
}

// logForeignPeer writes the line of a query dropped for its source,
// subject to the log rate limit shared with the decision lines. The name
// is not logged: it is whatever the sender wanted carried out.
func (g *Guard) logForeignPeer(peer netip.Addr, transport string) {
	ok, suppressed := g.limiter.allow()
	if suppressed > 0 {
		g.logSuppressed(suppressed)
	}
	if !ok {
		return
	}
	g.log.LogAttrs(context.Background(), slog.LevelWarn, "dns query from a source outside the Pod dropped",
		slog.String(telemetry.KeyDecision, telemetry.DecisionDeny),
		slog.String(telemetry.KeyReason, telemetry.DNSReasonForeignPeer),
		slog.String(telemetry.KeyTransport, transport),
		slog.String(telemetry.KeyPeer, peer.String()))
}

func (g *Guard) logSuppressed(n int) {
	g.log.LogAttrs(context.Background(), slog.LevelWarn, "dns decision lines suppressed by the log rate limit",
		slog.Int(telemetry.KeySuppressed, n))
}

// Close stops upstream waits in progress (their queries get SERVFAIL) and
// writes the summary line of decision lines still suppressed.
func (g *Guard) Close() {
	g.cancel()
	if n := g.limiter.flush(); n > 0 {
		g.logSuppressed(n)
	}
}

// Metrics returns the guard's counters.
func (g *Guard) Metrics() *telemetry.DNSMetrics { return g.opts.Metrics }
