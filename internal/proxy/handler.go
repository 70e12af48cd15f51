package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/generation"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/policy"
	"github.com/botbox/botbox/internal/reqpath"
	"github.com/botbox/botbox/internal/rewrite"
	"github.com/botbox/botbox/internal/scrub"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/upstream"
)

var (
	_ http.ResponseWriter = (*countingWriter)(nil)
	_ http.Hijacker       = (*countingWriter)(nil)
	_ net.Conn            = (*tunnelConn)(nil)
)

// SecretSource gives one immutable snapshot of the secrets per request, so
// that every header of a request is filled from the same generation even
// while a rotation is being loaded.
type SecretSource interface {
	Snapshot() *secrets.Snapshot
}

// Listener names, used in logs and metric labels (defined once, in telemetry).
const (
	ListenerHTTP  = telemetry.ListenerHTTP
	ListenerHTTPS = telemetry.ListenerHTTPS
)

// Options configures New.
type Options struct {
	// Config is the validated configuration (timeouts; and the policy when
	// Generation is nil).
	Config *config.Config
	// Generation is the policy generation in force, shared with the
	// interception authorizer and read once per request (nil: New compiles
	// Config into a Current of its own).
	Generation *generation.Current
	// Secrets supplies secret snapshots.
	Secrets SecretSource
	// Transport performs upstream round trips (package upstream builds it).
	Transport http.RoundTripper
	// Metrics receives the reference's metrics.
	Metrics *telemetry.Metrics
	// Logger receives the canonical decision lines.
	Logger *slog.Logger
	// Now is the clock of durations and of the repeated-denial window
	// (default time.Now). Tunnel idle timeouts use the runtime's timers.
	Now func() time.Time
	// ConnectTLS turns on CONNECT interception on the plain listener (an
	// agent with HTTPS_PROXY set): it returns a fresh TLS server
	// configuration that issues a leaf per SNI (package mitm's
	// Interceptor.TLSConfig, wired by package server), which the tunnel
	// restricts to the CONNECT host. Nil, or a nil result, keeps every
	// CONNECT at 405 (see serveConnect).
	ConnectTLS func() *tls.Config
	// ConnectServer, if set, returns the HTTP server that serves the
	// decrypted stream of one CONNECT tunnel with the handler it is given
	// (package server passes its interception listener's settings: timeouts,
	// HTTP/2 stream cap, request budget, write deadlines). Nil: a server with
	// Config's downstream timeouts. Its TLSConfig is set by the tunnel.
	ConnectServer func(http.Handler) *http.Server
	// Placeholders, if set, turns on the placeholder swap and the tripwire
	// (tripwire.go); nil when placeholders are disabled.
	Placeholders PlaceholderSource
	// Credentials resolves the rules' credentials (credential.go); nil
	// when none is configured (a rule naming one then gets 503).
	Credentials CredentialSource
	// EngineTransport performs the upstream round trips of the requests
	// BotBox's HTTP/1.1 engine serves (relayEngine): the synchronous pool
	// (upstream.Transport.Sync). Nil: Transport.
	EngineTransport http.RoundTripper
}

// Handler is the request pipeline shared by both listeners.
type Handler struct {
	gen        *generation.Current
	secrets    SecretSource
	metrics    *telemetry.Metrics
	logger     *slog.Logger
	now        func() time.Time
	rp         *httputil.ReverseProxy
	tunnelIdle time.Duration
	tunnels    tunnelSet
	repeats    *repeatLog
	connect    connectSetup
	// placeholders is nil when placeholders are off.
	placeholders PlaceholderSource
	credentials  CredentialSource
	scrubs       *scrub.Cache[scrubKey]
	// engineTransport and bufs serve relayEngine.
	engineTransport http.RoundTripper
	bufs            *bufferPool
}

// defaultTunnelIdle applies when Options.Config has no tunnel idle timeout
// (a Config built by hand rather than by config.Parse).
const defaultTunnelIdle = 10 * time.Minute

