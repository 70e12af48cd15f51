package mint

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of botbox_credential_refreshes_total and
// botbox_credential_revocations_total.
const (
	resultOK    = "ok"
	resultError = "error"
)

// Metrics are the credential metrics: refreshes and revocations counted by
// credential name and result, and each token's remaining lifetime. Labels
// are credential names (config keys), never a value. A nil *Metrics
// counts nothing.
type Metrics struct {
	refreshes   *prometheus.CounterVec
	revocations *prometheus.CounterVec
	expiry      *prometheus.Desc

	mu      sync.Mutex
	sources []*Source
}

// NewMetrics registers the credential metrics with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_credential_refreshes_total",
			Help: "Token mints of minted credentials, by credential name and result (ok, error).",
		}, []string{"credential", "result"}),
		revocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_credential_revocations_total",
			Help: "Token revocations at shutdown, by credential name and result (ok, error).",
		}, []string{"credential", "result"}),
		expiry: prometheus.NewDesc("botbox_credential_expiry_seconds",
			"Seconds until the current token of a minted credential expires (negative: expired; absent before the first token).",
			[]string{"credential"}, nil),
	}
	if reg != nil {
		reg.MustRegister(m.refreshes, m.revocations, m)
	}
	return m
}

func (m *Metrics) add(s *Source) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sources = append(m.sources, s)
	for _, r := range []string{resultOK, resultError} {
		m.refreshes.WithLabelValues(s.o.Name, r)
	}
}

func (m *Metrics) refresh(name, result string) {
	if m != nil {
		m.refreshes.WithLabelValues(name, result).Inc()
	}
}

func (m *Metrics) revoke(name, result string) {
	if m != nil {
		m.revocations.WithLabelValues(name, result).Inc()
	}
}

// Describe implements prometheus.Collector (the expiry gauge).
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) { ch <- m.expiry }

// Collect implements prometheus.Collector: the expiry gauge of every
// source that holds a token, computed at scrape time.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	sources := append([]*Source(nil), m.sources...)
	m.mu.Unlock()
	for _, s := range sources {
		exp := s.expiry()
		if exp.IsZero() {
			continue
		}
		ch <- prometheus.MustNewConstMetric(m.expiry, prometheus.GaugeValue, exp.Sub(s.o.Now()).Seconds(), s.o.Name)
	}
}
