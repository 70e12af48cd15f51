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

func TestEnvName(t *testing.T) {
	t.Parallel()
	tests := []struct{ ref, want string }{
		{"openai-api-key", "OPENAI_API_KEY"},
		{"anthropic.key", "ANTHROPIC_KEY"},
		{"GitHub_Token2", "GITHUB_TOKEN2"},
		{"1password", "_1PASSWORD"},
		{"ключ", "____"},
		{"a+b=c", "A_B_C"},
	}
	for _, tt := range tests {
		if got := EnvName(tt.ref); got != tt.want {
			t.Errorf("EnvName(%q) = %q, want %q", tt.ref, got, tt.want)
		}
	}
}

// FuzzEnvName holds that every name is a valid shell variable name.
func FuzzEnvName(f *testing.F) {
	for _, s := range []string{"openai-api-key", "9", "ключ", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		n := EnvName(ref)
		if n == "" || n[0] >= '0' && n[0] <= '9' {
			t.Fatalf("EnvName(%q) = %q: empty or starts with a digit", ref, n)
		}
		for i := 0; i < len(n); i++ {
			c := n[i]
			if !(c == '_' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				t.Fatalf("EnvName(%q) = %q: byte %q is not [A-Z0-9_]", ref, n, c)
			}
		}
	})
}
