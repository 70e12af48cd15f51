// Package reqpath canonicalises HTTP request paths and matches them against
// path globs, so that a route rule judges exactly one spelling of a path and
// the origin receives that same spelling.
//
// # Canonical form (Canonical)
//
// The input is the request's escaped path (url.URL.EscapedPath: no query,
// no fragment). Canonical refuses, with an error wrapping ErrAmbiguous:
//
//   - an empty path or one not starting with '/';
//   - a '.' or '..' segment, also when spelled with escapes ("%2e%2E"), and
//     any segment made of dots only ("...");
//   - an empty segment ("//"), except the single trailing '/' of "/a/";
//   - an encoded slash or backslash ("%2F", "%2f", "%5C", "%5c");
//   - a raw backslash;
//   - a control byte, raw or encoded (0x00–0x1F, 0x7F; so "%00");
//   - a byte >= 0x80 or a space, '"', '<', '>', '^', '`', '{', '|', '}',
//     '?', '#' written raw (EscapedPath always escapes them);
//   - a '%' not followed by two hex digits;
//   - a ';', raw or "%3B" (servlet containers and Spring cut a segment at
//     it: "/hooks;x=1" is "/hooks" to them);
//   - "%25", an encoded '%' (a double-decoding origin reads "%252e" as
//     ".");
//   - "%3F" and "%23", an encoded '?' or '#' (an origin, or a proxy in
//     front of it, that decodes the path and then parses it again, as
//     nginx's proxy_pass with $uri does, ends the path there:
//     "/hooks%3Fx" is "/hooks"; a raw '#' in a request line is sent on
//     as "%23");
//   - escapes of bytes >= 0x80 that are not valid UTF-8 (overlong
//     "%C0%AE", surrogates, truncated sequences), and a non-ASCII rune an
//     origin may read as ASCII (asciiAlias: fullwidth "%EF%BC%8E",
//     ligatures, the Kelvin sign, dotless i).
//
// It decodes a percent-escape of an unreserved character (A–Z a–z 0–9 - . _ ~,
// RFC 3986 §2.3 and §6.2.2.2: "%7E" -> "~", "%61" -> "a"), and keeps every
// other escape with upper-case hex ("%3b" -> "%3B", "%E2%82%AC" stays).
// Every other byte is kept as written. The result is a fixed point:
// Canonical(Canonical(p)) == Canonical(p) (FuzzCanonical holds it).
//
// # Globs (Pattern)
//
// A pattern is a path in canonical form whose segments may be "*" (exactly
// one non-empty segment) or "**" (any number of whole segments, zero
// included). '*' inside a segment ("a*") is refused; write "%2A" for a
// literal '*'. A trailing '/' is significant: "/user" does not match
// "/user/". Matching is byte-exact on canonical segments and never
// allocates.
package reqpath

import (
	"errors"
	"fmt"
	"strings"

	"github.com/botbox/botbox/internal/echo"
)

// ErrAmbiguous is wrapped by every error Canonical returns: the path has
// more than one reading and must be refused (400) before any matching.
var ErrAmbiguous = errors.New("ambiguous request path")

// ErrPattern is wrapped by every error ParsePattern returns.
var ErrPattern = errors.New("invalid path pattern")

const upperHex = "0123456789ABCDEF"

// Canonical returns the canonical form of the escaped request path p, or
// an error wrapping ErrAmbiguous (see the package doc). It returns p itself,
// without allocating, when p is already canonical.
func Canonical(p string) (string, error) {
	if p == "" || p[0] != '/' {
		return "", ambiguous(p, "the path must start with '/'")
	}
	var b []byte // nil while the output equals the input so far
	segStart := 1
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '/':
			if i > 0 {
				if err := checkSegment(p, b, segStart, i); err != nil {
					return "", err
				}
			}
			if b != nil {
				b = append(b, '/')
				segStart = len(b)
			} else {
				segStart = i + 1
			}
			continue
		case c == '%':
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return "", ambiguous(p, "invalid percent-escape")
			}
			v := unhex(p[i+1])<<4 | unhex(p[i+2])
			switch {
			case v == '/' || v == '\\':
				return "", ambiguous(p, "encoded slash or backslash")
			case v < 0x20 || v == 0x7f:
				return "", ambiguous(p, "encoded control byte")
			case v == '%':
				return "", ambiguous(p, "encoded '%' (a double-decoding origin reads another path)")
			case v == ';':
				return "", ambiguous(p, "encoded ';' (a path parameter to some origins)")
			case v == '?' || v == '#':
				return "", ambiguous(p, "encoded '?' or '#' (an origin that decodes before it parses the target ends the path there)")
			case unreserved(v):
				if b == nil {
					b = append(make([]byte, 0, len(p)), p[:i]...)
				}
				b = append(b, v)
				i += 2
			case v >= 0x80:
				end, why := checkEscapedRune(p, i)
				if why != "" {
					return "", ambiguous(p, why)
				}
				for ; i < end; i += 3 {
					b = appendEscape(b, p, i)
				}
				i--
			default:
				b = appendEscape(b, p, i)
				i += 2
			}
			continue
		case c == ';':
			return "", ambiguous(p, "';' path parameter (servlet containers and Spring strip it before routing)")
		case c == '\\':
			return "", ambiguous(p, "backslash")
		case c < 0x20 || c == 0x7f:
			return "", ambiguous(p, "control byte")
		case c >= 0x80 || strings.IndexByte(" \"<>^`{|}?#", c) >= 0:
			return "", ambiguous(p, fmt.Sprintf("unescaped byte 0x%02X", c))
		}
		if b != nil {
			b = append(b, c)
		}
	}
	if err := checkSegment(p, b, segStart, len(p)); err != nil {
		return "", err
	}
	if b == nil {
		return p, nil
	}
	return string(b), nil
}

