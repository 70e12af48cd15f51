package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Values of the listener label of the server metrics below (the first two
// are also the decision line's listener values).
const (
	ListenerHTTP  = "http"
	ListenerHTTPS = "https"
	ListenerAdmin = "admin"
)

// ListenerConnect is the decision line's listener value of a request
// served inside a CONNECT tunnel of the plain listener (never a metric
// label: the tunnel's requests count under ListenerHTTPS).
const ListenerConnect = "connect"

// ListenerDNS is the listener value of a tripwire line raised by the DNS
// guard (a query name carrying a placeholder).
const ListenerDNS = "dns"

// Values of the decision and reason fields of the line logged for a request
// net/http refused before any handler ran.
const (
	DecisionDeniedMalformed = "denied_malformed"
	ReasonMalformedRequest  = "malformed_request"
)

// Values of the reason label of botbox_requests_shed_total and of the
// reason field of its sampled log line.
const (
	ReasonOverload = "overload"
)

// Values of the result label of botbox_config_reloads_total.
const (
	ReloadSuccess = "success"
	ReloadFailure = "failure"
)

// ServerMetrics are the listener-level metrics of package server, on the
// same registry as Metrics. Label values come from the constants above and
// from StatusCodeLabel.
type ServerMetrics struct {
	// ConnectionsDropped is botbox_connections_dropped_total{listener}: a
	// connection closed without a response because its listener's budget
	// was full (max_connections for http and https, the admin budget for
	// admin, where the longest-idle connection is the one closed).
	ConnectionsDropped *prometheus.CounterVec
	// RequestsShed is botbox_requests_shed_total{listener}: a request
	// answered 503 because max_concurrent_requests were in flight.
	RequestsShed *prometheus.CounterVec
	// MalformedRequests is botbox_malformed_requests_total{listener,status}:
	// a request net/http refused before any handler ran (400, 431, 501,
	// 505), status being StatusCodeLabel(code).
	MalformedRequests *prometheus.CounterVec
	// WriteTimeouts is botbox_downstream_write_timeouts_total{listener}: a
	// response write that did not complete within
	// downstream_write_timeout_seconds (a client that stopped reading).
	WriteTimeouts *prometheus.CounterVec
	// ConfigReloads is botbox_config_reloads_total{result}: reloads of the
	// config file, result ReloadSuccess or ReloadFailure.
	ConfigReloads *prometheus.CounterVec
	// ConfigLastReloadSuccess is botbox_config_last_reload_success: 1 when
	// the last reload succeeded (or none was attempted yet), 0 when it
	// failed and the previous configuration is still in force.
	ConfigLastReloadSuccess prometheus.Gauge
}

// NewServerMetrics registers the server metrics on reg.
func NewServerMetrics(reg prometheus.Registerer) *ServerMetrics {
	m := &ServerMetrics{
		ConnectionsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_connections_dropped_total",
			Help: "Connections closed without a response because the listener's connection budget was full",
		}, []string{"listener"}),
		RequestsShed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_requests_shed_total",
			Help: "Requests answered 503 because max_concurrent_requests were in flight",
		}, []string{"listener"}),
		MalformedRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_malformed_requests_total",
			Help: "Requests refused by the HTTP parser before policy was evaluated",
		}, []string{"listener", "status"}),
		WriteTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_downstream_write_timeouts_total",
			Help: "Response writes cut because the client did not read within downstream_write_timeout_seconds",
		}, []string{"listener"}),
		ConfigReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_config_reloads_total",
			Help: "Reloads of the config file by result (failure: the previous configuration stays in force)",
		}, []string{"result"}),
		ConfigLastReloadSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "botbox_config_last_reload_success",
			Help: "1 when the last config reload succeeded or none was attempted, 0 when it failed",
		}),
	}
	m.ConfigLastReloadSuccess.Set(1)
	reg.MustRegister(m.ConnectionsDropped, m.RequestsShed, m.MalformedRequests, m.WriteTimeouts, m.ConfigReloads, m.ConfigLastReloadSuccess)
	return m
}
