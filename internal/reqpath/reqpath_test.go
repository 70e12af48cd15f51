package reqpath

import (
	"errors"
	"strings"
	"testing"
)

func TestCanonical(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/", "/"},
		{"/v1/chat/completions", "/v1/chat/completions"},
		{"/a/", "/a/"},
		{"/%7E/%7e", "/~/~"},
		{"/%61%62c", "/abc"},
		{"/a%2D%2e%5F", "/a-._"},
		{"/a%3a", "/a%3A"},
		{"/%e2%82%ac", "/%E2%82%AC"},
		{"/a,b=c/@:!$&'()*+,", "/a,b=c/@:!$&'()*+,"},
		{"/.well-known/x", "/.well-known/x"},
		{"/...a", "/...a"},
		{"/%c3%a9t%C3%A9", "/%C3%A9t%C3%A9"},
		{"/%E2%82%AC/%F0%9F%98%80", "/%E2%82%AC/%F0%9F%98%80"},
		{"/a.b/..c", "/a.b/..c"},
		{"/%20", "/%20"},
	} {
		got, err := Canonical(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Canonical(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestCanonicalRefuses(t *testing.T) {
	for _, tc := range []struct{ in, why string }{
		{"", "start with '/'"},
		{"a/b", "start with '/'"},
		{"*", "start with '/'"},
		{"http://x/a", "start with '/'"},
		{"/a/../b", "'..' segment"},
		{"/..", "'..' segment"},
		{"/a/.", "'..' segment"},
		{"/./a", "'..' segment"},
		{"/a/%2e%2E/b", "'..' segment"},
		{"/a/%2e", "'..' segment"},
		{"/a/.%2E", "'..' segment"},
		{"//a", "empty path segment"},
		{"/a//b", "empty path segment"},
		{"/a//", "empty path segment"},
		{"/a%2Fb", "encoded slash"},
		{"/a%2fb", "encoded slash"},
		{"/a%5Cb", "encoded slash or backslash"},
		{"/a%5cb", "encoded slash or backslash"},
		{`/a\b`, "backslash"},
		{"/a%00", "encoded control"},
		{"/a%0A", "encoded control"},
		{"/a%7f", "encoded control"},
		{"/a\x00", "control byte"},
		{"/a\tb", "control byte"},
		{"/a\x7f", "control byte"},
		{"/a%", "invalid percent-escape"},
		{"/a%4", "invalid percent-escape"},
		{"/a%zz", "invalid percent-escape"},
		{"/a%g1", "invalid percent-escape"},
		{"/a b", "unescaped byte"},
		{"/a?b", "unescaped byte"},
		{"/a#b", "unescaped byte"},
		{"/é", "unescaped byte"},
	} {
		got, err := Canonical(tc.in)
		if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("Canonical(%q) = %q, %v; want ErrAmbiguous (%s)", tc.in, got, err, tc.why)
		}
	}
}

func TestCanonicalDoesNotAllocateWhenCanonical(t *testing.T) {
	p := "/repos/acme/app/pulls/12/comments"
	if n := testing.AllocsPerRun(100, func() { _, _ = Canonical(p) }); n != 0 {
		t.Errorf("Canonical allocates %v times, want 0", n)
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		yes, no []string
	}{
		{"/user", []string{"/user"}, []string{"/user/", "/users", "/", "/user/x"}},
		{"/", []string{"/"}, []string{"/a"}},
		{"/**", []string{"/", "/a", "/a/b/c", "/a/"}, nil},
		{"/*", []string{"/a", "/b"}, []string{"/", "/a/b", "/a/"}},
		{"/repos/acme/**", []string{"/repos/acme", "/repos/acme/", "/repos/acme/app", "/repos/acme/app/pulls/1"},
			[]string{"/repos/acmeX", "/repos/acm", "/repos/other/app", "/repos"}},
		{"/repos/*/app", []string{"/repos/acme/app"}, []string{"/repos/acme/x/app", "/repos//app", "/repos/app"}},
		{"/repos/acme/app/issues/*/comments", []string{"/repos/acme/app/issues/7/comments"},
			[]string{"/repos/acme/app/issues/comments", "/repos/acme/app/issues/7/8/comments", "/repos/acme/app/issues/7/comments/1"}},
		{"/**/comments", []string{"/comments", "/a/comments", "/a/b/comments"}, []string{"/a/comments/x", "/a/commentsx"}},
		{"/a/**/b/**/c", []string{"/a/b/c", "/a/x/b/y/z/c", "/a/b/b/c"}, []string{"/a/b", "/a/c", "/a/x/c/b"}},
		{"/v1/*/**", []string{"/v1/x", "/v1/x/y/z"}, []string{"/v1", "/v1/"}},
		{"/a/~", []string{"/a/~"}, []string{"/a/%7E"}},
	} {
		g, err := ParsePattern(tc.pattern)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", tc.pattern, err)
		}
		for _, p := range tc.yes {
			if !g.Match(p) {
				t.Errorf("%q should match %q", tc.pattern, p)
			}
		}
		for _, p := range tc.no {
			if g.Match(p) {
				t.Errorf("%q should not match %q", tc.pattern, p)
			}
		}
	}
	if (Pattern{}).Match("/") {
		t.Error("zero Pattern matches")
	}
}

func TestParsePattern(t *testing.T) {
	for _, tc := range []struct{ in, want, wantErr string }{
		{in: "/a/%7e/**", want: "/a/~/**"},
		{in: "/a%3a/*", want: "/a%3A/*"},
		{in: "/a%3b/*", wantErr: "';'"},
		{in: "/a;b/*", wantErr: "';'"},
		{in: "/a*", wantErr: "whole segments"},
		{in: "/a/***", wantErr: "whole segments"},
		{in: "/a/b*c/d", wantErr: "whole segments"},
		{in: "a/b", wantErr: "start with '/'"},
		{in: "/a/../b", wantErr: "'..'"},
		{in: "/a//b", wantErr: "empty path segment"},
		{in: "", wantErr: "start with '/'"},
	} {
		g, err := ParsePattern(tc.in)
		if tc.wantErr != "" {
			if !errors.Is(err, ErrPattern) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParsePattern(%q) = %v; want error containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || g.String() != tc.want {
			t.Errorf("ParsePattern(%q) = %q, %v; want %q", tc.in, g, err, tc.want)
		}
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	g, _ := ParsePattern("/repos/*/app/**/comments")
	p := "/repos/acme/app/issues/7/comments"
	if n := testing.AllocsPerRun(100, func() { _ = g.Match(p) }); n != 0 {
		t.Errorf("Match allocates %v times, want 0", n)
	}
}

// naiveMatch is the reference glob matcher: recursion over split segments,
// written straight from the package doc.
func naiveMatch(pat, path []string) bool {
	if len(pat) == 0 {
		return len(path) == 0
	}
	if pat[0] == "**" {
		for k := 0; k <= len(path); k++ {
			if naiveMatch(pat[1:], path[k:]) {
				return true
			}
		}
		return false
	}
	if len(path) == 0 {
		return false
	}
	if pat[0] == "*" && path[0] != "" || pat[0] == path[0] {
		return naiveMatch(pat[1:], path[1:])
	}
	return false
}

// FuzzCanonical: no panic; an accepted path is canonical (a fixed point),
// has none of the refused forms, and Match agrees with naiveMatch.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{"/", "/a/b", "/%7e", "/a%2fb", "/a/../b", "//", "/a%3b", "/%2E%2e", "/x/y/"} {
		f.Add(s, "/a/**/b")
		f.Add(s, "/*/*")
	}
	f.Fuzz(func(t *testing.T, in, pattern string) {
		c, err := Canonical(in)
		if err != nil {
			if !errors.Is(err, ErrAmbiguous) {
				t.Fatalf("Canonical(%q) error %v does not wrap ErrAmbiguous", in, err)
			}
			return
		}
		if again, err := Canonical(c); err != nil || again != c {
			t.Fatalf("Canonical(%q) = %q; Canonical of that = %q, %v", in, c, again, err)
		}
		upper := strings.ToUpper(c)
		for _, bad := range []string{"%2F", "%5C", "%00", "\\", "//"} {
			if strings.Contains(upper, bad) {
				t.Fatalf("Canonical(%q) = %q contains %q", in, c, bad)
			}
		}
		segs := strings.Split(c[1:], "/")
		for _, s := range segs {
			if s == "." || s == ".." {
				t.Fatalf("Canonical(%q) = %q has a dot segment", in, c)
			}
		}
		g, err := ParsePattern(pattern)
		if err != nil || len(g.segs) > 12 {
			return
		}
		if got, want := g.Match(c), naiveMatch(g.segs, segs); got != want {
			t.Fatalf("%q.Match(%q) = %v, naive %v", g, c, got, want)
		}
		// Covers is sound: the path as a pattern (when it is one) and a
		// broader pattern built from it.
		for _, cover := range []string{"/**", "/*/**", pattern} {
			cg, err := ParsePattern(cover)
			if err != nil {
				continue
			}
			if cg.Covers(g) && g.Match(c) && !cg.Match(c) {
				t.Fatalf("%q.Covers(%q), but %q matches only the latter", cg, g, c)
			}
			if pg, err := ParsePattern(c); err == nil && g.Covers(pg) && pg.Match(c) && !g.Match(c) {
				t.Fatalf("%q.Covers(%q), but %q matches only the latter", g, pg, c)
			}
		}
	})
}

func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		g, h string
		want bool
	}{
		{"/a", "/a", true},
		{"/**", "/a/b", true},
		{"/**", "/", true},
		{"/a/**", "/a", true},
		{"/a/**", "/a/b/**", true},
		{"/a/*/**", "/a/b/c", true},
		{"/a/*/**", "/a/*/c", true},
		{"/*/**", "/a/", true},
		{"/*/**", "/", false},
		{"/a/**", "/b", false},
		{"/a/*/**", "/a", false},
		{"/a/*/**", "/a/**", false},
		{"/a/b", "/a/*", false},
		{"/a/*", "/a/b", false}, // true in fact; Covers is not complete
	} {
		g, err1 := ParsePattern(tc.g)
		h, err2 := ParsePattern(tc.h)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if got := g.Covers(h); got != tc.want {
			t.Errorf("%q.Covers(%q) = %v, want %v", tc.g, tc.h, got, tc.want)
		}
	}
}
