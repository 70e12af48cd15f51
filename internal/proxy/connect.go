package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/botbox/botbox/internal/generation"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/policy"
	"github.com/botbox/botbox/internal/telemetry"
)

// ListenerConnect names, in the decision line, a request served inside a
// CONNECT tunnel of the plain listener (an agent with HTTPS_PROXY set).
const ListenerConnect = telemetry.ListenerConnect

// Reasons and hints of the CONNECT path (docs/troubleshooting.md).
const (
	// reasonConnectTunnel is the reason of an allowed CONNECT's own line.
	reasonConnectTunnel = "connect_tunnel"
	// reasonConnectPort: CONNECT to a port other than 443.
	reasonConnectPort = "connect_port"
	// reasonConnectHandshake: the TLS handshake inside the tunnel failed
	// (not TLS, timed out, no SNI, a certificate could not be issued).
	reasonConnectHandshake = "connect_handshake_failed"

	hintConnectPort   = "only CONNECT to port 443 is served (HTTPS interception); use http:// URLs for other ports"
	hintConnectDenied = "host not allowed by the egress policy"
	hintConnectHTTP2  = "send CONNECT over HTTP/1.1"
)

// defaultConnectHandshake bounds the handshake inside a tunnel when the
// Config has no interception handshake timeout (a Config built by hand).
const defaultConnectHandshake = 10 * time.Second

// connectSetup is what the CONNECT path needs from Options.
type connectSetup struct {
	tls        func() *tls.Config // nil, or nil result: CONNECT is refused
	server     func(http.Handler) *http.Server
	handshake  time.Duration
	readHeader time.Duration
	idle       time.Duration
	drain      *tunnelDrain
}

func newConnectSetup(opts Options) connectSetup {
	c := connectSetup{
		tls:        opts.ConnectTLS,
		server:     opts.ConnectServer,
		handshake:  opts.Config.Interception.HandshakeTimeout,
		readHeader: opts.Config.Timeouts.DownstreamReadHeader,
		idle:       opts.Config.Timeouts.DownstreamIdle,
		drain:      &tunnelDrain{servers: map[*http.Server]struct{}{}, hooked: map[*http.Server]bool{}},
	}
	if c.handshake <= 0 {
		c.handshake = defaultConnectHandshake
	}
	return c
}

// errSNIMismatch refuses a handshake whose SNI is not the CONNECT host.
var errSNIMismatch = errors.New("SNI does not match the CONNECT host")

// serveConnect answers a CONNECT on the plain listener. With interception
// on (Options.ConnectTLS returns a configuration) and a target host:443
// that the policy allows on host and port (Policy.DecideConnection; in
// report mode, any host:443), it hijacks the connection, answers 200, ends TLS
// inside the tunnel with a leaf for the CONNECT host only (any other SNI is
// refused with a TLS alert), and serves the decrypted stream, HTTP/1.1 or h2
// by ALPN, with the interception pipeline: every request there is judged and
// logged on its own, with listener "connect" (TestConnectTunnel*). Anything
// else is 405 with a hint on what to do, and the line names the target.
//
// The CONNECT's own decision line is written when the tunnel ends (decision
// allow, reason connect_tunnel; or the handshake's failure, or shutdown),
// with the tunnel's raw byte counts, TLS included. The connection keeps the
// plain listener's max_connections permit until it closes, and is in the
// registry that CloseTunnels closes at shutdown.
func (h *Handler) serveConnect(w http.ResponseWriter, r *http.Request, x *exchange) {
	x.setHostGiven(r.Host)
	var base *tls.Config
	if h.connect.tls != nil {
		base = h.connect.tls()
	}
	if base == nil {
		h.reject(x, http.StatusMethodNotAllowed, bodyConnect+"\n"+hintConnect+"\n", telemetry.DecisionDeniedConnect, reasonConnect)
		return
	}
	if r.ProtoMajor != 1 {
		// An HTTP/2 CONNECT stream cannot be taken over as a connection.
		h.reject(x, http.StatusMethodNotAllowed, bodyConnect+"\n"+hintConnectHTTP2+"\n", telemetry.DecisionDeniedConnect, reasonConnect)
		return
	}
	hp, err := hostport.Parse(r.Host)
	if err != nil {
		h.reject(x, http.StatusBadRequest, bodyInvalidHost, telemetry.DecisionDeniedNoHost, reasonInvalidHost)
		return
	}
	if h.tripConnect(r, x, hp) {
		return
	}
	g := h.gen.Load()
	v := decideConnect(g, hp)
	if v.Decision.Rule != nil {
		x.rule = v.Decision.Rule.Host
	}
	if !v.Open {
		hint := hintConnectDenied
		if v.Reason == reasonConnectPort {
			hint = hintConnectPort
		}
		h.reject(x, http.StatusMethodNotAllowed, bodyConnect+"\n"+hint+"\n", telemetry.DecisionDeniedConnect, v.Reason)
		return
	}

	conn, brw, err := http.NewResponseController(x.cw.ResponseWriter).Hijack()
	if err != nil {
		h.reject(x, http.StatusMethodNotAllowed, bodyConnect+"\n"+hintConnectHTTP2+"\n", telemetry.DecisionDeniedConnect, reasonConnect)
		return
	}
	x.decision, x.reason, x.status = telemetry.DecisionAllow, reasonConnectTunnel, http.StatusOK
	if v.Reason != "" {
		// Report mode: the tunnel a denial would refuse is opened, and
		// every request inside it is forwarded as report_deny, without
		// header rewrites (forwardReport). TestReportModeConnectDenied.
		x.decision, x.reason = telemetry.DecisionReportDeny, v.Reason
	}
	x.connectTunnel = true
	// No idle timer: the tunnel's HTTP server closes idle keep-alive
	// connections itself, and a request waiting minutes for its response
	// head moves no byte but is not idle. A reload re-decides it on its
	// host and port (CloseRevokedTunnels).
	t := h.tunnels.open(conn, 0, tunnelTarget{connect: true, host: hp}, nil, h.now)
	x.tunnel = t
	h.recheckTunnel(t, g)
	if n := brw.Reader.Buffered(); n > 0 {
		// A client may send its ClientHello right behind the CONNECT.
		pre, _ := brw.Reader.Peek(n)
		t.pending = bytes.Clone(pre)
	}
	if _, err := io.WriteString(t, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = t.Close()
		h.abort(x, telemetry.AbortClientClosed, err)
		return
	}

	// The tunnel outlives this handler, so that the CONNECT holds no
	// request-budget permit of the plain listener's server while its
	// connection is open (an idle keep-alive tunnel is a connection, not a
	// request); its requests take their own.
	x.lineLater = true
	x.ctx = context.WithoutCancel(r.Context())
	if plain, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok {
		h.connect.drain.hook(plain)
	}
	go h.runTunnel(r, x, t, pinSNI(base, hp.Host))
}

// ConnectVerdict is how the plain listener answers a CONNECT when
// interception is on: whether the tunnel is opened (200, then TLS ended
// inside it and every request decided on its own), the host-and-port
// decision, and the reason its refusal or report line carries.
type ConnectVerdict struct {
	// Open: the tunnel is opened and intercepted.
	Open bool
	// Decision is Policy.DecideConnection of the target (zero for a port
	// other than 443, which is refused before the policy).
	Decision policy.Decision
	// Reason is the line's reason when the tunnel is refused
	// (connect_port, or the policy's reason) or reported (report mode,
	// the policy's reason); "" when the policy allows it.
	Reason string
}

// decideConnect is the one decision of a CONNECT to hp under g:
//   - only port 443 is intercepted; a tunnel to another port would carry a
//     protocol BotBox does not speak: refused, connect_port, in report
//     mode too;
//   - then host and port only (Policy.DecideConnection), as the
//     interception authorizer decides a handshake: routes are judged per
//     request inside the tunnel (serveTLS, forward), so a rule's routes
//     and rewrites are never bypassed, and without interception no CONNECT
//     is served at all. TestConnectToRoutedRule holds it;
//   - a denial opens the tunnel in report mode, with the policy's reason
//     (TestReportModeConnectDenied).
func decideConnect(g *generation.Generation, hp hostport.HostPort) ConnectVerdict {
	if !hp.HasPort || hp.Port != 443 {
		return ConnectVerdict{Reason: reasonConnectPort}
	}
	d := g.Policy.DecideConnection(hp)
	switch {
	case d.Allowed():
		return ConnectVerdict{Open: true, Decision: d}
	case g.Report:
		return ConnectVerdict{Open: true, Decision: d, Reason: string(d.Reason)}
	}
	return ConnectVerdict{Decision: d, Reason: string(d.Reason)}
}

