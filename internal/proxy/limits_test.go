package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/telemetry"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// withBareRule installs, as the generation in force, testConfig with keys
// added to the bare.example.test rule.
func (e *testEnv) withBareRule(keys string) {
	e.t.Helper()
	e.withBareRuleMode(keys, "")
}

// TestBodyLimitStreamedNeverCompletes: a body without Content-Length that
// crosses max_request_body_bytes never reaches the origin complete, over
// an HTTP/1.1 origin (chunked: no terminating chunk is sent) and an
// HTTP/2 origin (the stream is reset); the agent gets 413.
func TestBodyLimitStreamedNeverCompletes(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			e := newEnv(t, envOpts{http2Origin: h2})
			var complete, seen atomic.Int64
			e.originMux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
				seen.Add(1)
				if _, err := io.Copy(io.Discard, r.Body); err == nil {
					complete.Add(1)
				}
			})
			e.withBareRule("      max_request_body_bytes: 65536\n")
			// post returns the status and body of the answer, or status 0
			// when the upload was reset: BotBox answers 413 and closes while
			// the client may still be writing the rest of an over-limit body,
			// and the client then sees either the 413 or the reset, whichever
			// it notices first. Both are a refusal; the metric, the decision
			// line and the origin's view hold what BotBox did either way.
			post := func(body io.Reader, length int64) (int, string, http.Header) {
				req, _ := http.NewRequest(http.MethodPost, e.plain.URL+"/upload", body)
				req.Host = "bare.example.test"
				req.ContentLength = length
				resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
				if err != nil {
					if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
						return 0, "", nil
					}
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return resp.StatusCode, string(b), resp.Header
			}
			refused := func(status int, b string, h http.Header) bool {
				return status == 0 || status == http.StatusRequestEntityTooLarge && b == bodyBodyTooLarge && h.Get(HeaderReason) == reasonBodyTooLarge
			}
			if status, b, h := post(io.MultiReader(bytes.NewReader(make([]byte, 100_000)), bytes.NewReader(make([]byte, 100_000))), -1); !refused(status, b, h) {
				t.Errorf("streamed 200 kB: %d %q, want 413 %q", status, b, bodyBodyTooLarge)
			}
			if complete.Load() != 0 {
				t.Errorf("origin received a complete request (%d seen)", seen.Load())
			}
			if got := testutil.ToFloat64(e.metrics.Requests.WithLabelValues("bare.example.test", telemetry.DecisionDeniedBodyTooLarge)); got != 1 {
				t.Errorf("requests{denied_body_too_large} = %v, want 1", got)
			}
			if !strings.Contains(e.logs.String(), `"decision":"denied_body_too_large"`) {
				t.Error("decision line does not say denied_body_too_large")
			}
			// Exactly at the limit, streamed: forwarded whole.
			if status, _, _ := post(io.MultiReader(bytes.NewReader(make([]byte, 65536))), -1); status != http.StatusOK || complete.Load() != 1 {
				t.Errorf("streamed 64 KiB: %d, complete %d; want 200, 1", status, complete.Load())
			}
			// Declared over the limit: refused before any upstream work.
			before := seen.Load()
			if status, b, h := post(bytes.NewReader(make([]byte, 65537)), 65537); !refused(status, b, h) || seen.Load() != before {
				t.Errorf("declared 65537: %d, origin saw %d new; want 413, 0", status, seen.Load()-before)
			}
			if got := testutil.ToFloat64(e.metrics.Requests.WithLabelValues("bare.example.test", telemetry.DecisionDeniedBodyTooLarge)); got != 2 {
				t.Errorf("requests{denied_body_too_large} = %v after the declared one, want 2", got)
			}
		})
	}
}

// TestRateLimitRetryAfter: 429 with Retry-After when the bucket is empty,
// with the handler's clock; the bucket refills with time.
func TestRateLimitRetryAfter(t *testing.T) {
	var now atomic.Pointer[time.Time]
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now.Store(&t0)
	e := newEnv(t, envOpts{now: func() time.Time { return *now.Load() }})
	e.withBareRule("      rate_limit: { requests_per_second: 0.5, burst: 1 }\n")
	if resp, body := e.get("bare.example.test", "/", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("first: %d %q", resp.StatusCode, body)
	}
	resp, body := e.get("bare.example.test", "/", nil)
	if resp.StatusCode != http.StatusTooManyRequests || body != bodyRateLimited || resp.Header.Get("Retry-After") != "2" || resp.Header.Get(HeaderReason) != reasonRateLimited {
		t.Errorf("second: %d %q Retry-After %q, want 429 %q 2", resp.StatusCode, body, resp.Header.Get("Retry-After"), bodyRateLimited)
	}
	t1 := t0.Add(2 * time.Second)
	now.Store(&t1)
	if resp, body := e.get("bare.example.test", "/", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("after 2s: %d %q, want 200", resp.StatusCode, body)
	}
}
