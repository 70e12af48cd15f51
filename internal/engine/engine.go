// Package engine is BotBox's own HTTP/1.1 server for the common shape of
// an agent's traffic: keep-alive HTTP/1.1 requests with an ordinary head.
// It serves an http.Handler like net/http's server does, at a lower cost
// per request: one goroutine per client connection, no background read
// per request, one pooled write buffer per response, the head written
// straight from the handler's header map.
//
// # What it serves and what it hands over
//
// The choice is per connection. A connection is handed to the fallback
// http.Server (Options.Fallback, net/http), with every byte already read
// replayed, and stays there for the rest of its life, when the next
// request on it is anything but the common shape (handoff.go,
// needsNetHTTP):
//
//   - a TLS connection that negotiated h2, a cleartext one that opens with
//     the HTTP/2 preface (prior knowledge), any HTTP version but 1.1;
//   - CONNECT, the asterisk form (OPTIONS *), and a head that offers
//     Upgrade or carries Expect, or has a continuation line (obs-fold);
//   - a head that does not fit the read buffer (readBufferSize), whatever
//     its size limit: net/http applies MaxHeaderBytes to it.
//
// The handler sees a request on this engine through Serving (the decision
// line's engine field).
//
// # Parsing
//
// The head is parsed by package h1parse (http.ReadRequest, or a
// low-allocation reading of the common shape proved equal to it by its
// differential fuzz target) and then checked as net/http's server checks
// it (readRequest in head.go), so a head is never read differently from
// net/http (FuzzEngineMatchesNetHTTP compares whole connections): framing (Content-Length,
// Transfer-Encoding and their conflicts) and every refusal are net/http's.
// A refused head is answered like net/http answers it (400, 431, 501,
// 505, with Connection: close) and the connection is closed.
//
// # Contracts the handler may rely on
//
//   - The request context ends when ServeHTTP returns (as net/http), and
//     when the server is closed. Unlike net/http it does not end when the
//     client goes away while the handler runs: nothing reads the
//     connection then (no background read). The handler learns it from a
//     failed write.
//   - The response writer implements http.Flusher, FlushError,
//     SetWriteDeadline and SetReadDeadline (http.ResponseController), and
//     AdoptHeader (take a header map as the response's own, no copy). It
//     does not implement Hijack: upgrades are served by the fallback.
//   - Framing of the response: the Content-Length the handler set, else
//     chunked; none for HEAD, 1xx, 204 and 304. Trailers announced in the
//     Trailer header (or set with http.TrailerPrefix) follow a chunked
//     body. Unlike net/http, no Content-Type is sniffed and no
//     Content-Length computed for a handler that sets none.
//   - A request body the handler left unread is drained (up to 256 KiB,
//     as net/http) before the next request is read, or the connection is
//     closed: the next head is never read from inside a body. Each
//     request's body is its own: read after the handler returned (a
//     transport still sending it), it fails with
//     http.ErrBodyReadAfterClose, as on net/http, and never reaches the
//     next request's.
//   - A panic with http.ErrAbortHandler closes the connection without
//     finishing the response (the client sees it truncated), as net/http.
package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Options configures New.
type Options struct {
	// Handler serves every request on the engine (required).
	Handler http.Handler
	// Fallback serves the connections the engine hands over (required).
	// Its Handler serves their requests; New starts nothing: Serve
	// starts the fallback on an internal listener.
	Fallback *http.Server
	// ReadHeaderTimeout bounds the read of a request head, from its first
	// byte (0: none).
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a keep-alive
	// connection (0: ReadHeaderTimeout; both 0: none).
	IdleTimeout time.Duration
	// Logger receives the server's own errors (a handler panic); nil
	// discards them.
	Logger *slog.Logger
}

// Server is an HTTP/1.1 server. It is safe for concurrent use.
type Server struct {
	opts     Options
	handoff  *handoffListener
	fallback sync.Once
	fbErr    chan error

	mu        sync.Mutex
	listeners map[*net.Listener]struct{}
	conns     map[*conn]struct{}
	closing   atomic.Bool
	date      dateCache
	done      chan struct{} // closed when the last conn leaves after closing
}

