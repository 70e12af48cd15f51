package proxy

import (
	"log/slog"
	"net"
	"sync"
)

// ConnLimit is the one max_connections budget shared by every proxy
// listener (reference §7.3). A permit is taken when a connection is
// accepted and returned when it closes.
type ConnLimit struct {
	sem chan struct{}
}

// NewConnLimit returns a limit of n concurrent connections (n >= 1).
func NewConnLimit(n int) *ConnLimit {
	if n < 1 {
		n = 1
	}
	return &ConnLimit{sem: make(chan struct{}, n)}
}

// InUse reports how many permits are taken.
func (l *ConnLimit) InUse() int { return len(l.sem) }

func (l *ConnLimit) tryAcquire() bool {
	select {
	case l.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

func (l *ConnLimit) release() { <-l.sem }

// Listener wraps ln so that a connection accepted beyond the limit is closed
// at once with no response, as the reference does; dropMsg is the warning
// logged (with the peer address).
func (l *ConnLimit) Listener(ln net.Listener, logger *slog.Logger, dropMsg string) net.Listener {
	return &limitedListener{Listener: ln, limit: l, logger: logger, dropMsg: dropMsg}
}

type limitedListener struct {
	net.Listener
	limit   *ConnLimit
	logger  *slog.Logger
	dropMsg string
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.limit.tryAcquire() {
			return &permitConn{Conn: c, release: l.limit.release}, nil
		}
		l.logger.Warn(l.dropMsg, slog.String("peer", c.RemoteAddr().String()))
		_ = c.Close()
	}
}

// permitConn returns its permit exactly once, on the first Close.
type permitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *permitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
