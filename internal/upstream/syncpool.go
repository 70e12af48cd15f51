package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The synchronous HTTP/1.1 pool.
//
// SyncTransport is the upstream side of BotBox's own HTTP/1.1 engine
// (issue 24): a round tripper that writes the request and reads the
// response head on the calling goroutine, from a pool of HTTP/1.1
// connections that have no goroutine of their own. Where http.Transport
// runs a read loop and a write loop per connection and hands every request
// and response between them over channels, a SyncTransport connection is a
// socket, its TLS state and a 32 KiB bufio.Reader, owned by one request at
// a time.
//
// What it shares with the Transport it comes from (Transport.Sync): the
// dialer and the address guard (the same DialFunc: ControlContext on the
// default dialer, checked on an injected one), the roots and the TLS
// session cache, ConnectTimeout, the connection bounds and the
// response-header timeout semantics. Connections are pooled per (poolKey of
// the request's DialPolicy, scheme, host, port), so that the guard's
// verdict at dial time holds for every request a connection carries, as
// for the Transport's pools (TestSyncPoolIsolatedByDialPolicy).

// maxSyncHeadBytes bounds a response head (1xx heads included, each on its
// own): net/http's default MaxResponseHeaderBytes, which the Transport
// uses.
const maxSyncHeadBytes = 10 << 20

// maxSync1xx is how many informational (1xx) responses may precede the
// final one, as net/http.
const maxSync1xx = 5

// maxSyncDrain is how much of a response body Close may still read to keep
// the connection, and only from what is already buffered (no wait).
const maxSyncDrain = 64 << 10

// syncBufSize is the size of a connection's read buffer and of the pooled
// write buffers (the Transport's ReadBufferSize and WriteBufferSize).
const syncBufSize = 32 << 10

// SyncTransport is a synchronous HTTP/1.1 round tripper (see Transport.Sync).
// It is safe for concurrent use.
type SyncTransport struct {
	dial           DialFunc
	tlsConfig      *tls.Config // roots, session cache, ALPN http/1.1; cloned per dial with ServerName
	connectTimeout time.Duration
	idleTimeout    time.Duration
	headerTimeout  time.Duration
	maxPerHost     int
	maxIdlePerHost int
	maxIdle        int
	maxHeadBytes   int64 // maxSyncHeadBytes (tests lower it)

	writers sync.Pool // *bufio.Writer of syncBufSize, held while a request is written

	mu    sync.Mutex
	hosts map[hostKey]*hostPool
	idle  idleList // every idle connection, least recently used first
}

// newSyncTransport builds the SyncTransport of a Transport from the
// options NewTransport resolved (defaults applied) and its dial function.
func newSyncTransport(o Options, dial DialFunc, cfg *tls.Config) *SyncTransport {
	return &SyncTransport{
		dial:           dial,
		tlsConfig:      cfg,
		connectTimeout: o.ConnectTimeout,
		idleTimeout:    o.IdleConnTimeout,
		headerTimeout:  o.ResponseHeaderTimeout,
		maxPerHost:     o.MaxConnsPerHost,
		maxIdlePerHost: o.MaxIdleConnsPerHost,
		maxIdle:        o.MaxIdleConns,
		maxHeadBytes:   maxSyncHeadBytes,
		writers:        sync.Pool{New: func() any { return bufio.NewWriterSize(nil, syncBufSize) }},
		hosts:          make(map[hostKey]*hostPool),
	}
}

// Sync returns the synchronous HTTP/1.1 round tripper sharing t's dialer,
// address guard, roots and TLS session cache, connection bounds and
// response-header timeout semantics. It is cheap and returns the same
// *SyncTransport each time. CloseIdleConnections on t closes its idle
// connections too.
func (t *Transport) Sync() http.RoundTripper { return t.syncRT }

// hostKey names one pool of interchangeable connections.
type hostKey struct {
	policy poolKey // what the dial guard's verdict depended on
	tls    bool
	host   string // as in the URL, without brackets
	port   string // defaulted to 443 or 80
}

// hostPool is the connections of one hostKey. All fields are guarded by
// SyncTransport.mu.
type hostPool struct {
	key hostKey
	// conns counts the connections of this key: dialling, carrying a
	// request and idle, and the slots handed to waiters. It never exceeds
	// maxPerHost.
	conns int
	// idle is the idle connections, most recently used last. While it is
	// not empty waiters is empty: a connection put back goes to a waiter
	// first.
	idle []*syncConn
	// waiters is the requests waiting for a connection, first come first.
	waiters []*connWaiter
}