// DecideConnect is how a CONNECT to authority ("host:port") would be
// answered with interception on, under the generation in force (botbox
// explain). It fails when authority does not parse.
func (h *Handler) DecideConnect(authority string) (ConnectVerdict, error) {
	hp, err := hostport.Parse(authority)
	if err != nil {
		return ConnectVerdict{}, fmt.Errorf("CONNECT target %q: %w", clip(authority), err)
	}
	return decideConnect(h.gen.Load(), hp), nil
}

// Tunnel returns the handler of the requests inside an intercepted CONNECT
// tunnel (listener "connect": the SNI must name the Host), for botbox
// explain; the real tunnels are served by serveConnect.
func (h *Handler) Tunnel() http.Handler { return http.HandlerFunc(h.serveTunnelRequest) }

// runTunnel ends TLS in an accepted CONNECT tunnel and serves its
// requests; it writes the CONNECT's decision line when the tunnel ends.
func (h *Handler) runTunnel(r *http.Request, x *exchange, t *tunnelConn, cfg *tls.Config) {
	defer h.writeDecision(r, x)
	nc := &notifyConn{Conn: t, closed: make(chan struct{})}
	tc := tls.Server(nc, cfg)
	ctx, cancel := context.WithTimeout(x.ctx, h.connect.handshake)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		h.connectHandshakeFailed(x, err)
		_ = tc.Close()
		return
	}
	h.metrics.TLSHandshakes.WithLabelValues(telemetry.HandshakeOK).Inc()

	srv := h.tunnelServer()
	srv.TLSConfig = cfg // offers h2 by ALPN, as on the interception listener
	h.connect.drain.add(srv)
	defer h.connect.drain.remove(srv)
	ln := &oneConnListener{conn: tc, closed: nc.closed, stop: make(chan struct{})}
	// Serve returns when the connection is closed, or when the server is
	// shut down (a drain): the tunnel ends with its connection, which the
	// server closes once idle (CloseTunnels at the deadline otherwise). A
	// server shut down before Serve never accepted the connection.
	_ = srv.Serve(ln)
	if !ln.accepted() {
		_ = tc.Close()
	}
	<-nc.closed
}

// tunnelDrain ends CONNECT tunnels gracefully when the plain listener's
// http.Server shuts down: Shutdown does not see hijacked connections, so
// serveConnect registers drainAll with RegisterOnShutdown (once per
// server), which shuts down every tunnel's own server: idle keep-alive
// tunnels close at once, a request in flight finishes first (or is cut by
// CloseTunnels at the deadline). TestShutdownDrainsIdleConnectTunnel holds
// it.
type tunnelDrain struct {
	mu       sync.Mutex
	servers  map[*http.Server]struct{}
	hooked   map[*http.Server]bool
	draining bool
}

func (d *tunnelDrain) hook(plain *http.Server) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.hooked[plain] {
		d.hooked[plain] = true
		plain.RegisterOnShutdown(d.drainAll)
	}
}

// add registers a tunnel's server; during a drain it is shut down at once.
func (d *tunnelDrain) add(srv *http.Server) {
	d.mu.Lock()
	d.servers[srv] = struct{}{}
	draining := d.draining
	d.mu.Unlock()
	if draining {
		go srv.Shutdown(context.Background())
	}
}

func (d *tunnelDrain) remove(srv *http.Server) {
	d.mu.Lock()
	delete(d.servers, srv)
	d.mu.Unlock()
}

// drainAll shuts down every tunnel's server. Each Shutdown returns once its
// connection is closed, at the latest when CloseTunnels closes it.
func (d *tunnelDrain) drainAll() {
	d.mu.Lock()
	d.draining = true
	open := make([]*http.Server, 0, len(d.servers))
	for srv := range d.servers {
		open = append(open, srv)
	}
	d.mu.Unlock()
	for _, srv := range open {
		go srv.Shutdown(context.Background())
	}
}