// New compiles the policy and header templates of opts.Config.
func New(opts Options) (*Handler, error) {
	if opts.Config == nil || opts.Secrets == nil || opts.Transport == nil || opts.Metrics == nil || opts.Logger == nil {
		return nil, errors.New("proxy: Config, Secrets, Transport, Metrics and Logger are required")
	}
	gen := opts.Generation
	if gen == nil {
		var err error
		if gen, err = generation.New(opts.Config); err != nil {
			return nil, err
		}
	}
	h := &Handler{
		gen:        gen,
		secrets:    opts.Secrets,
		metrics:    opts.Metrics,
		logger:     opts.Logger,
		now:        opts.Now,
		tunnelIdle: opts.Config.Timeouts.TunnelIdle,
		connect:    newConnectSetup(opts),

		placeholders: opts.Placeholders,
		credentials:  opts.Credentials,
		scrubs:       scrub.NewCache[scrubKey](scrubCacheSize),
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.tunnelIdle <= 0 {
		h.tunnelIdle = defaultTunnelIdle
	}
	h.repeats = newRepeatLog(opts.Logger, h.now)
	h.bufs = newBufferPool()
	next := opts.EngineTransport
	if next == nil {
		next = opts.Transport
	}
	h.engineTransport = guardedTransport{next: next}
	h.rp = &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { h.rewrite(pr.In, pr.Out) },
		Transport: guardedTransport{next: opts.Transport},
		// Contract: streaming responses (text/event-stream, or no
		// Content-Length: chunked bodies, gRPC) are flushed after every
		// write whatever this value; responses of known length are flushed
		// at least every 50 ms, so a stalled body still reaches the agent
		// (TestKnownLengthBodyFlushedPromptly). Why not -1 (flush every
		// write): that arms an immediate flush timer per response, a second
		// write syscall per small request; numbers in docs/performance.md.
		FlushInterval:  50 * time.Millisecond,
		ErrorHandler:   h.upstreamError,
		ModifyResponse: h.upstreamResponse,
		ErrorLog:       slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
		BufferPool:     h.bufs,
	}
	return h, nil
}

// Policy returns the policy of the generation currently in force.
func (h *Handler) Policy() *policy.Policy { return h.gen.Load().Policy }

// Plain returns the handler of the plain HTTP listener (transparent
// redirect target and explicit forward proxy).
func (h *Handler) Plain() http.Handler { return http.HandlerFunc(h.servePlain) }

// Intercepted returns the handler of the HTTPS interception listener.
func (h *Handler) Intercepted() http.Handler { return http.HandlerFunc(h.serveIntercepted) }

func (h *Handler) servePlain(w http.ResponseWriter, r *http.Request) {
	x := h.newExchange(ListenerHTTP, w, r)
	defer h.logDecision(r, x)

	if r.Method == http.MethodConnect {
		// Served only with interception (TLS ended inside the tunnel);
		// otherwise 405 naming the target. See serveConnect.
		h.serveConnect(w, r, x)
		return
	}
	if r.RequestURI == "*" || (r.URL.Host == "" && !strings.HasPrefix(r.RequestURI, "/")) ||
		(r.ProtoMajor == 2 && !strings.HasPrefix(r.RequestURI, "/")) {
		// Asterisk-form and other non-origin forms have no path to forward
		// (the reference answered 500 here, §10.3 #15). HTTP/2 has no
		// absolute-form: the host is :authority (r.Host), and a :path
		// naming another would be a second destination.
		h.reject(x, http.StatusBadRequest, bodyInvalidTarget, telemetry.DecisionDeniedNoHost, reasonInvalidTarget)
		return
	}
	if r.URL.User != nil {
		// userinfo in an absolute-form target is a classic parser-confusion trick.
		x.host = r.URL.Host
		h.reject(x, http.StatusBadRequest, bodyInvalidHost, telemetry.DecisionDeniedNoHost, reasonInvalidHost)
		return
	}
	// Go's server sets r.Host from the absolute-form authority when present,
	// otherwise from the Host header: the reference's host source (§3.1).
	raw := r.Host
	if strings.TrimSpace(raw) == "" {
		h.reject(x, http.StatusBadRequest, bodyMissingHost, telemetry.DecisionDeniedNoHost, reasonMissingHost)
		return
	}
	hp, err := hostport.Parse(raw)
	if err != nil {
		x.host = raw
		h.reject(x, http.StatusBadRequest, bodyInvalidHost, telemetry.DecisionDeniedNoHost, reasonInvalidHost)
		return
	}
	g := h.gen.Load()
	h.forward(r, x, plainDefaultPort(hp, g.Policy), g)
}