// connWaiter is a request waiting for a connection of a full hostPool: it
// receives a connection to use, or nil for a slot to dial with.
type connWaiter struct{ ch chan *syncConn }

// idleList is an intrusive doubly linked list of idle connections.
type idleList struct {
	head, tail *syncConn // head: least recently used
	n          int
}

func (l *idleList) pushBack(c *syncConn) {
	c.prev, c.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
	l.n++
}

func (l *idleList) remove(c *syncConn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next = nil, nil
	l.n--
}

// syncConn is one upstream HTTP/1.1 connection. Between getConn and
// release it belongs to one request; idle, it belongs to the pool.
type syncConn struct {
	t  *SyncTransport
	hp *hostPool

	conn     net.Conn        // what requests are written to and read from: *tls.Conn or raw
	raw      net.Conn        // the TCP connection
	tls      *tls.Conn       // nil for cleartext
	rawConn  syscall.RawConn // raw's, for the liveness peek; nil when raw has none
	peeker   peeker
	tlsState *tls.ConnectionState
	br       *bufio.Reader // reads through the syncConn (Read) to apply headLeft
	// headLeft is how many bytes the response head being read may still
	// take; < 0 while no head is being read.
	headLeft int64
	// abort is what the request's context.AfterFunc calls: it ends the
	// open response body (body), else closes the socket.
	abort func()
	body  atomic.Pointer[syncBody]
	// requests counts the requests the connection carried (reused when > 0).
	requests  int
	idleSince time.Time
	prev      *syncConn // in SyncTransport.idle
	next      *syncConn
}

var errHeadTooLarge = errors.New("upstream response head too large (net/http's limit, 10 MiB)")

// Read is the connection as the bufio.Reader sees it: bounded while a
// response head is read.
func (c *syncConn) Read(p []byte) (int, error) {
	if c.headLeft < 0 {
		return c.conn.Read(p)
	}
	if c.headLeft == 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > c.headLeft {
		p = p[:c.headLeft]
	}
	n, err := c.conn.Read(p)
	c.headLeft -= int64(n)
	return n, err
}

// closeSocket closes the TCP connection (no TLS close_notify: it could
// block on a peer that does not read, and HTTP/1.1 framing does not need
// it). Safe to call more than once and concurrently.
func (c *syncConn) closeSocket() { _ = c.raw.Close() }

// alive reports whether an idle connection may carry a request: nothing to
// read on its socket, neither data (an unsolicited response) nor EOF. It
// never blocks and starts no goroutine.
func (c *syncConn) alive() bool {
	if c.rawConn == nil {
		return true // an injected dialer's conn without a socket: the retry covers it
	}
	return c.peeker.alive(c.rawConn)
}

// clean reports whether a connection whose response ended may be kept:
// nothing left unread, neither in the bufio.Reader nor (TLS) decrypted or
// received inside the tls.Conn. Bytes an origin sent after the end of its
// response would otherwise be read as the next request's response.
func (c *syncConn) clean() bool {
	if c.br.Buffered() != 0 {
		return false
	}
	if c.tls == nil {
		return true
	}
	// A read whose deadline has passed returns what the tls.Conn holds
	// (or io.EOF for a close_notify already received) and otherwise fails
	// at once, without a system call. The timeout does not stick.
	if c.raw.SetReadDeadline(aLongTimeAgo) != nil {
		return false
	}
	var one [1]byte
	n, err := c.tls.Read(one[:])
	if n != 0 || !isDeadline(err) {
		return false
	}
	return c.raw.SetReadDeadline(time.Time{}) == nil
}

var aLongTimeAgo = time.Unix(1, 0)

