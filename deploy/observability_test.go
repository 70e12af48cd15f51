package deploy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/telemetry"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	dashboardFile = "grafana/botbox-dashboard.json"
	alertsFile    = "prometheus/alerts.yaml"
)

// pendingMetrics are named by the dashboard and the alerts but added to
// internal/telemetry by other branches (DNS guard, tripwire secrets,
// reflection redaction). Once one exists in telemetry the test logs that
// it can leave this list.
var pendingMetrics = []string{
	"botbox_dns_queries_total",
	"botbox_secret_tripwire_total",
	"botbox_secret_reflections_total",
}

// externalMetrics are series from other exporters the alerts rely on.
var externalMetrics = []string{
	"kube_pod_init_container_status_ready", // kube-state-metrics
	"kube_pod_status_phase",                // kube-state-metrics
}

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// telemetryMetrics returns the name of every metric BotBox exports,
// described (not gathered: a vector without children gathers nothing) by
// every collector field of telemetry.Metrics, telemetry.ServerMetrics and
// telemetry.DNSMetrics;
// histograms also yield their _bucket, _sum and _count series.
func telemetryMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	collect := func(v any) {
		rv := reflect.ValueOf(v).Elem()
		for i := range rv.NumField() {
			f := rv.Field(i)
			if !rv.Type().Field(i).IsExported() {
				continue
			}
			c, ok := f.Interface().(prometheus.Collector)
			if !ok || f.IsNil() {
				continue
			}
			ch := make(chan *prometheus.Desc, 16)
			go func() { c.Describe(ch); close(ch) }()
			for d := range ch {
				m := descName.FindStringSubmatch(d.String())
				if m == nil {
					t.Fatalf("cannot read the name of %s", d)
				}
				names[m[1]] = true
				switch c.(type) {
				case prometheus.Histogram, *prometheus.HistogramVec:
					for _, s := range []string{"_bucket", "_sum", "_count"} {
						names[m[1]+s] = true
					}
				}
			}
		}
	}
	collect(telemetry.NewMetrics())
	collect(telemetry.NewServerMetrics(prometheus.NewRegistry()))
	collect(telemetry.NewDNSMetrics(prometheus.NewRegistry()))
	if !names["botbox_requests_total"] || !names["botbox_config_reloads_total"] || !names["botbox_request_duration_seconds_bucket"] {
		t.Fatalf("reflection found only %v: the telemetry structs changed shape", names)
	}
	return names
}

var metricName = regexp.MustCompile(`\b(?:botbox|kube)_[a-z0-9_]+\b`)

// unknownMetrics returns the metric names in exprs that BotBox does not
// export and that are neither pending nor external.
func unknownMetrics(exprs []string, known map[string]bool) []string {
	var bad []string
	for _, e := range exprs {
		for _, n := range metricName.FindAllString(e, -1) {
			if !known[n] && !slices.Contains(pendingMetrics, n) && !slices.Contains(externalMetrics, n) && !slices.Contains(bad, n) {
				bad = append(bad, n)
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// dashboardExprs decodes the dashboard and returns every PromQL string in
// it (panel targets and templating queries), checking its structure.
func dashboardExprs(data []byte) ([]string, error) {
	var d struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	if d.Title == "" || d.UID == "" {
		return nil, errors.New("dashboard without title or uid")
	}
	var exprs []string
	var errs []error
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			errs = append(errs, fmt.Errorf("panel id %d used twice", p.ID))
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			errs = append(errs, fmt.Errorf("panel %q: datasource must be the ${datasource} variable", p.Title))
		}
		if len(p.Targets) == 0 {
			errs = append(errs, fmt.Errorf("panel %q has no query", p.Title))
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				errs = append(errs, fmt.Errorf("panel %q has an empty query", p.Title))
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	return exprs, errors.Join(errs...)
}

// alertRules is the Prometheus rule file format, decoded strictly.
type alertRules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// TestDashboardMetricsExist: every metric the dashboard queries is one
// BotBox exports (or one of pendingMetrics), and the dashboard covers each
// area the operators asked for.
func TestDashboardMetricsExist(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	exprs, err := dashboardExprs(data)
	if err != nil {
		t.Fatal(err)
	}
	known := telemetryMetrics(t)
	if bad := unknownMetrics(exprs, known); len(bad) > 0 {
		t.Errorf("%s queries metrics BotBox does not export: %v", dashboardFile, bad)
	}
	all := strings.Join(exprs, "\n")
	for _, want := range []string{
		"botbox_requests_total", "botbox_request_duration_seconds_bucket", "botbox_upstream_errors_total",
		"botbox_tls_handshakes_total", "botbox_header_rewrites_total", "botbox_config_reloads_total",
		"botbox_config_last_reload_success", "botbox_dns_queries_total", "botbox_secret_tripwire_total",
		"botbox_secret_reflections_total",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the dashboard has no panel on %s", want)
		}
	}
	for _, p := range pendingMetrics {
		if known[p] {
			t.Logf("%s now exists in internal/telemetry: remove it from pendingMetrics", p)
		}
	}
}

// TestAlertsMetricsExist: the rule file decodes strictly, has the four
// alerts with a severity and a summary, and queries only exported (or
// pending, or kube-state-metrics) metrics. promtool checks the PromQL and
// runs alerts_test.yaml in .ci/run.
func TestAlertsMetricsExist(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := decodeStrict(data, &rules); err != nil {
		t.Fatal(err)
	}
	var exprs, names []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			exprs = append(exprs, r.Expr)
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert %s: needs a severity label and a summary", r.Alert)
			}
		}
	}
	for _, want := range []string{"BotBoxSecretTripwireFired", "BotBoxConfigReloadFailing", "BotBoxNotReady", "BotBoxUpstream5xxRatioHigh"} {
		if !slices.Contains(names, want) {
			t.Errorf("no alert %s", want)
		}
	}
	if bad := unknownMetrics(exprs, telemetryMetrics(t)); len(bad) > 0 {
		t.Errorf("%s queries metrics BotBox does not export: %v", alertsFile, bad)
	}
}

// TestUnknownMetricsCaught: the name check is not vacuous.
func TestUnknownMetricsCaught(t *testing.T) {
	t.Parallel()
	known := telemetryMetrics(t)
	got := unknownMetrics([]string{
		`sum(rate(botbox_requests_total[5m]))`,
		`rate(botbox_request_total[5m])`,
		`histogram_quantile(0.9, rate(botbox_request_duration_seconds_bucket[5m]))`,
		`botbox_upstream_errors_total / botbox_upstream_error_total`,
		`kube_pod_container_status_ready`,
	}, known)
	want := []string{"botbox_request_total", "botbox_upstream_error_total", "kube_pod_container_status_ready"}
	if !slices.Equal(got, want) {
		t.Errorf("unknown metrics %v, want %v", got, want)
	}
	if _, err := dashboardExprs([]byte(`{"title":"x","uid":"x","panels":[{"id":1,"type":"timeseries","title":"p","datasource":{"uid":"prom"},"targets":[]}]}`)); err == nil {
		t.Error("a panel without a query and with a fixed datasource passed")
	}
}
