package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/policy"
	"github.com/botbox/botbox/internal/rewrite"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/upstream"
)

// SecretSource gives one immutable snapshot of the secrets per request, so
// that every header of a request is filled from the same generation even
// while a rotation is being loaded.
type SecretSource interface {
	Snapshot() *secrets.Snapshot
}

// Listener names, used in logs.
const (
	ListenerHTTP  = "http"
	ListenerHTTPS = "https"
)

// Options configures New.
type Options struct {
	// Config is the validated configuration (policy, interception flags).
	Config *config.Config
	// Secrets supplies secret snapshots.
	Secrets SecretSource
	// Transport performs upstream round trips (package upstream builds it).
	Transport http.RoundTripper
	// Metrics receives the reference's metrics.
	Metrics *telemetry.Metrics
	// Logger receives the canonical decision lines.
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// compiled is one immutable generation of everything a request decides
// with. A later policy reload swaps the pointer; a request keeps the
// generation it started with.
type compiled struct {
	policy   *policy.Policy
	rewrites []*rewrite.Set // by rule index; nil when a rule has none
	// logNames and logRefs are, by rule index, the rewrites' header names
	// and secret refs as the log line's []string values, boxed once here:
	// Set.Names and Set.SecretRefs return fresh copies, and boxing a slice
	// into slog.Any allocates, three allocations per logged request.
	// Read-only after compile.
	logNames, logRefs []any
}

// Handler is the request pipeline shared by both listeners.
type Handler struct {
	state     atomic.Pointer[compiled]
	secrets   SecretSource
	metrics   *telemetry.Metrics
	logger    *slog.Logger
	now       func() time.Time
	rp        *httputil.ReverseProxy
	intercept config.Interception
}

// New compiles the policy and header templates of opts.Config.
func New(opts Options) (*Handler, error) {
	if opts.Config == nil || opts.Secrets == nil || opts.Transport == nil || opts.Metrics == nil || opts.Logger == nil {
		return nil, errors.New("proxy: Config, Secrets, Transport, Metrics and Logger are required")
	}
	c, err := compile(opts.Config.Policy)
	if err != nil {
		return nil, err
	}
	h := &Handler{
		secrets:   opts.Secrets,
		metrics:   opts.Metrics,
		logger:    opts.Logger,
		now:       opts.Now,
		intercept: opts.Config.Interception,
	}
	if h.now == nil {
		h.now = time.Now
	}
	h.state.Store(c)
	h.rp = &httputil.ReverseProxy{
		Rewrite:   h.rewrite,
		Transport: guardedTransport{next: opts.Transport},
		// Streaming responses (text/event-stream, or no Content-Length:
		// chunked bodies, gRPC) are flushed after every write whatever this
		// value, so SSE and chunked bodies reach the agent as produced.
		// Responses of known length are flushed at least every 50 ms. It was
		// -1 (flush every write of every response): ReverseProxy then arms
		// an immediate timer per response whose goroutine often flushed the
		// head alone, a second write syscall per request; the goroutine,
		// timer and flush cost 7-10% of the CPU per small request
		// (docs/performance.md). TestKnownLengthBodyFlushedPromptly holds
		// the bound.
		FlushInterval:  50 * time.Millisecond,
		ErrorHandler:   h.upstreamError,
		ModifyResponse: h.upstreamResponse,
		ErrorLog:       slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
		BufferPool:     newBufferPool(),
	}
	return h, nil
}

func compile(p config.Policy) (*compiled, error) {
	pol, err := policy.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("compiling egress policy: %w", err)
	}
	n := len(p.Rules)
	c := &compiled{policy: pol, rewrites: make([]*rewrite.Set, n), logNames: make([]any, n), logRefs: make([]any, n)}
	for i, r := range p.Rules {
		if len(r.HeaderRewrites) == 0 && len(r.RemoveHeaders) == 0 {
			continue
		}
		s, err := rewrite.CompileRule(r)
		if err != nil {
			return nil, fmt.Errorf("egress_policy.rules[%d] (%s): %w", i, r.Host, err)
		}
		c.rewrites[i] = s
		c.logNames[i], c.logRefs[i] = s.Names(), s.SecretRefs()
	}
	return c, nil
}

// Policy returns the policy generation currently in force.
func (h *Handler) Policy() *policy.Policy { return h.state.Load().policy }

// Plain returns the handler of the plain HTTP listener (transparent
// redirect target and explicit forward proxy).
func (h *Handler) Plain() http.Handler { return http.HandlerFunc(h.servePlain) }

