// Package upstream builds the egress side of BotBox: the HTTP transport that
// originates TLS to allowed origins, with its trust roots, timeouts and
// connection pool.
//
// It deliberately does not decide what may be reached (package policy does)
// and does not touch headers (package rewrite does). The dialer is a seam:
// the address guard of the roadmap (refusing loopback, link-local and private
// targets after resolution) plugs in as Options.Dial without changing callers.
//
// Typical use:
//
//	tr, err := upstream.NewTransport(upstream.Options{CAFile: cfg.UpstreamCAFile, ...})
//	proxy := &httputil.ReverseProxy{Transport: tr, ...}
package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

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
	// request was fully written (default 30s, the reference's value).
	ResponseHeaderTimeout time.Duration
	// IdleConnTimeout closes pooled idle connections (default 90s).
	IdleConnTimeout time.Duration
	// MaxIdleConnsPerHost is the keep-alive pool size per origin (default 256).
	MaxIdleConnsPerHost int
	// Dial replaces the TCP dialer (default net.Dialer with ConnectTimeout).
	Dial DialFunc
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
// is the egress point; honouring HTTP_PROXY would be a bypass).
func NewTransport(o Options) (*http.Transport, error) {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.ResponseHeaderTimeout <= 0 {
		o.ResponseHeaderTimeout = 30 * time.Second
	}
	if o.IdleConnTimeout <= 0 {
		o.IdleConnTimeout = 90 * time.Second
	}
	if o.MaxIdleConnsPerHost <= 0 {
		o.MaxIdleConnsPerHost = 256
	}
	roots := o.RootCAs
	if roots == nil {
		var err error
		if roots, err = RootPool(o.CAFile); err != nil {
			return nil, err
		}
	}
	dial := o.Dial
	if dial == nil {
		d := &net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           dial,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(1024)},
		TLSHandshakeTimeout:   o.ConnectTimeout,
		ResponseHeaderTimeout: o.ResponseHeaderTimeout,
		IdleConnTimeout:       o.IdleConnTimeout,
		MaxIdleConns:          0, // bounded per host instead
		MaxIdleConnsPerHost:   o.MaxIdleConnsPerHost,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
		// Go's HTTP/2 client defaults (4 MiB per connection, 16 KiB frames)
		// made a 256 MiB download cost a WINDOW_UPDATE write every 32 KiB:
		// 0.71x nginx's throughput. Larger windows and frames brought it to
		// 1.02x with 28% less CPU per MiB (docs/performance.md). Memory stays
		// bounded: at most 8 MiB of unread data per origin connection.
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
	return tr, nil
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
