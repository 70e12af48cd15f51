package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const plain = "hunter2-sk-live-0123"

// leaks reports whether s shows the secret in any common encoding.
func leaks(s string) bool {
	b := []byte(plain)
	forms := []string{
		plain,
		hex.EncodeToString(b),
		strings.ToUpper(hex.EncodeToString(b)),
		base64.StdEncoding.EncodeToString(b),
		fmt.Sprint(b),         // [104 117 ...]
		fmt.Sprintf("%#v", b), // []byte{0x68, ...}
		fmt.Sprintf("%q", b),
	}
	for _, f := range forms {
		if strings.Contains(s, f) {
			return true
		}
	}
	return false
}

// TestSecretStringRedacted is the port of the reference's
// test_secret_string_redacted.
func TestSecretStringRedacted(t *testing.T) {
	v := NewValue([]byte(plain))
	if got := v.String(); got != "REDACTED" {
		t.Errorf("String() = %q, want REDACTED", got)
	}
	if got := v.GoString(); got != "REDACTED" {
		t.Errorf("GoString() = %q, want REDACTED", got)
	}
	if got := string(v.Reveal()); got != plain {
		t.Errorf("Reveal() = %q, want the secret", got)
	}
	if got := v.Len(); got != len(plain) {
		t.Errorf("Len() = %d, want %d", got, len(plain))
	}
	var zero Value
	if zero.Reveal() != nil || zero.Len() != 0 || zero.String() != "REDACTED" {
		t.Errorf("zero Value: Reveal() = %q, Len() = %d, String() = %q", zero.Reveal(), zero.Len(), zero.String())
	}
}

type exported struct {
	Name   string
	Secret Value
	Ptr    *Value
	List   []Value
	Map    map[string]Value
}

type unexported struct {
	name   string
	secret Value
	ptr    *Value
	list   []Value
	m      map[string]Value
}

func TestValueFormatRedacted(t *testing.T) {
	v := NewValue([]byte(plain))
	ex := exported{Name: "n", Secret: v, Ptr: &v, List: []Value{v}, Map: map[string]Value{"k": v}}
	un := unexported{name: "n", secret: v, ptr: &v, list: []Value{v}, m: map[string]Value{"k": v}}
	snap := newSnapshot(map[string]Value{"k": v}, nil)
	verbs := []string{"%s", "%v", "%+v", "%#v", "%q", "%x", "%X", "%d", "%10.3s", "%T"}
	args := map[string]any{
		"value":              v,
		"pointer":            &v,
		"exported struct":    ex,
		"unexported struct":  un,
		"unexported pointer": &un,
		"slice":              []Value{v},
		"map":                map[string]Value{"k": v},
		"snapshot":           snap,
		"snapshot value":     *snap,
	}
	for name, arg := range args {
		for _, verb := range verbs {
			got := fmt.Sprintf(verb, arg)
			if leaks(got) {
				t.Errorf("Sprintf(%q, %s) = %q leaks the secret", verb, name, got)
			}
		}
		for _, got := range []string{fmt.Sprint(arg), fmt.Sprintln(arg)} {
			if leaks(got) {
				t.Errorf("Sprint(%s) = %q leaks the secret", name, got)
			}
		}
	}
	// The value itself, under every verb, is exactly REDACTED.
	for _, verb := range []string{"%s", "%v", "%+v", "%#v", "%q", "%x"} {
		if got := fmt.Sprintf(verb, v); got != "REDACTED" {
			t.Errorf("Sprintf(%q, v) = %q, want REDACTED", verb, got)
		}
	}
}

func TestValueSlogRedacted(t *testing.T) {
	v := NewValue([]byte(plain))
	for _, tt := range []struct {
		name string
		h    func(*bytes.Buffer) slog.Handler
	}{
		{"json", func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) }},
		{"text", func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(tt.h(&buf))
			log.Info("msg", "value", v, "ptr", &v,
				"struct", exported{Secret: v, Ptr: &v, List: []Value{v}},
				"unexported", unexported{secret: v},
				slog.Any("any", v), slog.Group("g", "value", v),
				"error", fmt.Errorf("loading: %w", errors.New(fmt.Sprint(v))))
			log.With("bound", v).Info("second")
			got := buf.String()
			if leaks(got) {
				t.Errorf("log output leaks the secret:\n%s", got)
			}
			if !strings.Contains(got, "REDACTED") {
				t.Errorf("log output has no REDACTED:\n%s", got)
			}
		})
	}
	t.Run("json value", func(t *testing.T) {
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("msg", "value", v)
		var rec map[string]any
		if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["value"] != "REDACTED" {
			t.Errorf(`JSON log "value" = %v, want REDACTED`, rec["value"])
		}
	})
}

func TestValueMarshalRedacted(t *testing.T) {
	v := NewValue([]byte(plain))
	ex := exported{Name: "n", Secret: v, Ptr: &v, List: []Value{v}, Map: map[string]Value{"k": v}}

	j, err := json.Marshal(ex)
	if err != nil {
		t.Fatalf("json.Marshal = %v", err)
	}
	want := `{"Name":"n","Secret":"REDACTED","Ptr":"REDACTED","List":["REDACTED"],"Map":{"k":"REDACTED"}}`
	if string(j) != want {
		t.Errorf("json.Marshal = %s, want %s", j, want)
	}
	txt, err := v.MarshalText()
	if err != nil || string(txt) != "REDACTED" {
		t.Errorf("MarshalText() = %q, %v", txt, err)
	}
	y, err := yaml.Marshal(ex)
	if err != nil || leaks(string(y)) || !strings.Contains(string(y), "REDACTED") {
		t.Errorf("yaml.Marshal = %q, %v", y, err)
	}
	x, err := xml.Marshal(xmlDoc{Secret: v})
	if err != nil || leaks(string(x)) {
		t.Errorf("xml.Marshal = %q, %v", x, err)
	}
}

type xmlDoc struct{ Secret Value }

type valueError struct{ v Value }

func (e *valueError) Error() string { return fmt.Sprintf("bad value %v", e.v) }

func TestValueInErrorsRedacted(t *testing.T) {
	v := NewValue([]byte(plain))
	base := &valueError{v}
	errs := []error{
		fmt.Errorf("loading %s: %w", v, base),
		fmt.Errorf("wrapped: %w", fmt.Errorf("inner %v %+v %#v %q %x", v, v, v, v, v)),
		errors.Join(base, fmt.Errorf("%v", []Value{v})),
	}
	for _, err := range errs {
		for _, got := range []string{err.Error(), fmt.Sprintf("%v", err), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
			if leaks(got) {
				t.Errorf("error text %q leaks the secret", got)
			}
		}
	}
	if ve, ok := errors.AsType[*valueError](errs[0]); !ok || string(ve.v.Reveal()) != plain {
		t.Errorf("errors.AsType lost the wrapped error")
	}
}
