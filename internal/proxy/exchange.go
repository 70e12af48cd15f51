package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/botbox/botbox/internal/credential"
	"github.com/botbox/botbox/internal/generation"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/rewrite"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/telemetry"
)

// exchange is the per-request record: what was decided and what happened,
// written once as the canonical log line. It also holds the counting
// response writer and request body, the upstream body wrapper and the
// client trace, so that a request costs one allocation for all of them.
// Every field is written by the request's handler goroutine, except the
// counters that say otherwise.
type exchange struct {
	h         *Handler
	ctx       context.Context // the agent's request context
	cw        countingWriter
	cb        countingBody
	ub        upstreamBody
	ob        outboundBody
	trace     httptrace.ClientTrace
	id        string
	listener  string
	engine    string // telemetry.EngineBotBox or EngineNetHTTP
	remote    string // the agent's connection (r.RemoteAddr)
	start     time.Time
	host      string // canonical host; the host as given when it did not parse
	port      uint16
	hostLabel string // closed-set metrics label
	hm        *telemetry.HostMetrics
	decision  string
	reason    string
	rule      string
	route     int    // index+1 of the route that decided; 0: none
	path      string // canonical path to forward; "": forward the agent's
	authority string // upstream authority, e.g. "api.openai.com" or "[::1]:8443"
	cleartext bool   // plain HTTP to the origin (the rule's upstream_tls: false)
	rewrites  *rewrite.Set
	secrets   *secrets.Snapshot
	rewritten []string
	// queryRewritten are the query_rewrites names set (configured names).
	queryRewritten []string
	rewriteErr     error
	// credential is the name of the rule's credential ("" = none) and
	// credPrep what its Prepare readied (credential.go).
	credential   string
	credPrep     credential.Prepared
	upstreamCode int
	upstreamAddr string // IP:port of the connection the request went out on
	status       int
	errText      string
	upgrade      string // the refused Upgrade offer
	aborted      bool
	tunnel       *tunnelConn
	// upgradeTarget and upgradeLimits are what an upgrade tunnel opened
	// by this request is re-decided on and limited by (tunnellimits.go).
	upgradeTarget tunnelTarget
	upgradeLimits *tunnelLimits
	// gen is the generation the request was decided with (forward).
	gen *generation.Generation
	// connectTunnel: a CONNECT whose tunnel was opened; its own line is
	// not counted in botbox_requests_total unless it ends refused (its
	// requests are counted on their own).
	connectTunnel bool
	// reportLimit is the limit report mode let pass (reason), set by
	// admitLimits; bodyOver is set by the transport's goroutine when a
	// streamed body crossed the limit in report mode.
	reportLimit string
	bodyOver    atomic.Bool
	timerDone   bool
	agentH2     bool // the agent's request came over HTTP/2 (see outboundBody)
	lineLater   bool // a CONNECT tunnel writes the line itself when it ends (serveConnect)
	tw          tripState
	// interim relays 1xx heads on BotBox's engine (relayEngine).
	interim interimRelay

	// Response scrubbing (scrub.go).
	scrubOn    bool           // the rule scrubs responses (scrub_responses)
	scrub      *responseScrub // &scrubState, set by prepareScrub when secrets were injected
	scrubState responseScrub
}

// exchangeKey is the context key under which forward stores the exchange
// for ReverseProxy's callbacks (rewrite, guardedTransport, upstreamResponse,
// upstreamError), which only see the outbound request.
type exchangeKey struct{}

func exchangeFrom(ctx context.Context) *exchange {
	x, _ := ctx.Value(exchangeKey{}).(*exchange)
	return x
}

func (h *Handler) newExchange(listener string, w http.ResponseWriter, r *http.Request) *exchange {
	x := &exchange{h: h, ctx: r.Context(), id: newRequestID(), listener: listener, engine: engineName(r), remote: r.RemoteAddr, start: h.now()}
	x.cw.ResponseWriter, x.cw.x = w, x
	x.agentH2 = r.ProtoMajor == 2
	if r.Body != nil && r.Body != http.NoBody {
		x.cb.ReadCloser = r.Body
		r.Body = &x.cb
	}
	return x
}

// newRequestID returns a random UUID v4, the form of the reference's
// request ids.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
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
	return string(s[:])
}

// setHostGiven logs the target of a request refused before its host was
// canonicalised (CONNECT, absolute-form on the interception listener): the
// canonical host and port when the authority parses, else the text as
// given (bounded like every free-form field).
func (x *exchange) setHostGiven(authority string) {
	if hp, err := hostport.Parse(authority); err == nil {
		x.host, x.port = hp.Host, hp.PortOr(443)
		return
	}
	x.host = authority
}

