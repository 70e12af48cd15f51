package listener

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/botbox/botbox/internal/telemetry"
)

// TLSListener terminates TLS on accepted connections before handing them to
// an http.Server: each handshake runs in its own goroutine bounded by the
// handshake timeout, and is counted exactly once in
// botbox_tls_handshakes_total (ok, io_error or timeout). Doing the handshake
// here rather than inside http.Server gives the interception listener its
// own timeout and metric without slowing the accept loop.
//
// A temporary Accept error of the inner listener (EMFILE and the others of
// temporaryAcceptError) is retried after a back-off of 5 ms doubling to 1 s,
// as net/http does; the listener ends only when the inner listener is
// closed or fails permanently, and then Accept returns a *PermanentError so
// that http.Server.Serve returns instead of retrying a dead socket
// (TestTLSListenerSurvivesEMFILE, TestTLSListenerPermanentError).
type TLSListener struct {
	inner   net.Listener
	config  *tls.Config
	timeout time.Duration
	metrics *telemetry.Metrics
	logger  *slog.Logger

	conns     chan net.Conn
	done      chan struct{}
	ctx       context.Context // cancelled by Close: aborts handshakes in progress
	cancel    context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup // the accept loop and every handshake goroutine
	mu        sync.Mutex
	acceptErr error // the inner listener's permanent failure, if that is what closed us
}

// NewTLSListener starts accepting on inner (usually a ConnLimit listener,
// so the permit is held from before the handshake, as in the reference).
func NewTLSListener(inner net.Listener, config *tls.Config, timeout time.Duration, metrics *telemetry.Metrics, logger *slog.Logger) *TLSListener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &TLSListener{
		inner: inner, config: config, timeout: timeout, metrics: metrics, logger: logger,
		conns: make(chan net.Conn), done: make(chan struct{}), ctx: ctx, cancel: cancel,
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

func (l *TLSListener) acceptLoop() {
	defer l.wg.Done()
	var backoff time.Duration
	for {
		c, err := l.inner.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				l.shut(nil)
				return
			}
			if temporaryAcceptError(err) {
				backoff = nextBackoff(backoff)
				l.logger.Warn("HTTPS interception accept error, retrying",
					slog.String(telemetry.KeyError, err.Error()),
					slog.Duration(telemetry.KeyRetryIn, backoff))
				t := time.NewTimer(backoff)
				select {
				case <-t.C:
					continue
				case <-l.done:
					t.Stop()
					return
				}
			}
			l.logger.Error("HTTPS interception listener failed", slog.String(telemetry.KeyError, err.Error()))
			l.shut(err)
			return
		}
		backoff = 0
		l.wg.Add(1)
		go l.handshake(c)
	}
}

// quietHandshakeError reports the failures that are the peer's business
// (it went away, or we are closing) and deserve no WARN line.
func quietHandshakeError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, context.Canceled)
}

func (l *TLSListener) handshake(c net.Conn) {
	defer l.wg.Done()
	tc := tls.Server(c, l.config)
	ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		result := telemetry.HandshakeIOError
		switch {
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
			result = telemetry.HandshakeTimeout
			l.logger.Warn("HTTPS interception TLS handshake timed out", slog.String(telemetry.KeyPeer, c.RemoteAddr().String()))
		case quietHandshakeError(err):
		default:
			l.logger.Warn("HTTPS interception TLS handshake failed", slog.String(telemetry.KeyPeer, c.RemoteAddr().String()), slog.String(telemetry.KeyError, err.Error()))
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

// Accept returns the next connection whose handshake succeeded. After the
// listener ends it returns net.ErrClosed, or a *PermanentError when the
// inner listener failed.
func (l *TLSListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		err := l.acceptErr
		l.mu.Unlock()
		if err != nil {
			return nil, &PermanentError{Err: err}
		}
		return nil, net.ErrClosed
	}
}

// shut ends the listener without waiting (the accept loop calls it).
func (l *TLSListener) shut(cause error) {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.acceptErr = cause
		l.mu.Unlock()
		close(l.done)
		l.cancel()
		_ = l.inner.Close()
	})
}

// Close stops accepting, aborts the handshakes in progress and waits for
// their goroutines (each ends at once on cancellation, at the latest after
// the handshake timeout).
func (l *TLSListener) Close() error {
	l.shut(nil)
	l.wg.Wait()
	return nil
}

// Addr is the listening address.
func (l *TLSListener) Addr() net.Addr { return l.inner.Addr() }
