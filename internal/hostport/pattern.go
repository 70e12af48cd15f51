package hostport

import (
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// WildcardPrefix is the only wildcard form: a leading "*." followed by a
// host name (the suffix).
const WildcardPrefix = "*."

// ParseWildcard parses a wildcard host pattern, "*.example.com", and returns
// its canonical form ("*." + the canonical suffix, canonicalised exactly
// like ParseHost: case, IDNA, one trailing dot) and the canonical suffix.
//
// The pattern matches any name with one or more labels before the suffix,
// never the suffix itself (package policy holds that). It refuses, with an
// error wrapping ErrInvalid that says why: "*" alone, a '*' anywhere but a
// leading "*." ("*example.com", "a.*.com", "*.*.com"), an IP-literal suffix,
// a single-label suffix ("*.com", "*.internal") and a suffix that is an
// ICANN public suffix ("*.co.uk", "*.com.au": golang.org/x/net/publicsuffix),
// since such a pattern admits names under every owner of that suffix.
// Private-section suffixes of the list (githubusercontent.com,
// s3.amazonaws.com) are accepted: they belong to one operator.
func ParseWildcard(pattern string) (canonical, suffix string, err error) {
	s := strings.Trim(pattern, " \t")
	rest, ok := strings.CutPrefix(s, WildcardPrefix)
	if !ok || s == "*" {
		return "", "", invalid(pattern, `a wildcard host must be "*." followed by a domain, e.g. "*.example.com"`)
	}
	if strings.Contains(rest, "*") {
		return "", "", invalid(pattern, `'*' is only allowed as the whole first label ("*.example.com")`)
	}
	suffix, err = ParseHost(rest)
	if err != nil {
		return "", "", err
	}
	if _, perr := netip.ParseAddr(suffix); perr == nil {
		return "", "", invalid(pattern, "a wildcard cannot precede an IP address (use a CIDR such as 10.0.0.0/8)")
	}
	if !strings.Contains(suffix, ".") {
		return "", "", invalid(pattern, fmt.Sprintf("%q is a top-level domain; a wildcard must name a registrable domain such as \"*.example.%s\"", suffix, suffix))
	}
	if ps, icann := publicsuffix.PublicSuffix(suffix); icann && ps == suffix {
		return "", "", invalid(pattern, fmt.Sprintf("%q is a public suffix; a wildcard under it would admit every domain registered there", suffix))
	}
	return WildcardPrefix + suffix, suffix, nil
}

// IsWildcard reports whether a rule host is meant as a wildcard pattern (it
// contains '*'); ParseWildcard decides whether it is a valid one.
func IsWildcard(host string) bool { return strings.Contains(host, "*") }

// IsCIDR reports whether a rule host is written as a CIDR prefix (it
// contains '/'); ParseCIDR decides whether it is a valid one.
func IsCIDR(host string) bool { return strings.Contains(host, "/") }

// ParseCIDR parses an IPv4 or IPv6 prefix, "10.0.0.0/8" or "2001:db8::/32",
// and returns it masked (host bits cleared) with its canonical text. IPv6
// zones and IPv4-mapped IPv6 prefixes ("::ffff:10.0.0.0/104") are refused:
// targets are canonicalised to their IPv4 form (package doc), so such a
// prefix would silently never match; write the IPv4 prefix instead. A prefix
// with host bits set ("10.1.2.3/8") is refused too, since its intent is
// unclear.
func ParseCIDR(s string) (netip.Prefix, string, error) {
	p, err := netip.ParsePrefix(strings.Trim(s, " \t"))
	if err != nil {
		return netip.Prefix{}, "", invalid(s, "not a valid CIDR prefix (e.g. 10.0.0.0/8 or 2001:db8::/32)")
	}
	if p.Addr().Zone() != "" {
		return netip.Prefix{}, "", invalid(s, "IPv6 zones are not allowed")
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, "", invalid(s, "IPv4-mapped IPv6 prefix; write the IPv4 prefix instead")
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, "", invalid(s, fmt.Sprintf("host bits are set (did you mean %s?)", m))
	}
	return p, p.String(), nil
}
