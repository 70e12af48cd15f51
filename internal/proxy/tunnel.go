package proxy

import (
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// admitUpgrade applies the upgrade policy to an allowed request (redteam
// finding 7) and reports whether it may go on:
//   - not an upgrade offer (no "upgrade" token in Connection): yes, and
//     ReverseProxy drops a stray Upgrade header as hop-by-hop;
//   - Upgrade: websocket: yes, ReverseProxy forwards the offer and, on 101,
//     tunnels the connection through a tunnelConn;
//   - Upgrade: h2c (Java's HttpClient offers it on every http:// request):
//     yes, with the offer and HTTP2-Settings removed, so the origin serves
//     plain HTTP/1.1 and no raw tunnel escapes per-request policy;
//   - any other token, or a mix: no (the caller answers 400 and logs it).
func (h *Handler) admitUpgrade(r *http.Request, x *exchange) bool {
	if !headerHasToken(r.Header["Connection"], "upgrade") {
		return true
	}
	offer := r.Header.Values("Upgrade")
	websocket, h2c, other := 0, 0, 0
	for _, v := range offer {
		for tok := range strings.SplitSeq(v, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(tok), "/")
			switch {
			case name == "":
			case strings.EqualFold(name, "websocket"):
				websocket++
			case strings.EqualFold(name, "h2c"):
				h2c++
			default:
				other++
			}
		}
	}
	switch {
	case other == 0 && h2c == 0:
		return true // websocket, or no offer at all
	case other == 0 && websocket == 0:
		r.Header.Del("Upgrade")
		r.Header.Del("Http2-Settings")
		return true
	}
	x.upgrade = strings.Join(offer, ", ")
	return false
}

// headerHasToken reports whether a comma-separated header has token
// (case-insensitive), as for Connection.
func headerHasToken(values []string, token string) bool {
	for _, v := range values {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), token) {
				return true
			}
		}
	}
	return false
}

// Reasons a tunnel was closed by BotBox rather than by either peer; the
// decision line written at close carries it.
const (
	reasonTunnelIdle     = "tunnel_idle_timeout"
	reasonTunnelShutdown = "shutdown"
)

// tunnelSet is the registry of open tunnels, for CloseTunnels.
type tunnelSet struct {
	mu sync.Mutex
	m  map[*tunnelConn]struct{}
}

// CloseTunnels closes every open tunnel: upgrade tunnels (WebSocket) and
// CONNECT tunnels, whose requests in flight then fail. http.Server's
// Shutdown neither waits for nor closes hijacked connections, so the server
// calls this at its shutdown deadline. Each tunnel's decision line is
// written as its handler returns, with reason "shutdown". Safe for
// concurrent use; tunnels opened afterwards are not affected.
func (h *Handler) CloseTunnels() {
	h.tunnels.mu.Lock()
	open := make([]*tunnelConn, 0, len(h.tunnels.m))
	for t := range h.tunnels.m {
		open = append(open, t)
	}
	h.tunnels.mu.Unlock()
	for _, t := range open {
		t.closeWith(reasonTunnelShutdown)
	}
}

// open registers c, the tunnel to target with limits (nil: none); idle > 0
// arms the idle timeout, 0 leaves it to the caller (a CONNECT tunnel's own
// HTTP server). now is the clock of the rate limit.
func (s *tunnelSet) open(c net.Conn, idle time.Duration, target tunnelTarget, limits *tunnelLimits, now func() time.Time) *tunnelConn {
	t := &tunnelConn{Conn: c, set: s, idle: idle, born: time.Now(), target: target, now: now, done: make(chan struct{})}
	t.limits.Store(limits)
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[*tunnelConn]struct{})
	}
	s.m[t] = struct{}{}
	s.mu.Unlock()
	if idle > 0 {
		t.mu.Lock()
		t.timer = time.AfterFunc(idle, t.checkIdle)
		t.mu.Unlock()
	}
	return t
}

