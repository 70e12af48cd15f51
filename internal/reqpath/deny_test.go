package reqpath

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// TestCanonicalRefusesOriginReadings: the spellings of redteam-2026-12-01
// §4 and of playbook class 4 that an origin reads as another path are
// refused, not forwarded (each was accepted at ee87e5f).
func TestCanonicalRefusesOriginReadings(t *testing.T) {
	for _, tc := range []struct{ in, why string }{
		{"/repos/acme/app/hooks;x=1", "';'"},
		{"/repos/acme/app/settings;/x", "';'"},
		{"/a;", "';'"},
		{"/;/a", "';'"},
		{"/a%3bx", "encoded ';'"},
		{"/a%3Bx", "encoded ';'"},
		{"/repos/acme/app/hooks%3Fx=1", "encoded '?' or '#'"},
		{"/repos/acme/app%3f/hooks", "encoded '?' or '#'"},
		{"/repos/acme/app/hooks%23frag", "encoded '?' or '#'"},
		{"/a%23", "encoded '?' or '#'"},
		{"/a/%252e%252e/b", "encoded '%'"},
		{"/a/%25", "encoded '%'"},
		{"/a/%252F", "encoded '%'"},
		{"/a/%C0%AE%C0%AE/b", "not valid UTF-8"},
		{"/a/%c0%ae", "not valid UTF-8"},
		{"/a/%C0%AF", "not valid UTF-8"},
		{"/a/%E0%80%AE", "not valid UTF-8"},
		{"/a/%F0%80%80%AE", "not valid UTF-8"},
		{"/a/%C1%9C", "not valid UTF-8"},
		{"/a/%80", "not valid UTF-8"},
		{"/a/%C3", "not valid UTF-8"},
		{"/a/%C3x", "not valid UTF-8"},
		{"/a/%C3%C3%A9", "not valid UTF-8"},
		{"/a/%ED%A0%80", "not valid UTF-8"},
		{"/a/%F8%88%80%80%80", "not valid UTF-8"},
		{"/a/%FF", "not valid UTF-8"},
		{"/a/%EF%BC%8E%EF%BC%8E/b", "turns into ASCII"},
		{"/a/%EF%BC%8F", "turns into ASCII"},
		{"/a/%EF%BC%BC", "turns into ASCII"},
		{"/repos/acme/app/%EF%BD%88ooks", "turns into ASCII"},
		{"/repos/acme/app/hoo%E2%84%AAs", "turns into ASCII"},
		{"/a/ho%C5%BFt", "turns into ASCII"},
		{"/a/%C4%B1", "turns into ASCII"},
		{"/a/%C4%B0", "turns into ASCII"},
		{"/a/%EF%AC%81le", "turns into ASCII"},
		{"/a/%C2%B9", "turns into ASCII"},
		{"/a/%E2%80%A4", "turns into ASCII"},
		{"/a/%C2%A0", "turns into ASCII"},
		{"/...", "dots only"},
		{"/a/..../b", "dots only"},
		{"/a/%2e%2e%2e", "dots only"},
	} {
		got, err := Canonical(tc.in)
		if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("Canonical(%q) = %q, %v; want ErrAmbiguous (%s)", tc.in, got, err, tc.why)
		}
	}
}

func TestFold(t *testing.T) {
	for _, tc := range []struct{ in, path string }{
		{"/", "/"},
		{"/Repos/ACME/App/Hooks", "/repos/acme/app/hooks"},
		{"/repos/acme/app/hooks/", "/repos/acme/app/hooks"},
		{"/a/b%3Ac", "/a/b:c"},
		{"/a/%40x", "/a/@x"},
		{"/a/%2A", "/a/%2A"},
		{"/a/*", "/a/%2A"},
		{"/a/hooks.", "/a/hooks"},
		{"/a./b%20", "/a/b"},
		{"/a/hooks.json", "/a/hooks.json"},
		{"/a/HOOKS.JSON/", "/a/hooks.json"},
		{"/a/.well-known", "/a/.well-known"},
		{"/.json", "/.json"},
		{"/%C3%89t%C3%A9", "/été"},
		{"/%CE%A3", "/σ"},
	} {
		c, err := Canonical(tc.in)
		if err != nil {
			t.Fatalf("Canonical(%q): %v", tc.in, err)
		}
		if f := Fold(c); f.Path != tc.path {
			t.Errorf("Fold(%q) = %+v; want %q", c, f, tc.path)
		}
	}
	if f := Fold(""); f != (Folded{}) {
		t.Errorf("Fold(\"\") = %+v", f)
	}
}

