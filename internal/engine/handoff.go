package engine

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"sync"
)

// handoffListener is the listener the fallback http.Server serves: its
// Accept returns the connections the engine hands over.
type handoffListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newHandoffListener() *handoffListener {
	return &handoffListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

// give hands c to the fallback; false (c untouched) when the fallback
// has stopped.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return handoffAddr{} }

type handoffAddr struct{}

func (handoffAddr) Network() string { return "handoff" }
func (handoffAddr) String() string  { return "engine-handoff" }

// prefixConn is a connection handed over after the engine read from it:
// Read returns what the engine's buffer holds first (the head net/http is
// to parse, and anything pipelined behind it), then reads the connection.
type prefixConn struct {
	net.Conn
	mu sync.Mutex
	br *bufio.Reader // nil once drained (and back in the pool)
}

func (c *prefixConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if c.br != nil {
		if c.br.Buffered() > 0 {
			defer c.mu.Unlock()
			return c.br.Read(p) // never reads the connection: Buffered > 0
		}
		c.br.Reset(nil)
		readerPool.Put(c.br)
		c.br = nil
	}
	c.mu.Unlock()
	return c.Conn.Read(p)
}

// CloseWrite half-closes the connection when it can (a TCP connection):
// an upgrade tunnel passes the origin's end of stream on to the client.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// tlsPrefixConn is a prefixConn of a TLS connection: it keeps the TLS
// state visible (ConnectionState), so that net/http fills Request.TLS for
// its requests as for its own connections.
type tlsPrefixConn struct {
	*prefixConn
	state *tls.ConnectionState
}

func (c *tlsPrefixConn) ConnectionState() tls.ConnectionState { return *c.state }

// handedOver returns the connection the fallback serves for rwc, whose
// unread bytes are in br.
func handedOver(rwc net.Conn, br *bufio.Reader, state *tls.ConnectionState) net.Conn {
	p := &prefixConn{Conn: rwc, br: br}
	if state != nil {
		return &tlsPrefixConn{prefixConn: p, state: state}
	}
	return p
}
