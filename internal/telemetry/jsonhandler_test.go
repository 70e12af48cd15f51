package telemetry

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// slogReference is what NewLogger wrote before jsonHandler: slog's own JSON
// handler with replaceAttr. jsonHandler must write the same bytes.
func slogReference(buf *bytes.Buffer, level slog.Leveler) slog.Handler {
	return slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: level, ReplaceAttr: replaceAttr})
}

// derive applies the same WithAttrs/WithGroup steps to a handler.
type derive func(slog.Handler) slog.Handler

func withAttrs(as ...slog.Attr) derive {
	return func(h slog.Handler) slog.Handler { return h.WithAttrs(as) }
}

func withGroup(name string) derive {
	return func(h slog.Handler) slog.Handler { return h.WithGroup(name) }
}

// compareHandlers handles one record with both handlers and compares bytes.
func compareHandlers(t *testing.T, r slog.Record, steps ...derive) {
	t.Helper()
	var got, want bytes.Buffer
	var fast slog.Handler = newJSONHandler(&got, slog.LevelDebug)
	ref := slogReference(&want, slog.LevelDebug)
	for _, d := range steps {
		fast, ref = d(fast), d(ref)
	}
	errFast, errRef := fast.Handle(context.Background(), r.Clone()), ref.Handle(context.Background(), r.Clone())
	if (errFast == nil) != (errRef == nil) {
		t.Fatalf("errors differ: fast %v, slog %v", errFast, errRef)
	}
	if d := cmp.Diff(want.String(), got.String()); d != "" {
		t.Errorf("output differs from slog's JSON handler (-slog +fast):\n%s", d)
	}
}

var fixedTime = time.Date(2026, 11, 29, 9, 30, 1, 123456789, time.FixedZone("CET", 3600))

type loggedSecret struct{}

func (loggedSecret) LogValue() slog.Value { return slog.StringValue("REDACTED") }

func TestJSONHandlerMatchesSlog(t *testing.T) {
	tests := []struct {
		name  string
		level slog.Level
		msg   string
		time  time.Time
		attrs []slog.Attr
		steps []derive
	}{
		{name: "decision line", msg: "proxy decision", attrs: canonicalDecisionAttrs(), steps: []derive{withAttrs(slog.String(KeyTarget, TargetProxy))}},
		{name: "escapes", msg: "a\"b\\c\n\r\t\b\f\x00\x1f<>&\u2028\u2029\xff é", attrs: []slog.Attr{
			slog.String("k\"ey\n", "v\b\f\x01\u2029\xc3"), slog.Any("list", []string{"a\b", "\f\"", "\u2028<&>", "\xff"}),
		}},
		{name: "numbers", attrs: []slog.Attr{
			slog.Int64("i", math.MinInt64), slog.Uint64("u", math.MaxUint64), slog.Bool("b", true), slog.Duration("d", 1500*time.Millisecond),
			slog.Float64("f0", 0), slog.Float64("fneg0", math.Copysign(0, -1)), slog.Float64("fsmall", 1.5e-7), slog.Float64("fbig", 2e21),
			slog.Float64("fms", 12.345), slog.Float64("fint", 42), slog.Float64("fmax", math.MaxFloat64), slog.Float64("ftiny", 5e-324),
		}},
		{name: "string slices", attrs: []slog.Attr{slog.Any("nil", []string(nil)), slog.Any("empty", []string{}), slog.Any("one", []string{"Authorization"})}},
		{name: "nan falls back", attrs: []slog.Attr{slog.Float64("nan", math.NaN()), slog.Float64("inf", math.Inf(-1))}},
		{name: "other values fall back", attrs: []slog.Attr{
			slog.Any("err", errors.New("boom")), slog.Any("map", map[string]int{"a": 1}), slog.Time("t", fixedTime),
			slog.Any("ints", []int{1, 2}), slog.Any("nil", nil),
		}},
		{name: "log valuer falls back", attrs: []slog.Attr{slog.Any("secret", loggedSecret{}), slog.String("after", "x")}},
		{name: "groups fall back", attrs: []slog.Attr{slog.Group("g", slog.String("msg", "kept")), slog.Group("", slog.Int("inlined", 1)), slog.Group("empty")}},
		{name: "empty attribute", attrs: []slog.Attr{{}, slog.String("", "empty key"), slog.String("k", "v")}},
		{name: "built-in keys", attrs: []slog.Attr{slog.String("msg", "m"), slog.String("level", "l"), slog.Time("time", fixedTime), slog.Any("level", slog.LevelWarn)}},
		{name: "custom level", level: slog.LevelInfo + 2, attrs: []slog.Attr{slog.String("k", "v")}},
		{name: "zero time", time: time.Time{}, attrs: []slog.Attr{slog.String("k", "v")}},
		{name: "year out of range", time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), attrs: []slog.Attr{slog.String("k", "v")}},
		{name: "with attrs", attrs: []slog.Attr{slog.Int("n", 1)}, steps: []derive{withAttrs(slog.String(KeyTarget, TargetProxy)), withAttrs(slog.Float64("f", 0.5), slog.Any("s", []string{"x"}))}},
		{name: "with log valuer attr", attrs: []slog.Attr{slog.Int("n", 1)}, steps: []derive{withAttrs(slog.Any("secret", loggedSecret{}))}},
		{name: "with group", attrs: []slog.Attr{slog.Int("n", 1)}, steps: []derive{withAttrs(slog.String("a", "b")), withGroup("g"), withAttrs(slog.String("c", "d"))}},
		{name: "with empty group", attrs: []slog.Attr{slog.Int("n", 1)}, steps: []derive{withGroup("")}},
		{name: "with no attrs", attrs: []slog.Attr{slog.Int("n", 1)}, steps: []derive{withAttrs()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := fixedTime
			if tt.time != (time.Time{}) || tt.name == "zero time" {
				ts = tt.time
			}
			r := slog.NewRecord(ts, tt.level, tt.msg, 0)
			r.AddAttrs(tt.attrs...)
			compareHandlers(t, r, tt.steps...)
		})
	}
}

func FuzzJSONHandlerMatchesSlog(f *testing.F) {
	f.Add("proxy decision", "api.example.com", "Authorization", 42.5, int64(443), uint64(7), true)
	f.Add("a\"b\\\n\r\t\b\f\x00", "\u2028\xff<>&", "\x7f\u2029", 1e-7, int64(-1), uint64(0), false)
	f.Add("", "", "", math.NaN(), int64(math.MaxInt64), uint64(math.MaxUint64), false)
	f.Add("m", "é", "\xed\xa0\x80", 1e21, int64(0), uint64(1), true)
	f.Fuzz(func(t *testing.T, msg, s, elem string, fl float64, i int64, u uint64, b bool) {
		r := slog.NewRecord(fixedTime, slog.LevelInfo, msg, 0)
		r.AddAttrs(slog.String("s", s), slog.String(s+"k", elem), slog.Float64("f", fl), slog.Int64("i", i),
			slog.Uint64("u", u), slog.Bool("b", b), slog.Any("list", []string{s, elem}), slog.Duration("d", time.Duration(i)))
		compareHandlers(t, r, withAttrs(slog.String(KeyTarget, elem)))
	})
}
