package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/logcapture"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestFloodedDenialsAreBoundedAndAggregated is redteam finding 5: 1,000
// pipelined denied requests with a 61 KB path on one connection wrote 61 MB
// of log. Now: the first line in full but bounded, one summary with the
// count, and every request counted in the metric. The clock is frozen, so
// the whole flood falls in one aggregation window whatever the machine's
// speed. The test pipelines 100 requests, not the report's 1,000: what it
// asserts (three lines, each at most 2 KB, "repeated" n-1, n+1 counted)
// fails for any n > 2 without aggregation, and each 61 KB request costs
// ~70 ms under -race (1,000 took 73 s, the slowest test of the suite).
func TestFloodedDenialsAreBoundedAndAggregated(t *testing.T) {
	frozen := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, envOpts{now: func() time.Time { return frozen }})
	const n = 100
	path := "/" + strings.Repeat("é", 61<<10/2) // 61 KB, multi-byte runes
	req := "GET " + path + " HTTP/1.1\r\nHost: evil.test\r\n\r\n"

	c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w := bufio.NewWriter(c)
		for range n {
			_, _ = w.WriteString(req)
		}
		// Then one different denial on the same connection, which writes
		// the pending summary.
		_, _ = w.WriteString("GET /other HTTP/1.1\r\nHost: blocked.example.test\r\n\r\n")
		_ = w.Flush()
	}()
	br := bufio.NewReader(c)
	for i := range n + 1 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("response %d: status %d", i, resp.StatusCode)
		}
	}
	wg.Wait()

	recs := e.waitDecisions(3)
	if len(recs) != 3 {
		t.Fatalf("%d decision lines, want 3 (first, summary, different)", len(recs))
	}
	first, summary, other := recs[0], recs[1], recs[2]
	if first["truncated"] != true || first["repeated"] != nil {
		t.Errorf("first line = %v, want truncated, not a summary", first)
	}
	if p, _ := first["path"].(string); len(p) > maxFieldBytes || !utf8.ValidString(p) || !strings.HasPrefix(path, p) {
		t.Errorf("first line path: %d bytes, valid UTF-8 %v, a prefix of the request's %v", len(p), utf8.ValidString(p), strings.HasPrefix(path, p))
	}
	if summary["repeated"] != float64(n-1) || summary["host"] != "evil.test" || summary["reason"] != "default_deny" || summary["path"] != nil {
		t.Errorf("summary = %v, want repeated %d for evil.test default_deny, no path", summary, n-1)
	}
	if other["host"] != "blocked.example.test" || other["repeated"] != nil {
		t.Errorf("last line = %v, want the different denial in full", other)
	}
	for i, line := range strings.Split(strings.TrimSpace(e.logs.String()), "\n") {
		if len(line) > 2048 {
			t.Errorf("log line %d is %d bytes, want at most 2048", i, len(line))
		}
	}
	if got := testutil.ToFloat64(e.metrics.Requests.WithLabelValues(telemetry.HostDenied, telemetry.DecisionDeny)); got != n+1 {
		t.Errorf("requests_total{_denied,deny} = %v, want %d: every request is counted", got, n+1)
	}
}

// TestRepeatSummaryAfterWindow: when no further request comes, the
// shared timer writes the summary once the window ends; a denial after the
// window is logged in full again; other connections are separate.
func TestRepeatSummaryAfterWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logcapture.Buffer{}
		l := newRepeatLog(telemetry.NewLogger(logs, nil), time.Now)
		deny := func(remote string) bool {
			x := &exchange{remote: remote, host: "evil.test", port: 443, decision: telemetry.DecisionDeny, reason: "default_deny", listener: ListenerHTTP}
			return l.suppress(x, http.MethodGet, http.StatusForbidden, slog.LevelWarn)
		}
		if deny("a:1") {
			t.Fatal("first denial suppressed")
		}
		for i := range 4 {
			if !deny("a:1") {
				t.Fatalf("repeat %d not suppressed", i)
			}
		}
		if deny("b:2") {
			t.Fatal("another connection's first denial suppressed")
		}
		if n := len(logs.Find(msgDecision)); n != 0 {
			t.Fatalf("%d summary lines before the window ended", n)
		}
		time.Sleep(repeatWindow + time.Millisecond)
		synctest.Wait()
		recs := logs.Find(msgDecision)
		if len(recs) != 1 || recs[0]["repeated"] != float64(4) || recs[0]["level"] != "WARN" {
			t.Fatalf("after the window: %v, want one summary with repeated 4", recs)
		}
		if deny("a:1") {
			t.Error("a denial after the window was suppressed")
		}
		time.Sleep(2 * repeatWindow)
		synctest.Wait()
		if n := len(logs.Find(msgDecision)); n != 1 {
			t.Errorf("%d lines; a window without repeats must write no summary", n)
		}
	})
}

