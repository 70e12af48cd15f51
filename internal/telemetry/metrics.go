package telemetry

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// durationBuckets are the reference's histogram buckets, in seconds.
func durationBuckets() []float64 {
	return []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
}

// Metrics holds every BotBox metric on a private registry. Names, types,
// labels and help strings are the reference's (newest scheme); label values
// come from the closed sets documented on each field.
//
// A vector's series appear in the exposition once a child is created
// (first increment, or ForHost for the per-host series); the unlabelled
// HostMismatch counter is always present.
type Metrics struct {
	// Registry holds the metrics below plus the Go runtime and process
	// collectors. Serve it with admin.NewHandler.
	Registry *prometheus.Registry

	// Requests is botbox_requests_total{host,decision}. Pairs used:
	// (rule host, DecisionAllow), (HostDefaultAllow, DecisionAllow),
	// (HostDenied, DecisionDeny), (HostDenied, DecisionDeniedUpgrade),
	// (HostUnknown, DecisionDeniedConnect), (HostUnknown,
	// DecisionDeniedNoHost), (HostUnknown, DecisionDeniedAbsoluteForm,
	// DecisionDeniedPort or DecisionDeniedHostMismatch), (rule host,
	// DecisionDeniedBodyTooLarge or DecisionDeniedRateLimit), (HostReport,
	// DecisionReportDeny). Allowed requests are best counted through
	// ForHost.
	Requests *prometheus.CounterVec
	// RequestDuration is botbox_request_duration_seconds{host}, host being a
	// rule host or HostDefaultAllow (unlike the reference, never the
	// requested host of a default-allowed request).
	RequestDuration *prometheus.HistogramVec
	// UpstreamErrors is botbox_upstream_errors_total{host,status_code},
	// status_code being a 4xx/5xx code (StatusCodeLabel),
	// UpstreamConnectionError or UpstreamTimeout.
	UpstreamErrors *prometheus.CounterVec
	// HeaderRewrites is botbox_header_rewrites_total{host}: one per request
	// that had at least one header rewritten.
	HeaderRewrites *prometheus.CounterVec
	// TLSHandshakes is botbox_tls_handshakes_total{result}: HandshakeOK,
	// HandshakeIOError or HandshakeTimeout, one per intercepted connection.
	TLSHandshakes *prometheus.CounterVec
	// CertIssued is botbox_https_interception_cert_issued_total{result}:
	// mitm.CertResultIssued or mitm.CertResultDenied.
	CertIssued *prometheus.CounterVec
	// CertErrors is botbox_https_interception_cert_error_total{error_type}:
	// mitm.CertErrorSigningFailed.
	CertErrors *prometheus.CounterVec
	// CertCache is botbox_https_interception_cert_cache_total{result}:
	// mitm.CacheResultHit or mitm.CacheResultMiss.
	CertCache *prometheus.CounterVec
	// HostMismatch is botbox_https_interception_host_mismatch_total.
	HostMismatch prometheus.Counter
	// Aborted is botbox_requests_aborted_total{host,reason} (BotBox's own,
	// not the reference's): allowed requests whose exchange broke after the
	// decision, reason AbortUpstreamBody or AbortClientClosed; host as in
	// ForHost. Their decision line says the same, at WARN.
	Aborted *prometheus.CounterVec
	// SecretTripwire is botbox_secret_tripwire_total{secret_ref}: requests
	// refused because they carried the placeholder of a secret towards a
	// host whose rule does not reference it (secret_ref is a configured
	// key name, a closed set).
	SecretTripwire *prometheus.CounterVec
	// SecretReflections is botbox_secret_reflections_total{secret_ref}
	// (BotBox's own): occurrences of an injected secret, in any of its
	// encodings, that an origin reflected in a response and BotBox masked
	// (package scrub). secret_ref is a configured name, never a value.
	SecretReflections *prometheus.CounterVec
	// SecretScrubStalls is botbox_secret_scrub_stalls_total{where} (BotBox's
	// own): scrubbed responses whose stream paused, past the scrubber's hold
	// timeout, inside a partial match of a secret (package scrub's
	// StallDepth bytes or more; no legitimate origin does that: a probe of
	// the hold-back). where is "body" or "websocket".
	SecretScrubStalls *prometheus.CounterVec

	hosts sync.Map // host label -> *HostMetrics
}

