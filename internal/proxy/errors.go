package proxy

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/botbox/botbox/internal/rewrite"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/upstream"
)

// Response bodies of the reference (reference §3.4); clients and tests match
// on them, so they are part of the drop-in contract. BotBox's additions
// (hintConnect, bodyUpgrade) come after or beside them, never instead.
const (
	bodyConnect         = "CONNECT method not allowed"
	bodyMissingHost     = "missing host"
	bodyInvalidHost     = "invalid host"
	bodyInvalidTarget   = "invalid request target"
	bodyDenied          = "host not allowed"
	bodySecretMissing   = "internal error: secret not available"
	bodyRewriteFailed   = "internal error"
	bodyUpstreamFailed  = "upstream connection failed"
	bodyGatewayTimeout  = "gateway timeout"
	bodyAbsoluteForm    = "absolute-form request not allowed on HTTPS interception listener"
	bodyMissingHostHdr  = "missing Host header"
	bodyInterceptPort   = "HTTPS interception listener only accepts port 443 traffic"
	bodySNIHostMismatch = "SNI/Host header mismatch"
	bodyAddrDenied      = "destination address not allowed"
	bodyRouteDenied     = "route not allowed"
	bodyAmbiguousPath   = "ambiguous request path"
	bodyMethodOverride  = "method override not allowed"
	bodyBodyTooLarge    = "request body too large"
	bodyRateLimited     = "rate limit exceeded"
	bodyTraceCredential = "TRACE not allowed on a host BotBox adds credentials for"

	// hintConnect is the second line of the CONNECT 405 body: the explicit
	// proxy carries http:// URLs only (BotBox originates the TLS).
	hintConnect = "use http:// URLs or enable HTTPS interception"
	// hintPortNotAllowed is the second line of a port_not_allowed 403.
	hintPortNotAllowed = "the host is allowed, but not on this port (add it to the rule's allowed_ports)"
	bodyUpgrade        = "upgrade not allowed: only websocket"
)

// Reasons of the decision line (and of the X-Botbox-Reason header) that
// BotBox's pipeline gives; the policy's reasons (policy.Reason: rule_allow,
// rule_deny, default_allow, default_deny, port_not_allowed, route_deny,
// no_route, ambiguous_path, method_override) and the abort
// reasons (telemetry.Abort…) complete the set. docs/troubleshooting.md
// explains each with its fix.
const (
	reasonConnect         = "connect"
	reasonInvalidTarget   = "invalid_target"
	reasonInvalidHost     = "invalid_host"
	reasonMissingHost     = "missing_host"
	reasonAbsoluteForm    = "absolute_form"
	reasonInterceptPort   = "intercept_port"
	reasonSNIHostMismatch = "sni_host_mismatch"
	reasonUpgrade         = "upgrade_not_allowed"
	reasonSecretMissing   = "secret_missing"
	reasonRewriteFailed   = "rewrite_failed"
	reasonUpstreamTimeout = "upstream_timeout"
	reasonUpstreamError   = "upstream_error"
	reasonAddrDenied      = telemetry.ReasonAddressGuard
	reasonBodyTooLarge    = "body_too_large"
	reasonRateLimited     = "rate_limited"
	// reasonTraceCredential: TRACE or TRACK to a rule with rewrites (the
	// origin would answer with the credential BotBox added).
	reasonTraceCredential = "trace_with_credential"
)

// HeaderReason names, on every response BotBox generates itself (never on
// an origin's), the reason of the decision, so that an agent or its
// operator can tell a port denial from a host denial without the logs.
const HeaderReason = "X-Botbox-Reason"

// HeaderHint carries, on a response BotBox generates whose body has a
// second line (the hint after the reference's message: CONNECT 405,
// port_not_allowed), that line: a client that shows only headers, such as
// curl on a refused CONNECT (`curl -v`), still sees the fix. Hints are
// constants; never a value from the request.
const HeaderHint = "X-Botbox-Hint"

// failure is what the single error mapper returns: the status and body sent
// to the client, the upstream_errors label (if any) and the log reason.
type failure struct {
	status        int
	body          string
	upstreamLabel string
	reason        string
}

// classify is the one place where an error becomes a status code.
func classify(ctx context.Context, err error) failure {
	if _, ok := errors.AsType[*bodyTooLargeError](err); ok {
		// max_request_body_bytes crossed while streaming (limits.go).
		return failure{status: http.StatusRequestEntityTooLarge, body: bodyBodyTooLarge, reason: reasonBodyTooLarge}
	}
	if _, ok := errors.AsType[*tripwireError](err); ok {
		// A placeholder in a streamed body (tripwire.go).
		return failure{status: http.StatusForbidden, body: bodyTripwire, reason: reasonTripwire}
	}
	if _, ok := errors.AsType[*rewrite.MissingQuerySecretError](err); ok {
		// Fail closed: never forward a request without its credential.
		return failure{status: http.StatusInternalServerError, body: bodySecretMissing, reason: reasonSecretMissing}
	}
	if _, ok := errors.AsType[*rewrite.MissingSecretError](err); ok {
		// Fail closed: never forward a request without its credential.
		return failure{status: http.StatusInternalServerError, body: bodySecretMissing, reason: reasonSecretMissing}
	}
	if isUninspectable(err) {
		// Response scrubbing cannot read this response (scrub.go): fail
		// closed, none of it reaches the agent.
		return failure{status: http.StatusBadGateway, body: bodyUninspectable, reason: reasonUninspectable}
	}
	if _, ok := errors.AsType[*rewrite.InvalidValueError](err); ok {
		// The filled template is not a valid header value (e.g. CR/LF in the secret).
		return failure{status: http.StatusInternalServerError, body: bodyRewriteFailed, reason: reasonRewriteFailed}
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// The agent hung up; nobody reads a response.
		return failure{status: 0, reason: telemetry.AbortClientClosed}
	}
	if _, ok := errors.AsType[*upstream.AddrDeniedError](err); ok {
		// The address guard refused every address the host resolved to (or
		// the literal it names): the policy allowed the name, not the
		// address it leads to. Nothing was sent to that address.
		return failure{status: http.StatusForbidden, body: bodyAddrDenied, upstreamLabel: telemetry.UpstreamAddrDenied, reason: reasonAddrDenied}
	}
	if upstream.IsTimeout(err) {
		// No response head within the configured timeout (reference: 504).
		return failure{status: http.StatusGatewayTimeout, body: bodyGatewayTimeout, upstreamLabel: telemetry.UpstreamTimeout, reason: reasonUpstreamTimeout}
	}
	// Connect, TLS or protocol failure: the reference answers 502.
	return failure{status: http.StatusBadGateway, body: bodyUpstreamFailed, upstreamLabel: telemetry.UpstreamConnectionError, reason: reasonUpstreamError}
}

// writePlain writes a handler-generated error response the way the reference
// does (text/plain, the bare body), plus the X-Botbox-Reason header.
func writePlain(w http.ResponseWriter, status int, body, reason string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set(HeaderReason, reason)
	if _, rest, ok := strings.Cut(body, "\n"); ok {
		if hint, _, _ := strings.Cut(rest, "\n"); hint != "" {
			h.Set(HeaderHint, hint)
		}
	}
	// The length too: net/http would compute it for so short a body,
	// BotBox's engine writes what the handler declares (package engine).
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}