// TestFlushLogs: pending summaries are written on demand (at shutdown),
// before their window ends.
func TestFlushLogs(t *testing.T) {
	frozen := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, envOpts{now: func() time.Time { return frozen }})
	c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, strings.Repeat("GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n", 4))
	br := bufio.NewReader(c)
	for range 4 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := len(e.waitDecisions(1)); n != 1 {
		t.Fatalf("%d lines before the flush, want 1", n)
	}
	e.handler.FlushLogs()
	recs := e.logs.Find(msgDecision)
	if len(recs) != 2 || recs[1]["repeated"] != float64(3) {
		t.Errorf("after FlushLogs: %v, want the summary of 3 repeats", recs)
	}
}

// TestRepeatStateBounded: however many connections deny, the state holds
// at most maxRepeatConns runs, and no pending count is lost on eviction.
func TestRepeatStateBounded(t *testing.T) {
	var out bytes.Buffer
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l := newRepeatLog(telemetry.NewLogger(&out, nil), func() time.Time { return now })
	total := 0
	for i := range maxRepeatConns + 100 {
		x := &exchange{remote: fmt.Sprintf("10.0.0.1:%d", i), host: "evil.test", port: 443, decision: telemetry.DecisionDeny, reason: "default_deny"}
		for range 3 {
			if l.suppress(x, http.MethodGet, 403, slog.LevelWarn) {
				total++
			}
		}
	}
	l.mu.Lock()
	runs := len(l.runs)
	l.mu.Unlock()
	if runs > maxRepeatConns {
		t.Errorf("%d runs held, want at most %d", runs, maxRepeatConns)
	}
	reported := 0
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r struct{ Repeated int }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		reported += r.Repeated
	}
	pending := 0
	l.mu.Lock()
	for _, r := range l.runs {
		pending += r.count
	}
	l.mu.Unlock()
	if reported+pending != total {
		t.Errorf("suppressed %d, reported %d + pending %d", total, reported, pending)
	}
}

func TestBound(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
		cut  bool
	}{
		{"short", "abc", "abc", false},
		{"exact", strings.Repeat("a", maxFieldBytes), strings.Repeat("a", maxFieldBytes), false},
		{"ascii", strings.Repeat("a", maxFieldBytes+1), strings.Repeat("a", maxFieldBytes), true},
		// 255 ASCII bytes then a 2-byte rune: the rune would be split.
		{"split rune", strings.Repeat("a", maxFieldBytes-1) + "é", strings.Repeat("a", maxFieldBytes-1), true},
		{"split 4-byte rune", strings.Repeat("a", maxFieldBytes-2) + "😀x", strings.Repeat("a", maxFieldBytes-2), true},
		{"whole rune at the end", strings.Repeat("a", maxFieldBytes-2) + "éx", strings.Repeat("a", maxFieldBytes-2) + "é", true},
	}
	for _, tt := range tests {
		got, cut := bound(tt.in)
		if got != tt.want || cut != tt.cut {
			t.Errorf("%s: bound = %q (%d bytes), %v; want %d bytes, %v", tt.name, got, len(got), cut, len(tt.want), tt.cut)
		}
	}
}