// Intercepted returns the handler of the HTTPS interception listener.
func (h *Handler) Intercepted() http.Handler { return http.HandlerFunc(h.serveIntercepted) }

// exchange is the per-request record: what was decided and what happened,
// written once as the canonical log line.
//
// It is also the context of the forwarded request (it embeds the server's
// request context and answers Value(exchangeKey{}) with itself), and holds
// the counting response writer and request body: one allocation instead of
// four (context.WithValue, the exchange, the writer, the body).
// Cancellation, deadline and every other value come from the embedded
// context unchanged.
type exchange struct {
	context.Context
	cw           countingWriter
	cb           countingBody
	id           string
	listener     string
	start        time.Time
	host         string // canonical host, "" when unknown
	port         uint16
	hostLabel    string // closed-set metrics label
	hm           *telemetry.HostMetrics
	decision     string
	reason       string
	rule         string
	authority    string // upstream authority, e.g. "api.openai.com" or "[::1]:8443"
	rewrites     *rewrite.Set
	logNames     any // c.logNames of the rule ([]string, shared, read-only)
	logRefs      any // c.logRefs of the rule
	secrets      *secrets.Snapshot
	rewritten    []string
	rewriteErr   error
	upstreamCode int
	status       int
	errText      string
	timerDone    bool
}

type exchangeKey struct{}

// Value returns x for exchangeKey{} and defers to the request context for
// every other key.
func (x *exchange) Value(key any) any {
	if _, ok := key.(exchangeKey); ok {
		return x
	}
	return x.Context.Value(key)
}

func exchangeFrom(ctx context.Context) *exchange {
	x, _ := ctx.Value(exchangeKey{}).(*exchange)
	return x
}

func (h *Handler) newExchange(listener string) *exchange {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // UUID v4, as the reference's request ids
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return &exchange{id: string(s[:]), listener: listener, start: h.now()}
}

func (h *Handler) servePlain(w http.ResponseWriter, r *http.Request) {
	x := h.newExchange(ListenerHTTP)
	x.Context, x.cw.ResponseWriter = r.Context(), w
	cw := &x.cw
	cb := countBody(r, &x.cb)
	defer func() { h.logDecision(r, x, cw, cb) }()

	if r.Method == http.MethodConnect {
		// A CONNECT tunnel would carry bytes BotBox cannot inspect or inject into.
		h.reject(cw, x, http.StatusMethodNotAllowed, bodyConnect, telemetry.DecisionDeniedConnect, "connect")
		return
	}
	if r.RequestURI == "*" || (r.URL.Host == "" && !strings.HasPrefix(r.RequestURI, "/")) {
		// Asterisk-form and other non-origin forms have no path to forward
		// (the reference answered 500 here, §10.3 #15).
		h.reject(cw, x, http.StatusBadRequest, bodyInvalidTarget, telemetry.DecisionDeniedNoHost, "invalid_target")
		return
	}
	if r.URL.User != nil {
		// userinfo in an absolute-form target is a classic parser-confusion trick.
		h.reject(cw, x, http.StatusBadRequest, bodyInvalidHost, telemetry.DecisionDeniedNoHost, "invalid_host")
		return
	}
	// Go's server sets r.Host from the absolute-form authority when present,
	// otherwise from the Host header: the reference's host source (§3.1).
	raw := r.Host
	if strings.TrimSpace(raw) == "" {
		h.reject(cw, x, http.StatusBadRequest, bodyMissingHost, telemetry.DecisionDeniedNoHost, "missing_host")
		return
	}
	hp, err := hostport.Parse(raw)
	if err != nil {
		h.reject(cw, x, http.StatusBadRequest, bodyInvalidHost, telemetry.DecisionDeniedNoHost, "invalid_host")
		return
	}
	h.forward(cw, r, x, hp)
}

