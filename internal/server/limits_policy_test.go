package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/eventually"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The harness's api.example.test rule, which the tests below extend.
const harnessAPIRule = "    - host: api.example.test\n      action: allow\n"

// reloadWith installs h.yaml with extra keys added to the api.example.test
// rule (indented for a rule) and, when policyKeys is set, to egress_policy.
func (h *harness) reloadWith(ruleKeys, policyKeys string) {
	h.t.Helper()
	if !strings.Contains(h.yaml, harnessAPIRule) {
		h.t.Fatal("harness config changed: api rule not found")
	}
	y := strings.Replace(h.yaml, harnessAPIRule, harnessAPIRule+ruleKeys, 1)
	y = strings.Replace(y, "egress_policy:\n", "egress_policy:\n"+policyKeys, 1)
	h.writeConfig(y)
	if err := h.srv.Reload(TriggerSIGHUP); err != nil {
		h.t.Fatalf("Reload: %v", err)
	}
}

func (h *harness) post(host, path string, body io.Reader, length int64) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+h.addrs.Proxy[0].String()+path, body)
	req.Host = host
	req.ContentLength = length
	return (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
}

func requests(h *harness, host, decision string) float64 {
	return testutil.ToFloat64(h.metrics.Requests.WithLabelValues(host, decision))
}

const mib = 1 << 20

func TestBodyLimitContentLength(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, configFile: true})
	h.reloadWith("      max_request_body_bytes: 1048576\n", "")
	// With "Expect: 100-continue" (curl's way for large bodies) the agent
	// waits for the answer before sending the body, so it reads the 413.
	req, _ := http.NewRequest(http.MethodPost, "http://"+h.addrs.Proxy[0].String()+"/upload", bytes.NewReader(make([]byte, 2*mib)))
	req.Host = "api.example.test"
	req.Header.Set("Expect", "100-continue")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true, ExpectContinueTimeout: time.Minute}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); resp.StatusCode != http.StatusRequestEntityTooLarge || b != "request body too large" || resp.Header.Get("X-Botbox-Reason") != "body_too_large" {
		t.Errorf("2 MiB: %d %q reason %q, want 413 request body too large", resp.StatusCode, b, resp.Header.Get("X-Botbox-Reason"))
	}
	// Without it the agent may still be writing when BotBox answers and
	// closes, and see a reset instead of the 413; the origin sees nothing
	// either way.
	if resp, err := h.post("api.example.test", "/upload", bytes.NewReader(make([]byte, 2*mib)), 2*mib); err == nil {
		if b := body(t, resp); resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("2 MiB without Expect: %d %q, want 413", resp.StatusCode, b)
		}
	}
	if n := h.uploadsSeen.Load(); n != 0 {
		t.Errorf("origin saw %d requests, want none", n)
	}
	if got := requests(h, "api.example.test", telemetry.DecisionDeniedBodyTooLarge); got != 2 {
		t.Errorf("requests{denied_body_too_large} = %v, want 2", got)
	}
	// At the limit exactly: forwarded whole.
	resp, err = h.post("api.example.test", "/upload", bytes.NewReader(make([]byte, mib)), mib)
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); resp.StatusCode != http.StatusOK || !strings.Contains(b, `"bytes":1048576`) {
		t.Errorf("1 MiB: %d %q, want 200", resp.StatusCode, b)
	}
}