// plainDefaultPort makes an explicit :80 on the plain listener mean what
// no port means there (the request is evaluated, and sent over TLS, as
// port 443): http://host:80/ is http://host/ to every HTTP client, and
// grpc-go sends ":authority host:80" for grpc.Dial("host:80"). The
// reference refused it as port_not_allowed; a documented difference
// (docs/differences.md). For a rule with upstream_tls: false it is the
// other way round: its origin really speaks plain HTTP, so :80 stays, and
// no port means 80 too, the port an http:// URL without one names (the
// cluster suite's in-cluster origin found a transparently redirected
// `http://svc/` refused as port 443 before). TestPlainListenerPort80.
func plainDefaultPort(hp hostport.HostPort, p *policy.Policy) hostport.HostPort {
	if hp.HasPort && hp.Port != 80 {
		return hp
	}
	if r := p.RuleForName(hp.Host); r != nil && r.PlainHTTP {
		return hostport.HostPort{Host: hp.Host, Port: 80, HasPort: true}
	}
	return hostport.HostPort{Host: hp.Host}
}

func (h *Handler) serveIntercepted(w http.ResponseWriter, r *http.Request) {
	h.serveTLS(ListenerHTTPS, w, r)
}

// serveTLS is the pipeline of a request on a connection whose TLS BotBox
// ended: the interception listener's, and a CONNECT tunnel's (listener
// ListenerConnect), where the SNI/Host match is always enforced.
func (h *Handler) serveTLS(listener string, w http.ResponseWriter, r *http.Request) {
	x := h.newExchange(listener, w, r)
	defer h.logDecision(r, x)

	// Reference §3.2 step 4, in order.
	if r.Method == http.MethodConnect || r.URL.Scheme != "" || r.URL.Host != "" || !strings.HasPrefix(r.RequestURI, "/") {
		// Only origin-form belongs on a TLS connection to "the origin";
		// anything else tries to pick a second destination.
		x.setHostGiven(r.Host)
		h.reject(x, http.StatusBadRequest, bodyAbsoluteForm, telemetry.DecisionDeniedAbsoluteForm, reasonAbsoluteForm)
		return
	}
	hp, err := hostport.Parse(r.Host)
	if r.Host == "" || err != nil {
		x.host = r.Host
		h.reject(x, http.StatusBadRequest, bodyMissingHostHdr, telemetry.DecisionDeniedNoHost, reasonMissingHost)
		return
	}
	x.host, x.port = hp.Host, hp.PortOr(443)
	if hp.HasPort && hp.Port != 443 {
		// The connection was redirected from port 443; another port would
		// reach a destination the agent never connected to.
		h.reject(x, http.StatusForbidden, bodyInterceptPort, telemetry.DecisionDeniedPort, reasonInterceptPort)
		return
	}
	g := h.gen.Load()
	if g.Interception.EnforceSNIHostMatch || listener == ListenerConnect {
		sni := ""
		if r.TLS != nil {
			sni = r.TLS.ServerName
		}
		if canon, err := hostport.ParseHost(sni); err != nil || canon != hp.Host {
			h.metrics.HostMismatch.Inc()
			h.reject(x, http.StatusBadRequest, bodySNIHostMismatch, telemetry.DecisionDeniedHostMismatch, reasonSNIHostMismatch)
			return
		}
	}
	h.forward(r, x, hp, g)
}

// reject answers a request the pipeline refused before any upstream work.
func (h *Handler) reject(x *exchange, status int, body, decision, reason string) {
	x.decision, x.reason, x.status = decision, reason, status
	if x.hostLabel == "" {
		x.hostLabel = telemetry.HostUnknown
	}
	writePlain(&x.cw, status, body, reason)
}

