package secrets

import (
	"fmt"
	"log/slog"
)

const redacted = "REDACTED"

// Value is a secret value. It prints as REDACTED through every formatting,
// logging and encoding path; only Reveal returns the bytes. The zero Value
// is empty. Values are not comparable with ==.
//
// The bytes are reachable only through a function. fmt cannot call Format on
// a Value held in an unexported struct field (a Snapshot's map, a caller's
// private struct) and then prints it field by field, dereferencing pointers
// when a verb does not fit; a func field always prints as an address.
type Value struct {
	reveal func() []byte
}

// NewValue wraps b (the caller must not modify b afterwards).
func NewValue(b []byte) Value { return Value{reveal: func() []byte { return b }} }

// Reveal returns the secret bytes. Call it only where the value is written
// onto the wire (the header writer in package rewrite). The caller must not
// modify them.
func (v Value) Reveal() []byte {
	if v.reveal == nil {
		return nil
	}
	return v.reveal()
}

// Len is the length of the value in bytes.
func (v Value) Len() int { return len(v.Reveal()) }

// String implements fmt.Stringer.
func (Value) String() string { return redacted }

// GoString implements fmt.GoStringer.
func (Value) GoString() string { return redacted }

// Format implements fmt.Formatter so that every verb (%s %v %+v %#v %x %q …) redacts.
func (Value) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue implements slog.LogValuer.
func (Value) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON implements json.Marshaler.
func (Value) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText implements encoding.TextMarshaler.
func (Value) MarshalText() ([]byte, error) { return []byte(redacted), nil }
