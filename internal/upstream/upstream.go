// Package upstream builds the egress side of BotBox: the HTTP transport that
// originates TLS to allowed origins, with its trust roots, timeouts and
// connection pool.
//
// It deliberately does not decide what may be reached (package policy does)
// and does not touch headers (package rewrite does).
//
// # Resource bounds
//
// Upstream sockets are bounded per origin (Options.MaxConnsPerHost: dialling,
// active and idle together; further requests wait) and idle ones across all
// origins (Options.MaxIdleConns). TestMaxConnsPerHostBoundsSockets holds the
// per-origin bound under a flood of concurrent requests. The bounds hold
// per connection pool: requests with different address guard exceptions
// use different pools (see Dial guard), so an origin reached under k
// distinct exceptions may hold k times the bound; in practice one or two.
//
// # Dial guard
//
// Options.Guard is the hook the address guard (SPEC §5.3) plugs into: it is
// called with the IP and port of every connection the transport makes, and a
// non-nil error refuses that connection with an *AddrDeniedError. With the
// default dialer it runs in net.Dialer.ControlContext, on the socket's
// address before connect(2), for every address tried (each Happy Eyeballs
// attempt included). A dialer injected through Options.Dial cannot skip it:
// the connection it returns is checked (its RemoteAddr) before any byte is
// written, and closed when refused. The request's exceptions travel in its
// context (WithDialPolicy); the guard reads them with DialPolicyFrom.
// CheckAddress is the Guard that applies package addrguard with them.
//
// The check runs when a connection is made, on the address connect(2) is
// given, after the one resolution of the name: nothing resolves the name
// again between the check and the connect, so a DNS answer that changes
// between two lookups (rebinding) cannot change what is dialled
// (TestResolveOnceDial). A pooled connection is reused only by requests
// whose DialPolicy would have admitted it the same way: Transport keeps
// one pool per guard and exceptions (pools.go,
// TestPooledConnNotReusedAcrossOptIns).
//
// # Response-header timeout
//
// The wait for an origin's response head is bounded per request by
// Transport, not by http.Transport.ResponseHeaderTimeout (which is one value
// for every request): the request's own value (WithResponseHeaderTimeout, a
// rule's response_header_timeout_ms) or else Options.ResponseHeaderTimeout
// (upstream_response_header_timeout_ms, default 10 minutes). The clock
// starts when the request, body included, has been written
// (httptrace WroteRequest, as Go's own timeout) and stops at the first byte
// of the response (GotFirstResponseByte); a request whose body is still
// being sent when the response starts (gRPC bidi streams) is never timed.
// On expiry the round trip is cancelled and fails with an error that
// IsTimeout reports (errors.Is context.DeadlineExceeded, and a net.Error
// whose Timeout is true): the proxy answers 504. Streams that go silent
// after their head are not affected. TestResponseHeaderTimeoutPerRequest
// holds this.
//
// # Synchronous HTTP/1.1 pool
//
// Transport.Sync returns a SyncTransport: the same dialer, guard, roots,
// bounds and response-header timeout, but HTTP/1.1 only and synchronous
// (the request written and the response head read on the caller's
// goroutine, no goroutine per connection). BotBox's own HTTP/1.1 engine
// uses it (issue 24); see syncpool.go and SyncTransport.RoundTrip.
//
// Typical use:
//
//	tr, err := upstream.NewTransport(upstream.Options{CAFile: cfg.UpstreamCAFile, Guard: g, ...})
//	proxy := &httputil.ReverseProxy{Transport: tr, ...}
//	// per request, before the round trip:
//	ctx := upstream.WithDialPolicy(req.Context(), upstream.DialPolicy{Host: host})
//	if d := gen.ResponseHeaderTimeout(decision); d > 0 {
//		ctx = upstream.WithResponseHeaderTimeout(ctx, d)
//	}
//	req = req.WithContext(ctx)
package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/botbox/botbox/internal/addrguard"
)

// Defaults of the connection bounds (config keys upstream_max_conns_per_host
// and upstream_max_idle_conns) and the per-origin idle pool.
const (
	DefaultMaxConnsPerHost     = 512
	DefaultMaxIdleConns        = 1024
	DefaultMaxIdleConnsPerHost = 256
)

// DefaultResponseHeaderTimeout is the default wait for a response head
// (config key upstream_response_header_timeout_ms): the request timeout of
// the OpenAI and Anthropic SDKs, because a reasoning model may think for
// minutes before its first byte. The reference used 30 s.
const DefaultResponseHeaderTimeout = 10 * time.Minute

