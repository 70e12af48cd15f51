package secretref

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ref  string
		want bool
	}{
		{"openai-api-key", true},
		{"key.with.dots", true},
		{"UPPER_and_123", true},
		{"ключ", true}, // non-ASCII file names are loadable
		{strings.Repeat("k", MaxLen), true},
		{"", false},
		{strings.Repeat("k", MaxLen+1), false},
		{".hidden", false},
		{"..data", false},
		{".", false},
		{"../openai-api-key", false},
		{"dir/key", false},
		{"with space", false},
		{"tab\there", false},
		{"nl\n", false},
		{"nul\x00", false},
		{"del\x7f", false},
	}
	for _, tt := range tests {
		if got := Valid(tt.ref); got != tt.want {
			t.Errorf("Valid(%q) = %v, want %v", tt.ref, got, tt.want)
		}
	}
}

// FuzzValid: a valid name is always a single path element that the store
// can open below its root (no separator, no dot-dot, no NUL).
func FuzzValid(f *testing.F) {
	f.Add("openai-api-key")
	f.Add("../x")
	f.Fuzz(func(t *testing.T, ref string) {
		if !Valid(ref) {
			return
		}
		if ref == "" || ref == "." || ref == ".." || strings.ContainsAny(ref, "/\x00") || strings.HasPrefix(ref, ".") {
			t.Fatalf("Valid(%q) = true for a name the store cannot load", ref)
		}
	})
}
