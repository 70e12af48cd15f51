package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// checkGolden compares got with testdata/name, or rewrites the file with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run go test -update to create it): %v", err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, d)
	}
}

var timestampRE = regexp.MustCompile(`"timestamp":"([^"]*)"`)

// normaliseTimestamps checks that every record's timestamp is RFC 3339 in
// UTC, then replaces it by a fixed string so that output can be golden-tested.
func normaliseTimestamps(t *testing.T, out []byte) []byte {
	t.Helper()
	for _, m := range timestampRE.FindAllSubmatch(out, -1) {
		ts := string(m[1])
		if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
			t.Errorf("timestamp %q is not RFC 3339: %v", ts, err)
		}
		if !strings.HasSuffix(ts, "Z") {
			t.Errorf("timestamp %q is not in UTC", ts)
		}
	}
	return timestampRE.ReplaceAll(out, []byte(`"timestamp":"<TIMESTAMP>"`))
}

// canonicalDecisionAttrs are the attributes of one decision line, with the
// kinds the proxy uses (strings, ints, a float, []string). The real lines
// are golden-tested where they are produced (internal/proxy,
// testdata/decision.golden); this package only tests the formatting.
func canonicalDecisionAttrs() []slog.Attr {
	return []slog.Attr{
		slog.String(KeyRequestID, "0b6b1a0e-5d3c-4c1e-9c53-0d6f2b9e8a11"),
		slog.String(KeyListener, "http"),
		slog.String(KeyHost, "api.example.com"),
		slog.Int(KeyPort, 443),
		slog.String(KeyMethod, "POST"),
		slog.String(KeyPath, "/v1/chat/completions"),
		slog.String(KeyDecision, DecisionAllow),
		slog.String(KeyRule, "api.example.com"),
		slog.String(KeyReason, "rule_allow"),
		slog.Int(KeyStatus, 200),
		slog.String(KeyUpstreamAddr, "203.0.113.7:443"),
		slog.Float64(KeyDurationMS, 42.125),
		slog.Int64(KeyBytesIn, 512),
		slog.Any(KeyHeaderRewritten, []string{"Authorization"}),
	}
}

// TestLoggerFormat holds the formatting rules of NewLogger (not the log
// contract, whose real lines internal/proxy golden-tests): the three
// renamed leading keys, the target, flattened attributes, nested groups,
// errors as text, non-standard levels.
func TestLoggerFormat(t *testing.T) {
	var buf bytes.Buffer
	root := NewLogger(&buf, slog.LevelDebug)
	proxy := WithTarget(root, TargetProxy)
	proxy.LogAttrs(context.Background(), slog.LevelWarn, "m", slog.String(KeyHost, "h"), slog.Any(KeySecretRef, []string{"a", "b"}))
	proxy.Debug("g", slog.Group("g", slog.String("msg", "nested keys are kept")))
	root.Error("e", KeyError, errors.New("dial tcp 203.0.113.7:443: connection refused"))
	root.Log(context.Background(), slog.LevelInfo+2, "n")
	want := `{"timestamp":"<T>","level":"WARN","message":"m","target":"botbox::proxy","host":"h","secret_ref":["a","b"]}
{"timestamp":"<T>","level":"DEBUG","message":"g","target":"botbox::proxy","g":{"msg":"nested keys are kept"}}
{"timestamp":"<T>","level":"ERROR","message":"e","error":"dial tcp 203.0.113.7:443: connection refused"}
{"timestamp":"<T>","level":"INFO+2","message":"n"}
`
	got := timestampRE.ReplaceAllString(string(normaliseTimestamps(t, buf.Bytes())), `"timestamp":"<T>"`)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("format (-want +got):\n%s", d)
	}
}

// TestLoggerKeys decodes one line and checks the key set and order.
func TestLoggerKeys(t *testing.T) {
	var buf bytes.Buffer
	WithTarget(NewLogger(&buf, nil), TargetSecrets).Info("secrets reloaded", "count", 3)

	dec := json.NewDecoder(&buf)
	var keys []string
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		t.Fatalf("first token = %v, %v, want {", tok, err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"timestamp", "level", "message", "target", "count"}
	if d := cmp.Diff(want, keys); d != "" {
		t.Errorf("keys (-want +got):\n%s", d)
	}
}

