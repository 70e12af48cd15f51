package server

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/testutil/eventually"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// placeholderHarness starts a server with placeholders on (in a directory
// of the test's own), interception on and the canary secret.
func placeholderHarness(t *testing.T) (*harness, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "placeholders")
	h := start(t, harnessOpts{
		writeSecret:  true,
		interception: "  enforce_sni_host_match: true\n",
		extraYAML:    fmt.Sprintf("placeholders:\n  enabled: true\n  dir: %s\n", dir),
	})
	return h, dir
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPlaceholdersThroughBothListeners: the placeholder BotBox writes is
// accepted in the header its own host's rule rewrites (the origin gets the
// real key there), and trips (403, ERROR line, metric, nothing sent) in
// any other header, towards another allowed host and towards its own host
// alike, on the plain listener (HTTP/1.1 and HTTP/2 with prior knowledge)
// and on the interception listener (HTTP/1.1 and HTTP/2).
func TestPlaceholdersThroughBothListeners(t *testing.T) {
	h, dir := placeholderHarness(t)
	ph := readFile(t, filepath.Join(dir, "api-key"))
	if len(ph) != len(canary) || !strings.HasPrefix(ph, "CANARY-") || ph == canary {
		t.Fatalf("placeholder does not have the secret's shape")
	}
	if env := readFile(t, filepath.Join(dir, "env")); env != "API_KEY="+ph+"\n" {
		t.Fatalf("env file = %q", env)
	}
	proxyURL := &url.URL{Scheme: "http", Host: h.addrs.Proxy[0].String()}
	plain := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	sendHeader := func(c *http.Client, u, name, value string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set(name, value)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body(t, resp)
	}
	send := func(c *http.Client, u string) (int, string) { return sendHeader(c, u, "X-Api-Key", ph) }
	trips := 0
	for _, tc := range []struct {
		name string
		c    *http.Client
		u    string
	}{
		{"plain", plain, "http://other.example.test/"},
		{"intercept h1", h.interceptClient("other.example.test", false), "https://other.example.test/"},
		{"intercept h2", h.interceptClient("other.example.test", true), "https://other.example.test/"},
		{"plain h2c", h.priorKnowledgeClient(t), "http://other.example.test/"},
		{"plain, own host", plain, "http://api.example.test/"},
		{"plain h2c, own host", h.priorKnowledgeClient(t), "http://api.example.test/"},
		{"intercept h1, own host", h.interceptClient("api.example.test", false), "https://api.example.test/"},
		{"intercept h2, own host", h.interceptClient("api.example.test", true), "https://api.example.test/"},
	} {
		status, b := send(tc.c, tc.u)
		trips++
		if status != http.StatusForbidden || b != "credential not allowed for this host" {
			t.Errorf("%s: %d %q, want 403 credential not allowed for this host", tc.name, status, b)
		}
		select {
		case hd := <-h.seen:
			t.Errorf("%s: the origin received a request (X-Api-Key %d bytes)", tc.name, len(hd.Get("X-Api-Key")))
		default:
		}
		if got := testutil.ToFloat64(h.metrics.SecretTripwire.WithLabelValues("api-key")); got != float64(trips) {
			t.Errorf("%s: botbox_secret_tripwire_total = %v, want %d", tc.name, got, trips)
		}
	}
	var alarms int
	for _, l := range h.logs.Find("proxy decision") {
		if l["event"] == "secret_tripwire" && l["level"] == "ERROR" && l["found_in"] == "header" {
			alarms++
		}
	}
	if alarms != 8 {
		t.Errorf("%d tripwire lines, want 8", alarms)
	}

	for _, tc := range []struct {
		name string
		c    *http.Client
		u    string
	}{
		{"plain", plain, "http://api.example.test/"},
		{"plain h2c", h.priorKnowledgeClient(t), "http://api.example.test/"},
		{"intercept h1", h.interceptClient("api.example.test", false), "https://api.example.test/"},
		{"intercept h2", h.interceptClient("api.example.test", true), "https://api.example.test/"},
	} {
		if status, _ := sendHeader(tc.c, tc.u, "Authorization", "Bearer "+ph); status != http.StatusOK {
			t.Fatalf("%s: status %d", tc.name, status)
		}
		if got := h.lastSeen().Get("Authorization"); got != "Bearer "+canary {
			t.Errorf("%s: the origin got Authorization of %d bytes, not the real key", tc.name, len(got))
		}
	}
}

// TestPlaceholdersFollowRotation: a rotation to a value of another shape
// rewrites the files; the earlier placeholder still trips.
func TestPlaceholdersFollowRotation(t *testing.T) {
	h, dir := placeholderHarness(t)
	old := readFile(t, filepath.Join(dir, "api-key"))
	h.writeSecret("ROTATED-" + canary + "-longer")
	var now string
	// The env file is written after the per-secret file.
	eventually.Eventually(t, 10*time.Second, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "api-key"))
		now = string(b)
		env, _ := os.ReadFile(filepath.Join(dir, "env"))
		return err == nil && len(now) == len("ROTATED-"+canary+"-longer") && string(env) == "API_KEY="+now+"\n"
	}, "placeholder and env files rewritten after the rotation")
	c := h.interceptClient("other.example.test", false)
	req, _ := http.NewRequest(http.MethodGet, "https://other.example.test/", nil)
	req.Header.Set("Authorization", "Bearer "+old)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("the earlier placeholder: status %d, want 403", resp.StatusCode)
	}
	body(t, resp)
}
