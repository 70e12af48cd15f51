package engine

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// readBufferSize is the size of a connection's read buffer, net/http's
// too: a request head must fit in it to be served by the engine (a larger
// one is handed to net/http).
const readBufferSize = 4 << 10

// maxPostHandlerReadBytes is how much of a request body the handler left
// unread is drained to keep the connection (net/http's value).
const maxPostHandlerReadBytes = 256 << 10

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}

// conn is one client connection and its request loop.
type conn struct {
	s      *Server
	rwc    net.Conn
	br     *bufio.Reader
	remote string
	tls    *tls.ConnectionState
	base   context.Context // carries servingKey; never cancelled
	// idle is set while the connection waits for a request (Shutdown
	// closes those).
	idle atomic.Bool
	// mu guards cancel and closed (close may run on another goroutine).
	mu     sync.Mutex
	cancel context.CancelFunc // the request in flight's, nil between requests
	closed bool

	resp response
	// lastMethod is the previous request's method: after a POST, CR and
	// LF before the next request line are skipped, as net/http does
	// (RFC 9112 §2.2 tolerance for old clients).
	lastMethod string
}

func newConn(s *Server, c net.Conn) *conn {
	cn := &conn{s: s, rwc: c, remote: c.RemoteAddr().String()}
	cn.base = context.WithValue(context.Background(), servingKey{}, struct{}{})
	return cn
}

// close closes the connection and cancels the request in flight; safe
// from any goroutine, any number of times.
func (c *conn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
	if !c.closed {
		c.closed = true
		_ = c.rwc.Close()
	}
}

func (c *conn) serve() {
	handedOff := false
	defer func() {
		if !handedOff {
			c.close()
		}
		if c.br != nil {
			c.br.Reset(nil)
			readerPool.Put(c.br)
			c.br = nil
		}
		c.s.removeConn(c)
	}()
	if ts, ok := c.rwc.(connectionStater); ok {
		st := ts.ConnectionState()
		if st.NegotiatedProtocol == "h2" {
			// HTTP/2 is net/http's; nothing was read yet.
			handedOff = c.s.handoff.give(c.rwc)
			return
		}
		c.tls = &st
	}
	c.br = readerPool.Get().(*bufio.Reader)
	c.br.Reset(c.rwc)
	first := true
	for {
		if !first && c.s.closing.Load() {
			return
		}
		h, err := c.awaitHead(first)
		first = false
		switch {
		case err != nil:
			// Closed, timed out or reset while idle: no response.
			return
		case h.verdict == handOver:
			handedOff = c.s.handoff.give(handedOver(c.rwc, c.br, c.tls))
			if handedOff {
				c.br = nil // the fallback's connection reads it now
			}
			return
		}
		if !c.serveOne(h) {
			return
		}
	}
}

// awaitHead waits for the next request head (the idle timeout until its
// first byte, then the header timeout) until it is complete in the read
// buffer, and says who serves it.
func (c *conn) awaitHead(first bool) (head, error) {
	o := &c.s.opts
	if !first {
		c.idle.Store(true)
		if o.IdleTimeout > 0 {
			_ = c.rwc.SetReadDeadline(time.Now().Add(o.IdleTimeout))
		}
		_, err := c.br.Peek(1)
		c.idle.Store(false)
		if err != nil {
			return head{}, err
		}
	}
	if o.ReadHeaderTimeout > 0 {
		_ = c.rwc.SetReadDeadline(time.Now().Add(o.ReadHeaderTimeout))
	}
	if c.lastMethod == http.MethodPost {
		peek, _ := c.br.Peek(4) // net/http's (conn.readRequest) as it is
		_, _ = c.br.Discard(numLeadingCRorLF(peek))
	}
	for {
		n := c.br.Buffered()
		if n == 0 {
			if _, err := c.br.Peek(1); err != nil {
				return head{}, err
			}
			continue
		}
		buf, _ := c.br.Peek(n)
		if h := judgeHead(buf); h.verdict != incomplete {
			return h, nil
		}
		if n >= readBufferSize {
			// The head does not fit: net/http reads it, with its limit.
			return head{verdict: handOver}, nil
		}
		if _, err := c.br.Peek(n + 1); err != nil {
			// Closed or timed out inside a head: no response, as net/http.
			return head{}, err
		}
	}
}

