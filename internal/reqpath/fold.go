package reqpath

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Folded is a canonical path in the form deny routes judge: the most
// permissive reading an origin may make of it, so that a deny holds
// whichever of those readings the origin applies (reference: the attack
// playbook, class 4). Fold builds it; Pattern.MatchFolded matches it.
//
// Folding, segment by segment, makes equal what some origin treats as
// equal:
//
//   - every percent-escape is decoded ("%3A" and ":" are one character to
//     every origin that decodes before routing); a '*' is kept as "%2A" so
//     that it never reads as a glob;
//   - letters are case-folded, Unicode simple folding included ("App" and
//     "app": GitHub, Windows and most case-insensitive routers);
//   - non-ASCII text is normalised (NFKC), so that a decomposed
//     "cafe%CC%81" and a composed "caf%C3%A9" are one segment, as to an
//     origin that normalises (macOS file names, Java's Normalizer);
//   - trailing dots and spaces are removed ("hooks." is "hooks" to IIS);
//   - a trailing '/' is removed ("/hooks/" is "/hooks" to Express, Rails and
//     Spring before 6);
//   - MatchFolded also tries the path without each extension of its last
//     segment ("/hooks.json" is "/hooks" to Rails' format suffix and
//     Spring's suffix matching; "/a.b.c" is tried as "/a.b" and "/a").
//
// Canonical already refuses what cannot be folded safely: ';', "%3B",
// "%25", invalid UTF-8 and non-ASCII runes that read as ASCII.
type Folded struct {
	// Path is the folded path.
	Path string
}

// Fold folds the canonical path p (a result of Canonical). It returns p
// itself, without allocating, when p is already folded (the common case:
// lower-case, no escapes).
func Fold(p string) Folded {
	if p == "" || p[0] != '/' {
		return Folded{}
	}
	if folded(p) {
		return Folded{Path: p}
	}
	segs := strings.Split(p[1:], "/")
	if len(segs) > 1 && segs[len(segs)-1] == "" {
		segs = segs[:len(segs)-1]
	}
	for i, s := range segs {
		segs[i] = foldSegment(s)
	}
	return Folded{Path: "/" + strings.Join(segs, "/")}
}

// folded reports whether the canonical path p is its own folded form: no
// upper-case letter, escape or '*', no segment ending in '.', and no
// trailing '/' (but for the root). TestFoldFastPath holds it equal to the
// slow path.
func folded(p string) bool {
	if len(p) > 1 && p[len(p)-1] == '/' {
		return false
	}
	for i := 1; i < len(p); i++ {
		switch c := p[i]; {
		case c >= 'A' && c <= 'Z', c == '%', c == '*':
			return false
		case c == '/' && p[i-1] == '.':
			return false
		}
	}
	return p[len(p)-1] != '.'
}

// foldSegment decodes and folds one canonical segment (Folded's rules).
func foldSegment(s string) string {
	dec := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			dec = append(dec, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
			continue
		}
		dec = append(dec, s[i])
	}
	nonASCII := slices.ContainsFunc(dec, func(b byte) bool { return b >= utf8.RuneSelf })
	if nonASCII {
		dec = norm.NFKC.Bytes(dec)
	}
	out := make([]byte, 0, len(dec))
	for len(dec) > 0 {
		r, n := utf8.DecodeRune(dec)
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, dec[0])
		case r == '*':
			out = append(out, "%2A"...)
		default:
			out = utf8.AppendRune(out, foldRune(r))
		}
		dec = dec[n:]
	}
	if nonASCII {
		// Case folding may leave a sequence NFKC would compose.
		out = norm.NFKC.Bytes(out)
	}
	return strings.TrimRight(string(out), ". ")
}

// foldRune maps r to one representative of the runes a case-insensitive
// comparison treats as r: the lower case of the smallest rune of the
// simple case folding orbit of lower(upper(r)) ("Σ", "σ", "ς" -> "σ").
func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if r >= 'A' && r <= 'Z' {
			r += 'a' - 'A'
		}
		return r
	}
	r = unicode.ToLower(unicode.ToUpper(r))
	least := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		least = min(least, f)
	}
	return unicode.ToLower(least)
}

// foldPattern returns the segments of a pattern's folded form: "*" and
// "**" kept as globs, every other segment folded like a request segment,
// a trailing empty segment (a trailing '/') removed.
func foldPattern(segs []string) []string {
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		switch {
		case s == "*" || s == "**":
			out = append(out, s)
		case s == "" && i == len(segs)-1 && i > 0:
		default:
			out = append(out, foldSegment(s))
		}
	}
	return out
}

// MatchFolded reports whether g, folded like the path, matches the folded
// path f, or f without one or more extensions of its last segment
// ("/a/x.tar.gz" is also tried as "/a/x.tar" and "/a/x"; "/a/.json" as
// "/a"): a deny route's question (package policy). It does not allocate:
// each candidate is a prefix of f.Path.
func (g Pattern) MatchFolded(f Folded) bool {
	if g.folded == nil || f.Path == "" {
		return false
	}
	p := f.Path
	if matchSegs(g.folded, p) {
		return true
	}
	lastSeg := strings.LastIndexByte(p, '/')
	for dot := len(p); ; {
		dot = strings.LastIndexByte(p[:dot], '.')
		if dot <= lastSeg {
			return false
		}
		c := strings.TrimRight(p[:dot], ". ")
		if len(c) > 1 {
			c = strings.TrimSuffix(c, "/")
		}
		if matchSegs(g.folded, c) {
			return true
		}
	}
}