// TestBodyLimitChunkedNeverCompletes: a body without Content-Length that
// crosses the limit while streaming aborts the upstream request; the
// origin never reads a complete request, and the agent gets 413.
func TestBodyLimitChunkedNeverCompletes(t *testing.T) {
	for _, listener := range []string{"plain-http1", "intercept-h2"} {
		t.Run(listener, func(t *testing.T) {
			h := start(t, harnessOpts{writeSecret: true, configFile: true, interception: "  enforce_sni_host_match: true\n"})
			h.reloadWith("      max_request_body_bytes: 1048576\n", "")
			var resp *http.Response
			var err error
			// An io.Reader that is not a *bytes.Reader: the length is unknown
			// (chunked on HTTP/1, no content-length on HTTP/2).
			src := io.MultiReader(bytes.NewReader(make([]byte, mib)), bytes.NewReader(make([]byte, mib)))
			if listener == "plain-http1" {
				resp, err = h.post("api.example.test", "/upload", src, -1)
			} else {
				req, _ := http.NewRequest(http.MethodPost, "https://api.example.test/upload", src)
				req.ContentLength = -1
				resp, err = h.interceptClient("api.example.test", true).Do(req)
			}
			if err != nil {
				// The agent may see its upload cut instead of the 413; the
				// origin side below is the invariant.
				t.Logf("agent: %v", err)
			} else if b := body(t, resp); resp.StatusCode != http.StatusRequestEntityTooLarge || b != "request body too large" {
				t.Errorf("chunked 2 MiB: %d %q, want 413", resp.StatusCode, b)
			}
			if n := h.uploadsComplete.Load(); n != 0 {
				t.Errorf("origin received %d complete requests, want none", n)
			}
			if got := requests(h, "api.example.test", telemetry.DecisionDeniedBodyTooLarge); got != 1 {
				t.Errorf("requests{denied_body_too_large} = %v, want 1", got)
			}
			// A small chunked body under the limit still goes through whole.
			resp, err = h.post("api.example.test", "/upload", io.MultiReader(strings.NewReader("hello")), -1)
			if err != nil {
				t.Fatal(err)
			}
			if b := body(t, resp); resp.StatusCode != http.StatusOK || h.uploadsComplete.Load() != 1 {
				t.Errorf("small chunked body: %d %q, complete %d", resp.StatusCode, b, h.uploadsComplete.Load())
			}
		})
	}
}

func TestRateLimit429(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, configFile: true})
	// One token per 1000 s: the test never sees a refill.
	h.reloadWith("      rate_limit: { requests_per_second: 0.001, burst: 2 }\n", "")
	for i := range 2 {
		if got := h.status("api.example.test"); got != http.StatusOK {
			t.Fatalf("request %d of the burst: %d", i, got)
		}
	}
	resp, err := h.proxyGet("api.example.test", "/")
	if err != nil {
		t.Fatal(err)
	}
	b := body(t, resp)
	if resp.StatusCode != http.StatusTooManyRequests || b != "rate limit exceeded" || resp.Header.Get("X-Botbox-Reason") != "rate_limited" {
		t.Errorf("over the burst: %d %q %q, want 429 rate limit exceeded", resp.StatusCode, b, resp.Header.Get("X-Botbox-Reason"))
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 1000 {
		t.Errorf("Retry-After = %q, want 1..1000 seconds", resp.Header.Get("Retry-After"))
	}
	if got := requests(h, "api.example.test", telemetry.DecisionDeniedRateLimit); got != 1 {
		t.Errorf("requests{denied_rate_limit} = %v, want 1", got)
	}
	// Another rule has no bucket.
	if got := h.status("other.example.test"); got != http.StatusOK {
		t.Errorf("other rule: %d, want 200", got)
	}
	// A reload of the unchanged rule keeps the drained bucket.
	h.reloadWith("      rate_limit: { requests_per_second: 0.001, burst: 2 }\n      max_request_body_bytes: 100\n", "")
	if got := h.status("api.example.test"); got != http.StatusTooManyRequests {
		t.Errorf("after reloading an unchanged rate_limit: %d, want 429", got)
	}
	if !strings.Contains(h.logs.String(), `"decision":"denied_rate_limit"`) || !strings.Contains(h.logs.String(), `"reason":"rate_limited"`) {
		t.Errorf("no decision line with denied_rate_limit / rate_limited")
	}
}

type uploadAnswer struct {
	Bytes         int64 `json:"bytes"`
	Authorization bool  `json:"authorization"`
}