func isDeadline(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// hostLocked returns the pool of k, made if needed.
func (t *SyncTransport) hostLocked(k hostKey) *hostPool {
	hp := t.hosts[k]
	if hp == nil {
		hp = &hostPool{key: k}
		t.hosts[k] = hp
	}
	return hp
}

// popIdleLocked takes the most recently used idle connection of hp that
// has not outlived the idle timeout. Expired ones (and, since they are
// older, every one below them) are removed and returned to be closed
// outside the lock; their slots are released.
func (t *SyncTransport) popIdleLocked(hp *hostPool, now time.Time) (c *syncConn, expired []*syncConn) {
	for len(hp.idle) > 0 {
		last := hp.idle[len(hp.idle)-1]
		hp.idle[len(hp.idle)-1] = nil
		hp.idle = hp.idle[:len(hp.idle)-1]
		t.idle.remove(last)
		if now.Sub(last.idleSince) <= t.idleTimeout {
			return last, expired
		}
		expired = append(expired, last)
		t.releaseSlotLocked(hp)
	}
	return nil, expired
}

// releaseSlotLocked gives up one of hp's connections (closed, or never
// dialled): to the first waiter, as a slot to dial with, or off the count.
// A pool left with nothing is forgotten.
func (t *SyncTransport) releaseSlotLocked(hp *hostPool) {
	if len(hp.waiters) > 0 {
		w := hp.waiters[0]
		hp.waiters[0] = nil
		hp.waiters = hp.waiters[1:]
		w.ch <- nil
		return
	}
	hp.conns--
	if hp.conns == 0 && t.hosts[hp.key] == hp {
		delete(t.hosts, hp.key)
	}
}

// releaseSlot is releaseSlotLocked with the lock.
func (t *SyncTransport) releaseSlot(hp *hostPool) {
	t.mu.Lock()
	t.releaseSlotLocked(hp)
	t.mu.Unlock()
}

// discard closes c and releases its slot.
func (c *syncConn) discard() {
	c.closeSocket()
	c.t.releaseSlot(c.hp)
}

// put returns c, whose response ended cleanly, to a waiter or the idle
// pool, and closes what the bounds push out (c itself when its host's idle
// pool is full; the least recently used idle connections beyond
// MaxIdleConns, and those past IdleConnTimeout).
func (t *SyncTransport) put(c *syncConn) {
	hp := c.hp
	now := time.Now()
	var toClose []*syncConn
	t.mu.Lock()
	switch {
	case len(hp.waiters) > 0:
		w := hp.waiters[0]
		hp.waiters[0] = nil
		hp.waiters = hp.waiters[1:]
		w.ch <- c
	case len(hp.idle) >= t.maxIdlePerHost:
		toClose = append(toClose, c)
		t.releaseSlotLocked(hp)
	default:
		c.idleSince = now
		hp.idle = append(hp.idle, c)
		t.idle.pushBack(c)
	}
	for o := t.idle.head; o != nil && (t.idle.n > t.maxIdle || now.Sub(o.idleSince) > t.idleTimeout); o = t.idle.head {
		t.removeIdleLocked(o)
		toClose = append(toClose, o)
	}
	t.mu.Unlock()
	for _, o := range toClose {
		o.closeSocket()
	}
}

// removeIdleLocked takes the idle connection o out of both lists and
// releases its slot.
func (t *SyncTransport) removeIdleLocked(o *syncConn) {
	t.idle.remove(o)
	ohp := o.hp
	if i := slices.Index(ohp.idle, o); i >= 0 {
		ohp.idle = slices.Delete(ohp.idle, i, i+1)
	}
	t.releaseSlotLocked(ohp)
}

// CloseIdleConnections closes every idle connection. Connections carrying
// a request are kept and pooled when it ends.
func (t *SyncTransport) CloseIdleConnections() {
	var toClose []*syncConn
	t.mu.Lock()
	for o := t.idle.head; o != nil; o = t.idle.head {
		t.removeIdleLocked(o)
		toClose = append(toClose, o)
	}
	t.mu.Unlock()
	for _, o := range toClose {
		o.closeSocket()
	}
}

// getConn returns a connection of key k for a request: an idle one that
// passes the liveness check, else a new one when the bound allows, else
// the first one released (waiting within ctx). wasIdle and idle describe
// an idle connection taken from the pool (httptrace.GotConnInfo).
func (t *SyncTransport) getConn(ctx context.Context, k hostKey) (c *syncConn, wasIdle bool, idle time.Duration, err error) {
	haveSlot := false // we hold one of hp.conns with no connection in it
	var hp *hostPool
	for {
		now := time.Now()
		t.mu.Lock()
		if hp == nil {
			hp = t.hostLocked(k)
		}
		var expired []*syncConn
		c, expired = t.popIdleLocked(hp, now)
		if c != nil && haveSlot {
			// The slot of a dead connection is not needed: idle is not
			// empty, so there is no waiter to give it to.
			t.releaseSlotLocked(hp)
			haveSlot = false
		}
		var w *connWaiter
		if c == nil && !haveSlot {
			if hp.conns < t.maxPerHost {
				hp.conns++
				haveSlot = true
			} else {
				w = &connWaiter{ch: make(chan *syncConn, 1)}
				hp.waiters = append(hp.waiters, w)
			}
		}
		t.mu.Unlock()
		for _, o := range expired {
			o.closeSocket()
		}
		if w != nil {
			if c, err = t.wait(ctx, hp, w); err != nil {
				return nil, false, 0, err
			}
			if c != nil {
				return c, false, 0, nil
			}
			haveSlot = true
		}
		if c == nil {
			break
		}
		if c.alive() {
			return c, true, now.Sub(c.idleSince), nil
		}
		// Closed by the origin, or it sent something unasked: its slot
		// is ours; take another idle connection or dial with it.
		c.closeSocket()
		haveSlot = true
	}
	c, err = t.dialConn(ctx, hp)
	if err != nil {
		t.releaseSlot(hp)
		return nil, false, 0, err
	}
	return c, false, 0, nil
}

// wait waits for w's connection or slot, or for ctx to end.
func (t *SyncTransport) wait(ctx context.Context, hp *hostPool, w *connWaiter) (*syncConn, error) {
	select {
	case c := <-w.ch:
		return c, nil
	case <-ctx.Done():
	}
	t.mu.Lock()
	if i := slices.Index(hp.waiters, w); i >= 0 {
		hp.waiters = slices.Delete(hp.waiters, i, i+1)
		t.mu.Unlock()
	} else {
		// Handed a connection or a slot meanwhile: give it back.
		t.mu.Unlock()
		if c := <-w.ch; c != nil {
			t.put(c)
		} else {
			t.releaseSlot(hp)
		}
	}
	return nil, fmt.Errorf("waiting for a connection to %s (upstream_max_conns_per_host %d reached): %w",
		net.JoinHostPort(hp.key.host, hp.key.port), t.maxPerHost, ctx.Err())
}

// dialConn dials a connection for hp (whose slot the caller holds) through
// the Transport's dialer and guard, and for https does the TLS handshake
// (ALPN http/1.1 only, verified against the roots, ServerName the URL's
// host). Connect and handshake together are bounded by ConnectTimeout;
// ctx's end closes the socket.
func (t *SyncTransport) dialConn(ctx context.Context, hp *hostPool) (*syncConn, error) {
	deadline := time.Now().Add(t.connectTimeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	addr := net.JoinHostPort(hp.key.host, hp.key.port)
	raw, err := t.dial(dctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("dialling %s: %w (%w)", addr, ctx.Err(), err)
		}
		return nil, err
	}
	c := &syncConn{t: t, hp: hp, raw: raw, conn: raw, headLeft: -1}
	c.abort = func() {
		if b := c.body.Load(); b != nil {
			b.ctxDone()
			return
		}
		c.closeSocket()
	}
	if sc, ok := raw.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			c.rawConn = rc
		}
	}
	if hp.key.tls {
		cfg := t.tlsConfig.Clone()
		cfg.ServerName = hp.key.host
		tc := tls.Client(raw, cfg)
		if err := raw.SetDeadline(deadline); err != nil {
			_ = raw.Close()
			return nil, err
		}
		stop := func() bool { return true }
		if ctx.Done() != nil {
			stop = context.AfterFunc(ctx, c.abort)
		}
		err := tc.Handshake()
		stopped := stop()
		if err == nil && !stopped {
			err = errors.New("cancelled")
		}
		if err != nil {
			_ = raw.Close()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("TLS handshake with %s: %w (%w)", addr, ctx.Err(), err)
			}
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		if err := raw.SetDeadline(time.Time{}); err != nil {
			_ = raw.Close()
			return nil, err
		}
		st := tc.ConnectionState()
		c.tls, c.conn, c.tlsState = tc, tc, &st
	}
	c.br = bufio.NewReaderSize(c, syncBufSize)
	return c, nil
}