func TestLoggerLevelFilter(t *testing.T) {
	tests := []struct {
		name  string
		level slog.Leveler
		want  []string // messages written
	}{
		{"nil means info", nil, []string{"info", "warn", "error"}},
		{"debug", slog.LevelDebug, []string{"debug", "info", "warn", "error"}},
		{"warn", slog.LevelWarn, []string{"warn", "error"}},
		{"error", slog.LevelError, []string{"error"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			l := NewLogger(&buf, tt.level)
			l.Debug("debug")
			l.Info("info")
			l.Warn("warn")
			l.Error("error")
			var got []string
			for line := range strings.Lines(buf.String()) {
				var rec struct{ Message string }
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("line %q: %v", line, err)
				}
				got = append(got, rec.Message)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("messages (-want +got):\n%s", d)
			}
		})
	}
}

// fakeSecret mimics secrets.Value: it only ever logs as REDACTED.
type fakeSecret struct{ b string }

func (fakeSecret) LogValue() slog.Value { return slog.StringValue("REDACTED") }

func TestLoggerRedactsLogValuer(t *testing.T) {
	const canary = "CANARY-sk-live-0123456789"
	s := fakeSecret{b: canary}
	var buf bytes.Buffer
	l := NewLogger(&buf, slog.LevelDebug)
	l.Info("attr", "value", s)
	l.With("value", s).Info("with")
	l.Info("group", slog.Group("g", slog.Any("value", s)))
	l.LogAttrs(context.Background(), slog.LevelInfo, "attrs", slog.Any("value", s))

	out := buf.String()
	if strings.Contains(out, canary) {
		t.Fatalf("log output contains the secret:\n%s", out)
	}
	if n := strings.Count(out, `"value":"REDACTED"`); n != 4 {
		t.Errorf("log output has %d REDACTED values, want 4:\n%s", n, out)
	}
}

// TestLoggerAllocs keeps the handler's own cost at zero: a record with no
// more attributes than slog.Record stores inline must not allocate.
func TestLoggerAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	l := WithTarget(NewLogger(io.Discard, nil), TargetProxy)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		l.LogAttrs(ctx, slog.LevelWarn, "request denied",
			slog.String(KeyRequestID, "r1"),
			slog.String(KeyHost, "evil.example"),
			slog.String(KeyMethod, "GET"),
			slog.String(KeyPath, "/"),
			slog.String(KeyDecision, DecisionDeny))
	})
	if allocs != 0 {
		t.Errorf("LogAttrs with 5 attrs: %v allocations, want 0", allocs)
	}
}

func BenchmarkDecisionLogLine(b *testing.B) {
	l := WithTarget(NewLogger(io.Discard, nil), TargetProxy)
	ctx := context.Background()
	attrs := canonicalDecisionAttrs()
	b.ReportAllocs()
	for b.Loop() {
		l.LogAttrs(ctx, slog.LevelInfo, "proxy decision",
			attrs[0], attrs[1], attrs[2], attrs[3], attrs[4], attrs[5], attrs[6],
			attrs[7], attrs[8], attrs[9], attrs[10], attrs[11], attrs[12], attrs[13])
	}
}

// BenchmarkDecisionLogLineBaseline is BenchmarkDecisionLogLine on a plain
// slog JSON handler (no ReplaceAttr), the cost floor to compare against.
func BenchmarkDecisionLogLineBaseline(b *testing.B) {
	l := slog.New(slog.NewJSONHandler(io.Discard, nil)).With(slog.String(KeyTarget, TargetProxy))
	ctx := context.Background()
	attrs := canonicalDecisionAttrs()
	b.ReportAllocs()
	for b.Loop() {
		l.LogAttrs(ctx, slog.LevelInfo, "proxy decision",
			attrs[0], attrs[1], attrs[2], attrs[3], attrs[4], attrs[5], attrs[6],
			attrs[7], attrs[8], attrs[9], attrs[10], attrs[11], attrs[12], attrs[13])
	}
}
