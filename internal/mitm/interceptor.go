package mitm

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sync/singleflight"
)

const (
	// DefaultCertTTL is the leaf lifetime when Options.CertTTL is zero
	// (cert_ttl_seconds default, 86400).
	DefaultCertTTL = 24 * time.Hour
	// DefaultCacheSize is the cache capacity when Options.CacheSize is zero
	// (cert_cache_size default, 1024).
	DefaultCacheSize = 1024
)

// Handshake refusals. GetCertificate and VerifyConnection errors wrap one of
// these (or a signing error), so the listener can tell them apart with
// errors.Is for its logs; crypto/tls aborts the handshake with an alert.
var (
	// ErrNoSNI: the ClientHello has no server_name. Without it there is no
	// host to make a certificate for (reference §4.3 step 1).
	ErrNoSNI = errors.New("client sent no SNI")
	// ErrHostNotAllowed: the SNI host is denied by policy and
	// Options.DenyDisallowedSNI is set.
	ErrHostNotAllowed = errors.New("SNI host not allowed by policy")
)

// Authorizer reports whether policy allows host at port 443. host is the
// canonical output of [ValidateSNI]. It must be safe for concurrent use.
type Authorizer func(host string) bool

// Options configure an [Interceptor]. The zero value of an optional field
// selects its documented default.
type Options struct {
	// CA signs the leaves. Required.
	CA *CA
	// CertTTL is the leaf lifetime from issuance (cert_ttl_seconds); zero
	// means DefaultCertTTL, negative is an error.
	CertTTL time.Duration
	// CacheTTL is how long a leaf is reused, measured from its insertion
	// (cert_cache_ttl_seconds). Zero disables caching, as in the reference;
	// negative is an error. Whatever its value, a leaf is not reused within
	// a safety margin of its NotAfter (see [Interceptor]).
	CacheTTL time.Duration
	// CacheSize bounds the number of cached leaves (cert_cache_size); zero
	// means DefaultCacheSize, negative is an error.
	CacheSize int
	// DenyDisallowedSNI refuses the handshake for hosts that Allowed
	// rejects (deny_handshake_on_disallowed_sni). When false, such hosts get
	// a certificate and are denied at the HTTP level.
	DenyDisallowedSNI bool
	// Allowed is the policy check; required when DenyDisallowedSNI is set,
	// unused otherwise.
	Allowed Authorizer
	// Observer receives the certificate counters; nil means NopObserver.
	Observer Observer
	// Logger receives signing failures (ERROR) and refusals (DEBUG); nil
	// discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now. Tests inject a fake one.
	Now func() time.Time
}

// Interceptor chooses the server certificate of each intercepted TLS
// connection from its SNI. It is safe for concurrent use.
//
// Leaves are cached per host in an LRU of Options.CacheSize entries, each
// reused for Options.CacheTTL after insertion but never within a safety
// margin of the leaf's NotAfter: min(10% of CertTTL, 1h), at least 1 minute,
// at most half of CertTTL. Concurrent misses for one host share a single
// issuance (singleflight).
type Interceptor struct {
	ca      *CA
	certTTL time.Duration
	margin  time.Duration
	deny    bool
	allowed Authorizer
	obs     Observer
	log     *slog.Logger
	now     func() time.Time
	cache   *lru[*tls.Certificate]
	flight  singleflight.Group
}

// New checks opts and returns an Interceptor.
func New(opts Options) (*Interceptor, error) {
	switch {
	case opts.CA == nil:
		return nil, errors.New("mitm: Options.CA is required")
	case opts.CertTTL < 0:
		return nil, fmt.Errorf("mitm: negative CertTTL %s", opts.CertTTL)
	case opts.CacheTTL < 0:
		return nil, fmt.Errorf("mitm: negative CacheTTL %s", opts.CacheTTL)
	case opts.CacheSize < 0:
		return nil, fmt.Errorf("mitm: negative CacheSize %d", opts.CacheSize)
	case opts.DenyDisallowedSNI && opts.Allowed == nil:
		return nil, errors.New("mitm: Options.Allowed is required with DenyDisallowedSNI")
	}
	ic := &Interceptor{
		ca:      opts.CA,
		certTTL: cmp.Or(opts.CertTTL, DefaultCertTTL),
		deny:    opts.DenyDisallowedSNI,
		allowed: opts.Allowed,
		obs:     opts.Observer,
		log:     opts.Logger,
		now:     opts.Now,
	}
	ic.margin = safetyMargin(ic.certTTL)
	ic.cache = newLRU[*tls.Certificate](cmp.Or(opts.CacheSize, DefaultCacheSize), opts.CacheTTL)
	if ic.obs == nil {
		ic.obs = NopObserver{}
	}
	if ic.log == nil {
		ic.log = slog.New(slog.DiscardHandler)
	}
	if ic.now == nil {
		ic.now = time.Now
	}
	return ic, nil
}