// TestMatchFolded: a deny pattern matches every spelling an origin may
// read as the denied path (redteam-2026-12-01 §4: case, trailing forms,
// escapes of reserved characters, format suffixes), and still not other
// paths.
func TestMatchFolded(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		yes, no []string
	}{
		{"/repos/acme/app/hooks/**",
			[]string{"/repos/acme/app/hooks", "/repos/acme/App/hooks", "/repos/acme/app/HOOKS", "/REPOS/ACME/APP/HOOKS/1",
				"/repos/acme/app/hooks/", "/repos/acme/app/hooks.", "/repos/acme/app/hooks.json", "/repos/acme./app/hooks",
				"/repos/%61cme/app/hooks", "/repos/acme/app/hooks%20", "/repos/acme/app/Hooks.JSON"},
			[]string{"/repos/acme/app/hookz", "/repos/acme/app", "/repos/acme/other/hooks", "/repos/acme/app/hooksx"}},
		{"/a/b:c", []string{"/a/b%3Ac", "/a/B%3aC"}, []string{"/a/b", "/a/b:c/d"}},
		{"/a/%2A", []string{"/a/*", "/a/%2a"}, []string{"/a/x"}},
		{"/a/*", []string{"/a/x", "/a/X/"}, []string{"/a", "/a/x/y"}},
		{"/a/", []string{"/a", "/a/"}, []string{"/a/b"}},
		{"/", []string{"/"}, []string{"/a"}},
		{"/%C3%A9t%C3%A9", []string{"/%C3%89T%C3%89", "/%C3%A9t%C3%A9/"}, []string{"/ete"}},
		// Unicode normalisation: decomposed (NFD) and composed (NFC)
		// spellings are one path to an origin that normalises.
		{"/files/caf%C3%A9/**", []string{"/files/cafe%CC%81", "/files/CAFE%CC%81/x", "/files/caf%C3%89"}, []string{"/files/cafe", "/files/caf%C3%A8"}},
		{"/files/cafe%CC%81", []string{"/files/caf%C3%A9", "/files/CAF%C3%89"}, []string{"/files/cafe"}},
	} {
		g, err := ParsePattern(tc.pattern)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", tc.pattern, err)
		}
		for _, p := range tc.yes {
			c, err := Canonical(p)
			if err != nil {
				t.Fatalf("Canonical(%q): %v", p, err)
			}
			if !g.MatchFolded(Fold(c)) {
				t.Errorf("deny %q should match %q", tc.pattern, p)
			}
		}
		for _, p := range tc.no {
			c, err := Canonical(p)
			if err != nil {
				t.Fatalf("Canonical(%q): %v", p, err)
			}
			if g.MatchFolded(Fold(c)) {
				t.Errorf("deny %q should not match %q", tc.pattern, p)
			}
		}
	}
	if (Pattern{}).MatchFolded(Fold("/")) {
		t.Error("zero Pattern matches")
	}
}

// TestFoldFastPath: the no-allocation path of Fold gives what the slow
// path gives.
func TestFoldFastPath(t *testing.T) {
	for _, p := range []string{"/", "/a", "/repos/acme/app/hooks", "/a.b/c", "/a./b", "/a/b.", "/a/", "/A", "/%41", "/*", "/a-b_c~d", "/a:b@c"} {
		segs := strings.Split(p[1:], "/")
		if len(segs) > 1 && segs[len(segs)-1] == "" {
			segs = segs[:len(segs)-1]
		}
		for i, s := range segs {
			segs[i] = foldSegment(s)
		}
		if slow, fast := "/"+strings.Join(segs, "/"), Fold(p).Path; slow != fast {
			t.Errorf("Fold(%q) = %q, slow path %q", p, fast, slow)
		}
	}
	p := "/repos/acme/app/issues/7/comments"
	if n := testing.AllocsPerRun(100, func() { _ = Fold(p) }); n != 0 {
		t.Errorf("Fold of a folded path allocates %v times", n)
	}
}

