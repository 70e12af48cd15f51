package dnsguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Bounds of the listeners. A query is one small message; the app's stub
// resolver sends one or two per name, over TCP only after a truncated
// answer, so these leave room for any well-behaved client while a
// misbehaving one can hold at most maxTCPConns goroutines and sockets.
const (
	// maxQuerySize is the UDP read buffer: a larger datagram is cut, fails
	// to parse and is answered FORMERR (the longest valid query, a
	// 255-octet name plus an OPT record, is far below it).
	maxQuerySize = 1232
	// maxTCPConns bounds the open TCP connections; more are closed at
	// once.
	maxTCPConns = 64
	// maxTCPQueries bounds the queries on one TCP connection.
	maxTCPQueries = 128
	// tcpIdleTimeout closes a TCP connection that sends no further query
	// after an answer (RFC 7766 suggests seconds).
	tcpIdleTimeout = 5 * time.Second
	// ioTimeout bounds reading one query (the first on a TCP connection:
	// a connection that sends nothing is closed after it) and writing one
	// answer.
	ioTimeout = 2 * time.Second
)

// Serve answers queries on the given UDP sockets and TCP listeners until
// ctx is cancelled, then shuts every server down, stops upstream waits
// (Close) and returns nil; if a socket fails before that, it shuts the
// others down too and returns the failure. The sockets are closed on
// return.
func (g *Guard) Serve(ctx context.Context, pcs []net.PacketConn, lns []net.Listener) error {
	var servers []*dns.Server
	for _, pc := range pcs {
		servers = append(servers, &dns.Server{PacketConn: pc, Net: "udp", Handler: g, UDPSize: maxQuerySize,
			ReadTimeout: g.ioWait, WriteTimeout: g.ioWait, MsgAcceptFunc: accept})
	}
	for _, ln := range lns {
		servers = append(servers, &dns.Server{Listener: &limitListener{Listener: ln, sem: make(chan struct{}, maxTCPConns)},
			Net: "tcp", Handler: g, ReadTimeout: g.ioWait, WriteTimeout: g.ioWait,
			IdleTimeout: func() time.Duration { return g.tcpIdle }, MaxTCPQueries: maxTCPQueries, MsgAcceptFunc: accept})
	}
	errs := make(chan error, len(servers))
	started := make(chan struct{}, len(servers))
	var wg sync.WaitGroup
	for _, s := range servers {
		s.NotifyStartedFunc = func() { started <- struct{}{} }
		wg.Add(1)
		go serveOne(&wg, s, errs)
	}
	// Every server must have started (or failed) before any is shut down:
	// dns.Server.ShutdownContext on a server that has not started yet
	// returns at once and the server then serves forever, so a Serve
	// cancelled right after it began would never return
	// (TestServeCancelledAtOnce).
	var err error
	for range servers {
		select {
		case <-started:
		case e := <-errs:
			if err == nil {
				err = e
			}
		}
	}
	if err == nil {
		select {
		case <-ctx.Done():
		case err = <-errs:
		}
	}
	g.Close()
	sctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	for _, s := range servers {
		_ = s.ShutdownContext(sctx)
	}
	wg.Wait()
	return err
}

// serveOne runs one dns.Server; a failure is reported on errs.
func serveOne(wg *sync.WaitGroup, s *dns.Server, errs chan<- error) {
	defer wg.Done()
	if err := s.ActivateAndServe(); err != nil && !errors.Is(err, net.ErrClosed) {
		errs <- fmt.Errorf("DNS guard %s listener: %w", s.Net, err)
	}
}

// accept is the servers' first look at a message header: a response is
// dropped; a non-QUERY opcode gets NOTIMP; more or less than one
// question, any answer or authority record, or more than one additional
// record (only an OPT is wanted) get FORMERR. ServeDNS checks the same
// again on the parsed message (FuzzServeDNS calls it directly).
func accept(dh dns.Header) dns.MsgAcceptAction {
	const qr = 1 << 15
	switch {
	case dh.Bits&qr != 0:
		return dns.MsgIgnore
	case int(dh.Bits>>11)&0xF != dns.OpcodeQuery:
		return dns.MsgRejectNotImplemented
	case dh.Qdcount != 1 || dh.Ancount != 0 || dh.Nscount != 0 || dh.Arcount > 1:
		return dns.MsgReject
	}
	return dns.MsgAccept
}

// limitListener closes accepted connections beyond cap(sem) open ones.
type limitListener struct {
	net.Listener
	sem chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.sem <- struct{}{}:
			return &permitConn{Conn: c, release: func() { <-l.sem }}, nil
		default:
			_ = c.Close()
		}
	}
}

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