// safetyMargin is how long before a leaf's NotAfter it stops being reused:
// 10% of its lifetime, capped at 1h (a day-long leaf is refreshed an hour
// before expiry), at least 1 minute for clock skew between us and the
// client, but never more than half the lifetime, so that very short TTLs
// still cache.
func safetyMargin(certTTL time.Duration) time.Duration {
	m := min(certTTL/10, time.Hour)
	m = max(m, time.Minute)
	return min(m, certTTL/2)
}

// TLSConfig returns a new server configuration for the interception
// listener: the certificate is chosen per ClientHello, ALPN offers "h2" then
// "http/1.1" (h2 first so that HTTP/2 and gRPC clients keep working; the
// reference offered only http/1.1), TLS 1.2 is the minimum, and resumed
// sessions get the same SNI checks as full handshakes. Each call returns a
// fresh value with its own session-ticket keys, which the caller may adjust
// before use; use one per listener so that tickets resume across
// connections.
func (ic *Interceptor) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS12,
		NextProtos:       []string{"h2", "http/1.1"},
		GetCertificate:   ic.getCertificate,
		VerifyConnection: ic.verifyConnection,
	}
}

// getCertificate is tls.Config.GetCertificate.
func (ic *Interceptor) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if hello.ServerName == "" {
		// Not counted as a certificate decision (reference §4.3 step 1); the
		// listener counts the failed handshake.
		return nil, ErrNoSNI
	}
	return ic.CertificateFor(hello.ServerName)
}

// verifyConnection closes a gap crypto/tls leaves open: a resumed TLS 1.3
// session skips GetCertificate and is not tied to the SNI it was issued for,
// so a client could resume a ticket obtained for an allowed host while
// sending a disallowed (or no, or invalid) SNI. Full handshakes were already
// checked in getCertificate, and so were TLS 1.2 resumptions (crypto/tls
// calls GetCertificate before resuming those; the recheck here then passes
// and counts nothing).
func (ic *Interceptor) verifyConnection(cs tls.ConnectionState) error {
	if !cs.DidResume {
		return nil
	}
	if cs.ServerName == "" {
		return ErrNoSNI
	}
	_, err := ic.authorize(cs.ServerName)
	return err
}

// authorize validates name and applies DenyDisallowedSNI, counting a refusal
// as cert_issued{denied}.
func (ic *Interceptor) authorize(name string) (string, error) {
	host, err := ValidateSNI(name)
	if err != nil {
		ic.obs.CertIssued(CertResultDenied)
		ic.log.Debug("HTTPS interception certificate denied", "reason", "invalid_sni", "error", err)
		return "", err
	}
	if ic.deny && !ic.allowed(host) {
		ic.obs.CertIssued(CertResultDenied)
		ic.log.Debug("HTTPS interception certificate denied", "reason", "disallowed_sni", "host", host)
		return "", fmt.Errorf("%w: %q", ErrHostNotAllowed, host)
	}
	return host, nil
}

// CertificateFor returns the leaf for an SNI value exactly as a handshake
// would get it — validation, the DenyDisallowedSNI check, the cache and
// single-flight issuance, with the same Observer counts.
func (ic *Interceptor) CertificateFor(sni string) (*tls.Certificate, error) {
	host, err := ic.authorize(sni)
	if err != nil {
		return nil, err
	}
	if cert, ok := ic.cache.get(host, ic.now()); ok {
		ic.obs.CertCache(CacheResultHit)
		return cert, nil
	}
	ic.obs.CertCache(CacheResultMiss)
	v, err, _ := ic.flight.Do(host, func() (any, error) { return ic.issueAndCache(host) })
	if err != nil {
		return nil, err
	}
	return v.(*tls.Certificate), nil
}

// issueAndCache runs once per flight. It looks again first: a flight for the
// same host may have completed between our miss and our joining the group.
func (ic *Interceptor) issueAndCache(host string) (*tls.Certificate, error) {
	now := ic.now()
	if cert, ok := ic.cache.get(host, now); ok {
		return cert, nil
	}
	cert, err := ic.ca.issue(host, ic.certTTL, now)
	if err != nil {
		ic.obs.CertError(CertErrorSigningFailed)
		ic.log.Error("failed to issue HTTPS interception leaf certificate", "host", host, "error", err)
		return nil, fmt.Errorf("issuing leaf certificate for %q: %w", host, err)
	}
	ic.cache.add(host, cert, now, cert.Leaf.NotAfter.Add(-ic.margin))
	ic.obs.CertIssued(CertResultIssued)
	return cert, nil
}
