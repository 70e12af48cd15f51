package placeholder

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// fake builds the random part of a real-world token format from a seeded
// generator, so that no token-shaped literal is committed: each byte of
// pattern is kept except 'A' (an upper-case letter), 'a' (lower), '9'
// (digit), 'x' (letter or digit) and 'b' (base64url: letter, digit, '-' or
// '_').
func fake(seed uint64, pattern string) string {
	r := rand.New(rand.NewPCG(seed, 7))
	const (
		up    = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		low   = "abcdefghijklmnopqrstuvwxyz"
		dig   = "0123456789"
		alnum = up + low + dig
		b64   = alnum + "-_"
	)
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		set := ""
		switch pattern[i] {
		case 'A':
			set = up
		case 'a':
			set = low
		case '9':
			set = dig
		case 'x':
			set = alnum
		case 'b':
			set = b64
		default:
			b.WriteByte(pattern[i])
			continue
		}
		b.WriteByte(set[r.IntN(len(set))])
	}
	return b.String()
}

func rep(s string, n int) string { return strings.Repeat(s, n) }

// formats are real-world credential formats (shape only).
var formats = []struct {
	name, value, prefix string
}{
	{"openai project key", "sk-proj-" + fake(1, rep("b", 156)), "sk-proj-"},
	{"openai legacy key", "sk-" + fake(2, rep("x", 48)), "sk-"},
	// The prefix window is 12 characters: "sk-ant-api03-" is 13 long, so
	// "api03" is drawn anew (letters and digits in place) and the '-' kept.
	{"anthropic key", "sk-ant-api03-" + fake(3, rep("b", 93)) + "AA", "sk-ant-"},
	{"github classic token", "ghp_" + fake(4, rep("x", 36)), "ghp_"},
	{"github fine-grained token", "github_pat_" + fake(5, rep("x", 22)+"_"+rep("x", 59)), "github_pat_"},
	{"slack bot token", "xoxb-" + fake(6, rep("9", 12)+"-"+rep("9", 13)+"-"+rep("x", 24)), "xoxb-"},
	{"aws access key id", "AKIA" + fake(7, rep("A", 10)+rep("9", 6)), ""},
	{"jwt", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + fake(8, rep("x", 60)) + "." + fake(9, rep("b", 43)), ""},
}

var testKey = bytes.Repeat([]byte{0x42}, keyLen)

func class(b byte) byte {
	switch {
	case b >= 'A' && b <= 'Z':
		return 'A'
	case b >= 'a' && b <= 'z':
		return 'a'
	case b >= '0' && b <= '9':
		return '9'
	}
	return b
}

// checkShape fails unless p has v's shape: length, prefix, the class of
// every other position and every non-alphanumeric byte.
func checkShape(t *testing.T, v, p, prefix string) {
	t.Helper()
	if len(p) != len(v) {
		t.Fatalf("len = %d, want %d", len(p), len(v))
	}
	if !strings.HasPrefix(p, prefix) {
		t.Errorf("placeholder does not keep the prefix %q", prefix)
	}
	for i := len(prefix); i < len(v); i++ {
		if class(p[i]) != class(v[i]) {
			t.Fatalf("position %d: class %q, want %q", i, class(p[i]), class(v[i]))
		}
	}
	if p == v {
		t.Fatal("placeholder equals the value")
	}
}

func TestDeriveKeepsShape(t *testing.T) {
	t.Parallel()
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			p, err := Derive(testKey, "ref", []byte(f.value))
			if err != nil {
				t.Fatal(err)
			}
			checkShape(t, f.value, p, f.prefix)
			// Random characters really change: at most a few positions
			// after the prefix may coincide with the value by chance.
			same := 0
			for i := len(f.prefix); i < len(f.value); i++ {
				if class(f.value[i]) != f.value[i] && p[i] == f.value[i] {
					same++
				}
			}
			if same > (len(f.value)-len(f.prefix))/4 {
				t.Errorf("%d random positions equal the value's", same)
			}
			if f.name == "jwt" && strings.Count(p, ".") != 2 {
				t.Errorf("jwt placeholder has %d dots, want 2", strings.Count(p, "."))
			}
		})
	}
}

func TestDeriveStableAndIndependentOfValue(t *testing.T) {
	t.Parallel()
	v1 := "sk-proj-" + fake(10, rep("x", 48))
	p1, err := Derive(testKey, "openai-api-key", []byte(v1))
	if err != nil {
		t.Fatal(err)
	}
	// Same inputs: same placeholder (a restart).
	if p, _ := Derive(testKey, "openai-api-key", []byte(v1)); p != p1 {
		t.Error("same key, ref and value give another placeholder")
	}
	// A rotation to a value of the same shape: same placeholder. The value
	// bytes do not enter the derivation.
	v2 := []byte(v1)
	for i := 8; i < len(v2); i++ {
		switch c := class(v2[i]); c {
		case 'A':
			v2[i] = 'A' + (v2[i]-'A'+1)%26
		case 'a':
			v2[i] = 'a' + (v2[i]-'a'+1)%26
		case '9':
			v2[i] = '0' + (v2[i]-'0'+1)%10
		}
	}
	if p, _ := Derive(testKey, "openai-api-key", v2); p != p1 {
		t.Error("a value of the same shape gives another placeholder")
	}
	// Another shape, ref or key: another placeholder.
	if p, _ := Derive(testKey, "openai-api-key", []byte(v1+"x")); p[8:24] == p1[8:24] {
		t.Error("a longer value gives the same random characters")
	}
	if p, _ := Derive(testKey, "other-key", []byte(v1)); p == p1 {
		t.Error("another ref gives the same placeholder")
	}
	if p, _ := Derive(bytes.Repeat([]byte{1}, keyLen), "openai-api-key", []byte(v1)); p == p1 {
		t.Error("another key gives the same placeholder")
	}
}

func TestDeriveRefusesWeakShapes(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"", "short", "sk-proj-abc", "----------------------------", "1234567890123", "sk-" + rep("9", 14)} {
		if _, err := Derive(testKey, "ref", []byte(v)); !errors.Is(err, ErrWeakShape) {
			t.Errorf("Derive(%q) error = %v, want ErrWeakShape", v, err)
		}
	}
	// 11 letters: 51.7 bits, enough.
	if _, err := Derive(testKey, "ref", []byte("abcdefghijk")); err != nil {
		t.Errorf("11 letters: %v", err)
	}
}

// FuzzDerive holds the shape contract for any value.
func FuzzDerive(f *testing.F) {
	for _, fm := range formats {
		f.Add(fm.value, "ref")
	}
	f.Add("a-b_c-"+rep("z", 20), "k")
	f.Fuzz(func(t *testing.T, v, ref string) {
		p, err := Derive(testKey, ref, []byte(v))
		if errors.Is(err, ErrWeakShape) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		checkShape(t, v, p, v[:prefixLen([]byte(v))])
	})
}
