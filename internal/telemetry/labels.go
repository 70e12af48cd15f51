package telemetry

import "strconv"

// Values of the decision label of botbox_requests_total (and of the
// decision field of the "proxy decision" log line). The first four are the
// reference's; the denied_* values after them name BotBox's own rejections
// on the interception listener (reference §3.2 step 4, which the reference
// neither logged nor counted) and of upgrade requests.
const (
	DecisionAllow         = "allow"
	DecisionDeny          = "deny"
	DecisionDeniedConnect = "denied_connect"
	DecisionDeniedNoHost  = "denied_no_host"

	DecisionDeniedAbsoluteForm = "denied_absolute_form"
	DecisionDeniedPort         = "denied_port"
	DecisionDeniedHostMismatch = "denied_host_mismatch"
	DecisionDeniedUpgrade      = "denied_upgrade"
	// DecisionDeniedRoute: the host and port are allowed, but the rule's
	// routes refuse the method and path (403 route not allowed).
	DecisionDeniedRoute = "denied_route"
	// DecisionDeniedPath: the rule has routes and the request path is
	// ambiguous (400 ambiguous request path), refused before matching.
	DecisionDeniedPath = "denied_path"

	// Per-rule limits (max_request_body_bytes, rate_limit) and report mode.
	DecisionDeniedBodyTooLarge = "denied_body_too_large"
	DecisionDeniedRateLimit    = "denied_rate_limit"
	// DecisionReportDeny: mode report forwarded, without header rewrites,
	// a request that enforce mode would have refused.
	DecisionReportDeny = "report_deny"
	// DecisionDeniedTripwire: a placeholder credential was on its way to a
	// host whose rule does not reference its secret (403 credential not
	// allowed for this host), in any mode.
	DecisionDeniedTripwire = "denied_tripwire"
	// DecisionDeniedCredential: the rule's credential could not
	// authenticate the request: the app signed it with a key that is not
	// its placeholder (403 credential_refused), no valid token could be
	// minted (503 credential_unavailable) or a secret file it needs is
	// missing (500 secret_missing).
	DecisionDeniedCredential = "denied_credential"
)

// EventSecretTripwire is the event field of the ERROR line of a placeholder
// caught heading for a host that may not receive its secret.
const EventSecretTripwire = "secret_tripwire"

// Values of the found_in field of a tripwire line: where in the request
// the placeholder was.
const (
	FoundInHost   = "host"
	FoundInURL    = "url"
	FoundInHeader = "header"
	FoundInBody   = "body"
	// FoundInMethod is the request method (a token: a placeholder's
	// characters are token characters).
	FoundInMethod = "method"
	// FoundInDNSQuery is a query name seen by the DNS guard.
	FoundInDNSQuery = "dns_query"
)

// Host label values that are not a rule's host. A requested host that no
// rule names is never a label value; such requests are counted under these.
const (
	// HostDefaultAllow labels requests allowed by default_action: allow.
	HostDefaultAllow = "_default_allow"
	// HostDenied labels denied requests, whatever host they asked for.
	HostDenied = "_denied"
	// HostUnknown labels requests rejected before a host was known
	// (CONNECT, missing Host).
	HostUnknown = "unknown"
	// HostReport labels requests forwarded by report mode that enforce
	// mode would have refused (decision report_deny).
	HostReport = "_report"
)

// Values of the result label of botbox_tls_handshakes_total.
const (
	HandshakeOK      = "ok"
	HandshakeIOError = "io_error"
	HandshakeTimeout = "timeout"
)

// The result and error_type labels of the botbox_https_interception_cert_*
// metrics take the values package mitm reports through its Observer
// (mitm.CertResultIssued, …): mitm may not import telemetry, so those
// constants live with their producer only.

// Non-numeric values of the status_code label of botbox_upstream_errors_total.
const (
	UpstreamConnectionError = "connection_error"
	UpstreamTimeout         = "timeout"
	// UpstreamAddrDenied: the address guard refused the address (package
	// upstream's AddrDeniedError); the same value as ReasonAddressGuard.
	UpstreamAddrDenied = ReasonAddressGuard
)

// ReasonAddressGuard is the reason field of the decision line (and
// X-Botbox-Reason) of a request whose upstream address the address guard
// refused (403 destination address not allowed), and the status_code
// label of botbox_upstream_errors_total for it.
const ReasonAddressGuard = "address_guard"

// Values of the reason label of botbox_requests_aborted_total: an allowed
// request whose exchange broke after the decision. They are also the
// reason field of its decision line.
const (
	// AbortUpstreamBody: reading the origin's response body failed (the
	// origin reset or closed the connection mid-body).
	AbortUpstreamBody = "upstream_body_error"
	// AbortClientClosed: the agent went away (cancelled the request or
	// closed its connection) before the response was complete.
	AbortClientClosed = "client_closed"
)

const (
	minStatusLabel = 100
	maxStatusLabel = 599
)

// statusCodeLabels holds the decimal form of every code in
// [minStatusLabel, maxStatusLabel]. It is an immutable lookup table, filled
// once when the package is loaded, so StatusCodeLabel does not allocate.
var statusCodeLabels = func() (t [maxStatusLabel - minStatusLabel + 1]string) {
	for i := range t {
		t[i] = strconv.Itoa(minStatusLabel + i)
	}
	return t
}()

// StatusCodeLabel returns code in decimal, the status_code label value for
// an upstream response status. It does not allocate for 100-599.
func StatusCodeLabel(code int) string {
	if code >= minStatusLabel && code <= maxStatusLabel {
		return statusCodeLabels[code-minStatusLabel]
	}
	return strconv.Itoa(code)
}
