package telemetry

import "github.com/prometheus/client_golang/prometheus"

// TargetDNS is the log target of the DNS guard (package dnsguard).
const TargetDNS = "botbox::dns_guard"

// Values of the result label of botbox_dns_queries_total, one per query
// the DNS guard answered.
const (
	// DNSForwarded: the name is allowed and the answer came from an
	// upstream resolver (directly or from the guard's cache).
	DNSForwarded = "forwarded"
	// DNSDenied: the guard answered locally without asking upstream: a
	// name the policy does not allow (NXDOMAIN) or a query type it does
	// not forward for an allowed name (empty NOERROR).
	DNSDenied = "denied"
	// DNSError: malformed query (FORMERR, NOTIMP, REFUSED) or no usable
	// upstream answer in time (SERVFAIL).
	DNSError = "error"
)

// Values of the reason field of the DNS guard's decision line.
const (
	// DNSReasonNotAllowed: no allow rule covers the name (or a deny rule
	// names it) and the default action is deny.
	DNSReasonNotAllowed = "name_not_allowed"
	// DNSReasonType: the name is allowed but the query type is not one the
	// guard forwards (A, AAAA, CNAME, HTTPS, SVCB).
	DNSReasonType = "type_not_forwarded"
	// DNSReasonInspector: the name inspector (placeholder tripwire)
	// refused the name; the name itself is not logged.
	DNSReasonInspector = "name_refused_by_inspector"
	// DNSReasonReport: report mode forwarded a name enforce mode would
	// have refused.
	DNSReasonReport = "report_deny"
	// DNSReasonForeignPeer: the query's source is not an address of the
	// Pod; it was dropped without an answer.
	DNSReasonForeignPeer = "foreign_peer"
)

// Log keys of the DNS guard's lines.
const (
	KeyQType     = "qtype"     // the query type, e.g. "A", "TXT"
	KeyTransport = "transport" // "udp" or "tcp"
	// KeySuppressed is, on the guard's summary line, how many decision
	// lines the log rate limit left out since the previous line.
	KeySuppressed = "suppressed"
)

// DNSMetrics are the DNS guard's metrics (BotBox's own).
type DNSMetrics struct {
	// Queries is botbox_dns_queries_total{result}: result DNSForwarded,
	// DNSDenied or DNSError. All three series exist from registration.
	Queries *prometheus.CounterVec
	// Forwarded, Denied and Error are the three children of Queries,
	// resolved once so that counting costs an atomic add.
	Forwarded, Denied, Error prometheus.Counter
	// ForeignPeer is botbox_dns_foreign_peer_queries_total: queries the
	// guard dropped unanswered because their source is not an address of
	// the Pod (a spoofed source: answering it would send the query's bytes
	// out of the Pod). The init rules drop such packets first; a non-zero
	// value means they are missing or incomplete.
	ForeignPeer prometheus.Counter
}

// NewDNSMetrics registers the DNS guard's metrics on reg.
func NewDNSMetrics(reg prometheus.Registerer) *DNSMetrics {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "botbox_dns_queries_total",
		Help: "DNS queries answered by the DNS guard, by result (denied: answered locally, never sent upstream)",
	}, []string{"result"})
	reg.MustRegister(v)
	foreign := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "botbox_dns_foreign_peer_queries_total",
		Help: "DNS queries the DNS guard dropped unanswered because their source is not an address of the Pod",
	})
	reg.MustRegister(foreign)
	return &DNSMetrics{
		ForeignPeer: foreign,
		Queries:     v,
		Forwarded:   v.WithLabelValues(DNSForwarded),
		Denied:      v.WithLabelValues(DNSDenied),
		Error:       v.WithLabelValues(DNSError),
	}
}
