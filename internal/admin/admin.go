// Package admin is the HTTP handler of BotBox's loopback admin port: the
// Prometheus exposition and the health probes.
//
// Routes (the path alone decides; the query string is ignored, including
// promhttp's name[] filter):
//
//	/metrics  200, Prometheus exposition of the given Gatherer, in the format
//	          promhttp negotiates (text/plain; version=0.0.4 by default)
//	/healthz  200 "ok" when ready() reports true, else 503 "not ready";
//	          with WithReadyNote, a 200 whose note is not empty says
//	          "ok (NOTE)" — the body still starts with "ok" and the status
//	          alone is the contract (probes, `botbox probe`, the probe MAC)
//	/readyz   the same as /healthz
//	anything  404 "not found"
//
// Deliberate improvement over the reference, which answered any method: the
// known paths accept only GET and HEAD and answer any other method with
// 405 "method not allowed" and an "Allow: GET, HEAD" header. Health and
// error bodies are text/plain with no trailing newline, exactly the
// reference's bodies.
//
// Probes that send a nonce in ProbeNonceHeader get ProbeAuthHeader back, an
// HMAC under the per-start key that BotBox writes to a file only its own
// container can read (probe.go), so that a process squatting the port
// cannot pass `botbox probe`.
//
// The package does not listen: package server serves the handler on a
// loopback-only http.Server with its own connection budget, timeouts and
// shutdown, and flips readiness (for example to false on SIGTERM) through
// the ready function.
//
// Typical use:
//
//	srv := &http.Server{Addr: "127.0.0.1:9090", Handler: admin.NewHandler(metrics.Registry, ready.Load, probeKey)}
package admin

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Response bodies; the health and 404 bodies are the reference's.
const (
	bodyOK               = "ok"
	bodyNotReady         = "not ready"
	bodyNotFound         = "not found"
	bodyMethodNotAllowed = "method not allowed"
	allowedMethods       = "GET, HEAD"
)

// handler routes the admin paths.
type handler struct {
	metrics  http.Handler
	ready    func() bool
	note     func() string
	probeKey []byte
}

// Option configures NewHandler.
type Option func(*handler)

// WithReadyNote makes a ready probe answer "ok (NOTE)" whenever note()
// returns a non-empty string, so that a state an operator must not miss
// (report mode) is visible wherever readiness is looked at. note is called
// once per ready probe and must be safe for concurrent use; it never
// changes the status code (TestHandlerReadyNote).
func WithReadyNote(note func() string) Option {
	return func(h *handler) { h.note = note }
}

var _ http.Handler = (*handler)(nil)

// NewHandler returns the admin handler serving reg on /metrics and ready()
// on /healthz and /readyz. ready is called once per probe and must be safe
// for concurrent use; nil means always ready. probeKey (nil = none) signs
// the answers to probes that send a nonce.
func NewHandler(reg prometheus.Gatherer, ready func() bool, probeKey []byte, opts ...Option) http.Handler {
	if ready == nil {
		ready = func() bool { return true }
	}
	h := &handler{
		metrics:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		ready:    ready,
		probeKey: probeKey,
	}
	for _, o := range opts {
		o(h)
	}
	return h
}

// ServeHTTP implements http.Handler.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if nonce := r.Header.Get(ProbeNonceHeader); h.probeKey != nil && validNonce(nonce) {
		w = &probeAuthWriter{ResponseWriter: w, key: h.probeKey, nonce: nonce, path: r.URL.Path}
	}
	switch r.URL.Path {
	case "/metrics", "/healthz", "/readyz":
	default:
		writeText(w, http.StatusNotFound, bodyNotFound)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", allowedMethods)
		writeText(w, http.StatusMethodNotAllowed, bodyMethodNotAllowed)
		return
	}
	if r.URL.Path == "/metrics" {
		if r.URL.RawQuery != "" {
			// promhttp filters families by name[] query parameters; the
			// reference ignores the query, and so do we.
			r = r.Clone(r.Context())
			r.URL.RawQuery = ""
		}
		h.metrics.ServeHTTP(w, r)
		return
	}
	if h.ready() {
		body := bodyOK
		if h.note != nil {
			if n := h.note(); n != "" {
				body += " (" + n + ")"
			}
		}
		writeText(w, http.StatusOK, body)
		return
	}
	writeText(w, http.StatusServiceUnavailable, bodyNotReady)
}

// writeText writes a short plain-text response; probes should never be
// cached or content-sniffed.
func writeText(w http.ResponseWriter, code int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}
