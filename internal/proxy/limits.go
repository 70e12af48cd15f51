package proxy

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"

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
// limit (before any upstream work). The rate is checked first, so a request
// over the rate costs no body read.
//
// A body of unknown length (chunked, HTTP/2 without content-length) is
// wrapped so that the read crossing the limit fails: the transport then
// aborts the upstream request before its end (no terminating chunk, an
// HTTP/2 RST_STREAM), so the origin never receives a complete request,
// and the agent gets 413 (classify, limitFailure). Proven by
// TestBodyLimitChunkedNeverCompletes.
//
// In report mode a limit refuses nothing and changes nothing: the request
// the policy allows goes on as in enforce mode, with its rule's header
// rewrites (its credential), and its line says report_deny with the
// limit's reason (rate_limited, body_too_large; a streamed body when it
// crosses the limit). TestReportModeLimitKeepsCredential holds it.
func (h *Handler) admitLimits(r *http.Request, x *exchange, g *generation.Generation, d policy.Decision) bool {
	l := g.Limits(d)
	if l == nil {
		return true
	}
	if l.Rate != nil {
		if ok, wait := l.Rate.Take(h.now()); !ok {
			if g.Report {
				x.reportLimit = reasonRateLimited
				return true
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
				if x.reportLimit == "" {
					x.reportLimit = reasonBodyTooLarge
				}
				return true
			}
			x.hostLabel = d.Rule.Host
			h.reject(x, http.StatusRequestEntityTooLarge, bodyBodyTooLarge, telemetry.DecisionDeniedBodyTooLarge, reasonBodyTooLarge)
			return false
		}
		if r.Body != nil && r.Body != http.NoBody {
			lb := &limitedBody{ReadCloser: r.Body, left: l.MaxBodyBytes, limit: l.MaxBodyBytes}
			if g.Report {
				lb.over = &x.bodyOver
			}
			r.Body = lb
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
// bytes of that read are dropped, never forwarded. With over set (report
// mode) it fails nothing and sets over instead. It is read by the
// transport's goroutine only.
type limitedBody struct {
	io.ReadCloser
	left  int64        // bytes still allowed
	limit int64        // max_request_body_bytes, for the error
	over  *atomic.Bool // report mode: set when the body crossed the limit
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if int64(n) > b.left {
		if b.over != nil {
			b.over.Store(true)
			b.left = 0
			return n, err
		}
		return 0, &bodyTooLargeError{limit: b.limit}
	}
	b.left -= int64(n)
	return n, err
}

// reportOver is the limit report mode let this request pass, "" if none.
func (x *exchange) reportOver() string {
	if x.reportLimit != "" {
		return x.reportLimit
	}
	if x.bodyOver.Load() {
		return reasonBodyTooLarge
	}
	return ""
}

// limitFailure turns an allowed exchange whose body crossed the limit
// while streaming into a body-too-large refusal: its decision line and
// botbox_requests_total (counted once, from the final decision, in
// writeDecision) say denied_body_too_large (TestStreamedRefusalCountedOnce).
func (h *Handler) limitFailure(x *exchange, f failure) {
	if f.reason != reasonBodyTooLarge {
		return
	}
	x.decision = telemetry.DecisionDeniedBodyTooLarge
}

// forwardReport forwards, in report mode, a request that enforce mode would
// refuse for reason: like forward's tail, but never with header rewrites
// (no credential goes where the policy does not allow it), under the host
// label HostReport, and logged as report_deny with that reason. Requests
// refused before the policy (malformed, a CONNECT to a port other than
// 443, ...) never get here; a CONNECT the policy denies opens its tunnel,
// and the requests inside get here.
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
	x.upgradeTarget = tunnelTarget{host: hp, method: r.Method, path: escapedPath(r)}
	x.setUpstream(hp, policy.Decision{}, dp)
	x.trace.GotConn = x.gotConn
	ctx := httptrace.WithClientTrace(context.WithValue(r.Context(), exchangeKey{}, x), &x.trace)
	ctx = upstream.WithDialPolicy(ctx, dp)
	h.relay(x, r.WithContext(ctx))
}
