package webhook

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/botbox/botbox/internal/inject"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Limits of the HTTPS server. The API server gives a webhook at most 10 s
// (timeoutSeconds, default 10); a review is CPU-only and takes
// milliseconds, so every bound stays well below that.
const (
	// MaxBody bounds an AdmissionReview: the API server's own request limit
	// is 3 MiB, and the review carries the object (twice on UPDATE).
	MaxBody           = 7 << 20
	readHeaderTimeout = 2 * time.Second
	readTimeout       = 4 * time.Second
	writeTimeout      = 4 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 64 << 10
	shutdownTimeout   = 5 * time.Second
)

// Paths served.
const (
	PathMutate   = "/mutate"
	PathValidate = "/validate"
	PathHealthz  = "/healthz"
	PathMetrics  = "/metrics"
)

// Metrics are the webhook's Prometheus series.
type Metrics struct {
	reviews  *prometheus.CounterVec
	duration *prometheus.HistogramVec
	reloads  *prometheus.CounterVec
}

// NewMetrics registers the webhook's series (and the Go and process
// collectors) on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_webhook_reviews_total",
			Help: "Admission reviews by endpoint (mutate, validate) and result (allowed, patched, denied, invalid).",
		}, []string{"endpoint", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "botbox_webhook_review_duration_seconds",
			Help:    "Time to decide one admission review.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"endpoint"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botbox_webhook_certificate_reloads_total",
			Help: "Reloads of the serving certificate from its files by result (success, failure).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.reviews, m.duration, m.reloads,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves /mutate, /validate and /healthz.
type Handler struct {
	Options inject.Options
	Logger  *slog.Logger
	Metrics *Metrics
}

// ServeHTTP routes by path.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case PathMutate:
		h.admit(w, r, true)
	case PathValidate:
		h.admit(w, r, false)
	case PathHealthz:
		healthz(w, r)
	default:
		http.NotFound(w, r)
	}
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok\n")
}

func (h *Handler) admit(w http.ResponseWriter, r *http.Request, mutate bool) {
	start := time.Now()
	endpoint := "validate"
	if mutate {
		endpoint = "mutate"
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		h.invalid(w, endpoint, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			h.invalid(w, endpoint, http.StatusRequestEntityTooLarge, fmt.Sprintf("AdmissionReview larger than %d bytes", MaxBody))
			return
		}
		h.invalid(w, endpoint, http.StatusBadRequest, "reading the request body failed")
		return
	}
	rev, err := decodeReview(body)
	if err != nil {
		h.invalid(w, endpoint, http.StatusBadRequest, err.Error())
		return
	}
	req := rev.Request
	d := review(req, mutate, h.Options)
	out, err := response(req, d)
	var b []byte
	if err == nil {
		b, err = json.Marshal(out)
	}
	if err != nil {
		h.invalid(w, endpoint, http.StatusInternalServerError, "encoding the AdmissionReview response failed")
		return
	}
	// Counted before the answer leaves: whoever saw the answer sees the count.
	h.Metrics.reviews.WithLabelValues(endpoint, d.result).Inc()
	h.Metrics.duration.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
	w.Header().Set("Content-Type", "application/json")
	_, err = w.Write(b)
	attrs := []any{
		slog.String(telemetry.KeyEndpoint, endpoint), slog.String(telemetry.KeyUID, string(req.UID)),
		slog.String(telemetry.KeyNamespace, req.Namespace), slog.String(telemetry.KeyName, req.Name),
		slog.String(telemetry.KeyOperation, string(req.Operation)), slog.String(telemetry.KeyResult, d.result),
	}
	if d.message != "" {
		attrs = append(attrs, slog.String(telemetry.KeyReason, d.message))
	}
	if err != nil {
		attrs = append(attrs, slog.String(telemetry.KeyError, err.Error()))
	}
	h.Logger.Info("admission review", attrs...)
}

// invalid answers a request that is not an AdmissionReview the webhook can
// decide. The API server then applies the configuration's failurePolicy
// (Fail in the chart): the Pod is not admitted.
func (h *Handler) invalid(w http.ResponseWriter, endpoint string, code int, msg string) {
	h.Metrics.reviews.WithLabelValues(endpoint, ResultInvalid).Inc()
	h.Logger.Warn("invalid admission request", slog.String(telemetry.KeyEndpoint, endpoint), slog.Int(telemetry.KeyStatus, code), slog.String(telemetry.KeyError, msg))
	http.Error(w, msg, code)
}