// len is the number of open tunnels.
func (s *tunnelSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// openTunnels is the number of open tunnels (for tests and, later, a gauge).
func (h *Handler) openTunnels() int { return h.tunnels.len() }

func (s *tunnelSet) remove(t *tunnelConn) {
	s.mu.Lock()
	delete(s.m, t)
	s.mu.Unlock()
}

// tunnelConn is the agent's side of an upgrade tunnel: the connection
// ReverseProxy hijacks and copies to and from the origin. It counts the
// bytes of both directions (in: read from the agent, out: written to it),
// and closes itself once neither direction moved a byte for idle. The
// copies run on two goroutines of ReverseProxy and the idle check on a
// timer, hence the atomics.
type tunnelConn struct {
	net.Conn
	set  *tunnelSet
	idle time.Duration
	born time.Time // monotonic base of last
	// pending holds agent bytes read ahead by the HTTP server, returned by
	// Read before the connection's own; only the one reading goroutine of
	// ReverseProxy touches it.
	pending []byte
	// target is what a reload re-decides (immutable).
	target tunnelTarget
	// limits apply to what the agent sends (tunnellimits.go); a reload
	// replaces them. nil: none.
	limits atomic.Pointer[tunnelLimits]
	// frames counts the agent's WebSocket frames (the reading goroutine's).
	frames wsFrameCounter
	// reportReason is the limit report mode let pass, nil if none.
	reportReason atomic.Pointer[string]
	now          func() time.Time
	done         chan struct{} // closed by Close

	in, out atomic.Int64
	last    atomic.Int64           // time since born of the last byte, in nanoseconds
	reason  atomic.Pointer[string] // why BotBox closed it, nil when a peer did
	once    sync.Once

	mu     sync.Mutex // guards timer (re-armed by its own callback) and closed
	timer  *time.Timer
	closed bool
}

// Read returns what the agent sent, after the tunnel's limits admitted it
// (admit): a read the limits refuse returns an error and none of its bytes.
func (t *tunnelConn) Read(p []byte) (int, error) {
	n, err := t.read(p)
	if n > 0 {
		if lerr := t.admit(p[:n]); lerr != nil {
			return 0, lerr
		}
	}
	return n, err
}

func (t *tunnelConn) read(p []byte) (int, error) {
	if len(t.pending) > 0 {
		n := copy(p, t.pending)
		t.pending = t.pending[n:]
		t.in.Add(int64(n))
		t.last.Store(int64(time.Since(t.born)))
		return n, nil
	}
	n, err := t.Conn.Read(p)
	if n > 0 {
		t.in.Add(int64(n))
		t.last.Store(int64(time.Since(t.born)))
	}
	return n, err
}

func (t *tunnelConn) Write(p []byte) (int, error) {
	n, err := t.Conn.Write(p)
	if n > 0 {
		t.out.Add(int64(n))
		t.last.Store(int64(time.Since(t.born)))
	}
	return n, err
}

// CloseWrite keeps ReverseProxy's half-close: when the origin ends its
// side, the agent sees EOF while it may still send.
func (t *tunnelConn) CloseWrite() error {
	if cw, ok := t.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close closes the connection once and leaves the registry.
func (t *tunnelConn) Close() error {
	err := net.ErrClosed
	t.once.Do(func() {
		t.mu.Lock()
		t.closed = true
		if t.timer != nil {
			t.timer.Stop()
		}
		t.mu.Unlock()
		t.set.remove(t)
		close(t.done)
		err = t.Conn.Close()
	})
	return err
}

func (t *tunnelConn) closeWith(reason string) {
	t.reason.CompareAndSwap(nil, &reason)
	_ = t.Close()
}

// closedBy is the reason BotBox closed the tunnel, "" if a peer did.
func (t *tunnelConn) closedBy() string {
	if r := t.reason.Load(); r != nil {
		return *r
	}
	return ""
}

// checkIdle runs when the tunnel may have been silent for idle: it closes
// it if so, else re-arms for the rest of the period.
func (t *tunnelConn) checkIdle() {
	silent := time.Since(t.born) - time.Duration(t.last.Load())
	if silent >= t.idle {
		t.closeWith(reasonTunnelIdle)
		return
	}
	t.mu.Lock()
	if !t.closed {
		t.timer.Reset(t.idle - silent)
	}
	t.mu.Unlock()
}
