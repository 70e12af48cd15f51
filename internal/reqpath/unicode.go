package reqpath

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// checkEscapedRune checks the UTF-8 sequence written as percent-escapes
// from p[i] (an escape of a byte >= 0x80) and returns the index after its
// last escape, or why it is refused: an invalid or overlong sequence
// ("%C0%AE", a lone continuation byte, a surrogate: whatever
// utf8.DecodeRune refuses), and a rune that an origin may read as ASCII
// (asciiAlias).
func checkEscapedRune(p string, i int) (end int, why string) {
	var buf [utf8.UTFMax]byte
	n := 0
	for j := i; n < len(buf) && j+2 < len(p) && p[j] == '%' && isHex(p[j+1]) && isHex(p[j+2]); j += 3 {
		v := unhex(p[j+1])<<4 | unhex(p[j+2])
		if v < 0x80 || n > 0 && v >= 0xC0 {
			break // ASCII, or the lead byte of the next sequence
		}
		buf[n] = v
		n++
		if utf8.FullRune(buf[:n]) {
			break
		}
	}
	r, size := utf8.DecodeRune(buf[:n])
	if r == utf8.RuneError || size != n {
		return 0, "percent-escapes that are not valid UTF-8 (overlong forms such as %C0%AE included)"
	}
	if asciiAlias(r) {
		return 0, "a non-ASCII character that normalisation or case mapping turns into ASCII (fullwidth forms, ligatures, the Kelvin sign)"
	}
	return i + 3*n, ""
}

// asciiAlias reports whether an origin may read the non-ASCII rune r as
// (or as containing) an ASCII character: its NFKC form (compatibility
// normalisation, applied by Java, .NET and IIS) holds an ASCII byte ("．" U+FF0E -> ".", "ｆ" -> "f", "ﬁ" -> "fi", "K" U+212A -> "K",
// "ſ" U+017F -> "s", "İ" -> "I" + combining dot), or its upper, lower or
// title case is ASCII ("ı" U+0131 -> "I"). Such a rune could turn a path
// into another one at the origin, so Canonical refuses it.
func asciiAlias(r rune) bool {
	if r < utf8.RuneSelf {
		return true
	}
	for _, m := range [...]rune{unicode.ToUpper(r), unicode.ToLower(r), unicode.ToTitle(r)} {
		if m < utf8.RuneSelf {
			return true
		}
	}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f < utf8.RuneSelf {
			return true
		}
	}
	var in [utf8.UTFMax]byte
	var out [4 * utf8.UTFMax]byte
	n := utf8.EncodeRune(in[:], r)
	for _, c := range norm.NFKC.Append(out[:0], in[:n]...) {
		if c < utf8.RuneSelf {
			return true
		}
	}
	return false
}
