package listener

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/botbox/botbox/internal/telemetry"
)

// ConnLimit is the one max_connections budget shared by every proxy
// listener (reference §7.3). A permit is taken when a connection is
// accepted and returned when it closes; a connection accepted beyond the
// budget is closed at once with no response, as the reference does.
//
// ConnLimit also remembers every connection it admitted until it closes, so
// that shutdown can close what http.Server.Shutdown leaves open: hijacked
// connections (WebSocket tunnels), which net/http neither waits for nor
// closes (TestConnLimitCloseAllHijacked).
type ConnLimit struct {
	sem chan struct{}

	mu    sync.Mutex
	conns map[*permitConn]struct{}
	empty chan struct{} // closed and replaced when conns becomes empty; nil while empty
}

// NewConnLimit returns a limit of n concurrent connections (n >= 1).
func NewConnLimit(n int) *ConnLimit {
	if n < 1 {
		n = 1
	}
	return &ConnLimit{sem: make(chan struct{}, n), conns: make(map[*permitConn]struct{})}
}

// InUse reports how many permits are taken.
func (l *ConnLimit) InUse() int { return len(l.sem) }

// CloseAll closes every admitted connection that is still open, hijacked
// ones included, and returns how many it closed.
func (l *ConnLimit) CloseAll() int {
	l.mu.Lock()
	open := make([]*permitConn, 0, len(l.conns))
	for c := range l.conns {
		open = append(open, c)
	}
	l.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
	return len(open)
}

// Wait blocks until every admitted connection has closed or ctx is done;
// it reports whether none is left open.
func (l *ConnLimit) Wait(ctx context.Context) bool {
	for {
		l.mu.Lock()
		if len(l.conns) == 0 {
			l.mu.Unlock()
			return true
		}
		if l.empty == nil {
			l.empty = make(chan struct{})
		}
		ch := l.empty
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

func (l *ConnLimit) admit(c net.Conn) (*permitConn, bool) {
	select {
	case l.sem <- struct{}{}:
	default:
		return nil, false
	}
	pc := &permitConn{Conn: c, limit: l}
	l.mu.Lock()
	l.conns[pc] = struct{}{}
	l.mu.Unlock()
	return pc, true
}

func (l *ConnLimit) release(pc *permitConn) {
	l.mu.Lock()
	delete(l.conns, pc)
	if len(l.conns) == 0 && l.empty != nil {
		close(l.empty)
		l.empty = nil
	}
	l.mu.Unlock()
	<-l.sem
}

// DropOptions says how a listener reports the connections it drops.
type DropOptions struct {
	// Name is the listener label ("http", "https", "admin"), logged and
	// passed to OnDrop.
	Name string
	// Logger receives at most one line per second per listener, with the
	// number of drops it stands for (required).
	Logger *slog.Logger
	// Message is that line's message.
	Message string
	// OnDrop is called once per dropped connection (a metric); nil = none.
	OnDrop func()
}

// dropReporter counts and samples drops for one listener.
type dropReporter struct {
	DropOptions
	sampler *Sampler
}

func newDropReporter(o DropOptions) *dropReporter {
	return &dropReporter{DropOptions: o, sampler: NewSampler(time.Second)}
}

func (d *dropReporter) drop(peer net.Addr) {
	if d.OnDrop != nil {
		d.OnDrop()
	}
	if ok, n := d.sampler.Allow(); ok {
		d.Logger.Warn(d.Message,
			slog.String(telemetry.KeyListener, d.Name),
			slog.String(telemetry.KeyPeer, peer.String()),
			slog.Int(telemetry.KeyCount, n))
	}
}

// Listener wraps ln so that a connection accepted beyond the limit is
// closed at once with no response.
func (l *ConnLimit) Listener(ln net.Listener, o DropOptions) net.Listener {
	return &limitedListener{Listener: ln, limit: l, drops: newDropReporter(o)}
}

type limitedListener struct {
	net.Listener
	limit *ConnLimit
	drops *dropReporter
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if pc, ok := l.limit.admit(c); ok {
			return pc, nil
		}
		l.drops.drop(c.RemoteAddr())
		_ = c.Close()
	}
}

// permitConn returns its permit exactly once, on the first Close.
type permitConn struct {
	net.Conn
	once  sync.Once
	limit *ConnLimit
}

func (c *permitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.limit.release(c) })
	return err
}