func (h *Handler) serveIntercepted(w http.ResponseWriter, r *http.Request) {
	x := h.newExchange(ListenerHTTPS)
	x.Context, x.cw.ResponseWriter = r.Context(), w
	cw := &x.cw
	cb := countBody(r, &x.cb)
	defer func() { h.logDecision(r, x, cw, cb) }()

	// Reference §3.2 step 4, in order.
	if r.Method == http.MethodConnect || r.URL.Scheme != "" || r.URL.Host != "" || !strings.HasPrefix(r.RequestURI, "/") {
		// Only origin-form belongs on a TLS connection to "the origin";
		// anything else tries to pick a second destination.
		h.reject(cw, x, http.StatusBadRequest, bodyAbsoluteForm, decisionDeniedAbsoluteForm, "absolute_form")
		return
	}
	hp, err := hostport.Parse(r.Host)
	if r.Host == "" || err != nil {
		h.reject(cw, x, http.StatusBadRequest, bodyMissingHostHdr, telemetry.DecisionDeniedNoHost, "missing_host")
		return
	}
	x.host = hp.Host
	if hp.HasPort && hp.Port != 443 {
		// The connection was redirected from port 443; another port would
		// reach a destination the agent never connected to.
		h.reject(cw, x, http.StatusForbidden, bodyInterceptPort, decisionDeniedPort, "intercept_port")
		return
	}
	if h.intercept.EnforceSNIHostMatch {
		sni := ""
		if r.TLS != nil {
			sni = r.TLS.ServerName
		}
		if canon, err := hostport.ParseHost(sni); err != nil || canon != hp.Host {
			h.metrics.HostMismatch.Inc()
			h.reject(cw, x, http.StatusBadRequest, bodySNIHostMismatch, decisionDeniedHostMismatch, "sni_host_mismatch")
			return
		}
	}
	h.forward(cw, r, x, hp)
}

// reject answers a request the pipeline refused before any upstream work.
func (h *Handler) reject(w http.ResponseWriter, x *exchange, status int, body, decision, reason string) {
	x.decision, x.reason, x.status = decision, reason, status
	if x.hostLabel == "" {
		x.hostLabel = telemetry.HostUnknown
	}
	h.metrics.Requests.WithLabelValues(x.hostLabel, decision).Inc()
	writePlain(w, status, body)
}

func (h *Handler) forward(w *countingWriter, r *http.Request, x *exchange, hp hostport.HostPort) {
	c := h.state.Load()
	x.host = hp.Host
	x.port = hp.PortOr(443)
	d := c.policy.Decide(policy.Target{Host: hp, Method: r.Method, Path: r.URL.Path})
	x.reason = string(d.Reason)
	if d.Rule != nil {
		x.rule = d.Rule.Host
	}
	if !d.Allowed() {
		x.hostLabel = telemetry.HostDenied
		h.reject(w, x, http.StatusForbidden, bodyDenied, telemetry.DecisionDeny, string(d.Reason))
		x.reason = string(d.Reason)
		return
	}
	x.decision = telemetry.DecisionAllow
	if d.Rule != nil {
		x.hostLabel = d.Rule.Host
		x.rewrites = c.rewrites[d.Rule.Index]
		x.logNames, x.logRefs = c.logNames[d.Rule.Index], c.logRefs[d.Rule.Index]
		if t := d.Rule.ResponseHeaderTimeout; t > 0 {
			x.Context = upstream.WithResponseHeaderTimeout(x.Context, t)
		}
	} else {
		x.hostLabel = telemetry.HostDefaultAllow
	}
	x.hm = h.metrics.ForHost(x.hostLabel)
	x.hm.Requests.Inc()
	// Upstream is always TLS; 443 is implied and omitted like the reference (§3.3 step 7).
	x.authority = hp.Authority(443)
	if x.rewrites != nil {
		x.secrets = h.secrets.Snapshot()
	}
	h.rp.ServeHTTP(w, r.WithContext(x))
}

// rewrite builds the outbound request. It runs after ReverseProxy removed
// the hop-by-hop headers (including those named in Connection), so nothing
// the client names in Connection can strip what is added here.
func (h *Handler) rewrite(pr *httputil.ProxyRequest) {
	x := exchangeFrom(pr.In.Context())
	out := pr.Out
	out.URL.Scheme = "https"
	out.URL.Host = x.authority
	out.URL.User = nil
	if out.URL.Path == "" && out.URL.RawPath == "" {
		out.URL.Path = "/"
	}
	out.Host = x.authority
	// No X-Forwarded-*: the origin must not learn the Pod's internals, and
	// the reference adds none.
	if x.rewrites == nil {
		return
	}
	names, err := x.rewrites.Apply(out.Header, x.secrets)
	if err != nil {
		// guardedTransport refuses the request; nothing is forwarded.
		x.rewriteErr = err
		return
	}
	x.rewritten = names
}

// guardedTransport refuses to send a request whose rewrite failed: the
// fail-closed gate between the pipeline and the network.
type guardedTransport struct{ next http.RoundTripper }

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
	if len(x.rewritten) > 0 {
		x.hm.HeaderRewrites.Inc()
	}
	h.observeDuration(x)
	// Large HTTP/2 bodies: one flow-control update per 256 KiB instead of
	// per 32 KiB (see coalescingBody).
	if resp.ProtoMajor == 2 && resp.ContentLength >= coalesceMinBody {
		resp.Body = newCoalescingBody(resp.Body)
	}
	return nil
}