// DialFunc dials an upstream TCP connection.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Options configures NewTransport. Zero durations take the documented defaults.
type Options struct {
	// CAFile is an optional PEM bundle whose certificates are trusted in
	// addition to the system roots ("" = system roots only).
	CAFile string
	// RootCAs, when non-nil, replaces the system roots (tests).
	RootCAs *x509.CertPool
	// ConnectTimeout bounds TCP connect plus TLS handshake (default 10s).
	ConnectTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the response head after the
	// request was fully written, for requests without their own
	// (WithResponseHeaderTimeout); default DefaultResponseHeaderTimeout.
	ResponseHeaderTimeout time.Duration
	// IdleConnTimeout closes pooled idle connections (default 90s).
	IdleConnTimeout time.Duration
	// MaxIdleConnsPerHost is the keep-alive pool size per origin (default
	// 256, and never more than MaxConnsPerHost).
	MaxIdleConnsPerHost int
	// MaxConnsPerHost bounds the connections to one origin host:port,
	// dialling, active and idle together (default 512). A request that finds
	// every one busy waits for one, within its context and timeouts.
	MaxConnsPerHost int
	// MaxIdleConns bounds idle connections across all origins (default
	// 1024); the least recently used one is closed beyond it.
	MaxIdleConns int
	// Dial replaces the TCP dialer (default net.Dialer with ConnectTimeout).
	// Guard still applies to what it returns (see the package doc).
	Dial DialFunc
	// Resolver resolves origin names for the default dialer (nil = the
	// system resolver). Unused when Dial is set.
	Resolver *net.Resolver
	// Guard, if not nil, is asked about every upstream connection's IP and
	// port before it is used; an error refuses the connection (nil = allow
	// all). It must be safe for concurrent use and must not block.
	Guard Guard
}

// Guard decides whether a connection to addr may be used. ctx is the dial's
// context: the request's, carrying its DialPolicy when the caller set one
// (DialPolicyFrom reports ok=false otherwise, and a guard must then apply
// its strictest rule). addr is never zero; an IPv4 peer is reported as an
// IPv4 address, not as IPv4-mapped IPv6. The returned error is wrapped in
// an *AddrDeniedError.
type Guard func(ctx context.Context, addr netip.AddrPort) error

// DialPolicy is what a request's policy decision tells the dial guard:
// the address guard in force for it and the exceptions its rule grants.
// The zero value is the strictest: every range package addrguard refuses,
// no exception.
type DialPolicy struct {
	// Host is the canonical host the request was allowed for (for the
	// guard's logs).
	Host string
	// Guard is the address guard of the request's policy generation
	// (address_guard.allowed_cidrs); nil judges as addrguard.New(nil).
	Guard *addrguard.Guard
	// Opts are the exceptions of the rule that allowed the request
	// (allow_private_addresses, an IP/CIDR rule's prefix).
	Opts addrguard.Opts
	// Unguarded is set when address_guard is disabled: no address is
	// refused, except as Cleartext says.
	Unguarded bool
	// Cleartext is set for a request sent as plain HTTP (its rule's
	// upstream_tls: false): every address that is not loopback, RFC 1918
	// private or ULA is refused (addrguard.CleartextAllowed), whatever the
	// guard, its opt-ins or Unguarded say, so a request (and the
	// credential a rule injects) never crosses a public network in the
	// clear, even when a name resolves somewhere unexpected
	// (TestCleartextDialRefusesPublicAddress).
	Cleartext bool
}

type dialPolicyKey struct{}

// WithDialPolicy returns ctx carrying p for the dial guard. The proxy sets
// it on the outbound request's context before the round trip.
func WithDialPolicy(ctx context.Context, p DialPolicy) context.Context {
	return context.WithValue(ctx, dialPolicyKey{}, p)
}

// DialPolicyFrom returns the DialPolicy of ctx; ok is false when none was
// set (a dial no request asked for).
func DialPolicyFrom(ctx context.Context) (p DialPolicy, ok bool) {
	p, ok = ctx.Value(dialPolicyKey{}).(DialPolicy)
	return p, ok
}

// AddrDeniedError is the error of a connection the Guard refused. The
// transport returns it wrapped (in *net.OpError, *url.Error, ...): callers
// detect it with errors.As.
type AddrDeniedError struct {
	// Addr is the refused address.
	Addr netip.AddrPort
	// Err is the guard's reason (nil when the peer address was not an
	// IP:port at all).
	Err error
}

func (e *AddrDeniedError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("upstream address %s refused by the dial guard", e.Addr)
	}
	return fmt.Sprintf("upstream address %s refused by the dial guard: %v", e.Addr, e.Err)
}

// Unwrap returns the guard's reason.
func (e *AddrDeniedError) Unwrap() error { return e.Err }

// check asks g about addr (unmapped, so that 127.0.0.1 is never seen as
// ::ffff:127.0.0.1).
func (g Guard) check(ctx context.Context, addr netip.AddrPort) error {
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	if err := g(ctx, addr); err != nil {
		if _, ok := errors.AsType[*AddrDeniedError](err); ok {
			return err
		}
		return &AddrDeniedError{Addr: addr, Err: err}
	}
	return nil
}