// tunnelServer is the HTTP server of one tunnel's decrypted stream.
func (h *Handler) tunnelServer() *http.Server {
	handler := http.HandlerFunc(h.serveTunnelRequest)
	if h.connect.server != nil {
		return h.connect.server(handler)
	}
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: h.connect.readHeader,
		IdleTimeout:       h.connect.idle,
		MaxHeaderBytes:    64 << 10,
		// "OPTIONS *" reaches the pipeline and is refused there.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     slog.NewLogLogger(h.logger.Handler(), slog.LevelDebug),
	}
}

// connectHandshakeFailed records a failed handshake inside a tunnel on the
// CONNECT's line and in botbox_tls_handshakes_total, as the interception
// listener does for its own.
func (h *Handler) connectHandshakeFailed(x *exchange, err error) {
	result := telemetry.HandshakeIOError
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		result = telemetry.HandshakeTimeout
	}
	h.metrics.TLSHandshakes.WithLabelValues(result).Inc()
	x.reason = reasonConnectHandshake
	if errors.Is(err, errSNIMismatch) {
		// A refusal, not a failure of an allowed tunnel: the agent tried to
		// reach a host other than the one it named in the CONNECT.
		// Counted like every refusal line (countDecision), so that
		// requests_total still adds up to the refusal lines.
		h.metrics.HostMismatch.Inc()
		x.hostLabel = telemetry.HostUnknown
		x.decision, x.reason = telemetry.DecisionDeniedHostMismatch, reasonSNIHostMismatch
	}
	x.errText = err.Error()
}

// pinSNI returns a copy of base whose handshakes succeed only for an SNI
// naming host (canonical form): the leaf is never issued for another name,
// and a resumed session, which skips certificate selection, is checked
// too. Session tickets are off: each tunnel has its own configuration, so
// a ticket could never be resumed anyway.
func pinSNI(base *tls.Config, host string) *tls.Config {
	cfg := base.Clone()
	cfg.SessionTicketsDisabled = true
	match := func(sni string) error {
		if canon, err := hostport.ParseHost(sni); err != nil || canon != host {
			return fmt.Errorf("%w: SNI %q, CONNECT host %q", errSNIMismatch, clip(sni), host)
		}
		return nil
	}
	getCert, verify := base.GetCertificate, base.VerifyConnection
	cfg.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if err := match(hello.ServerName); err != nil {
			return nil, err
		}
		if getCert == nil {
			return nil, errors.New("proxy: ConnectTLS configuration has no GetCertificate")
		}
		return getCert(hello)
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if err := match(cs.ServerName); err != nil {
			return err
		}
		if verify != nil {
			return verify(cs)
		}
		return nil
	}
	return cfg
}

// clip bounds a client-chosen string quoted in an error.
func clip(s string) string {
	out, _ := bound(s)
	return out
}

// serveTunnelRequest is the pipeline of a request inside a CONNECT tunnel:
// the interception listener's, with the SNI/Host match always enforced (the
// tunnel was opened for one host).
func (h *Handler) serveTunnelRequest(w http.ResponseWriter, r *http.Request) {
	h.serveTLS(ListenerConnect, w, r)
}

// notifyConn closes its channel when the connection is closed.
type notifyConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *notifyConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}

// oneConnListener hands one connection to an http.Server, then blocks
// Accept until that connection is closed or the listener is (Shutdown
// closes it, and waits for Serve to return before closing idle
// connections).
type oneConnListener struct {
	mu       sync.Mutex
	conn     net.Conn // nil once accepted
	closed   chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	addr     net.Addr
}

// accepted reports whether Accept handed the connection out.
func (l *oneConnListener) accepted() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn == nil
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	if c != nil {
		l.addr = c.LocalAddr()
	}
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	select {
	case <-l.closed:
	case <-l.stop:
	}
	return nil, net.ErrClosed
}

// Close ends Accept; the connection is not affected.
func (l *oneConnListener) Close() error {
	l.stopOnce.Do(func() { close(l.stop) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.addr == nil && l.conn != nil {
		return l.conn.LocalAddr()
	}
	return l.addr
}
