package telemetry

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// jsonHandler is the handler behind NewLogger.
//
// Contract: for every record it writes exactly the bytes that
// slog.NewJSONHandler with replaceAttr writes, one complete line per
// Write. Records whose attributes are all strings, integers, booleans,
// durations, finite floats or []string, with non-empty keys other than
// "time", "level" and "msg", are encoded here; any other record (a group, a
// LogValuer such as secrets.Value, an error, a time, any other value) is
// handed, whole, to the wrapped slog.JSONHandler, so redaction through
// LogValue is always slog's own. TestJSONHandlerMatchesSlog and
// FuzzJSONHandlerMatchesSlog hold the two paths byte-identical; a Go
// release that changes slog's output fails them.
//
// Why not slog.JSONHandler alone: it calls ReplaceAttr for every attribute
// and encodes float64 and []string through encoding/json, which makes the
// per-request decision line the largest single cost of an allowed request.
// It is kept because a same-run A/B of the proxy's request benchmark
// (BenchmarkServePlainLogHandler) shows it earns far more than the 2% of
// CPU per request that justifies such code; the numbers are in
// docs/performance.md, "Decision line".
type jsonHandler struct {
	slow   slog.Handler // slog.NewJSONHandler on the same (locked) writer
	level  slog.Leveler
	out    *lockedWriter
	prefix []byte // WithAttrs attributes, encoded: `,"k":v...`
	// delegate is set once WithGroup or a WithAttrs attribute the fast
	// path cannot encode was used: every record then goes to slow.
	delegate bool
}

// lockedWriter serialises the writes of both paths (slog's handler has its
// own mutex, which the fast path cannot share), one complete line per Write.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func newJSONHandler(w io.Writer, level slog.Leveler) *jsonHandler {
	out := &lockedWriter{w: w}
	return &jsonHandler{
		slow:  slog.NewJSONHandler(out, &slog.HandlerOptions{Level: level, ReplaceAttr: replaceAttr}),
		level: level,
		out:   out,
	}
}

func (h *jsonHandler) Enabled(_ context.Context, l slog.Level) bool {
	minLevel := slog.LevelInfo
	if h.level != nil {
		minLevel = h.level.Level()
	}
	return l >= minLevel
}

func (h *jsonHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	h2 := *h
	h2.slow = h.slow.WithAttrs(as)
	if !h.delegate {
		p := append([]byte(nil), h.prefix...)
		for _, a := range as {
			var ok bool
			if p, ok = appendFastAttr(p, a); !ok {
				h2.delegate = true
				break
			}
		}
		h2.prefix = p
	}
	return &h2
}

func (h *jsonHandler) WithGroup(name string) slog.Handler {
	// Even "" opens a group in slog's handler (slog.Logger.WithGroup("")
	// does not call this).
	h2 := *h
	h2.slow = h.slow.WithGroup(name)
	h2.delegate = true
	return &h2
}

var lineBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func (h *jsonHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.delegate || r.Time.IsZero() {
		return h.slow.Handle(ctx, r)
	}
	t := r.Time.Round(0).UTC()
	if y := t.Year(); y < 0 || y >= 10000 {
		return h.slow.Handle(ctx, r)
	}
	bp := lineBufPool.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= 16<<10 {
			lineBufPool.Put(bp)
		}
	}()
	buf := append((*bp)[:0], `{"`+KeyTimestamp+`":"`...)
	buf = t.AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","`+KeyLevel+`":`...)
	buf = appendSlogString(buf, levelName(r.Level))
	buf = append(buf, `,"`+KeyMessage+`":`...)
	buf = appendSlogString(buf, r.Message)
	buf = append(buf, h.prefix...)
	ok := true
	r.Attrs(func(a slog.Attr) bool {
		buf, ok = appendFastAttr(buf, a)
		return ok
	})
	*bp = buf
	if !ok {
		return h.slow.Handle(ctx, r)
	}
	buf = append(buf, '}', '\n')
	*bp = buf
	_, err := h.out.Write(buf)
	return err
}

// appendFastAttr appends `,"key":value` and reports whether the fast path
// can encode a; when it cannot, buf's new content must be discarded.
func appendFastAttr(buf []byte, a slog.Attr) ([]byte, bool) {
	switch a.Key {
	case "", slog.TimeKey, slog.LevelKey, slog.MessageKey:
		// Empty keys (ignored or inlined groups) and the keys replaceAttr
		// renames: slog's rules apply.
		return buf, false
	}
	buf = append(buf, ',')
	buf = appendSlogString(buf, a.Key)
	buf = append(buf, ':')
	v := a.Value
	switch v.Kind() {
	case slog.KindString:
		buf = appendSlogString(buf, v.String())
	case slog.KindInt64:
		buf = strconv.AppendInt(buf, v.Int64(), 10)
	case slog.KindUint64:
		buf = strconv.AppendUint(buf, v.Uint64(), 10)
	case slog.KindBool:
		buf = strconv.AppendBool(buf, v.Bool())
	case slog.KindDuration:
		buf = strconv.AppendInt(buf, int64(v.Duration()), 10)
	case slog.KindFloat64:
		f := v.Float64()
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return buf, false
		}
		buf = appendJSONFloat(buf, f)
	case slog.KindAny:
		ss, isStrings := v.Any().([]string)
		if !isStrings {
			return buf, false
		}
		if ss == nil {
			return append(buf, "null"...), true
		}
		buf = append(buf, '[')
		for i, s := range ss {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendJSONString(buf, s)
		}
		buf = append(buf, ']')
	default:
		return buf, false
	}
	return buf, true
}

// appendJSONFloat formats f as encoding/json does (which slog's handler
// calls for floats): ES6 number formatting.
func appendJSONFloat(buf []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	buf = strconv.AppendFloat(buf, f, format, -1, 64)
	if format == 'e' {
		// e-09 -> e-9, as encoding/json does.
		if n := len(buf); n >= 4 && buf[n-4] == 'e' && buf[n-3] == '-' && buf[n-2] == '0' {
			buf[n-2] = buf[n-1]
			buf = buf[:n-1]
		}
	}
	return buf
}

// appendSlogString quotes s as slog's JSON handler does for strings and
// keys (only \n, \r and \t have short escapes).
func appendSlogString(buf []byte, s string) []byte {
	return appendQuoted(buf, s, false)
}

// appendJSONString quotes s as encoding/json does with HTML escaping off
// (what slog uses for []string values): \b and \f have short escapes too.
func appendJSONString(buf []byte, s string) []byte {
	return appendQuoted(buf, s, true)
}

const hexDigits = "0123456789abcdef"

func appendQuoted(buf []byte, s string, shortBF bool) []byte {
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch {
			case b == '\\' || b == '"':
				buf = append(buf, '\\', b)
			case b == '\n':
				buf = append(buf, '\\', 'n')
			case b == '\r':
				buf = append(buf, '\\', 'r')
			case b == '\t':
				buf = append(buf, '\\', 't')
			case shortBF && b == '\b':
				buf = append(buf, '\\', 'b')
			case shortBF && b == '\f':
				buf = append(buf, '\\', 'f')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}
