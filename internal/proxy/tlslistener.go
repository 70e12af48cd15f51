package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/botbox/botbox/internal/telemetry"
)

// TLSListener terminates TLS on accepted connections before handing them to
// an http.Server: each handshake runs in its own goroutine bounded by the
// handshake timeout, and is counted exactly once in
// botbox_tls_handshakes_total (ok, io_error or timeout). Doing the handshake
// here rather than inside http.Server gives the interception listener its
// own timeout and metric without slowing the accept loop.
type TLSListener struct {
	inner   net.Listener
	config  *tls.Config
	timeout time.Duration
	metrics *telemetry.Metrics
	logger  *slog.Logger

	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	mu        sync.Mutex
	acceptErr error // the inner listener's failure, if that is what closed us
}

// NewTLSListener starts accepting on inner (usually a ConnLimit listener,
// so the permit is held from before the handshake, as in the reference).
func NewTLSListener(inner net.Listener, config *tls.Config, timeout time.Duration, metrics *telemetry.Metrics, logger *slog.Logger) *TLSListener {
	l := &TLSListener{
		inner: inner, config: config, timeout: timeout, metrics: metrics, logger: logger,
		conns: make(chan net.Conn), done: make(chan struct{}),
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

func (l *TLSListener) acceptLoop() {
	defer l.wg.Done()
	for {
		c, err := l.inner.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			l.mu.Lock()
			if l.acceptErr == nil {
				l.acceptErr = err
			}
			l.mu.Unlock()
			l.Close()
			return
		}
		l.wg.Add(1)
		go l.handshake(c)
	}
}

func (l *TLSListener) handshake(c net.Conn) {
	defer l.wg.Done()
	tc := tls.Server(c, l.config)
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		result := telemetry.HandshakeIOError
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
			result = telemetry.HandshakeTimeout
			l.logger.Warn("HTTPS interception TLS handshake timed out", slog.String("peer", c.RemoteAddr().String()))
		} else if !strings.Contains(err.Error(), "connection closed") && !errors.Is(err, net.ErrClosed) {
			l.logger.Warn("HTTPS interception TLS handshake failed", slog.String("peer", c.RemoteAddr().String()), slog.String(telemetry.KeyError, err.Error()))
		}
		l.metrics.TLSHandshakes.WithLabelValues(result).Inc()
		_ = tc.Close()
		return
	}
	l.metrics.TLSHandshakes.WithLabelValues(telemetry.HandshakeOK).Inc()
	select {
	case l.conns <- tc:
	case <-l.done:
		_ = tc.Close()
	}
}

// Accept returns the next connection whose handshake succeeded.
func (l *TLSListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		err := l.acceptErr
		l.mu.Unlock()
		if err != nil && !errors.Is(err, net.ErrClosed) {
			return nil, err
		}
		return nil, net.ErrClosed
	}
}

// Close stops accepting; handshakes in progress are abandoned.
func (l *TLSListener) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.done)
		err = l.inner.Close()
	})
	return err
}

// Addr is the listening address.
func (l *TLSListener) Addr() net.Addr { return l.inner.Addr() }
