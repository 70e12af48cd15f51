package telemetry

import (
	"io"
	"log/slog"
)

// Keys of the three fields every record starts with. They replace slog's
// "time", "level" and "msg" so that lines match the reference's
// tracing-subscriber JSON.
const (
	KeyTimestamp = "timestamp"
	KeyLevel     = "level"
	KeyMessage   = "message"
	// KeyTarget names the emitting component, e.g. "botbox::proxy" (see WithTarget).
	KeyTarget = "target"
)

// Targets: the reference's Rust module paths, one per component, so that log
// queries written against the reference keep matching.
const (
	TargetMain         = "botbox"
	TargetProxy        = "botbox::proxy"
	TargetInterception = "botbox::https_interception"
	TargetSecrets      = "botbox::secrets"
	// TargetCredentials: token mints, failures and revocations of the
	// minted credentials (names only, never a token).
	TargetCredentials = "botbox::credentials"
)

// NewLogger returns a logger writing one JSON object per line to w, with the
// keys "timestamp" (RFC 3339 with nanoseconds, UTC), "level" ("DEBUG",
// "INFO", "WARN", "ERROR"), "message", then the logger's own attributes
// (such as "target", see WithTarget) and the record's attributes, all at the
// top level. Records below level are dropped; a nil level means Info.
//
// Attribute values that implement slog.LogValuer are resolved before they are
// written, which is how secrets.Value prints as REDACTED.
//
// The output is byte for byte that of slog.NewJSONHandler with those key
// renames; the common records (string, number, boolean and []string
// attributes) are encoded by a faster path of this package (see jsonHandler)
// that adds no allocation of its own. On hot paths use Logger.LogAttrs with
// slog.Attr values (as the proxy's decision line does): it avoids boxing
// key/value pairs.
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(newJSONHandler(w, level))
}

// WithTarget returns l with the attribute target=target, naming the component
// that logs (one of the Target… constants).
func WithTarget(l *slog.Logger, target string) *slog.Logger {
	return l.With(slog.String(KeyTarget, target))
}

// replaceAttr renames slog's built-in keys to the reference's ones. It runs
// for every attribute of every record, so it only compares strings and never
// allocates.
func replaceAttr(groups []string, a slog.Attr) slog.Attr {
	if len(groups) != 0 {
		return a
	}
	switch a.Key {
	case slog.TimeKey:
		if a.Value.Kind() == slog.KindTime {
			// A time.Time value is formatted by the JSON handler with
			// time.RFC3339Nano; UTC() only swaps the location pointer.
			return slog.Time(KeyTimestamp, a.Value.Time().UTC())
		}
	case slog.LevelKey:
		// The built-in level arrives as an slog.Level inside an Any value;
		// left alone, the JSON handler would encode it through
		// encoding/json (several allocations per record).
		if a.Value.Kind() == slog.KindAny {
			if l, ok := a.Value.Any().(slog.Level); ok {
				return slog.String(KeyLevel, levelName(l))
			}
		}
	case slog.MessageKey:
		a.Key = KeyMessage
	}
	return a
}

// levelName returns constant strings for the four standard levels (what
// tracing prints) and slog's "INFO+2" form for any other level.
func levelName(l slog.Level) string {
	switch l {
	case slog.LevelDebug:
		return "DEBUG"
	case slog.LevelInfo:
		return "INFO"
	case slog.LevelWarn:
		return "WARN"
	case slog.LevelError:
		return "ERROR"
	}
	return l.String()
}
