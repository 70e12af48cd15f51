package mitm

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidSNI is wrapped by every error of [ValidateSNI].
var ErrInvalidSNI = errors.New("invalid SNI")

// maxQuoted bounds how much of an attacker-supplied name an error echoes.
const maxQuoted = 64

// ValidateSNI checks a TLS server_name and returns its canonical form: the
// name trimmed of surrounding whitespace, ASCII-lowercased, with one trailing
// dot removed. It keeps the rules of reference §4.3 step 2 (reject empty,
// longer than 253 characters, '*', any character other than [A-Za-z0-9.-];
// punycode "xn--" labels are fine since they are plain LDH) and adds what the
// reference lacks:
//
//   - empty labels ("a..b", ".a"), labels longer than 63 octets and labels that
//     start or end with '-' are refused (RFC 1035/1123 host names);
//   - IP literals are refused: RFC 6066 §3 forbids them in SNI, and a leaf
//     for "1.2.3.4" would carry a DNS SAN that is not an IP SAN. The test is
//     the WHATWG URL "ends in a number" rule — the last label all digits or
//     "0x" + hex — so inet_aton spellings such as "127.1" or "0x7f000001"
//     are refused too (no real TLD is numeric);
//   - non-ASCII is refused before lowercasing, so that Unicode case folding
//     (the Kelvin sign folds to "k") cannot smuggle a different name in.
//
// The result contains only [a-z0-9.-], is at most 253 bytes long and is a
// fixed point: ValidateSNI(result) returns result.
func ValidateSNI(sni string) (string, error) {
	s := strings.TrimSpace(sni)
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", sniError(sni, "empty name")
	}
	if len(s) > 253 {
		return "", sniError(sni, fmt.Sprintf("name is %d bytes, longer than 253", len(s)))
	}
	upper := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '.':
		case 'A' <= c && c <= 'Z':
			upper = true
		case c == '*':
			return "", sniError(sni, "wildcard '*' not allowed")
		case c >= 0x80:
			return "", sniError(sni, fmt.Sprintf("non-ASCII byte %#x", c))
		default:
			return "", sniError(sni, fmt.Sprintf("invalid character %q", rune(c)))
		}
	}
	if upper {
		s = asciiLower(s)
	}
	var last string
	for label := range strings.SplitSeq(s, ".") {
		switch {
		case label == "":
			return "", sniError(sni, "empty label")
		case len(label) > 63:
			return "", sniError(sni, fmt.Sprintf("label is %d bytes, longer than 63", len(label)))
		case label[0] == '-' || label[len(label)-1] == '-':
			return "", sniError(sni, "label starts or ends with '-'")
		}
		last = label
	}
	if isNumericLabel(last) {
		return "", sniError(sni, "IP address literal not allowed in SNI (RFC 6066)")
	}
	return s, nil
}

// isNumericLabel reports whether a (lowercase) label is what the WHATWG URL
// parser's "ends in a number" check treats as an IPv4 part: all decimal
// digits, or "0x" followed by zero or more hex digits.
func isNumericLabel(l string) bool {
	if rest, ok := strings.CutPrefix(l, "0x"); ok {
		for i := 0; i < len(rest); i++ {
			if c := rest[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if c := l[i]; c < '0' || c > '9' {
			return false
		}
	}
	return l != ""
}

// asciiLower lowercases ASCII letters only (s is known to be ASCII).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}

func sniError(sni, reason string) error {
	return fmt.Errorf("%w %s: %s", ErrInvalidSNI, quoteBounded(sni), reason)
}

// quoteBounded quotes at most maxQuoted bytes of s: SNI comes from the
// network and ends up in logs.
func quoteBounded(s string) string {
	if len(s) <= maxQuoted {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q…", s[:maxQuoted])
}
