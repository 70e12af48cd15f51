package proxy

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/botbox/botbox/internal/telemetry"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/testutil/wsecho"
	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var (
	reTimestamp = regexp.MustCompile(`"timestamp":"[^"]*"`)
	reRequestID = regexp.MustCompile(`"request_id":"[0-9a-f-]{36}"`)
	reDuration  = regexp.MustCompile(`"duration_ms":[0-9.e+-]+`)
	reLoopback  = regexp.MustCompile(`127\.0\.0\.1:[0-9]+`)
)

// normaliseDecision replaces what differs between runs: time, request id,
// duration and the ephemeral loopback ports of the origin.
func normaliseDecision(line string) string {
	// Both engines serve the golden requests (BOTBOX_TEST_HTTP1_ENGINE);
	// which one is not what these lines pin (TestEngineChoiceInDecisionLine does).
	line = strings.Replace(line, `"engine":"`+telemetry.EngineBotBox+`"`, `"engine":"<ENGINE>"`, 1)
	line = strings.Replace(line, `"engine":"`+telemetry.EngineNetHTTP+`"`, `"engine":"<ENGINE>"`, 1)
	line = reTimestamp.ReplaceAllString(line, `"timestamp":"<TIME>"`)
	line = reRequestID.ReplaceAllString(line, `"request_id":"<ID>"`)
	line = reDuration.ReplaceAllString(line, `"duration_ms":"<MS>"`)
	return reLoopback.ReplaceAllString(line, `127.0.0.1:<PORT>`)
}

// TestDecisionLinesGolden holds the log contract with real "proxy decision"
// lines, one per kind of outcome, as the proxy writes them (the schema
// docs/troubleshooting.md documents). Run with -update after an intended
// change and review the diff.
func TestDecisionLinesGolden(t *testing.T) {
	// A frozen clock: the repeats below fall in one aggregation window
	// however slow the machine.
	frozen := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, envOpts{now: func() time.Time { return frozen }, placeholders: testPlaceholders()})
	e.originMux.HandleFunc("/cut", func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
		_ = brw.Flush()
	})
	e.originMux.HandleFunc("/ws", wsecho.Handler(nil))
	e.originMux.HandleFunc("/unauth", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusUnauthorized) })

	// Each step is one request and one line (the step names say which
	// kind of line).
	lines := 0
	step := func(_ string, do func()) {
		t.Helper()
		do()
		lines++
		e.waitDecisions(lines)
	}
	step("allowed with a rewrite", func() { e.get("api.example.test", "/v1/chat?key=not-logged", nil) })
	step("allowed, origin says 401", func() { e.get("bare.example.test", "/unauth", nil) })
	step("default deny", func() { e.get("evil.test", "/exfil", nil) })
	step("port not allowed", func() { e.get("ports.example.test:9999", "/", nil) })
	step("deny rule", func() { e.get("blocked.example.test", "/", nil) })
	step("connect", func() { e.raw("CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n") })
	step("invalid host", func() { e.raw("GET / HTTP/1.1\r\nHost: a..b\r\n\r\n") })
	step("secret missing", func() { e.get("nosecret.example.test", "/", nil) })
	step("upgrade refused", func() {
		e.raw("GET / HTTP/1.1\r\nHost: api.example.test\r\nConnection: Upgrade\r\nUpgrade: foo\r\n\r\n")
	})
	step("truncated body", func() {
		// A raw connection: http.Client would retry the GET.
		c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprint(c, "GET /cut HTTP/1.1\r\nHost: bare.example.test\r\n\r\n")
		_, _ = io.Copy(io.Discard, c)
	})
	step("websocket tunnel", func() {
		c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		wsecho.RoundTrip(t, c, "api.example.test", "/ws", "")
		c.Close()
	})
	step("long path", func() { e.get("evil.test", "/"+strings.Repeat("a", 400), nil) })
	// Three identical denials on one connection, then a different one:
	// the first in full, a summary of the two repeats, the different one.
	c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprint(c, strings.Repeat("GET /a HTTP/1.1\r\nHost: evil.test\r\n\r\n", 3)+"GET /b HTTP/1.1\r\nHost: blocked.example.test\r\n\r\n")
	br := bufio.NewReader(c)
	for range 4 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	lines += 3
	e.waitDecisions(lines)
	dead := "127.0.0.1:1"
	e.dialAddr.Store(&dead)
	step("upstream unreachable", func() { e.get("bare.example.test", "/", nil) })
	step("tripwire", func() { e.get("bare.example.test", "/v1", http.Header{"X-Key": {phAPI}}) })

	var got strings.Builder
	for line := range strings.Lines(e.logs.String()) {
		if strings.Contains(line, `"message":"proxy decision"`) {
			got.WriteString(normaliseDecision(line))
		}
	}
	path := filepath.Join("testdata", "decision.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s (run go test -update to create it): %v", path, err)
	}
	if d := cmp.Diff(string(want), got.String()); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, d)
	}
}
