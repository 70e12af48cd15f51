package mitm

// Label values reported through [Observer]. They are the closed sets of
// reference §6.2; no value ever carries a host name. These constants are the
// only definition of these values (telemetry, which mitm may not import,
// documents them by these names).
const (
	// CertResultIssued: a new leaf certificate was signed
	// (botbox_https_interception_cert_issued_total{result="issued"}).
	CertResultIssued = "issued"
	// CertResultDenied: no certificate because the SNI was invalid or the host
	// is disallowed with DenyDisallowedSNI (…cert_issued_total{result="denied"}).
	CertResultDenied = "denied"
	// CertErrorSigningFailed: key generation or signing failed
	// (botbox_https_interception_cert_error_total{error_type="signing_failed"}).
	CertErrorSigningFailed = "signing_failed"
	// CacheResultHit and CacheResultMiss label
	// botbox_https_interception_cert_cache_total{result}.
	CacheResultHit  = "hit"
	CacheResultMiss = "miss"
)

// Observer receives the interception counters. It is declared here, by its
// consumer, so that mitm does not import telemetry; package server adapts
// telemetry.Metrics to it. Implementations must be safe for concurrent use
// and cheap: they are called inside TLS handshakes.
type Observer interface {
	// CertIssued counts certificate decisions: CertResultIssued or CertResultDenied.
	CertIssued(result string)
	// CertError counts issuance failures: CertErrorSigningFailed.
	CertError(errorType string)
	// CertCache counts cache lookups: CacheResultHit or CacheResultMiss.
	CertCache(result string)
}

// NopObserver is an [Observer] that discards everything.
type NopObserver struct{}

var _ Observer = NopObserver{}

// CertIssued implements [Observer].
func (NopObserver) CertIssued(string) {}

// CertError implements [Observer].
func (NopObserver) CertError(string) {}

// CertCache implements [Observer].
func (NopObserver) CertCache(string) {}
