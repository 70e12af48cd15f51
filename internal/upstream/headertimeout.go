package upstream

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"
)

// Transport is the upstream round tripper NewTransport builds: an
// *http.Transport (TLS, pool, dial guard) whose response-header timeout is
// chosen per request (see the package doc). It is safe for concurrent use.
type Transport struct {
	// base is the first connection pool; pools holds it and the others
	// (pools.go).
	base  *http.Transport
	pools pools
	// responseHeaderTimeout applies to requests without their own.
	responseHeaderTimeout time.Duration
	// syncRT is the synchronous HTTP/1.1 pool Sync returns (syncpool.go).
	syncRT *SyncTransport
}

type responseHeaderTimeoutKey struct{}

// WithResponseHeaderTimeout returns ctx carrying d as the response-header
// timeout of the request made with it, replacing Options.ResponseHeaderTimeout
// (shorter or longer). d <= 0 leaves the transport's default in force. The
// proxy sets it from the rule that allowed the request
// (generation.Generation.ResponseHeaderTimeout).
func WithResponseHeaderTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, responseHeaderTimeoutKey{}, d)
}

// ResponseHeaderTimeoutError is the error of a round trip whose response
// head did not start within its response-header timeout. It is a net.Error
// whose Timeout is true and it matches context.DeadlineExceeded (errors.Is),
// so IsTimeout reports it and the proxy answers 504.
type ResponseHeaderTimeoutError struct {
	// After is the bound that expired.
	After time.Duration
}

func (e *ResponseHeaderTimeoutError) Error() string {
	return fmt.Sprintf("timeout awaiting response headers: no response from the origin within %v of sending the request (upstream_response_header_timeout_ms, or the rule's response_header_timeout_ms)", e.After)
}

// Timeout reports true (net.Error).
func (e *ResponseHeaderTimeoutError) Timeout() bool { return true }

// Temporary reports false (net.Error).
func (e *ResponseHeaderTimeoutError) Temporary() bool { return false }

// Unwrap returns context.DeadlineExceeded.
func (e *ResponseHeaderTimeoutError) Unwrap() error { return context.DeadlineExceeded }

// RoundTrip sends req with its response-header timeout: the request's own
// (WithResponseHeaderTimeout) or the transport's default. See the package
// doc for when the clock runs. The response body is the base transport's,
// unwrapped (a 101 body stays an io.ReadWriteCloser).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	parent := req.Context()
	d := t.responseHeaderTimeout
	if v, ok := parent.Value(responseHeaderTimeoutKey{}).(time.Duration); ok && v > 0 {
		d = v
	}
	ctx, cancel := context.WithCancelCause(parent)
	w := &headerWait{d: d, cancel: cancel}
	w.trace = httptrace.ClientTrace{WroteRequest: w.wroteRequest, GotFirstResponseByte: w.gotFirstByte}
	dp, _ := DialPolicyFrom(parent)
	resp, err := t.poolFor(dp).RoundTrip(req.WithContext(httptrace.WithClientTrace(ctx, &w.trace)))
	if w.finish() {
		// The timer fired: whatever the base returned, the request is being
		// cancelled; report the timeout (not the context.Canceled it causes).
		if resp != nil {
			_ = resp.Body.Close()
		}
		return nil, &ResponseHeaderTimeoutError{After: d}
	}
	if err != nil {
		cancel(err)
		return nil, err
	}
	// On success ctx is not cancelled here: the response body is read under
	// it. It ends with the caller's context (the proxy's request context
	// ends when its handler returns); the timer is already stopped.
	return resp, nil
}

// headerWait is the response-header clock of one round trip.
type headerWait struct {
	d      time.Duration
	cancel context.CancelCauseFunc
	trace  httptrace.ClientTrace

	mu      sync.Mutex
	timer   *time.Timer
	started bool // the response head started (or the round trip ended)
	fired   bool // the timer expired before that
}

// wroteRequest (re)starts the clock once the request, body included, is
// written. A retry on another connection writes again and restarts it. It
// does nothing once the response started: a bidi stream's request body may
// end long after the response head.
func (w *headerWait) wroteRequest(info httptrace.WroteRequestInfo) {
	if info.Err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.fired {
		return
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	w.timer = time.AfterFunc(w.d, w.expire)
}

// gotFirstByte stops the clock.
func (w *headerWait) gotFirstByte() { w.finish() }

// expire cancels the round trip unless the response started meanwhile.
func (w *headerWait) expire() {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return
	}
	w.fired = true
	w.mu.Unlock()
	w.cancel(&ResponseHeaderTimeoutError{After: w.d})
}

// finish stops the clock and reports whether it had fired.
func (w *headerWait) finish() (fired bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started = true
	if w.timer != nil {
		w.timer.Stop()
	}
	return w.fired
}
