package server

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/botbox/botbox/internal/telemetry"
)

// TestAddressGuardDefaultBothListeners: with address_guard at its defaults
// the loopback origin of an allowed name is refused on the plain listener
// and on the interception listener (HTTP/1.1 and HTTP/2) with 403
// "destination address not allowed" and reason address_guard, counted in
// botbox_upstream_errors_total, and the origin gets no request. A hot
// reload that adds the loopback range to allowed_cidrs lets the next
// request through; a reload that removes it refuses again.
func TestAddressGuardDefaultBothListeners(t *testing.T) {
	var hits atomic.Int64
	h := start(t, harnessOpts{
		writeSecret: true, strictGuard: true, configFile: true,
		interception: "  enforce_sni_host_match: true\n",
		origin:       http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }),
	})
	h.waitHealth(http.StatusOK)
	refused := func(where string, resp *http.Response, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		b := body(t, resp)
		if resp.StatusCode != http.StatusForbidden || b != "destination address not allowed" || resp.Header.Get("X-Botbox-Reason") != telemetry.ReasonAddressGuard {
			t.Errorf("%s: %d %q (reason %q), want 403 destination address not allowed, reason address_guard", where, resp.StatusCode, b, resp.Header.Get("X-Botbox-Reason"))
		}
	}
	resp, err := h.proxyGet("api.example.test", "/v1/models")
	refused("plain listener", resp, err)
	for _, h2 := range []bool{false, true} {
		resp, err := h.interceptClient("api.example.test", h2).Get("https://api.example.test/v1/models")
		refused(map[bool]string{false: "interception HTTP/1.1", true: "interception HTTP/2"}[h2], resp, err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("origin got %d requests, want 0", n)
	}
	if got := testutil.ToFloat64(h.metrics.UpstreamErrors.WithLabelValues("api.example.test", telemetry.ReasonAddressGuard)); got != 3 {
		t.Errorf("upstream_errors{api.example.test,address_guard} = %v, want 3", got)
	}

	strict := h.yaml
	h.writeConfig(loopbackOptIn + strict)
	if err := h.srv.Reload(TriggerSIGHUP); err != nil {
		t.Fatal(err)
	}
	if code := h.status("api.example.test"); code != http.StatusOK || hits.Load() != 1 {
		t.Fatalf("after the reload opening loopback: %d, origin hits %d; want 200, 1", code, hits.Load())
	}
	h.writeConfig(strict)
	if err := h.srv.Reload(TriggerSIGHUP); err != nil {
		t.Fatal(err)
	}
	if code := h.status("api.example.test"); code != http.StatusForbidden || hits.Load() != 1 {
		t.Errorf("after the reload closing loopback again: %d, origin hits %d; want 403, 1", code, hits.Load())
	}
}
