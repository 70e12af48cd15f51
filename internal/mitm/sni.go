package mitm

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/botbox/botbox/internal/echo"
	"github.com/botbox/botbox/internal/hostport"
)

// ErrInvalidSNI is wrapped by every error of [ValidateSNI].
var ErrInvalidSNI = errors.New("invalid SNI")

// ValidateSNI checks a TLS server_name and returns its canonical form: the
// name trimmed of surrounding whitespace and canonicalised by
// [hostport.ParseHost] (ASCII-lowercased, one trailing dot removed), which
// is the one host grammar of BotBox, so the name compared with the Host
// header and the policy is the name the certificate is issued for.
//
// Before hostport, an ASCII precheck keeps the rules of reference §4.3 step 2
// (reject empty, '*', any character other than [A-Za-z0-9.-]; punycode
// "xn--" labels are fine) and refuses non-ASCII before any case mapping, so
// that Unicode case folding (the Kelvin sign folds to "k") cannot smuggle a
// different name in. hostport then refuses empty labels, labels longer than
// 63 octets or starting or ending with '-', names longer than 253 bytes,
// invalid punycode, and names whose last label is numeric ("127.1",
// "0x7f000001": the WHATWG "ends in a number" rule). Finally an IP literal
// is refused: RFC 6066 §3 forbids it in SNI, and a leaf for "1.2.3.4" would
// carry a DNS SAN that is not an IP SAN.
//
// The result contains only [a-z0-9.-], is at most 253 bytes long and is a
// fixed point: ValidateSNI(result) returns result. FuzzValidateSNI and
// FuzzValidateSNIMatchesHostport hold these properties.
func ValidateSNI(sni string) (string, error) {
	s := strings.TrimSpace(sni)
	if strings.TrimSuffix(s, ".") == "" {
		return "", sniError(sni, "empty name")
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '.':
		case c == '*':
			return "", sniError(sni, "wildcard '*' not allowed")
		case c >= 0x80:
			return "", sniError(sni, fmt.Sprintf("non-ASCII byte %#x", c))
		default:
			return "", sniError(sni, fmt.Sprintf("invalid character %q", rune(c)))
		}
	}
	h, err := hostport.ParseHost(s)
	if err != nil {
		// hostport's message names the input and the rule it breaks.
		return "", fmt.Errorf("%w: %w", ErrInvalidSNI, err)
	}
	// The precheck leaves no ':' or '[', so an IP literal here is IPv4.
	if c := h[len(h)-1]; '0' <= c && c <= '9' {
		if _, err := netip.ParseAddr(h); err == nil {
			return "", sniError(sni, "IP address literal not allowed in SNI (RFC 6066)")
		}
	}
	return h, nil
}

func sniError(sni, reason string) error {
	return fmt.Errorf("%w %q: %s", ErrInvalidSNI, echo.Clip(sni), reason)
}