// control is the net.Dialer.ControlContext of the default dialer: address
// is the IP:port the socket is about to connect(2) to.
func (g Guard) control(ctx context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Never happens for TCP; refuse rather than guess.
		return &AddrDeniedError{Err: fmt.Errorf("unparsable dial address %q: %w", address, err)}
	}
	return g.check(ctx, ap)
}

// checked wraps an injected dialer: the connection it returns is checked by
// the guard on its remote address before the transport writes to it.
func (g Guard) checked(dial DialFunc) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		var ap netip.AddrPort
		if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			ap = ta.AddrPort()
		}
		if !ap.IsValid() {
			_ = c.Close()
			return nil, &AddrDeniedError{Err: fmt.Errorf("connection to %s has no IP peer address (%v)", addr, c.RemoteAddr())}
		}
		if err := g.check(ctx, ap); err != nil {
			_ = c.Close()
			return nil, &net.OpError{Op: "dial", Net: network, Addr: c.RemoteAddr(), Err: err}
		}
		return c, nil
	}
}

// RootPool returns the system roots plus the certificates of caFile. Go's
// system pool honours SSL_CERT_FILE and SSL_CERT_DIR; on a system with no
// roots (scratch image) the embedded Mozilla bundle imported by the main
// package is the fallback.
func RootPool(caFile string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if caFile == "" {
		return pool, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading upstream_ca_file %q: %w", caFile, err)
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("upstream_ca_file %q: no PEM certificate found", caFile)
	}
	return pool, nil
}

// NewTransport returns the transport used for every upstream request: TLS
// only (the proxy always rewrites the scheme to https), HTTP/2 when the
// origin offers it, keep-alive pooling, no proxy from the environment (BotBox
// is the egress point; honouring HTTP_PROXY would be a bypass), and the
// per-request response-header timeout (see the package doc).
func NewTransport(o Options) (*Transport, error) {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.ResponseHeaderTimeout <= 0 {
		o.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if o.IdleConnTimeout <= 0 {
		o.IdleConnTimeout = 90 * time.Second
	}
	if o.MaxConnsPerHost <= 0 {
		o.MaxConnsPerHost = DefaultMaxConnsPerHost
	}
	if o.MaxIdleConns <= 0 {
		o.MaxIdleConns = DefaultMaxIdleConns
	}
	if o.MaxIdleConnsPerHost <= 0 {
		o.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	o.MaxIdleConnsPerHost = min(o.MaxIdleConnsPerHost, o.MaxConnsPerHost)
	roots := o.RootCAs
	if roots == nil {
		var err error
		if roots, err = RootPool(o.CAFile); err != nil {
			return nil, err
		}
	}
	dial := o.Dial
	switch {
	case dial == nil:
		d := &net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second, Resolver: o.Resolver}
		if o.Guard != nil {
			d.ControlContext = o.Guard.control
		}
		dial = d.DialContext
	case o.Guard != nil:
		dial = o.Guard.checked(dial)
	}
	// One session cache for both transports: a connection of either
	// resumes the sessions of the other.
	sessions := tls.NewLRUClientSessionCache(1024)
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         dial,
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, ClientSessionCache: sessions},
		TLSHandshakeTimeout: o.ConnectTimeout,
		// No ResponseHeaderTimeout here: it would be one bound for every
		// request, and cut a rule's longer one. Transport.RoundTrip
		// enforces the request's.
		IdleConnTimeout:       o.IdleConnTimeout,
		MaxIdleConns:          o.MaxIdleConns,
		MaxIdleConnsPerHost:   o.MaxIdleConnsPerHost,
		MaxConnsPerHost:       o.MaxConnsPerHost,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
		// Larger flow-control windows and frames than Go's HTTP/2 client
		// defaults (4 MiB per connection, 16 KiB frames), so that a large
		// download costs few WINDOW_UPDATE writes (measured in
		// docs/performance.md). Memory stays bounded: at most 8 MiB of
		// unread data per origin connection, 4 MiB per stream.
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerConnection: 8 << 20,
			MaxReceiveBufferPerStream:     4 << 20,
			MaxReadFrameSize:              1 << 20,
		},
		WriteBufferSize: 32 << 10,
		ReadBufferSize:  32 << 10,
		// A proxy passes Accept-Encoding through as the client sent it. Left
		// on, the transport would add "Accept-Encoding: gzip" to requests
		// that had none and then gunzip the answer itself (CPU per byte, and
		// the Content-Length the origin sent is lost).
		DisableCompression: true,
	}
	// The synchronous HTTP/1.1 pool (Sync) gets its own tls.Config:
	// http.Transport adds "h2" to the NextProtos of its own on first use.
	syncTLS := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, ClientSessionCache: sessions, NextProtos: []string{"http/1.1"}}
	return &Transport{base: tr, responseHeaderTimeout: o.ResponseHeaderTimeout, syncRT: newSyncTransport(o, dial, syncTLS)}, nil
}

// IsTimeout reports whether err is a timeout: the origin did not answer
// (connect, handshake or response head) in time. Callers map it to 504.
func IsTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