func (h *Handler) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	x := exchangeFrom(r.Context())
	f := classify(r.Context(), err)
	h.observeDuration(x)
	x.reason = f.reason
	x.errText = errorText(err)
	if f.upstreamLabel != "" {
		x.hm.UpstreamError(f.upstreamLabel)
	}
	if f.status == 0 {
		return
	}
	writePlain(w, f.status, f.body)
}

// errorText is the log form of an upstream error. Rewrite errors carry only
// header names and secret refs by construction; transport errors carry
// addresses, never header values.
func errorText(err error) string {
	s := err.Error()
	if len(s) > 256 {
		s = s[:256]
	}
	return s
}

// logDecision writes the one canonical line of a request.
func (h *Handler) logDecision(r *http.Request, x *exchange, w *countingWriter, in *countingBody) {
	status := w.status
	if status == 0 {
		status = x.status
	}
	level := slog.LevelInfo
	if x.decision != telemetry.DecisionAllow {
		level = slog.LevelWarn
	}
	if !h.logger.Enabled(r.Context(), level) {
		return
	}
	var bytesIn int64
	if in != nil {
		bytesIn = in.n.Load()
	}
	attrs := make([]slog.Attr, 0, 18)
	attrs = append(attrs,
		slog.String(telemetry.KeyRequestID, x.id),
		slog.String(telemetry.KeyListener, x.listener),
		slog.String(telemetry.KeyHost, x.host),
		slog.Int(telemetry.KeyPort, int(x.port)),
		slog.String(telemetry.KeyMethod, r.Method),
		slog.String(telemetry.KeyPath, r.URL.Path), // never the query: it may carry tokens
		slog.String(telemetry.KeyDecision, x.decision),
		slog.String(telemetry.KeyRule, x.rule),
		slog.String(telemetry.KeyReason, x.reason),
		slog.Int(telemetry.KeyStatus, status),
		slog.Int(telemetry.KeyUpstreamStatus, x.upstreamCode),
		slog.Float64(telemetry.KeyDurationMS, float64(h.now().Sub(x.start).Microseconds())/1000),
		slog.Int64(telemetry.KeyBytesIn, bytesIn),
		slog.Int64(telemetry.KeyBytesOut, w.n),
	)
	if len(x.rewritten) > 0 {
		// Apply reports every name of the set, in order, when it succeeds:
		// the pre-boxed copy is the same list.
		if pre, _ := x.logNames.([]string); slices.Equal(pre, x.rewritten) {
			attrs = append(attrs, slog.Any(telemetry.KeyHeaderRewritten, x.logNames))
		} else {
			attrs = append(attrs, slog.Any(telemetry.KeyHeaderRewritten, x.rewritten))
		}
		if refs, _ := x.logRefs.([]string); len(refs) > 0 {
			attrs = append(attrs, slog.Any(telemetry.KeySecretRef, x.logRefs))
		}
	}
	if x.rewriteErr != nil {
		if m, ok := errors.AsType[*rewrite.MissingSecretError](x.rewriteErr); ok {
			attrs = append(attrs, slog.String(telemetry.KeySecretRef, m.Ref))
		}
	}
	if x.errText != "" {
		attrs = append(attrs, slog.String(telemetry.KeyError, x.errText))
	}
	// Straight to the handler, as Logger.LogAttrs would, minus the
	// runtime.Callers stack walk slog does for a source position that no
	// handler of BotBox prints (about 1% of the CPU per request).
	rec := slog.NewRecord(time.Now(), level, "proxy decision", 0)
	rec.AddAttrs(attrs...)
	_ = h.logger.Handler().Handle(r.Context(), rec)
}

// countingWriter counts response body bytes and remembers the status. It
// unwraps for http.ResponseController, so flushing and hijacking (WebSocket)
// reach the real connection.
type countingWriter struct {
	http.ResponseWriter
	n      int64
	status int
}

func (c *countingWriter) WriteHeader(code int) {
	if c.status == 0 && code >= 200 || code == http.StatusSwitchingProtocols {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// countingBody counts request body bytes read by the upstream round trip.
type countingBody struct {
	io.ReadCloser
	// n is atomic: the transport reads the body on its own goroutine,
	// and a full-duplex body may still be read when the line is logged.
	n atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// countBody makes cb count r's body (nil when r has none).
func countBody(r *http.Request, cb *countingBody) *countingBody {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	cb.ReadCloser = r.Body
	r.Body = cb
	return cb
}