// CertReloader serves the key pair from two files and reloads it when
// either file changes (size, modification time or inode, checked at most
// once per interval on a handshake). A pair that fails to load is logged
// and counted, and the previous one kept.
type CertReloader struct {
	certFile, keyFile string
	logger            *slog.Logger
	metrics           *Metrics
	interval          time.Duration
	now               func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string
	checked time.Time
}

// NewCertReloader loads the pair once; an error here is fatal to the caller.
func NewCertReloader(certFile, keyFile string, logger *slog.Logger, m *Metrics) (*CertReloader, error) {
	c := &CertReloader{certFile: certFile, keyFile: keyFile, logger: logger, metrics: m, interval: time.Second, now: time.Now}
	stamp, err := c.fileStamp()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the serving certificate: %w", err)
	}
	c.cert, c.stamp, c.checked = &cert, stamp, c.now()
	return c, nil
}

func (c *CertReloader) fileStamp() (string, error) {
	var s string
	for _, f := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("serving certificate: %w", err)
		}
		s += fmt.Sprintf("%d/%d/%v;", fi.Size(), fi.ModTime().UnixNano(), inode(fi))
	}
	return s, nil
}

// GetCertificate is tls.Config.GetCertificate.
func (c *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); now.Sub(c.checked) >= c.interval {
		c.checked = now
		c.reload()
	}
	return c.cert, nil
}

// reload reloads the pair when the files changed; c.mu is held.
func (c *CertReloader) reload() {
	stamp, err := c.fileStamp()
	if err == nil && stamp == c.stamp {
		return
	}
	var cert tls.Certificate
	if err == nil {
		cert, err = tls.LoadX509KeyPair(c.certFile, c.keyFile)
	}
	if err != nil {
		// Half-written files during a rotation land here; the next check
		// retries, the old pair serves meanwhile.
		c.metrics.reloads.WithLabelValues("failure").Inc()
		c.logger.Warn("serving certificate not reloaded; keeping the previous one", slog.String(telemetry.KeyError, err.Error()))
		return
	}
	c.cert, c.stamp = &cert, stamp
	c.metrics.reloads.WithLabelValues("success").Inc()
	c.logger.Info("serving certificate reloaded")
}

// Config is what Serve needs.
type Config struct {
	Listen        string // HTTPS, e.g. ":8443"
	MetricsListen string // plain HTTP /metrics and /healthz; "" for none
	CertFile      string
	KeyFile       string
	Options       inject.Options
	Logger        *slog.Logger
	// Ready, when not nil, receives the bound addresses (HTTPS first)
	// once both listeners accept.
	Ready func(addrs []net.Addr)
}

// Serve runs the webhook until ctx is done, then shuts down within
// shutdownTimeout.
func Serve(ctx context.Context, cfg Config) error {
	if err := cfg.Options.Validate(); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	certs, err := NewCertReloader(cfg.CertFile, cfg.KeyFile, cfg.Logger, m)
	if err != nil {
		return err
	}
	for _, w := range cfg.Options.Weaknesses() {
		cfg.Logger.Warn("webhook option weakens containment", slog.String(telemetry.KeyReason, w))
	}
	h := &Handler{Options: cfg.Options, Logger: cfg.Logger, Metrics: m}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("webhook listener: %w", err)
	}
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate},
		ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout, WriteTimeout: writeTimeout,
		IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes,
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	servers := []*http.Server{srv}
	addrs := []net.Addr{ln.Addr()}
	errc := make(chan error, 2)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	if cfg.MetricsListen != "" {
		mln, err := lc.Listen(ctx, "tcp", cfg.MetricsListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("metrics listener: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle(PathMetrics, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc(PathHealthz, healthz)
		msrv := &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
			WriteTimeout: writeTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes}
		servers = append(servers, msrv)
		addrs = append(addrs, mln.Addr())
		go func() { errc <- msrv.Serve(mln) }()
	}
	cfg.Logger.Info("webhook serving", slog.String(telemetry.KeyAddr, ln.Addr().String()))
	if cfg.Ready != nil {
		cfg.Ready(addrs)
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	for _, s := range servers {
		if err := s.Shutdown(sctx); err != nil && serveErr == nil {
			serveErr = fmt.Errorf("shutdown: %w", err)
		}
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}