// forward decides with generation g (loaded once for the whole request)
// and, when allowed, hands the request to the reverse proxy.
func (h *Handler) forward(r *http.Request, x *exchange, hp hostport.HostPort, g *generation.Generation) {
	x.gen = g
	x.host = hp.Host
	x.port = hp.PortOr(443)
	// The escaped path, the spelling the origin would receive: a rule with
	// routes judges its canonical form, and that form is forwarded.
	path := escapedPath(r)
	d := g.Policy.Decide(policy.Target{Host: hp, Method: r.Method, Path: path, Override: reqpath.Override(r.Header, r.URL.RawQuery)})
	if d.Rule != nil {
		x.rule = d.Rule.Host
	}
	x.route = d.Route + 1
	// The canonical path a rule with routes judged is the one forwarded,
	// in report mode too.
	x.path = d.Path
	if h.tripHead(r, x, hp, g, d) {
		return
	}
	if !d.Allowed() && g.Report {
		h.forwardReport(r, x, hp, string(d.Reason), dialPolicy(g, d, hp.Host))
		return
	}
	if !d.Allowed() {
		x.hostLabel = telemetry.HostDenied
		switch d.Reason {
		case policy.ReasonAmbiguousPath:
			// Refused before any route is tried (package reqpath).
			h.reject(x, http.StatusBadRequest, bodyAmbiguousPath, telemetry.DecisionDeniedPath, string(d.Reason))
		case policy.ReasonMethodOverride:
			// A method or path override the origin may obey (reqpath.Override).
			h.reject(x, http.StatusBadRequest, bodyMethodOverride, telemetry.DecisionDeniedRoute, string(d.Reason))
		case policy.ReasonRouteDeny, policy.ReasonNoRoute:
			h.reject(x, http.StatusForbidden, bodyRouteDenied, telemetry.DecisionDeniedRoute, string(d.Reason))
		case policy.ReasonPortNotAllowed:
			// The reference's body, then what it does not say: the host is
			// allowed, the port is not (TestDecisionLines).
			h.reject(x, http.StatusForbidden, bodyDenied+"\n"+hintPortNotAllowed+"\n", telemetry.DecisionDeny, string(d.Reason))
		default:
			// d.Reason tells the agent which fix applies: rule_deny,
			// default_deny.
			h.reject(x, http.StatusForbidden, bodyDenied, telemetry.DecisionDeny, string(d.Reason))
		}
		return
	}
	if (addsToRequest(g.Rewrites(d)) || d.Allowed() && d.Rule != nil && d.Rule.Credential != "") && (reflectsRequest(r.Method) || reqpath.OverridesTo(r.Header, r.URL.RawQuery, reflectsRequest)) {
		x.hostLabel = telemetry.HostDenied
		h.reject(x, http.StatusForbidden, bodyTraceCredential, telemetry.DecisionDeny, reasonTraceCredential)
		return
	}
	if !h.admitLimits(r, x, g, d) {
		return
	}
	if !h.admitUpgrade(r, x) {
		x.hostLabel = telemetry.HostDenied
		h.reject(x, http.StatusBadRequest, bodyUpgrade, telemetry.DecisionDeniedUpgrade, reasonUpgrade)
		return
	}
	if h.tripBody(r, x, d) {
		return
	}
	x.decision, x.reason = telemetry.DecisionAllow, string(d.Reason)
	if d.Rule != nil {
		x.hostLabel = d.Rule.Host
		x.rewrites = g.Rewrites(d)
		x.scrubOn = d.Rule.ScrubResponses && (d.Rule.ScrubAlways || d.Rule.InjectsSecret())
	} else {
		x.hostLabel = telemetry.HostDefaultAllow
	}
	x.hm = h.metrics.ForHost(x.hostLabel)
	if r.Header.Get("Upgrade") != "" {
		// What the tunnel is re-decided on at reload, and the limits it
		// carries if the origin switches protocols.
		x.upgradeTarget = tunnelTarget{host: hp, method: r.Method, path: path}
		x.upgradeLimits = newTunnelLimits(g, g.Limits(d))
	}
	dp := dialPolicy(g, d, hp.Host)
	x.setUpstream(hp, d, dp)
	if x.rewrites != nil || x.scrubOn || d.Rule != nil && d.Rule.Credential != "" {
		x.secrets = h.secrets.Snapshot()
	}
	var maxBody int64
	if l := g.Limits(d); l != nil {
		maxBody = l.MaxBodyBytes
	}
	if !h.admitCopySource(r, x, hp, g, d) || !h.prepareCredential(r, x, d, dp.Cleartext, maxBody) {
		return
	}
	// GotConn runs for new and reused connections alike, HTTP/1 and
	// HTTP/2, on the goroutine that calls RoundTrip (this one).
	x.trace.GotConn = x.gotConn
	ctx := httptrace.WithClientTrace(context.WithValue(r.Context(), exchangeKey{}, x), &x.trace)
	// The address guard judges this request's dials with its generation's
	// guard and its rule's exceptions.
	ctx = upstream.WithDialPolicy(ctx, dp)
	if t := g.ResponseHeaderTimeout(d); t > 0 { // the rule's response_header_timeout_ms
		ctx = upstream.WithResponseHeaderTimeout(ctx, t)
	}
	h.relay(x, r.WithContext(ctx))
}