func TestOverride(t *testing.T) {
	h := func(kv ...string) map[string][]string {
		m := map[string][]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = []string{kv[i+1]}
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		header map[string][]string
		query  string
		want   string
	}{
		{"none", h("Accept", "*/*", "X-Request-Id", "1"), "a=1&method=x&x_method=1", ""},
		{"canonical header", h("X-Http-Method-Override", "DELETE"), "", "x-http-method-override"},
		{"lower header", h("x-http-method-override", "DELETE"), "", "x-http-method-override"},
		{"upper header", h("X-HTTP-METHOD-OVERRIDE", "DELETE"), "", "x-http-method-override"},
		{"underscores", h("X_HTTP_METHOD_OVERRIDE", "DELETE"), "", "x-http-method-override"},
		{"x-http-method", h("X-Http-Method", "PUT"), "", "x-http-method"},
		{"x-method-override", h("X-Method-Override", "PATCH"), "", "x-method-override"},
		{"x-original-method", h("X-Original-Method", "DELETE"), "", "x-original-method"},
		{"x-original-url", h("X-Original-Url", "/repos/acme/app/hooks"), "", "x-original-url"},
		{"x-rewrite-url", h("X-Rewrite-Url", "/x"), "", "x-rewrite-url"},
		{"empty value", h("X-Http-Method-Override", ""), "", "x-http-method-override"},
		{"query", nil, "_method=DELETE", "_method"},
		{"query later", nil, "a=1&_method=DELETE", "_method"},
		{"query semicolon", nil, "a=1;_method=DELETE", "_method"},
		{"query upper", nil, "_METHOD=DELETE", "_method"},
		{"query escaped", nil, "%5Fmethod=DELETE", "_method"},
		{"query escaped letters", nil, "_%6Dethod=DELETE", "_method"},
		{"query no value", nil, "_method", "_method"},
		{"query php dot", nil, ".method=DELETE", "_method"},
		{"query php leading space", nil, "+_method=DELETE", "_method"},
		{"query php bracket", nil, "[method=DELETE", "_method"},
		{"query bad escape", nil, "%zz&_method=x", "_method"},
		{"query value only", nil, "a=_method", ""},
	} {
		if got := Override(tc.header, tc.query); got != tc.want {
			t.Errorf("%s: Override(%v, %q) = %q, want %q", tc.name, tc.header, tc.query, got, tc.want)
		}
	}
}

// TestOverridesTo: every override value, header or parameter, in each
// spelling Override finds, is offered to match; other headers and
// parameters are not.
func TestOverridesTo(t *testing.T) {
	isTrace := func(v string) bool { return strings.EqualFold(v, "TRACE") }
	for _, tc := range []struct {
		name   string
		header map[string][]string
		query  string
		want   bool
	}{
		{"header", map[string][]string{"X-Http-Method-Override": {"TRACE"}}, "", true},
		{"second value", map[string][]string{"X-Method-Override": {"GET", "trace"}}, "", true},
		{"underscore header", map[string][]string{"X_HTTP_METHOD": {"Trace"}}, "", true},
		{"query", nil, "_method=TRACE", true},
		{"query escaped", nil, "a=1;%5Fmethod=%54RACE", true},
		{"query php dot", nil, ".method=trace", true},
		{"other value", map[string][]string{"X-Http-Method-Override": {"DELETE"}}, "_method=PUT", false},
		{"not an override", map[string][]string{"X-Method": {"TRACE"}}, "method=TRACE", false},
	} {
		if got := OverridesTo(tc.header, tc.query, isTrace); got != tc.want {
			t.Errorf("%s: OverridesTo(%v, %q) = %v, want %v", tc.name, tc.header, tc.query, got, tc.want)
		}
	}
}

// FuzzDenyHoldsUnderFolding: if a canonical path is denied (a deny
// pattern MatchFolded it), every spelling an origin may read as it — case
// variants, a ';'-suffixed segment, a trailing '/', '.' or extension, an
// escaped letter or reserved character — is refused by Canonical or
// denied too.
func FuzzDenyHoldsUnderFolding(f *testing.F) {
	f.Add("/files/caf%C3%A9", "/files/caf%C3%A9", uint8(8), uint16(0))
	f.Add("/files/cafe%CC%81", "/files/caf%C3%A9/**", uint8(9), uint16(0))
	for _, s := range []string{"/repos/acme/app/hooks", "/a/b:c", "/A/%C3%A9", "/x/y/"} {
		for v := range uint8(10) {
			f.Add(s, "/repos/acme/app/hooks/**", v, uint16(3))
			f.Add(s, "/*/**", v, uint16(1))
		}
	}
	f.Fuzz(func(t *testing.T, in, pattern string, variant uint8, at uint16) {
		c, err := Canonical(in)
		if err != nil {
			return
		}
		g, err := ParsePattern(pattern)
		if err != nil || len(g.segs) > 12 || !g.MatchFolded(Fold(c)) {
			return
		}
		v := spell(c, variant, int(at))
		vc, err := Canonical(v)
		if err != nil {
			if !errors.Is(err, ErrAmbiguous) {
				t.Fatalf("Canonical(%q): %v", v, err)
			}
			return
		}
		if !g.MatchFolded(Fold(vc)) {
			t.Fatalf("deny %q matches %q but not its spelling %q (canonical %q)", g, c, v, vc)
		}
	})
}

