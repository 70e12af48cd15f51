// Package hostport canonicalises host names, IP literals and host:port
// authorities, so that every component of BotBox (config validation, policy
// matching, the Host header, the TLS SNI) compares the same string.
//
// Canonical form:
//   - names are lowercase ASCII (IDNA names in punycode, via the UTS #46
//     lookup mapping), with one trailing dot removed, made only of
//     letters, digits and hyphens (no '_'), labels 1–63 bytes, at most 253 bytes;
//   - IP literals are in netip's canonical text form (IPv6 without brackets;
//     an IPv4-mapped IPv6 address becomes its IPv4 form, "::ffff:1.2.3.4" -> "1.2.3.4",
//     so it cannot dodge a rule naming the IPv4 address);
//   - ports are 1–65535 written in decimal without sign or leading zero.
//
// It deliberately refuses anything that another parser could read
// differently: userinfo ("user@host"), URL delimiters, percent-encoding, IPv6
// zones, bare IPv6 in an authority, and the non-canonical numeric IPv4 forms
// that inet_aton, curl or browsers turn into an address ("127.1",
// "0x7f000001", "017.0.0.1"): a name whose last label is all digits must be a
// dotted-quad, and a last label "0x…" is refused. This closes the aliasing of
// deny rules described in reference §10.3 #3.
//
// Rule hosts have two more forms, parsed beside ParseHost: wildcards
// ("*.example.com", ParseWildcard: a canonical suffix, never '*' elsewhere;
// CheckWildcardAllow: an allow wildcard never over a public suffix of
// either section of the list) and CIDR prefixes ("10.0.0.0/8", ParseCIDR).
// Parse and ParseHost still refuse '*' and '/': a request target is never a
// pattern.
//
// The package is pure: no DNS, no I/O, no global state. It is the one host
// grammar of BotBox: package mitm validates TLS server names with ParseHost.
//
// Typical use:
//
//	hp, err := hostport.Parse(r.Host) // "Example.COM.:8443" -> {example.com 8443 true}
//	if err != nil { /* 400 */ }
//	port := hp.PortOr(443)
package hostport

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"

	"github.com/botbox/botbox/internal/echo"
)

// ErrInvalid is wrapped by every error this package returns.
var ErrInvalid = errors.New("invalid host")

// maxInput bounds the work done on hostile input. Any valid name, even in
// its Unicode form, fits well below it.
const maxInput = 2048

// HostPort is a canonical host with an optional port.
type HostPort struct {
	// Host is the canonical host: a lowercase LDH name (punycode for IDNA
	// names, no trailing dot) or an IP literal in canonical form (IPv6
	// without brackets).
	Host string
	// Port is the port, 0 when absent.
	Port uint16
	// HasPort reports whether the authority had a port.
	HasPort bool
}

// Parse parses a Host header or URL authority: "Example.COM.",
// "a.b:8443", "[::1]:443", "1.2.3.4". Surrounding spaces and tabs are
// trimmed. A bare IPv6 address ("::1") is refused as ambiguous; it must be
// bracketed. Every error wraps ErrInvalid.
func Parse(authority string) (HostPort, error) {
	s, err := precheck(authority)
	if err != nil {
		return HostPort{}, err
	}
	if s[0] == '[' {
		host, rest, err := splitBracket(s)
		if err != nil {
			return HostPort{}, err
		}
		if rest == "" {
			return HostPort{Host: host}, nil
		}
		if rest[0] != ':' {
			return HostPort{}, invalid(s, "unexpected text after ']'")
		}
		p, err := parsePort(s, rest[1:])
		if err != nil {
			return HostPort{}, err
		}
		return HostPort{Host: host, Port: p, HasPort: true}, nil
	}
	switch strings.Count(s, ":") {
	case 0:
		h, err := parseName(s)
		if err != nil {
			return HostPort{}, err
		}
		return HostPort{Host: h}, nil
	case 1:
		i := strings.IndexByte(s, ':')
		if i == 0 {
			return HostPort{}, invalid(s, "empty host")
		}
		h, err := parseName(s[:i])
		if err != nil {
			return HostPort{}, err
		}
		p, err := parsePort(s, s[i+1:])
		if err != nil {
			return HostPort{}, err
		}
		return HostPort{Host: h, Port: p, HasPort: true}, nil
	default:
		return HostPort{}, invalid(s, "IPv6 address must be in brackets or there are several ports")
	}
}

// ParseHost parses a host without a port (a config rule host, a TLS SNI
// value): the same rules as Parse, but any port is refused and a bare IPv6
// address is accepted. It returns the canonical host.
func ParseHost(host string) (string, error) {
	s, err := precheck(host)
	if err != nil {
		return "", err
	}
	if s[0] == '[' {
		h, rest, err := splitBracket(s)
		if err != nil {
			return "", err
		}
		if rest != "" {
			return "", invalid(s, "a port is not allowed here")
		}
		return h, nil
	}
	switch strings.Count(s, ":") {
	case 0:
		return parseName(s)
	case 1:
		return "", invalid(s, "a port is not allowed here")
	default:
		return parseIPv6(s, s)
	}
}

// IsIP reports whether Host is an IP literal.
func (h HostPort) IsIP() bool {
	_, ok := h.Addr()
	return ok
}

