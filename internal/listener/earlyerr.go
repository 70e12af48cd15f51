package listener

import (
	"bytes"
	"crypto/tls"
	"net"
	"strconv"
	"sync/atomic"
)

// earlyErrorHeaders is what net/http's conn.serve writes between the status
// line and the body of the responses it sends on its own, before any
// handler runs (malformed request line or Host, unsupported
// Transfer-Encoding, oversized head, unsupported HTTP version). A response
// written through http.ResponseWriter never has this shape: its headers
// are sorted (Connection before Content-Type) and carry a Date.
const earlyErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// EarlyErrorFunc receives the status code of an early-error response and
// the connection it was written to.
type EarlyErrorFunc func(status int, c net.Conn)

// parseEarlyError recognises one early-error response written in a single
// Write, as net/http does ("HTTP/1.1 <code> <text>" + earlyErrorHeaders +
// body), and returns its status code.
func parseEarlyError(b []byte) (int, bool) {
	const prefix = "HTTP/1.1 "
	if len(b) < len(prefix)+4 || !bytes.HasPrefix(b, []byte(prefix)) || b[len(prefix)+3] != ' ' {
		return 0, false
	}
	code, err := strconv.Atoi(string(b[len(prefix) : len(prefix)+3]))
	if err != nil || code < 400 || code > 599 {
		return 0, false
	}
	i := bytes.Index(b, []byte("\r\n"))
	if i < 0 || !bytes.HasPrefix(b[i:], []byte(earlyErrorHeaders)) {
		return 0, false
	}
	return code, true
}

// ObserveEarlyErrors wraps ln so that fn sees every error response net/http
// writes before a handler runs, on plain HTTP/1 connections and on TLS
// connections that negotiated HTTP/1 (TestObserveEarlyErrors). A *tls.Conn
// that negotiated h2 is passed through untouched: http.Server needs the
// *tls.Conn itself to start HTTP/2, and HTTP/2 has no such responses (a
// malformed stream is reset by the HTTP/2 server). A cleartext connection
// that opens with the HTTP/2 client preface (prior knowledge, served when
// http.Server.Protocols has UnencryptedHTTP2) is recognised as it is read,
// before net/http answers anything on it, and from then on its writes are
// passed on uninspected: they are HTTP/2 frames, never an early error
// (TestObserveEarlyErrorsSkipsPriorKnowledgeH2). A TLS connection is
// wrapped in a type with ConnectionState, so that http.Server still fills
// Request.TLS for it.
//
// Only whole responses in one Write are recognised, which is how net/http
// writes them; a hijacked tunnel's data is seen too, so a peer could make
// fn fire spuriously on its own connection: fn must be bounded (a counter,
// a sampled log line), never a decision.
func ObserveEarlyErrors(ln net.Listener, fn EarlyErrorFunc) net.Listener {
	return &earlyErrorListener{Listener: ln, fn: fn}
}

type earlyErrorListener struct {
	net.Listener
	fn EarlyErrorFunc
}

func (l *earlyErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*tls.Conn); ok {
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			return c, nil
		}
		// HTTP/2 inside TLS is chosen by ALPN (above), never by a preface
		// on an HTTP/1 connection: no sniffing.
		return &earlyErrorTLSConn{earlyErrorConn{Conn: c, fn: l.fn, matched: -1}, tc}, nil
	}
	return &earlyErrorConn{Conn: c, fn: l.fn}, nil
}

// h2Preface is the HTTP/2 client connection preface (RFC 9113 §3.4).
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

type earlyErrorConn struct {
	net.Conn
	fn EarlyErrorFunc
	// matched counts the bytes read so far that equal the start of
	// h2Preface; -1 once the connection is known not to open with it.
	// Only Read touches it, and net/http reads the start of a connection
	// from one goroutine.
	matched int
	// h2 is set once the whole preface was read: the connection speaks
	// HTTP/2 and Write no longer inspects what it writes.
	h2 atomic.Bool
}

func (c *earlyErrorConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.matched >= 0 && n > 0 {
		c.sniff(b[:n])
	}
	return n, err
}

// sniff advances the preface match over the next bytes read.
func (c *earlyErrorConn) sniff(b []byte) {
	rest := h2Preface[c.matched:]
	k := min(len(b), len(rest))
	if string(b[:k]) != rest[:k] {
		c.matched = -1
		return
	}
	c.matched += k
	if c.matched == len(h2Preface) {
		c.matched = -1
		c.h2.Store(true)
	}
}

func (c *earlyErrorConn) Write(b []byte) (int, error) {
	if len(b) > 0 && b[0] == 'H' && !c.h2.Load() {
		if code, ok := parseEarlyError(b); ok {
			c.fn(code, c.Conn)
		}
	}
	return c.Conn.Write(b)
}

// earlyErrorTLSConn keeps the TLS state visible to http.Server, which sets
// Request.TLS from any conn with a ConnectionState method.
type earlyErrorTLSConn struct {
	earlyErrorConn
	tc *tls.Conn
}

func (c *earlyErrorTLSConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }
