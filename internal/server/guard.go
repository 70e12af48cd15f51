package server

import (
	"bufio"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/botbox/botbox/internal/listener"
	"github.com/botbox/botbox/internal/telemetry"
)

// Body of the 503 answered when max_concurrent_requests are in flight.
const bodyOverloaded = "too many concurrent requests"

// guard wraps a proxy listener's handler with the two request-level bounds
// of package server:
//
//   - max_concurrent_requests: one budget of requests in flight across both
//     proxy listeners (HTTP/1 requests, HTTP/2 streams, WebSocket tunnels,
//     which hold their permit while open). A request beyond it is answered
//     503 at once with Retry-After, counted in botbox_requests_shed_total
//     and logged at most once per second per listener
//     (TestRequestBudgetSheds).
//   - downstream_write_timeout_seconds: a deadline on each single write and
//     flush of the response, set just before it and cleared just after, so
//     a client (or HTTP/2 stream) that stops reading is cut, while a
//     streaming response that is silent between events, or read slowly, is
//     not (TestStalledReaderIsCut, and the streaming tests).
//
// The writer it passes on keeps http.ResponseController working: Unwrap
// reaches the real writer for Hijack, EnableFullDuplex and deadlines.
func (s *Server) guard(name string, next http.Handler) http.Handler {
	shed := s.sm.RequestsShed.WithLabelValues(name)
	timeouts := s.sm.WriteTimeouts.WithLabelValues(name)
	sampler := listener.NewSampler(time.Second)
	timeout := s.cfg.Timeouts.DownstreamWrite
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case s.requests <- struct{}{}:
		default:
			shed.Inc()
			if ok, n := sampler.Allow(); ok {
				s.logger.Warn("concurrent request budget exhausted, answering 503",
					slog.String(telemetry.KeyListener, name),
					slog.String(telemetry.KeyPeer, r.RemoteAddr),
					slog.Int(telemetry.KeyLimit, cap(s.requests)),
					slog.Int(telemetry.KeyCount, n))
			}
			h := w.Header()
			h.Set("Retry-After", "1")
			h.Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(bodyOverloaded))
			return
		}
		defer func() { <-s.requests }()
		dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: timeout, onTimeout: timeouts.Inc}
		// A keep-alive HTTP/1 connection keeps the deadline the previous
		// response's end set; this request starts with none.
		_ = dw.rc.SetWriteDeadline(time.Time{})
		defer dw.finish()
		next.ServeHTTP(dw, r)
	})
}

// deadlineWriter bounds each Write and Flush by timeout.
type deadlineWriter struct {
	http.ResponseWriter
	rc        *http.ResponseController
	timeout   time.Duration
	onTimeout func()
	hijacked  bool
}

// bounded runs op under a write deadline and clears it afterwards: on an
// HTTP/2 stream a deadline left set resets the stream when it passes, even
// with nothing to write, which would cut a silent SSE stream.
func (w *deadlineWriter) bounded(op func() error) error {
	deadline := time.Now().Add(w.timeout)
	_ = w.rc.SetWriteDeadline(deadline)
	err := op()
	_ = w.rc.SetWriteDeadline(time.Time{})
	if err != nil && !time.Now().Before(deadline) {
		w.onTimeout()
	}
	return err
}

func (w *deadlineWriter) Write(b []byte) (n int, err error) {
	err = w.bounded(func() error {
		n, err = w.ResponseWriter.Write(b)
		return err
	})
	return n, err
}

// FlushError is what http.ResponseController.Flush calls.
func (w *deadlineWriter) FlushError() error { return w.bounded(w.rc.Flush) }

// Flush implements http.Flusher for callers that type-assert it.
func (w *deadlineWriter) Flush() { _ = w.FlushError() }

// Hijack records the hijack so that finish leaves the connection's
// deadline alone: net/http hands the raw connection over, and a deadline
// set through the response afterwards would land on the tunnel.
func (w *deadlineWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := w.rc.Hijack()
	if err == nil {
		w.hijacked = true
	}
	return c, brw, err
}

// Unwrap gives http.ResponseController the real writer.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish bounds what net/http writes after the handler returns (the
// buffered tail of the response), which no Write of ours covers.
func (w *deadlineWriter) finish() {
	if !w.hijacked {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	}
}

// earlyError returns the hook that logs and counts the requests net/http
// refuses before the handler (listener.ObserveEarlyErrors): one
// decision-style line per second per listener at most, every one counted
// in botbox_malformed_requests_total.
func (s *Server) earlyError(name string) listener.EarlyErrorFunc {
	sampler := listener.NewSampler(time.Second)
	return func(status int, c net.Conn) {
		s.sm.MalformedRequests.WithLabelValues(name, telemetry.StatusCodeLabel(status)).Inc()
		if ok, n := sampler.Allow(); ok {
			s.decisions.Warn("proxy decision",
				slog.String(telemetry.KeyListener, name),
				slog.String(telemetry.KeyDecision, telemetry.DecisionDeniedMalformed),
				slog.String(telemetry.KeyReason, telemetry.ReasonMalformedRequest),
				slog.Int(telemetry.KeyStatus, status),
				slog.String(telemetry.KeyHost, telemetry.HostUnknown),
				slog.String(telemetry.KeyPeer, c.RemoteAddr().String()),
				slog.Int(telemetry.KeyCount, n))
		}
	}
}
