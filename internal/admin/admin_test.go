package admin

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// newTestServer serves NewHandler over loopback with a registry holding one
// counter, and returns a switch for readiness.
func newTestServer(t *testing.T) (*httptest.Server, *atomic.Bool) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "botbox_test_total", Help: "Test counter"})
	reg.MustRegister(c)
	c.Add(3)
	var ready atomic.Bool
	srv := httptest.NewServer(NewHandler(reg, ready.Load, nil))
	t.Cleanup(srv.Close)
	return srv, &ready
}

func TestHandler(t *testing.T) {
	const textPlain = "text/plain; charset=utf-8"
	tests := []struct {
		name       string
		method     string
		path       string
		ready      bool
		wantCode   int
		wantBody   string // exact; ignored when wantInBody is set
		wantInBody string // substring of the body (metrics)
		wantCT     string // Content-Type prefix
		wantAllow  string
	}{
		{name: "healthz ready", method: "GET", path: "/healthz", ready: true, wantCode: 200, wantBody: "ok", wantCT: textPlain},
		{name: "healthz not ready", method: "GET", path: "/healthz", wantCode: 503, wantBody: "not ready", wantCT: textPlain},
		{name: "healthz query ignored", method: "GET", path: "/healthz?verbose=1", ready: true, wantCode: 200, wantBody: "ok", wantCT: textPlain},
		{name: "healthz head ready", method: "HEAD", path: "/healthz", ready: true, wantCode: 200, wantBody: "", wantCT: textPlain},
		{name: "healthz head not ready", method: "HEAD", path: "/healthz", wantCode: 503, wantBody: "", wantCT: textPlain},
		{name: "healthz post", method: "POST", path: "/healthz", ready: true, wantCode: 405, wantBody: "method not allowed", wantCT: textPlain, wantAllow: "GET, HEAD"},
		{name: "healthz options", method: "OPTIONS", path: "/healthz", ready: true, wantCode: 405, wantBody: "method not allowed", wantCT: textPlain, wantAllow: "GET, HEAD"},
		{name: "readyz ready", method: "GET", path: "/readyz", ready: true, wantCode: 200, wantBody: "ok", wantCT: textPlain},
		{name: "readyz not ready", method: "GET", path: "/readyz", wantCode: 503, wantBody: "not ready", wantCT: textPlain},
		{name: "readyz head", method: "HEAD", path: "/readyz", ready: true, wantCode: 200, wantBody: "", wantCT: textPlain},
		{name: "readyz delete", method: "DELETE", path: "/readyz", wantCode: 405, wantBody: "method not allowed", wantCT: textPlain, wantAllow: "GET, HEAD"},
		{name: "metrics", method: "GET", path: "/metrics", wantCode: 200, wantInBody: "\nbotbox_test_total 3\n", wantCT: "text/plain; version=0.0.4"},
		{name: "metrics query ignored", method: "GET", path: "/metrics?name[]=x", wantCode: 200, wantInBody: "\nbotbox_test_total 3\n", wantCT: "text/plain; version=0.0.4"},
		{name: "metrics head", method: "HEAD", path: "/metrics", wantCode: 200, wantBody: "", wantCT: "text/plain; version=0.0.4"},
		{name: "metrics put", method: "PUT", path: "/metrics", wantCode: 405, wantBody: "method not allowed", wantCT: textPlain, wantAllow: "GET, HEAD"},
		{name: "root", method: "GET", path: "/", wantCode: 404, wantBody: "not found", wantCT: textPlain},
		{name: "trailing slash", method: "GET", path: "/healthz/", ready: true, wantCode: 404, wantBody: "not found", wantCT: textPlain},
		{name: "case matters", method: "GET", path: "/METRICS", wantCode: 404, wantBody: "not found", wantCT: textPlain},
		{name: "unknown path", method: "GET", path: "/debug/pprof/", wantCode: 404, wantBody: "not found", wantCT: textPlain},
		{name: "unknown path post", method: "POST", path: "/livez", wantCode: 404, wantBody: "not found", wantCT: textPlain},
		{name: "unknown path head", method: "HEAD", path: "/nope", wantCode: 404, wantBody: "", wantCT: textPlain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, ready := newTestServer(t)
			ready.Store(tt.ready)
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantCode {
				t.Errorf("%s %s: status %d, want %d", tt.method, tt.path, resp.StatusCode, tt.wantCode)
			}
			if tt.wantInBody != "" {
				if !strings.Contains(string(body), tt.wantInBody) {
					t.Errorf("%s %s: body lacks %q:\n%s", tt.method, tt.path, tt.wantInBody, body)
				}
			} else if string(body) != tt.wantBody {
				t.Errorf("%s %s: body %q, want %q", tt.method, tt.path, body, tt.wantBody)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, tt.wantCT) {
				t.Errorf("%s %s: Content-Type %q, want prefix %q", tt.method, tt.path, ct, tt.wantCT)
			}
			if allow := resp.Header.Get("Allow"); allow != tt.wantAllow {
				t.Errorf("%s %s: Allow %q, want %q", tt.method, tt.path, allow, tt.wantAllow)
			}
		})
	}
}