// serveOne reads, serves and finishes one request whose head is in the
// buffer; it reports whether the connection may carry another.
func (c *conn) serveOne(h head) (keep bool) {
	req, err := readRequest(c.br, h)
	if err != nil {
		c.writeEarlyError(err)
		return false
	}
	_ = c.rwc.SetReadDeadline(time.Time{})
	c.lastMethod = req.Method
	// A wrapper of this request's own, never reused: a transport's write
	// loop (or an HTTP/2 upstream's Close) may still hold it after the
	// handler returned, and must not reach the next request's body.
	var body *reqBody
	if req.Body != http.NoBody {
		body = &reqBody{rc: req.Body}
		req.Body = body
	}
	ctx, cancel := context.WithCancel(c.base)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cancel()
		return false
	}
	c.cancel = cancel
	c.mu.Unlock()
	// In place, not the copy WithContext returns: the parser's body
	// writes the trailers it reads into this very Request (as net/http's
	// server, which sets the context of the request it parsed).
	*req = *req.WithContext(ctx)
	req.RemoteAddr = c.remote
	req.TLS = c.tls
	w := &c.resp
	w.reset(c, req)
	w.body = body
	defer func() {
		c.mu.Lock()
		c.cancel = nil
		c.mu.Unlock()
		cancel()
		w.release()
	}()
	if !c.runHandler(w, req) {
		return false
	}
	if err := w.finish(); err != nil {
		return false
	}
	if body != nil && !body.drain() {
		return false
	}
	return !w.closeAfter
}

// runHandler calls the handler; false when it aborted the response
// (http.ErrAbortHandler) or panicked: the connection is then closed
// without finishing it.
func (c *conn) runHandler(w *response, req *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			ok = false
			if v != http.ErrAbortHandler {
				buf := make([]byte, 16<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.s.opts.Logger.Error("http: panic serving "+c.remote, slog.String("panic", fmt.Sprint(v)), slog.String("stack", string(buf)))
			}
		}
	}()
	c.s.opts.Handler.ServeHTTP(w, req)
	return true
}

// reqBody is the request body the handler reads: the parser's, whose
// Close would read an unbounded body to its end, behind one that records
// EOF and whose Close only stops further reads (the connection drains or
// closes afterwards, drain). After the handler returned, drain retires it:
// a late Read (a transport's write loop still sending it) gets
// http.ErrBodyReadAfterClose, as on net/http. mu serialises those reads
// with drain, as net/http's body lock does.
type reqBody struct {
	mu     sync.Mutex
	rc     io.ReadCloser
	eof    bool
	err    error // a read error other than EOF: the connection is unusable
	closed bool
}

func (b *reqBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.eof {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil:
		b.err = err
	}
	return n, err
}

func (b *reqBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

// readToEnd reports whether the body was read to its end; false while a
// Read is in flight (TryLock: a Read holds the lock while it waits for
// the client).
func (b *reqBody) readToEnd() bool {
	if !b.mu.TryLock() {
		return false
	}
	defer b.mu.Unlock()
	return b.eof
}

// drain retires the body (later Reads fail) and reads what the handler
// left of it, up to maxPostHandlerReadBytes; it reports whether the body
// ended cleanly (the next head starts right after it).
func (b *reqBody) drain() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.err != nil {
		return false
	}
	if b.eof {
		return true
	}
	_, err := io.CopyN(io.Discard, b.rc, maxPostHandlerReadBytes+1)
	return errors.Is(err, io.EOF)
}

func numLeadingCRorLF(v []byte) (n int) {
	for _, b := range v {
		if b == '\r' || b == '\n' {
			n++
			continue
		}
		break
	}
	return n
}
