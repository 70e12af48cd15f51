package echo

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClip(t *testing.T) {
	t.Parallel()
	a64 := strings.Repeat("a", 64)
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"short", "api.openai.com", "api.openai.com"},
		{"exactly max", a64, a64},
		{"one over", a64 + "b", a64 + "..."},
		{"long", strings.Repeat("x", 1000) + "TAIL", strings.Repeat("x", 64) + "..."},
		// "é" is 2 bytes; 63 ASCII bytes + "é" straddles the limit, so the cut backs up.
		{"no split rune", strings.Repeat("a", 63) + "éé", strings.Repeat("a", 63) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Clip(tt.in); got != tt.want {
				t.Errorf("Clip(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzClip(f *testing.F) {
	f.Add("api.openai.com")
	f.Add(strings.Repeat("é", 40))
	f.Fuzz(func(t *testing.T, s string) {
		got := Clip(s)
		if len(got) > Max+len(Ellipsis) {
			t.Fatalf("Clip(%q) is %d bytes", s, len(got))
		}
		if len(s) <= Max {
			if got != s {
				t.Fatalf("Clip(%q) = %q changed a short input", s, got)
			}
			return
		}
		body, ok := strings.CutSuffix(got, Ellipsis)
		if !ok || !strings.HasPrefix(s, body) || len(body) < Max-utf8.UTFMax+1 {
			t.Fatalf("Clip(%q) = %q is not a prefix of the input plus the ellipsis", s, got)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Clip(%q) = %q split a rune", s, got)
		}
	})
}
