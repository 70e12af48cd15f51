package proxy

import (
	"context"
	"errors"
	"net/http"

	"github.com/botbox/botbox/internal/rewrite"
	"github.com/botbox/botbox/internal/upstream"
)

// Response bodies of the reference (reference §3.4); clients and tests match
// on them, so they are part of the drop-in contract.
const (
	bodyConnect          = "CONNECT method not allowed"
	bodyMissingHost      = "missing host"
	bodyInvalidHost      = "invalid host"
	bodyInvalidTarget    = "invalid request target"
	bodyDenied           = "host not allowed"
	bodySecretMissing    = "internal error: secret not available"
	bodyRewriteFailed    = "internal error"
	bodyInternal         = "internal server error"
	bodyUpstreamFailed   = "upstream connection failed"
	bodyGatewayTimeout   = "gateway timeout"
	bodyAbsoluteForm     = "absolute-form request not allowed on HTTPS interception listener"
	bodyMissingHostHdr   = "missing Host header"
	bodyInterceptPort    = "HTTPS interception listener only accepts port 443 traffic"
	bodySNIHostMismatch  = "SNI/Host header mismatch"
	upstreamLabelTimeout = "timeout"
	upstreamLabelConnErr = "connection_error"
)

// Decision label values for the interception listener's own rejections
// (reference §3.2 step 4). The reference neither logged nor counted them
// (§10.3 #14); BotBox counts them in botbox_requests_total under host
// "unknown" with these values, a closed set.
const (
	decisionDeniedAbsoluteForm = "denied_absolute_form"
	decisionDeniedPort         = "denied_port"
	decisionDeniedHostMismatch = "denied_host_mismatch"
)

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
	if _, ok := errors.AsType[*rewrite.MissingSecretError](err); ok {
		// Fail closed: never forward a request without its credential.
		return failure{status: http.StatusInternalServerError, body: bodySecretMissing, reason: "secret_missing"}
	}
	if _, ok := errors.AsType[*rewrite.InvalidValueError](err); ok {
		// The filled template is not a valid header value (e.g. CR/LF in the secret).
		return failure{status: http.StatusInternalServerError, body: bodyRewriteFailed, reason: "rewrite_failed"}
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// The agent hung up; nobody reads a response.
		return failure{status: 0, reason: "client_closed"}
	}
	if upstream.IsTimeout(err) {
		// No response head within the configured timeout (reference: 504).
		return failure{status: http.StatusGatewayTimeout, body: bodyGatewayTimeout, upstreamLabel: upstreamLabelTimeout, reason: "upstream_timeout"}
	}
	// Connect, TLS or protocol failure: the reference answers 502.
	return failure{status: http.StatusBadGateway, body: bodyUpstreamFailed, upstreamLabel: upstreamLabelConnErr, reason: "upstream_error"}
}

// writePlain writes a handler-generated error response the way the reference
// does: text/plain, the bare body.
func writePlain(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}