// ErrServerClosed is returned by Serve after Shutdown or Close
// (http.ErrServerClosed, so callers treat both servers alike).
var ErrServerClosed = http.ErrServerClosed

// New returns a server; it serves nothing until Serve.
func New(opts Options) (*Server, error) {
	if opts.Handler == nil || opts.Fallback == nil {
		return nil, errors.New("engine: Handler and Fallback are required")
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = opts.ReadHeaderTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{
		opts:      opts,
		handoff:   newHandoffListener(),
		fbErr:     make(chan error, 1),
		listeners: make(map[*net.Listener]struct{}),
		conns:     make(map[*conn]struct{}),
	}, nil
}

// servingKey marks the context of a request served by the engine.
type servingKey struct{}

// Serving reports whether ctx is the context of a request served by this
// engine (and not by net/http).
func Serving(ctx context.Context) bool {
	_, ok := ctx.Value(servingKey{}).(struct{})
	return ok
}

// Serve accepts connections on ln and serves each on its own goroutine
// until ln fails or the server is shut down; it then returns
// ErrServerClosed (after Shutdown or Close) or the accept error. It
// closes ln.
func (s *Server) Serve(ln net.Listener) error {
	s.fallback.Do(func() {
		go func() { s.fbErr <- s.opts.Fallback.Serve(s.handoff) }()
	})
	if !s.track(&ln, true) {
		_ = ln.Close()
		return ErrServerClosed
	}
	defer s.track(&ln, false)
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			if retryableAccept(err) {
				// Out of descriptors or memory, an aborted connection: back
				// off and go on, as net/http does, so that exhaustion never
				// stops the listener.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		cn := newConn(s, c)
		if !s.addConn(cn) {
			_ = c.Close()
			continue
		}
		go cn.serve()
	}
}

func (s *Server) track(ln *net.Listener, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.closing.Load() {
			return false
		}
		s.listeners[ln] = struct{}{}
		return true
	}
	delete(s.listeners, ln)
	return true
}

func (s *Server) addConn(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if s.done != nil && len(s.conns) == 0 {
		close(s.done)
		s.done = nil
	}
}

// beginClose stops accepting: it closes the listeners and returns a
// channel closed once no engine connection is left.
func (s *Server) beginClose() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing.Store(true)
	for ln := range s.listeners {
		_ = (*ln).Close()
	}
	done := make(chan struct{})
	if len(s.conns) == 0 {
		close(done)
	} else {
		s.done = done
	}
	return done
}

// closeIdle closes the connections waiting for a request; with all set,
// every connection (their requests' contexts are cancelled too).
func (s *Server) closeIdle(all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if all || c.idle.Load() {
			c.close()
		}
	}
}

// Shutdown stops accepting, closes idle connections, lets the requests in
// flight finish (each connection closes after its response) and then
// shuts the fallback down, all within ctx, like http.Server.Shutdown. It
// returns ctx's error when the deadline passed first; the connections
// still open are then left to Close.
func (s *Server) Shutdown(ctx context.Context) error {
	done := s.beginClose()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		s.closeIdle(false)
		select {
		case <-done:
			return s.opts.Fallback.Shutdown(ctx)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Close closes the listeners and every connection, the fallback's too.
func (s *Server) Close() error {
	s.beginClose()
	s.closeIdle(true)
	return s.opts.Fallback.Close()
}

// connectionStater is what a TLS connection (or a wrapper that keeps its
// state visible, as package listener's) offers; net/http looks for the
// same interface to fill Request.TLS.
type connectionStater interface {
	ConnectionState() tls.ConnectionState
}

// retryableAccept reports whether an Accept error passes (net/http's
// "temporary" accept errors: EMFILE, ENFILE, ENOBUFS, ENOMEM,
// ECONNABORTED, a timeout) rather than ending the listener.
func retryableAccept(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
