package proxy

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"strconv"

	"github.com/botbox/botbox/internal/generation"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/policy"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/upstream"
)

// admitLimits applies the limits of the rule that allowed d
// (max_request_body_bytes, rate_limit), after the policy allowed the host
// and port. It returns true when the request may go on to the ordinary
// forward, false when admitLimits answered it: 429 with Retry-After when the
// rule's bucket is empty, 413 when the declared Content-Length is over the
// limit (before any upstream work), or, in report mode, forwarded without
// header rewrites as report_deny. The rate is checked first, so a request
// over the rate costs no body read.
//
// A body of unknown length (chunked, HTTP/2 without content-length) is
// wrapped so that the read crossing the limit fails: the transport then
// aborts the upstream request before its end (no terminating chunk, an
// HTTP/2 RST_STREAM), so the origin never receives a complete request,
// and the agent gets 413 (classify, limitFailure). Proven by
// TestBodyLimitChunkedNeverCompletes. In report mode such a body is not
// counted: its headers, rewrites included, left before its size was known.
func (h *Handler) admitLimits(r *http.Request, x *exchange, hp hostport.HostPort, g *generation.Generation, d policy.Decision) bool {
	l := g.Limits(d)
	if l == nil {
		return true
	}
	if l.Rate != nil {
		if ok, wait := l.Rate.Take(h.now()); !ok {
			if g.Report {
				h.forwardReport(r, x, hp, reasonRateLimited, dialPolicy(g, d, hp.Host))
				return false
			}
			x.hostLabel = d.Rule.Host
			secs := max(1, int64(math.Ceil(wait.Seconds())))
			x.cw.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
			h.reject(x, http.StatusTooManyRequests, bodyRateLimited, telemetry.DecisionDeniedRateLimit, reasonRateLimited)
			return false
		}
	}
	if l.MaxBodyBytes > 0 {
		if r.ContentLength > l.MaxBodyBytes {
			if g.Report {
				h.forwardReport(r, x, hp, reasonBodyTooLarge, dialPolicy(g, d, hp.Host))
				return false
			}
			x.hostLabel = d.Rule.Host
			h.reject(x, http.StatusRequestEntityTooLarge, bodyBodyTooLarge, telemetry.DecisionDeniedBodyTooLarge, reasonBodyTooLarge)
			return false
		}
		if !g.Report && r.Body != nil && r.Body != http.NoBody {
			r.Body = &limitedBody{ReadCloser: r.Body, left: l.MaxBodyBytes, limit: l.MaxBodyBytes}
		}
	}
	return true
}

// bodyTooLargeError is limitedBody's read error; classify maps it to 413.
type bodyTooLargeError struct{ limit int64 }

func (e *bodyTooLargeError) Error() string {
	return fmt.Sprintf("request body larger than max_request_body_bytes (%d)", e.limit)
}

// limitedBody fails the read that would take the body past its limit; the
// bytes of that read are dropped, never forwarded. It is read by the
// transport's goroutine only.
type limitedBody struct {
	io.ReadCloser
	left  int64 // bytes still allowed
	limit int64 // max_request_body_bytes, for the error
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if int64(n) > b.left {
		return 0, &bodyTooLargeError{limit: b.limit}
	}
	b.left -= int64(n)
	return n, err
}

// limitFailure turns an allowed exchange whose body crossed the limit
// while streaming into a body-too-large refusal: its decision line and
// botbox_requests_total say denied_body_too_large.
func (h *Handler) limitFailure(x *exchange, f failure) {
	if f.reason != reasonBodyTooLarge {
		return
	}
	x.decision = telemetry.DecisionDeniedBodyTooLarge
	h.metrics.Requests.WithLabelValues(x.hostLabel, telemetry.DecisionDeniedBodyTooLarge).Inc()
}

// forwardReport forwards, in report mode, a request that enforce mode would
// refuse for reason: like forward's tail, but never with header rewrites
// (no credential goes where the policy does not allow it), under the host
// label HostReport, and logged as report_deny with that reason. Requests
// refused before the policy (malformed, CONNECT, ...) never get here.
//
// The address guard still applies, with dp (the rule's exceptions when a
// rule allowed the host): report mode never reports an address refusal
// instead of enforcing it.
func (h *Handler) forwardReport(r *http.Request, x *exchange, hp hostport.HostPort, reason string, dp upstream.DialPolicy) {
	if !h.admitUpgrade(r, x) {
		x.hostLabel = telemetry.HostDenied
		h.reject(x, http.StatusBadRequest, bodyUpgrade, telemetry.DecisionDeniedUpgrade, reasonUpgrade)
		return
	}
	if h.tripBody(r, x, policy.Decision{}) {
		return
	}
	x.decision, x.reason = telemetry.DecisionReportDeny, reason
	x.hostLabel = telemetry.HostReport
	x.rewrites = nil
	x.hm = h.metrics.ForHost(x.hostLabel)
	h.metrics.Requests.WithLabelValues(telemetry.HostReport, telemetry.DecisionReportDeny).Inc()
	x.setUpstream(hp, policy.Decision{}, dp)
	x.trace.GotConn = x.gotConn
	ctx := httptrace.WithClientTrace(context.WithValue(r.Context(), exchangeKey{}, x), &x.trace)
	ctx = upstream.WithDialPolicy(ctx, dp)
	h.rp.ServeHTTP(&x.cw, r.WithContext(ctx))
}