// TestHandlerReadinessFlips checks that readiness is read on every probe.
func TestHandlerReadinessFlips(t *testing.T) {
	srv, ready := newTestServer(t)
	var got []int
	for _, r := range []bool{false, true, false} {
		ready.Store(r)
		resp, err := srv.Client().Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got = append(got, resp.StatusCode)
	}
	if d := cmp.Diff([]int{503, 200, 503}, got); d != "" {
		t.Errorf("statuses (-want +got):\n%s", d)
	}
}

func TestHandlerNilReady(t *testing.T) {
	h := NewHandler(prometheus.NewRegistry(), nil, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 200 || rec.Body.String() != "ok" {
		t.Errorf("GET /readyz with nil ready = %d %q, want 200 \"ok\"", rec.Code, rec.Body.String())
	}
}

// TestHandlerReadyNote: WithReadyNote appends a non-empty note to the 200
// body of both probe paths, read on every probe; the status codes, the 503
// body and the probe MAC (status and path only) are unchanged.
func TestHandlerReadyNote(t *testing.T) {
	key, err := NewProbeKey()
	if err != nil {
		t.Fatal(err)
	}
	var ready atomic.Bool
	var note atomic.Value
	note.Store("")
	srv := httptest.NewServer(NewHandler(prometheus.NewRegistry(), ready.Load, key, WithReadyNote(func() string { return note.Load().(string) })))
	t.Cleanup(srv.Close)
	tests := []struct {
		name     string
		path     string
		ready    bool
		note     string
		wantCode int
		wantBody string
	}{
		{"no note", "/healthz", true, "", 200, "ok"},
		{"note healthz", "/healthz", true, "policy in REPORT mode", 200, "ok (policy in REPORT mode)"},
		{"note readyz", "/readyz", true, "policy in REPORT mode", 200, "ok (policy in REPORT mode)"},
		{"note cleared", "/healthz", true, "", 200, "ok"},
		{"not ready ignores note", "/healthz", false, "policy in REPORT mode", 503, "not ready"},
	}
	for i, tt := range tests {
		ready.Store(tt.ready)
		note.Store(tt.note)
		nonce := fmt.Sprintf("nonce-%d", i)
		req, _ := http.NewRequest(http.MethodGet, srv.URL+tt.path, nil)
		req.Header.Set(ProbeNonceHeader, nonce)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != tt.wantCode || string(b) != tt.wantBody {
			t.Errorf("%s: %d %q, want %d %q", tt.name, resp.StatusCode, b, tt.wantCode, tt.wantBody)
		}
		if !VerifyProbe(key, nonce, tt.path, tt.wantCode, resp.Header.Get(ProbeAuthHeader)) {
			t.Errorf("%s: probe MAC does not verify", tt.name)
		}
	}
}