func (x *exchange) gotConn(info httptrace.GotConnInfo) {
	if info.Conn != nil {
		if a := info.Conn.RemoteAddr(); a != nil {
			x.upstreamAddr = a.String()
		}
	}
}

// maxFieldBytes bounds every free-form field of a decision line (host as
// given, method, path, error, upgrade token), so that one line costs at
// most a few kilobytes however large the request head is (redteam finding
// 5). TestFloodedDenialsAreBoundedAndAggregated holds it.
const maxFieldBytes = 256

// bound returns s cut to maxFieldBytes on a rune boundary, and whether it
// was cut.
func bound(s string) (string, bool) {
	if len(s) <= maxFieldBytes {
		return s, false
	}
	cut := s[:maxFieldBytes]
	// Drop a rune the cut split in two (invalid bytes before it stay: the
	// JSON encoder writes them as U+FFFD).
	for i := len(cut) - 1; i >= 0 && i >= len(cut)-utf8.UTFMax; i-- {
		if utf8.RuneStart(cut[i]) {
			if !utf8.FullRuneInString(cut[i:]) {
				cut = cut[:i]
			}
			break
		}
	}
	return cut, true
}

// level is the decision line's level: ERROR when BotBox could not do its
// job for an allowed request (500: a secret missing, a rewrite failed) and
// for a tripwire (a placeholder heading for the wrong host, an alarm),
// WARN for every denial and every other failure (502, 504, a broken body,
// a client gone), INFO for an allowed request that completed, whatever the
// origin answered.
func (x *exchange) level(status int) slog.Level {
	switch {
	case status == http.StatusInternalServerError && x.upstreamCode == 0, x.tw.trip.Load() != nil:
		return slog.LevelError
	case x.decision != telemetry.DecisionAllow, x.aborted, x.errText != "", status >= 500 && x.upstreamCode == 0:
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// logDecision writes the one canonical line of a request. It runs deferred,
// also while ReverseProxy unwinds with http.ErrAbortHandler after a body
// error, and then reports that error (TestTruncatedBodyLoggedAsError).
func (h *Handler) logDecision(r *http.Request, x *exchange) {
	if x.lineLater {
		return
	}
	h.writeDecision(r, x)
}

// writeDecision is logDecision without the CONNECT tunnel's deferral.
func (h *Handler) writeDecision(r *http.Request, x *exchange) {
	status := x.cw.status
	if status == 0 {
		status = x.status
	}
	bytesIn, bytesOut := x.cb.n.Load(), x.cw.n
	if t := x.tunnel; t != nil {
		bytesIn += t.in.Load()
		bytesOut += t.out.Load()
		reason := t.closedBy()
		// A tunnel BotBox closed for its policy (a limit, a reload) says
		// so, also when the close then failed a copy (an abort).
		if reason != "" && (!x.aborted || reason == reasonPolicyReloaded || reason == reasonBodyTooLarge) {
			x.reason = reason
		}
		switch {
		case reason == reasonBodyTooLarge:
			x.decision = telemetry.DecisionDeniedBodyTooLarge
		case x.decision == telemetry.DecisionAllow && t.reportedBy() != "":
			x.decision, x.reason = telemetry.DecisionReportDeny, t.reportedBy()
		}
	}
	if x.decision == telemetry.DecisionAllow {
		if reason := x.reportOver(); reason != "" {
			// Report mode let a request over a limit of its rule pass,
			// credential included (the policy allows it).
			x.decision, x.reason = telemetry.DecisionReportDeny, reason
		}
	}
	h.countDecision(x)
	if x.decision == telemetry.DecisionAllow && !x.aborted && x.ctx.Err() != nil {
		// The agent's connection went away while the exchange ran. The
		// transport may then end the origin's body with a plain io.EOF, so
		// upstreamBody alone cannot tell (TestClientClosedMidBody).
		h.abort(x, telemetry.AbortClientClosed, context.Cause(x.ctx))
	}
	level := x.level(status)
	// A tripwire line is an alarm: never folded into a repeat count.
	if x.decision != telemetry.DecisionAllow && x.tw.trip.Load() == nil && h.repeats.suppress(x, r.Method, status, level) {
		return
	}
	if !h.logger.Enabled(x.ctx, level) {
		return
	}
	host, cutHost := bound(x.host)
	method, cutMethod := bound(r.Method)
	logPath := r.URL.Path
	if logPath == "" && r.Method != http.MethodConnect {
		logPath = "/" // what rewrite forwards for an absolute-form target without a path
	}
	path, cutPath := bound(logPath) // never the query: it may carry tokens
	attrs := make([]slog.Attr, 0, 24)
	attrs = append(attrs,
		slog.String(telemetry.KeyRequestID, x.id),
		slog.String(telemetry.KeyListener, x.listener),
		slog.String(telemetry.KeyEngine, x.engine),
		slog.String(telemetry.KeyHost, host),
		slog.Int(telemetry.KeyPort, int(x.port)),
		slog.String(telemetry.KeyMethod, method),
		slog.String(telemetry.KeyPath, path),
		slog.String(telemetry.KeyDecision, x.decision),
		slog.String(telemetry.KeyRule, x.rule),
		slog.String(telemetry.KeyReason, x.reason),
	)
	if x.route > 0 {
		attrs = append(attrs, slog.Int(telemetry.KeyRoute, x.route-1))
	}
	attrs = append(attrs,
		slog.Int(telemetry.KeyStatus, status),
		slog.Int(telemetry.KeyUpstreamStatus, x.upstreamCode),
		slog.String(telemetry.KeyUpstreamAddr, x.upstreamAddr),
		slog.Float64(telemetry.KeyDurationMS, float64(h.now().Sub(x.start).Microseconds())/1000),
		slog.Int64(telemetry.KeyBytesIn, bytesIn),
		slog.Int64(telemetry.KeyBytesOut, bytesOut),
	)
	if len(x.rewritten) > 0 {
		attrs = append(attrs, slog.Any(telemetry.KeyHeaderRewritten, x.rewritten))
	}
	if x.credential != "" {
		attrs = append(attrs, slog.String(telemetry.KeyCredential, x.credential))
	}
	if len(x.queryRewritten) > 0 {
		attrs = append(attrs, slog.Any(telemetry.KeyQueryRewritten, x.queryRewritten))
	}
	if len(x.rewritten) > 0 || len(x.queryRewritten) > 0 {
		if refs := x.rewrites.SecretRefs(); len(refs) > 0 && x.tw.trip.Load() == nil {
			attrs = append(attrs, slog.Any(telemetry.KeySecretRef, refs))
		}
	}
	if m, ok := errors.AsType[*rewrite.MissingSecretError](x.rewriteErr); ok {
		// Always an array, as in the lines above.
		attrs = append(attrs, slog.Any(telemetry.KeySecretRef, []string{m.Ref}))
	}
	if m, ok := errors.AsType[*rewrite.MissingQuerySecretError](x.rewriteErr); ok {
		attrs = append(attrs, slog.Any(telemetry.KeySecretRef, []string{m.Ref}))
	}
	attrs = x.tripAttrs(attrs)
	var cutUpgrade, cutErr bool
	if x.upgrade != "" {
		var up string
		up, cutUpgrade = bound(x.upgrade)
		attrs = append(attrs, slog.String(telemetry.KeyUpgrade, up))
	}
	if x.errText != "" {
		// Rewrite errors carry only header names and secret refs by
		// construction; transport errors carry addresses, never header
		// values.
		var e string
		e, cutErr = bound(x.errText)
		attrs = append(attrs, slog.String(telemetry.KeyError, e))
	}
	if cutHost || cutMethod || cutPath || cutUpgrade || cutErr {
		attrs = append(attrs, slog.Bool(telemetry.KeyTruncated, true))
	}
	h.logger.LogAttrs(x.ctx, level, msgDecision, attrs...)
}

// countDecision counts the exchange in botbox_requests_total once, from
// its final decision: a streamed body that crossed the limit or tripped
// after the request was allowed is counted as that refusal only
// (TestStreamedRefusalCountedOnce). It runs before the repeat log may fold
// the line, so the count still adds up to the refusals. A report-mode
// request is counted under HostReport.
func (h *Handler) countDecision(x *exchange) {
	switch {
	case x.decision == "":
		return
	case x.connectTunnel && (x.decision == telemetry.DecisionAllow || x.decision == telemetry.DecisionReportDeny):
		return
	case x.decision == telemetry.DecisionAllow && x.hm != nil:
		x.hm.Requests.Inc()
	case x.decision == telemetry.DecisionReportDeny:
		h.metrics.Requests.WithLabelValues(telemetry.HostReport, telemetry.DecisionReportDeny).Inc()
	default:
		label := x.hostLabel
		if label == "" {
			label = telemetry.HostUnknown
		}
		h.metrics.Requests.WithLabelValues(label, x.decision).Inc()
	}
}

// msgDecision is the message of the canonical line.
const msgDecision = "proxy decision"

// countingWriter counts response body bytes, remembers the status and
// records a failed write (the agent went away) on the exchange. It unwraps
// for http.ResponseController, so flushing reaches the real connection; its
// own Hijack hands ReverseProxy a counting tunnelConn (WebSocket).
type countingWriter struct {
	http.ResponseWriter
	x      *exchange
	n      int64
	status int
}

func (c *countingWriter) WriteHeader(code int) {
	if c.status == 0 && code >= 200 || code == http.StatusSwitchingProtocols {
		c.status = code
	}
	if code < 200 && code != http.StatusSwitchingProtocols && c.x.scrub != nil {
		// A 1xx head ReverseProxy relays (Early Hints): scrub.go.
		c.x.scrub.maskInformational(c.Header())
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	if err != nil {
		c.x.h.abort(c.x, telemetry.AbortClientClosed, err)
	}
	return n, err
}

// Hijack takes over the agent's connection for an upgrade tunnel: the
// returned conn counts both directions, closes itself after the tunnel idle
// timeout and is registered for CloseTunnels until closed.
func (c *countingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(c.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	c.status = http.StatusSwitchingProtocols
	t := c.x.h.tunnels.open(conn, c.x.h.tunnelIdle, c.x.upgradeTarget, c.x.upgradeLimits, c.x.h.now)
	if n := brw.Reader.Buffered(); n > 0 {
		// Bytes the agent sent right behind the upgrade request are in the
		// server's read buffer, which ReverseProxy never reads: the tunnel
		// delivers them first (TestTunnelKeepsBytesSentWithTheUpgrade).
		pre, _ := brw.Reader.Peek(n)
		t.pending = bytes.Clone(pre)
	}
	c.x.tunnel = t
	c.x.h.recheckTunnel(t, c.x.gen)
	return t, brw, nil
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

// upstreamBody records the first error of the origin's response body other
// than io.EOF. ReverseProxy reads it on the handler goroutine; when the
// read fails it panics with http.ErrAbortHandler, and the deferred decision
// line then reports the recorded error instead of a clean 200.
type upstreamBody struct {
	io.ReadCloser
	x *exchange
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.x.h.abort(b.x, telemetry.AbortUpstreamBody, err)
	}
	return n, err
}

// outboundBody is the request body the transport reads: ReverseProxy's
// wrapper around the agent's body, whose Close does nothing. The Close of
// outboundBody, which the transport calls when it is done with the stream,
// also closes the agent's body (endRequestBody).
//
// Why: the HTTP/2 transport copies the request body on a goroutine of its
// own, and both its response body's Close (which ReverseProxy calls after
// the response and its trailers are complete, before it copies the
// trailers and returns) and RoundTrip after a reset or a lost connection
// wait until that goroutine has returned. With ReverseProxy's wrapper
// alone, the goroutine stays blocked reading the agent's body for as long
// as the agent keeps its side of the stream open: a gRPC bidi stream whose
// server ended first (OK or an error status) hung until the client's
// deadline and its trailers never left (Go issues 48908, 80085). Once the
// transport has given up the stream nothing the agent still sends can
// reach the origin, so closing the agent's body loses nothing.
// TestServerEndsFirstWhileBodyOpen holds it; test/grpc holds it for
// grpc-go. The transport may call Close on its own goroutine, even after
// the handler returned: endRequestBody is safe for that.
type outboundBody struct {
	io.ReadCloser
	x *exchange
}

func (b *outboundBody) Close() error {
	err := b.ReadCloser.Close()
	b.x.endRequestBody()
	return err
}

// endRequestBody closes the agent's request body so that a transport
// goroutine blocked reading it returns. Only for an agent on HTTP/2, whose
// server-side body closes without blocking, from any goroutine and any
// number of times: a blocked Read returns an error, DATA the agent still
// sends is discarded (its connection-level flow control credited back),
// and the stream ends with the trailers once the handler returns. An
// HTTP/1 body's Close waits for a concurrent Read and then drains, so it
// would block where this is meant to unblock; and Go's HTTP/1 server is
// half-duplex anyway (it drains the unread request body before it writes
// the response head).
func (x *exchange) endRequestBody() {
	if x.agentH2 && x.cb.ReadCloser != nil {
		_ = x.cb.ReadCloser.Close()
	}
}