func decodeAnswer(t *testing.T, resp *http.Response) uploadAnswer {
	t.Helper()
	defer resp.Body.Close()
	var a uploadAnswer
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d %q, want 200", resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestReportModeForwards: in report mode what enforce would refuse is
// forwarded and logged as report_deny with the reason. What the policy
// denies (default deny, rule deny) goes without the header rewrite; a
// request the policy allows keeps its credential over a limit (rate, body
// size): report mode has no effect on allowed traffic. On ee87e5f the
// rate-limited request lost its credential and the agent saw the origin's
// 401s while the operator only observed.
func TestReportModeForwards(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, configFile: true})
	h.yaml = h.withOther("    - host: other.example.test\n      action: deny\n")
	h.reloadWith("      rate_limit: { requests_per_second: 0.001, burst: 1 }\n      max_request_body_bytes: 10\n", "  mode: report\n")
	// Within the limits: the ordinary allow, credential injected.
	if a := decodeAnswer(t, must(h.post("api.example.test", "/upload", strings.NewReader("x"), 1))); !a.Authorization {
		t.Error("allowed request in report mode lost its credential")
	}
	// Over the rate: forwarded, with the credential.
	if a := decodeAnswer(t, must(h.post("api.example.test", "/upload", strings.NewReader("x"), 1))); !a.Authorization {
		t.Error("rate-limited request in report mode lost its credential")
	}
	// A host a rule denies: forwarded, without.
	if a := decodeAnswer(t, must(h.post("other.example.test", "/upload", strings.NewReader("x"), 1))); a.Authorization || a.Bytes != 1 {
		t.Errorf("denied host in report mode: %+v", a)
	}
	logs := h.logs.String()
	for _, reason := range []string{"rate_limited", "rule_deny"} {
		found := false
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, `"decision":"report_deny"`) && strings.Contains(line, `"reason":"`+reason+`"`) {
				found = true
			}
		}
		if !found {
			t.Errorf("no report_deny line with reason %s", reason)
		}
	}
	if got := requests(h, telemetry.HostReport, telemetry.DecisionReportDeny); got != 2 {
		t.Errorf("requests{_report,report_deny} = %v, want 2", got)
	}
	if got := requests(h, "api.example.test", telemetry.DecisionAllow); got != 1 {
		t.Errorf("requests{api,allow} = %v, want 1 (the over-rate request is counted as report_deny only)", got)
	}
	if !strings.Contains(logs, "egress policy is in REPORT mode") {
		t.Error("no REPORT mode warning")
	}
}

// TestReportModeLimitKeepsCredential: a body over the limit, declared or
// streamed, is forwarded whole in report mode with the credential, and
// its line says report_deny, body_too_large.
func TestReportModeLimitKeepsCredential(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, configFile: true})
	h.reloadWith("      max_request_body_bytes: 10\n", "  mode: report\n")
	for _, length := range []int64{11, -1} {
		a := decodeAnswer(t, must(h.post("api.example.test", "/upload", strings.NewReader(strings.Repeat("x", 11)), length)))
		if !a.Authorization || a.Bytes != 11 {
			t.Errorf("over-limit body (Content-Length %d) in report mode: %+v, want forwarded whole with the credential", length, a)
		}
	}
	eventually.Eventually(t, 5*time.Second, func() bool {
		return requests(h, telemetry.HostReport, telemetry.DecisionReportDeny) == 2
	}, "both over-limit bodies counted as report_deny")
	if n := strings.Count(h.logs.String(), `"reason":"body_too_large"`); n != 2 {
		t.Errorf("%d report_deny lines with reason body_too_large, want 2", n)
	}
}

// TestReportModeMissingSecretFailsClosed: report mode never forwards an
// allowed request without its credential.
func TestReportModeMissingSecretFailsClosed(t *testing.T) {
	h := start(t, harnessOpts{configFile: true}) // no secret written
	h.reloadWith("", "  mode: report\n")
	resp, err := h.proxyGet("api.example.test", "/")
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("missing secret in report mode: %d %q, want 500", resp.StatusCode, b)
	}
}

func must(resp *http.Response, err error) *http.Response {
	if err != nil {
		panic(err)
	}
	return resp
}

// TestReportModeAdmitsDeniedSNI: with deny_handshake_on_disallowed_sni,
// enforce mode refuses the handshake for a denied SNI; report mode
// completes it and forwards the request without header rewrites.
func TestReportModeAdmitsDeniedSNI(t *testing.T) {
	h := start(t, harnessOpts{writeSecret: true, configFile: true, interception: "  deny_handshake_on_disallowed_sni: true\n"})
	h.yaml = h.withOther("    - host: other.example.test\n      action: deny\n")
	h.reloadWith("", "")
	if _, err := h.interceptClient("other.example.test", false).Get("https://other.example.test/"); err == nil {
		t.Fatal("enforce mode: handshake for a denied SNI succeeded")
	}
	h.reloadWith("", "  mode: report\n")
	resp, err := h.interceptClient("other.example.test", false).Get("https://other.example.test/")
	if err != nil {
		t.Fatalf("report mode: %v", err)
	}
	var got struct {
		Authorization bool `json:"authorization"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("report mode: status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got.Authorization {
		t.Error("report mode forwarded a denied host WITH a credential")
	}
}