// checkSegment checks the segment that just ended: in b[from:] when b is
// in use, else p[from:to]. The last segment may be empty (a trailing '/',
// or the root "/").
func checkSegment(p string, b []byte, from, to int) error {
	var seg string
	last := to == len(p)
	if b != nil {
		seg = string(b[from:]) // does not escape: compared only
	} else {
		seg = p[from:to]
	}
	switch {
	case seg == "" && !last:
		return ambiguous(p, "empty path segment ('//')")
	case seg == "." || seg == "..":
		return ambiguous(p, "'.' or '..' segment")
	case seg != "" && strings.Trim(seg, ".") == "":
		return ambiguous(p, "segment of dots only")
	}
	return nil
}

// appendEscape appends the escape at p[i:i+3] with upper-case hex to b,
// starting b as a copy of p[:i] when the escape is not already upper-case
// (b nil means the output equals the input so far).
func appendEscape(b []byte, p string, i int) []byte {
	hi, lo := upper(p[i+1]), upper(p[i+2])
	if b == nil && (p[i+1] != hi || p[i+2] != lo) {
		b = append(make([]byte, 0, len(p)), p[:i]...)
	}
	if b != nil {
		b = append(b, '%', hi, lo)
	}
	return b
}

func upper(c byte) byte {
	if c >= 'a' && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}

func unreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

func ambiguous(p, why string) error {
	return fmt.Errorf("%w %q: %s", ErrAmbiguous, echo.Clip(p), why)
}

// Pattern is a compiled path glob. The zero Pattern matches nothing.
type Pattern struct {
	text string
	segs []string
	// folded is segs in the form deny routes compare (Fold, MatchFolded).
	folded []string
}

// String returns the pattern's canonical text.
func (g Pattern) String() string { return g.text }

// ParsePattern compiles a glob. The pattern must itself be a canonical path
// once its "*" and "**" segments are set aside (same refusals as
// Canonical); it returns the canonical text too ("/a/%7e" -> "/a/~"). A
// '*' inside a segment is refused.
func ParsePattern(s string) (Pattern, error) {
	c, err := Canonical(s)
	if err != nil {
		return Pattern{}, fmt.Errorf("%w: %w", ErrPattern, err)
	}
	segs := strings.Split(c[1:], "/")
	for _, seg := range segs {
		if seg != "*" && seg != "**" && strings.Contains(seg, "*") {
			return Pattern{}, fmt.Errorf("%w %q: '*' and '**' must be whole segments (write %%2A for a literal '*')", ErrPattern, echo.Clip(s))
		}
	}
	return Pattern{text: c, segs: segs, folded: foldPattern(segs)}, nil
}

// Match reports whether the canonical path p (a result of Canonical)
// matches g. It does not allocate. Its cost is O(len(segments of p) ×
// len(segments of g)) at worst (one backtracking point, the last "**").
func (g Pattern) Match(p string) bool { return matchSegs(g.segs, p) }

// matchSegs matches path p against the pattern segments segs (nil: no
// match); Match's contract.
func matchSegs(segs []string, p string) bool {
	if segs == nil || p == "" || p[0] != '/' {
		return false
	}
	n := len(p)
	next := func(s int) int { // start of the segment after the one at s
		if j := strings.IndexByte(p[s:], '/'); j >= 0 {
			return s + j + 1
		}
		return n + 1
	}
	seg := func(s int) string {
		if j := strings.IndexByte(p[s:], '/'); j >= 0 {
			return p[s : s+j]
		}
		return p[s:]
	}
	pi, s := 0, 1
	starP, starS := -1, 0
	for s <= n {
		if pi < len(segs) && segs[pi] == "**" {
			starP, starS = pi, s
			pi++
			continue
		}
		if pi < len(segs) {
			ps, cur := segs[pi], seg(s)
			if ps == cur || ps == "*" && cur != "" {
				pi++
				s = next(s)
				continue
			}
		}
		if starP >= 0 {
			starS = next(starS)
			pi, s = starP+1, starS
			continue
		}
		return false
	}
	for pi < len(segs) && segs[pi] == "**" {
		pi++
	}
	return pi == len(segs)
}

// Covers reports whether every path h matches is also matched by g. It is
// sound but not complete: true is always right (FuzzCanonical holds it),
// false may be a miss. It recognises g == h, and g = P/** where P covers
// the start of h segment by segment ("*" covers a non-empty literal or
// "*"; a literal covers the same literal).
func (g Pattern) Covers(h Pattern) bool {
	if g.segs == nil || h.segs == nil {
		return false
	}
	if g.text == h.text {
		return true
	}
	n := len(g.segs) - 1
	if g.segs[n] != "**" || len(h.segs) < n {
		return false
	}
	for i, gs := range g.segs[:n] {
		hs := h.segs[i]
		switch {
		case hs == "**":
			return false
		case gs == hs:
		case gs == "*" && hs != "":
		default:
			return false
		}
	}
	return true
}