// NewMetrics creates the metrics on a new private registry, together with
// the Go runtime and process collectors.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	f := promauto.With(reg)
	return &Metrics{
		Registry: reg,
		Requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_requests_total",
			Help: "Total requests",
		}, []string{"host", "decision"}),
		RequestDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "botbox_request_duration_seconds",
			Help:    "Request duration in seconds",
			Buckets: durationBuckets(),
		}, []string{"host"}),
		UpstreamErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_upstream_errors_total",
			Help: "Total upstream errors",
		}, []string{"host", "status_code"}),
		HeaderRewrites: f.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_header_rewrites_total",
			Help: "Total header rewrites performed",
		}, []string{"host"}),
		TLSHandshakes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_tls_handshakes_total",
			Help: "Total HTTPS interception TLS handshakes",
		}, []string{"result"}),
		CertIssued: f.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_https_interception_cert_issued_total",
			Help: "Total HTTPS interception certificates issued",
		}, []string{"result"}),
		CertErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_https_interception_cert_error_total",
			Help: "Total HTTPS interception certificate generation errors",
		}, []string{"error_type"}),
		CertCache: f.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_https_interception_cert_cache_total",
			Help: "Total HTTPS interception cert cache operations",
		}, []string{"result"}),
		HostMismatch: f.NewCounter(prometheus.CounterOpts{
			Name: "botbox_https_interception_host_mismatch_total",
			Help: "Total HTTPS interception SNI/Host mismatches",
		}),
		Aborted: f.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_requests_aborted_total",
			Help: "Total allowed requests aborted after the decision (upstream body error or client gone)",
		}, []string{"host", "reason"}),
		SecretTripwire: f.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_secret_tripwire_total",
			Help: "Total requests refused for carrying a placeholder credential to a host its secret is not for",
		}, []string{"secret_ref"}),
		SecretReflections: f.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_secret_reflections_total",
			Help: "Injected secret values found in responses and masked",
		}, []string{"secret_ref"}),
		SecretScrubStalls: f.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_secret_scrub_stalls_total",
			Help: "Scrubbed responses that paused inside a partial match of a secret",
		}, []string{"where"}),
	}
}

// HostMetrics holds the per-host series of one host label, resolved once so
// that counting an allowed request costs a map lookup and atomic adds, with
// no label hashing and no allocation. Get it from Metrics.ForHost.
type HostMetrics struct {
	// Requests is botbox_requests_total{host=<host>,decision="allow"}.
	Requests prometheus.Counter
	// Duration is botbox_request_duration_seconds{host=<host>}.
	Duration prometheus.Observer
	// HeaderRewrites is botbox_header_rewrites_total{host=<host>}.
	HeaderRewrites prometheus.Counter

	host     string
	upstream *prometheus.CounterVec
	// Children of botbox_upstream_errors_total, created on first use so
	// that, as in the reference, an error series appears only once it
	// happened.
	status  [600 - 400]lazyCounter // status_code 400-599
	connErr lazyCounter
	timeout lazyCounter
}

// ForHost returns the per-host series for host, which must come from a
// closed set: a policy rule's canonical host or HostDefaultAllow (denied and
// rejected requests are counted on Requests directly). The first call for a
// host creates its Requests, Duration and HeaderRewrites series (at zero);
// later calls return the same *HostMetrics. Callers may call ForHost for
// every rule host at start-up so that all series exist from the first
// scrape. Safe for concurrent use.
func (m *Metrics) ForHost(host string) *HostMetrics {
	if v, ok := m.hosts.Load(host); ok {
		return v.(*HostMetrics)
	}
	// Racing first calls build equal values (WithLabelValues returns the
	// existing child); LoadOrStore keeps exactly one.
	h := &HostMetrics{
		Requests:       m.Requests.WithLabelValues(host, DecisionAllow),
		Duration:       m.RequestDuration.WithLabelValues(host),
		HeaderRewrites: m.HeaderRewrites.WithLabelValues(host),
		host:           host,
		upstream:       m.UpstreamErrors,
	}
	v, _ := m.hosts.LoadOrStore(host, h)
	return v.(*HostMetrics)
}

// UpstreamStatus counts an upstream response in
// botbox_upstream_errors_total{host,status_code=<code>} when code is 4xx or
// 5xx, the reference's rule; any other code is ignored.
func (h *HostMetrics) UpstreamStatus(code int) {
	switch {
	case code >= 400 && code < 600:
		h.status[code-400].get(h.upstream, h.host, StatusCodeLabel(code)).Inc()
	case code >= 600:
		// Not an HTTP status net/http produces for a well-behaved upstream;
		// still an error, and bounded (three digits).
		h.upstream.WithLabelValues(h.host, StatusCodeLabel(code)).Inc()
	}
}

// UpstreamError counts a failed upstream exchange in
// botbox_upstream_errors_total{host,status_code=<kind>}; kind is
// UpstreamConnectionError or UpstreamTimeout.
func (h *HostMetrics) UpstreamError(kind string) {
	switch kind {
	case UpstreamConnectionError:
		h.connErr.get(h.upstream, h.host, kind).Inc()
	case UpstreamTimeout:
		h.timeout.get(h.upstream, h.host, kind).Inc()
	default:
		h.upstream.WithLabelValues(h.host, kind).Inc()
	}
}

// lazyCounter caches one child of a counter vector once it is first used.
type lazyCounter struct {
	p atomic.Pointer[counterRef]
}

type counterRef struct{ c prometheus.Counter }

func (l *lazyCounter) get(vec *prometheus.CounterVec, host, label string) prometheus.Counter {
	if r := l.p.Load(); r != nil {
		return r.c
	}
	c := vec.WithLabelValues(host, label)
	// A racing Store holds the same child: WithLabelValues is idempotent.
	l.p.Store(&counterRef{c})
	return c
}
