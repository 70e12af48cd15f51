package telemetry

import "strconv"

// Values of the decision label of botbox_requests_total.
const (
	DecisionAllow         = "allow"
	DecisionDeny          = "deny"
	DecisionDeniedConnect = "denied_connect"
	DecisionDeniedNoHost  = "denied_no_host"
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
)

// Values of the result label of botbox_tls_handshakes_total.
const (
	HandshakeOK      = "ok"
	HandshakeIOError = "io_error"
	HandshakeTimeout = "timeout"
)

// Values of the result label of botbox_https_interception_cert_issued_total.
const (
	CertIssued = "issued"
	CertDenied = "denied"
)

// Values of the result label of botbox_https_interception_cert_cache_total.
const (
	CacheHit  = "hit"
	CacheMiss = "miss"
)

// Values of the error_type label of botbox_https_interception_cert_error_total.
const (
	CertErrSigningFailed = "signing_failed"
)

// Non-numeric values of the status_code label of botbox_upstream_errors_total.
const (
	UpstreamConnectionError = "connection_error"
	UpstreamTimeout         = "timeout"
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