// Addr returns Host as an address when it is an IP literal.
func (h HostPort) Addr() (netip.Addr, bool) {
	a, err := netip.ParseAddr(h.Host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a, true
}

// PortOr returns Port if the authority had one, else def.
func (h HostPort) PortOr(def uint16) uint16 {
	if h.HasPort {
		return h.Port
	}
	return def
}

// Authority formats the host ("name", "1.2.3.4" or "[v6]") followed by
// ":port" only when HasPort is set and Port differs from omitPort (use the
// scheme's default port to get the shortest form, 0 to always keep it).
func (h HostPort) Authority(omitPort uint16) string {
	host := h.Host
	if strings.IndexByte(host, ':') >= 0 {
		host = "[" + host + "]"
	}
	if h.HasPort && h.Port != omitPort {
		return host + ":" + strconv.FormatUint(uint64(h.Port), 10)
	}
	return host
}

// String is Authority(0): the canonical authority, which Parse reads back
// to the same value.
func (h HostPort) String() string { return h.Authority(0) }

// precheck trims spaces and tabs and refuses empty input and every byte
// that has a meaning to a URL or HTTP parser.
func precheck(in string) (string, error) {
	s := strings.Trim(in, " \t")
	if s == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalid)
	}
	if len(s) > maxInput {
		return "", invalid(s, "too long")
	}
	if !utf8.ValidString(s) {
		return "", invalid(s, "not valid UTF-8")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c < 0x20 || c == 0x7f || c == ' ':
			return "", invalid(s, "contains a space or control character")
		case c == '@':
			return "", invalid(s, "userinfo ('@') is not allowed")
		case c == '/' || c == '?' || c == '#' || c == '\\':
			return "", invalid(s, fmt.Sprintf("%q is not allowed", c))
		case c == '%':
			return "", invalid(s, "percent-encoding and IPv6 zones are not allowed")
		case c == '*':
			return "", invalid(s, "wildcards are not allowed")
		}
	}
	return s, nil
}

// splitBracket splits "[v6]rest" into the canonical IPv6 host and rest.
func splitBracket(s string) (host, rest string, err error) {
	i := strings.IndexByte(s, ']')
	if i < 0 {
		return "", "", invalid(s, "missing ']'")
	}
	host, err = parseIPv6(s, s[1:i])
	if err != nil {
		return "", "", err
	}
	return host, s[i+1:], nil
}

// parseIPv6 parses v as an IPv6 literal (no zone) and returns its canonical
// form. orig is the input for messages.
func parseIPv6(orig, v string) (string, error) {
	a, err := netip.ParseAddr(v)
	if err != nil || !a.Is6() {
		return "", invalid(orig, "not a valid IPv6 address")
	}
	if a.Zone() != "" {
		return "", invalid(orig, "IPv6 zones are not allowed")
	}
	// An IPv4-mapped address reaches the IPv4 host on a dual-stack dial, so
	// it must match (and be denied by) a rule naming that IPv4 address.
	return a.Unmap().String(), nil
}

// parsePort parses a decimal port 1-65535 without sign or leading zero.
func parsePort(orig, p string) (uint16, error) {
	if p == "" {
		return 0, invalid(orig, "empty port")
	}
	if len(p) > 5 || p[0] == '0' {
		return 0, invalid(orig, "port must be 1-65535")
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return 0, invalid(orig, "port must be decimal digits")
		}
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, invalid(orig, "port must be 1-65535")
	}
	return uint16(n), nil
}

// lookup is the UTS #46 lookup profile, non-transitional, with the STD3 ASCII
// rules and the Bidi rule. Hyphen positions are checked by checkName, not by
// the IDNA "--" rule: browsers accept labels like "r3---sn-abc".
var lookup = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.Transitional(false),
	idna.CheckHyphens(false),
)

// parseName canonicalises a host name or IPv4 literal (no port, no ':').
func parseName(orig string) (string, error) {
	s := orig
	if !plainLDH(orig) {
		var err error
		if s, err = lookup.ToASCII(orig); err != nil {
			return "", invalid(orig, "not a valid host name")
		}
	}
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", invalid(orig, "empty host")
	}
	// Only a name ending in a digit can be a dotted-quad (skipping the rest
	// avoids ParseAddr's error allocation on every ordinary name).
	if c := s[len(s)-1]; c >= '0' && c <= '9' {
		if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
			return a.String(), nil
		}
	}
	if err := checkName(s); err != "" {
		return "", invalid(orig, err)
	}
	return s, nil
}

// plainLDH reports whether s is made only of [a-z0-9.-] and has no "xn--"
// label: the UTS #46 lookup maps such a string to itself (FuzzPlainLDH holds
// this), so parseName skips it and the common case does not allocate.
func plainLDH(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
		if c == 'x' && (i == 0 || s[i-1] == '.') && strings.HasPrefix(s[i:], "xn--") {
			return false
		}
	}
	return true
}

// checkName validates an ASCII name (LDH rule, lengths) and refuses a last
// label that an IPv4 parser would read as a number. It returns a reason or "".
func checkName(s string) string {
	if len(s) > 253 {
		return "name longer than 253 bytes"
	}
	last := ""
	for label := range strings.SplitSeq(s, ".") {
		switch {
		case label == "":
			return "empty label"
		case len(label) > 63:
			return "label longer than 63 bytes"
		case label[0] == '-' || label[len(label)-1] == '-':
			return "label starts or ends with '-'"
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "only letters, digits and '-' are allowed"
			}
		}
		last = label
	}
	if numericLabel(last) {
		return "numeric name that is not a dotted-quad IPv4 address"
	}
	return ""
}

// numericLabel reports whether a final label makes the name look like a
// number to inet_aton or the WHATWG URL parser: all decimal digits, or "0x"
// followed by hex digits.
func numericLabel(l string) bool {
	if len(l) >= 2 && l[0] == '0' && l[1] == 'x' {
		for i := 2; i < len(l); i++ {
			if !isHex(l[i]) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
}

// invalid builds an error that repeats at most echo.Max bytes of the input.
func invalid(in, reason string) error {
	return fmt.Errorf("%w %q: %s", ErrInvalid, echo.Clip(in), reason)
}