// rewrite builds the outbound request. It runs after ReverseProxy removed
// the hop-by-hop headers (including those named in Connection), so nothing
// the client names in Connection can strip what is added here.
func (h *Handler) rewrite(in, out *http.Request) {
	x := exchangeFrom(in.Context())
	out.URL.Scheme = "https"
	if x.cleartext {
		out.URL.Scheme = "http"
	}
	out.URL.Host = x.authority
	out.URL.User = nil
	switch {
	case x.path != "":
		// The canonical path the routes judged, and nothing else: Path is
		// its decoded form, RawPath the exact bytes sent (EscapedPath
		// returns RawPath since it is a valid encoding of Path).
		// TestRouteForwardsCanonicalPath holds it.
		if p, err := url.PathUnescape(x.path); err == nil {
			out.URL.Path, out.URL.RawPath = p, x.path
		} else {
			x.rewriteErr = fmt.Errorf("proxy: canonical path %q does not unescape: %w", x.path, err)
		}
	case out.URL.Path == "" && out.URL.RawPath == "":
		out.URL.Path = "/"
	}
	out.Host = x.authority
	// Request trailers are never forwarded, names or values: they arrive
	// after the body, when the tripwire, the override check and the
	// rewrites have already judged the request, so nothing there is
	// judged (TestRequestTrailersNeverForwarded).
	out.Trailer = nil
	if x.agentH2 && out.Body != nil {
		// The transport's Close of the body ends the agent's (outboundBody).
		x.ob.ReadCloser, x.ob.x = out.Body, x
		out.Body = &x.ob
	}
	// No X-Forwarded-*: the origin must not learn the Pod's internals, and
	// the reference adds none.
	if x.rewrites == nil {
		if x.scrubOn {
			h.prepareScrub(x, out)
		}
		x.applyCredential(out)
		return
	}
	// The query first: ApplyQuery changes nothing on error, and the
	// header Apply leaves the header unchanged on error; either error
	// refuses the request in guardedTransport, nothing is forwarded.
	q, params, err := x.rewrites.ApplyQuery(out.URL.RawQuery, x.secrets)
	if err != nil {
		x.rewriteErr = err
		return
	}
	names, err := x.rewrites.Apply(out.Header, x.secrets)
	if err != nil {
		x.rewriteErr = err
		return
	}
	if params != nil {
		out.URL.RawQuery, out.URL.ForceQuery = q, false
		x.queryRewritten = params
	}
	x.rewritten = names
	if x.scrubOn {
		h.prepareScrub(x, out)
	}
	x.applyCredential(out)
	if len(names) > 0 {
		// Counted here, where the decision line's header_rewritten is
		// decided, so that the metric and the log agree even when the
		// upstream then fails (TestHeaderRewriteMetricMatchesLog).
		x.hm.HeaderRewrites.Inc()
	}
}

// guardedTransport refuses to send a request whose rewrite failed: the
// fail-closed gate between the pipeline and the network.
type guardedTransport struct{ next http.RoundTripper }

var _ http.RoundTripper = guardedTransport{}

func (g guardedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if x := exchangeFrom(req.Context()); x == nil || x.rewriteErr != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		if x == nil {
			return nil, errors.New("proxy: request without pipeline state")
		}
		return nil, x.rewriteErr
	}
	return g.next.RoundTrip(req)
}

func (h *Handler) observeDuration(x *exchange) {
	if x.timerDone {
		return
	}
	x.timerDone = true
	x.hm.Duration.Observe(h.now().Sub(x.start).Seconds())
}

func (h *Handler) upstreamResponse(resp *http.Response) error {
	x := exchangeFrom(resp.Request.Context())
	x.upstreamCode = resp.StatusCode
	x.hm.UpstreamStatus(resp.StatusCode)
	h.observeDuration(x)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// ReverseProxy needs the body's io.ReadWriteCloser for the tunnel;
		// the tunnel's bytes are counted on the agent's side (tunnelConn).
		if x.scrub != nil {
			return x.scrub.scrubResponse(resp)
		}
		return nil
	}
	// Large HTTP/2 bodies: one flow-control update per 256 KiB instead of
	// per 32 KiB (see coalescingBody).
	if resp.ProtoMajor == 2 && resp.ContentLength >= coalesceMinBody {
		resp.Body = newCoalescingBody(resp.Body)
	}
	if x.scrub != nil {
		// Masks the head, wraps the body (scrub.go); an error is a 502.
		if err := x.scrub.scrubResponse(resp); err != nil {
			return err
		}
	}
	x.ub.ReadCloser, x.ub.x = resp.Body, x
	resp.Body = &x.ub
	return nil
}

