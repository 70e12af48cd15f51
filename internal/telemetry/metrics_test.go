package telemetry

import (
	"bufio"
	"bytes"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// exerciseAll creates at least one series of every BotBox metric, with the
// label values the proxy and the interception listener use.
func exerciseAll(m *Metrics) {
	api := m.ForHost("api.example.com")
	api.Requests.Inc()
	api.Duration.Observe(0.042)
	api.HeaderRewrites.Inc()
	api.UpstreamStatus(401)
	api.UpstreamStatus(200) // not an error: no series

	def := m.ForHost(HostDefaultAllow)
	def.Requests.Inc()
	def.Duration.Observe(3)
	def.UpstreamError(UpstreamTimeout)
	def.UpstreamError(UpstreamConnectionError)

	m.Requests.WithLabelValues(HostDenied, DecisionDeny).Inc()
	m.Requests.WithLabelValues(HostUnknown, DecisionDeniedConnect).Inc()
	m.Requests.WithLabelValues(HostUnknown, DecisionDeniedNoHost).Inc()
	m.TLSHandshakes.WithLabelValues(HandshakeOK).Inc()
	m.TLSHandshakes.WithLabelValues(HandshakeIOError).Inc()
	m.TLSHandshakes.WithLabelValues(HandshakeTimeout).Inc()
	// mitm's label values (mitm.CertResultIssued, …), which telemetry may
	// not import.
	m.CertIssued.WithLabelValues("issued").Inc()
	m.CertIssued.WithLabelValues("denied").Inc()
	m.CertErrors.WithLabelValues("signing_failed").Inc()
	m.CertCache.WithLabelValues("hit").Inc()
	m.CertCache.WithLabelValues("miss").Inc()
	m.HostMismatch.Inc()
	m.Aborted.WithLabelValues("api.example.com", AbortUpstreamBody).Inc()
	m.Aborted.WithLabelValues(HostDefaultAllow, AbortClientClosed).Inc()
	m.SecretTripwire.WithLabelValues("openai-api-key").Inc()
	m.SecretScrubStalls.WithLabelValues("body").Inc()
}

// lintAllowed lists promlint objections to names and help strings the
// reference mandates, keyed by metric name. Empty: the reference's names
// pass promlint as they are.
var lintAllowed = map[string]string{}

func TestMetricsLint(t *testing.T) {
	m := NewMetrics()
	exerciseAll(m)
	problems, err := testutil.GatherAndLint(m.Registry) // every family, go_ and process_ included
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if _, ok := lintAllowed[p.Metric]; ok {
			continue
		}
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// TestMetricsExposition holds the /metrics text of the BotBox families (not
// go_ or process_) as a golden file: names, types, help strings, labels and
// buckets are a drop-in contract.
func TestMetricsExposition(t *testing.T) {
	m := NewMetrics()
	exerciseAll(m)

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape status = %d, want 200", rec.Code)
	}

	var out bytes.Buffer
	sawRuntime := map[string]bool{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		name := strings.TrimPrefix(strings.TrimPrefix(line, "# HELP "), "# TYPE ")
		if prefix, _, _ := strings.Cut(name, "_"); prefix == "go" || prefix == "process" {
			sawRuntime[prefix] = true
			continue
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !sawRuntime["go"] || !sawRuntime["process"] {
		t.Errorf("runtime collectors missing from the exposition: saw %v", sawRuntime)
	}
	checkGolden(t, "metrics.golden", out.Bytes())
}

// TestMetricsFresh checks what a scrape shows before any traffic: only the
// unlabelled host-mismatch counter, as in the reference.
func TestMetricsFresh(t *testing.T) {
	m := NewMetrics()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "botbox_") {
			got = append(got, mf.GetName())
		}
	}
	want := []string{"botbox_https_interception_host_mismatch_total"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("families before traffic (-want +got):\n%s", d)
	}
}

func TestMetricsPrivateRegistry(t *testing.T) {
	// Two instances must not collide (no global registry).
	a, b := NewMetrics(), NewMetrics()
	a.HostMismatch.Inc()
	if got := testutil.ToFloat64(b.HostMismatch); got != 0 {
		t.Errorf("second Metrics sees the first one's count: %v", got)
	}
}

func TestForHost(t *testing.T) {
	m := NewMetrics()
	h := m.ForHost("api.example.com")
	if h2 := m.ForHost("api.example.com"); h2 != h {
		t.Fatalf("ForHost returned a different *HostMetrics on the second call")
	}
	if other := m.ForHost(HostDefaultAllow); other == h {
		t.Fatalf("ForHost returned the same *HostMetrics for two hosts")
	}

	// The cached children are the vectors' own children.
	if h.Requests != m.Requests.WithLabelValues("api.example.com", DecisionAllow) {
		t.Errorf("Requests is not the {host,allow} child")
	}
	if h.Duration != m.RequestDuration.WithLabelValues("api.example.com") {
		t.Errorf("Duration is not the {host} child")
	}
	if h.HeaderRewrites != m.HeaderRewrites.WithLabelValues("api.example.com") {
		t.Errorf("HeaderRewrites is not the {host} child")
	}

	h.Requests.Inc()
	h.Requests.Inc()
	h.HeaderRewrites.Inc()
	h.Duration.Observe(0.2)
	if got := testutil.ToFloat64(m.Requests.WithLabelValues("api.example.com", DecisionAllow)); got != 2 {
		t.Errorf("requests{api.example.com,allow} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.HeaderRewrites.WithLabelValues("api.example.com")); got != 1 {
		t.Errorf("header_rewrites{api.example.com} = %v, want 1", got)
	}
	if got := histogramCount(t, m, "api.example.com"); got != 1 {
		t.Errorf("request_duration_seconds{api.example.com} count = %v, want 1", got)
	}
}

// histogramCount returns the sample count of botbox_request_duration_seconds{host}.
func histogramCount(t *testing.T, m *Metrics, host string) uint64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "botbox_request_duration_seconds" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				if lp.GetName() == "host" && lp.GetValue() == host {
					return s.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	t.Fatalf("no botbox_request_duration_seconds{host=%q} series", host)
	return 0
}

func TestHostMetricsUpstream(t *testing.T) {
	tests := []struct {
		name   string
		record func(h *HostMetrics)
		want   map[string]float64 // status_code -> count
	}{
		{"2xx is not an error", func(h *HostMetrics) { h.UpstreamStatus(200) }, map[string]float64{}},
		{"3xx is not an error", func(h *HostMetrics) { h.UpstreamStatus(304) }, map[string]float64{}},
		{"1xx is not an error", func(h *HostMetrics) { h.UpstreamStatus(100) }, map[string]float64{}},
		{"401", func(h *HostMetrics) { h.UpstreamStatus(401); h.UpstreamStatus(401) }, map[string]float64{"401": 2}},
		{"edges", func(h *HostMetrics) { h.UpstreamStatus(400); h.UpstreamStatus(599) }, map[string]float64{"400": 1, "599": 1}},
		{"beyond 599", func(h *HostMetrics) { h.UpstreamStatus(600); h.UpstreamStatus(999) }, map[string]float64{"600": 1, "999": 1}},
		{"connection error", func(h *HostMetrics) { h.UpstreamError(UpstreamConnectionError) }, map[string]float64{"connection_error": 1}},
		{"timeout", func(h *HostMetrics) { h.UpstreamError(UpstreamTimeout); h.UpstreamError(UpstreamTimeout) }, map[string]float64{"timeout": 2}},
		{"other kind", func(h *HostMetrics) { h.UpstreamError("tls_error") }, map[string]float64{"tls_error": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := NewMetrics()
			tt.record(m.ForHost("api.example.com"))
			mfs, err := m.Registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, mf := range mfs {
				if mf.GetName() != "botbox_upstream_errors_total" {
					continue
				}
				for _, s := range mf.GetMetric() {
					labels := map[string]string{}
					for _, lp := range s.GetLabel() {
						labels[lp.GetName()] = lp.GetValue()
					}
					if labels["host"] != "api.example.com" {
						t.Errorf("host label = %q", labels["host"])
					}
					got[labels["status_code"]] = s.GetCounter().GetValue()
				}
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("upstream errors (-want +got):\n%s", d)
			}
		})
	}
}

func TestForHostConcurrent(t *testing.T) {
	m := NewMetrics()
	const goroutines = 8
	got := make([]*HostMetrics, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			h := m.ForHost("api.example.com")
			got[i] = h
			for range 100 {
				h.Requests.Inc()
				h.UpstreamStatus(503)
				h.UpstreamError(UpstreamTimeout)
			}
		})
	}
	wg.Wait()
	for i, h := range got {
		if h != got[0] {
			t.Errorf("goroutine %d got a different *HostMetrics", i)
		}
	}
	if v := testutil.ToFloat64(m.Requests.WithLabelValues("api.example.com", DecisionAllow)); v != goroutines*100 {
		t.Errorf("requests = %v, want %d", v, goroutines*100)
	}
	if v := testutil.ToFloat64(m.UpstreamErrors.WithLabelValues("api.example.com", "503")); v != goroutines*100 {
		t.Errorf("503 errors = %v, want %d", v, goroutines*100)
	}
}