// spell returns another spelling of the canonical path c that an origin
// may read as c (variant selects which, at where in c).
func spell(c string, variant uint8, at int) string {
	at %= len(c) + 1
	switch variant % 10 {
	case 0:
		return strings.ToUpper(c)
	case 1:
		return strings.ToLower(c)
	case 2: // a path parameter at the end of a segment
		i := strings.IndexByte(c[at:], '/')
		if i < 0 {
			return c + ";x=1"
		}
		return c[:at+i] + ";x=1" + c[at+i:]
	case 3:
		return c + "/"
	case 4:
		return c + "."
	case 5:
		return c + ".json"
	case 6: // escape the letter at `at`
		for i := at; i < len(c); i++ {
			if ch := c[i]; ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || strings.IndexByte(":@!$&'()+,=", ch) >= 0 {
				return c[:i] + "%" + strings.ToLower(string(upperHex[ch>>4])+string(upperHex[ch&15])) + c[i+1:]
			}
		}
		return c
	case 8: // the non-ASCII characters decomposed (NFD)
		return escapeHigh(norm.NFD.String(unescapeHigh(c)))
	case 9: // the non-ASCII characters composed (NFC)
		return escapeHigh(norm.NFC.String(unescapeHigh(c)))
	default: // swap the case of one letter
		for i := at; i < len(c); i++ {
			if ch := c[i]; ch >= 'a' && ch <= 'z' {
				return c[:i] + string(ch-'a'+'A') + c[i+1:]
			}
		}
		return c
	}
}

// unescapeHigh decodes the escapes of bytes >= 0x80 in the canonical path
// c (the only way a canonical path holds them).
func unescapeHigh(c string) string {
	var b strings.Builder
	for i := 0; i < len(c); i++ {
		if c[i] == '%' && i+2 < len(c) && isHex(c[i+1]) && isHex(c[i+2]) {
			if v := unhex(c[i+1])<<4 | unhex(c[i+2]); v >= 0x80 {
				b.WriteByte(v)
				i += 2
				continue
			}
		}
		b.WriteByte(c[i])
	}
	return b.String()
}

// escapeHigh percent-encodes every byte >= 0x80 of s.
func escapeHigh(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x80 {
			b.WriteString("%" + string(upperHex[c>>4]) + string(upperHex[c&15]))
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// FuzzOverride: no panic; every override header, in any case and with '_'
// for '-', and a "_method" parameter added anywhere in any query, is
// found; a request with neither and only other headers is not refused.
func FuzzOverride(f *testing.F) {
	f.Add(uint8(0), uint64(0), "a=1&b=2", uint8(3), "X-Request-Id")
	f.Add(uint8(5), uint64(0xffff), "", uint8(0), "Accept")
	f.Add(uint8(2), uint64(0x5555), "%zz;x", uint8(1), "X-Http-Method-Overrid")
	f.Fuzz(func(t *testing.T, which uint8, caseBits uint64, query string, at uint8, other string) {
		if got := Override(map[string][]string{other: {"x"}}, ""); got != "" && !slices.ContainsFunc(overrideHeaders[:], func(o string) bool { return headerNameIs(other, o) }) {
			t.Fatalf("Override(%q header) = %q", other, got)
		}
		name := []byte(overrideHeaders[int(which)%len(overrideHeaders)])
		for i := range name {
			switch {
			case caseBits>>(i%64)&1 == 1 && name[i] >= 'a' && name[i] <= 'z':
				name[i] -= 'a' - 'A'
			case name[i] == '-' && caseBits>>((i+7)%64)&1 == 1:
				name[i] = '_'
			}
		}
		if got := Override(map[string][]string{"Accept": {"*/*"}, string(name): {"DELETE"}}, query); got == "" {
			t.Fatalf("header %q not found", name)
		}
		// Insert "_method=x" at a parameter boundary of query.
		cut := int(at) % (len(query) + 1)
		for cut > 0 && query[cut-1] != '&' && query[cut-1] != ';' {
			cut--
		}
		q := query[:cut] + "_method=DELETE&" + query[cut:]
		if got := Override(nil, q); got != overrideParam {
			t.Fatalf("Override(query %q) = %q", q, got)
		}
	})
}