func (h *Handler) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	x := exchangeFrom(r.Context())
	f := classify(r.Context(), err)
	h.limitFailure(x, f)
	h.tripFailure(x, f)
	h.observeDuration(x)
	if f.status == 0 {
		// Nobody reads a response; the line still says why.
		h.abort(x, f.reason, err)
		return
	}
	x.reason = f.reason
	x.errText = err.Error()
	if f.upstreamLabel != "" {
		x.hm.UpstreamError(f.upstreamLabel)
	}
	writePlain(w, f.status, f.body, f.reason)
}

// abort records the first failure of an allowed exchange after the
// decision (the origin's body broke, or the agent went away): the decision
// line then carries reason and error and is written at WARN, and
// botbox_requests_aborted_total counts it once. Later failures of the same
// exchange are consequences of the first and are dropped.
func (h *Handler) abort(x *exchange, reason string, err error) {
	if x.aborted {
		return
	}
	if x.ctx.Err() != nil {
		// The read failed because the agent's request was cancelled.
		reason = telemetry.AbortClientClosed
	}
	x.aborted = true
	x.reason = reason
	x.errText = err.Error()
	h.metrics.Aborted.WithLabelValues(x.hostLabel, reason).Inc()
}

// reflectsRequest reports whether an origin answers method with the
// request it received, headers and all: TRACE (RFC 9110 §9.3.8, which
// forbids sending credentials in one) and IIS's TRACK, in any case and
// with surrounding spaces (an origin may compare methods loosely, and
// read an override header's value trimmed). forward also asks it of
// every method override the request carries (reqpath.OverridesTo).
func reflectsRequest(method string) bool {
	method = strings.TrimSpace(method)
	return strings.EqualFold(method, "TRACE") || strings.EqualFold(method, "TRACK")
}

// addsToRequest reports whether set puts anything of BotBox's into a
// request: a header rewrite (secret or static) or a query rewrite. A
// request that carries none of it holds only the agent's own bytes.
// forward refuses a reflecting method (reflectsRequest) to such a rule,
// in report mode too: the response would carry the credential back
// (TestTraceNeverCarriesCredential).
func addsToRequest(set *rewrite.Set) bool {
	return set.Len() > 0 || len(set.QueryNames()) > 0
}

// escapedPath is the request's escaped path, "/" when empty (what rewrite
// forwards for an empty path): the spelling routes judge.
func escapedPath(r *http.Request) string {
	if p := r.URL.EscapedPath(); p != "" {
		return p
	}
	return "/"
}

// dialPolicy is what the address guard needs to judge the dials of a
// request decided d under generation g for host: the generation's guard
// (or none when address_guard is disabled) and the exceptions of the rule
// that allowed it (none for a default allow or a denial).
// Cleartext is set when the rule that names the host has upstream_tls:
// false (allowed or, in report mode, forwarded without credentials).
func dialPolicy(g *generation.Generation, d policy.Decision, host string) upstream.DialPolicy {
	return upstream.DialPolicy{Host: host, Guard: g.AddrGuard, Opts: g.AddrOpts(d), Unguarded: g.AddrGuardOff,
		Cleartext: d.Rule != nil && d.Rule.Action == config.ActionAllow && d.Rule.PlainHTTP}
}

// setUpstream sets where x goes. TLS: hp's authority, 443 implied and
// omitted like the reference (§3.3 step 7). Plain HTTP (dp.Cleartext): the
// port the policy evaluated, always written out (443 when the request had
// none), so the connection goes to exactly the port the rule allowed.
func (x *exchange) setUpstream(hp hostport.HostPort, d policy.Decision, dp upstream.DialPolicy) {
	x.cleartext = dp.Cleartext
	if !x.cleartext {
		x.authority = hp.Authority(443)
		return
	}
	port := d.Port
	if port == 0 {
		port = hp.PortOr(443)
	}
	x.authority = hostport.HostPort{Host: hp.Host, Port: port, HasPort: true}.Authority(0)
}