func TestStatusCodeLabel(t *testing.T) {
	for code := -1; code <= 1000; code++ {
		if got, want := StatusCodeLabel(code), strconv.Itoa(code); got != want {
			t.Fatalf("StatusCodeLabel(%d) = %q, want %q", code, got, want)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		for code := 100; code <= 599; code++ {
			_ = StatusCodeLabel(code)
		}
	})
	if allocs != 0 {
		t.Errorf("StatusCodeLabel(100-599): %v allocations, want 0", allocs)
	}
}

func TestHostMetricsAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	m := NewMetrics()
	m.ForHost("api.example.com").UpstreamStatus(502) // create the child
	allocs := testing.AllocsPerRun(100, func() {
		h := m.ForHost("api.example.com")
		h.Requests.Inc()
		h.HeaderRewrites.Inc()
		h.Duration.Observe(0.1)
		h.UpstreamStatus(502)
	})
	if allocs != 0 {
		t.Errorf("per-request metrics update: %v allocations, want 0", allocs)
	}
}

// BenchmarkMetricsUpdate is the per-request metrics cost of an allowed
// request: ForHost, the request counter, the rewrite counter and the
// duration histogram.
func BenchmarkMetricsUpdate(b *testing.B) {
	m := NewMetrics()
	for _, h := range []string{"a.example.com", "b.example.com", "api.example.com", HostDefaultAllow} {
		m.ForHost(h)
	}
	b.ReportAllocs()
	for b.Loop() {
		h := m.ForHost("api.example.com")
		h.Requests.Inc()
		h.HeaderRewrites.Inc()
		h.Duration.Observe(0.042)
	}
}

// BenchmarkMetricsUpdateWithLabels is the same update through
// WithLabelValues, for comparison.
func BenchmarkMetricsUpdateWithLabels(b *testing.B) {
	m := NewMetrics()
	b.ReportAllocs()
	for b.Loop() {
		m.Requests.WithLabelValues("api.example.com", DecisionAllow).Inc()
		m.HeaderRewrites.WithLabelValues("api.example.com").Inc()
		m.RequestDuration.WithLabelValues("api.example.com").Observe(0.042)
	}
}
