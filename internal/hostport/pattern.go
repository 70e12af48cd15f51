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
// leading "*." ("*example.com", "a.*.com", "*.*.com"), an IP-literal suffix
// and a single-label suffix ("*.com", "*.internal"). A suffix that is a
// public suffix is a valid pattern (a deny rule may name "*.workers.dev");
// an allow rule checks CheckWildcardAllow too.
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
	return WildcardPrefix + suffix, suffix, nil
}

// CheckWildcardAllow refuses, with an error wrapping ErrInvalid that names
// the suffix and its section, an allow wildcard over the canonical suffix
// when the suffix is itself a public suffix of the Public Suffix List
// (golang.org/x/net/publicsuffix), in its ICANN section ("co.uk",
// "com.au") or its private section ("workers.dev", "vercel.app",
// "herokuapp.com", "github.io", "s3.us-east-1.amazonaws.com"): the names
// under it belong to every customer registered there, so such a wildcard
// would admit, and hand the rule's credential to, anyone's host.
// TestCheckWildcardAllow.
func CheckWildcardAllow(suffix string) error {
	ps, icann := publicsuffix.PublicSuffix(suffix)
	if ps != suffix || !strings.Contains(suffix, ".") {
		return nil
	}
	section := "private section of the Public Suffix List: a provider's customers each get their own names there"
	if icann {
		section = "ICANN section of the Public Suffix List: a registry's customers each register their own domains there"
	}
	return invalid(WildcardPrefix+suffix, fmt.Sprintf("%q is a public suffix (%s); an allow wildcard under it would admit every one of them: name the exact host, e.g. \"myapp.%s\"", suffix, section, suffix))
}

// UnderDeeperPublicSuffix reports whether the canonical name lies under a
// public suffix longer than suffix (one of its parent domains), without
// being that public suffix itself: "bucket.s3.amazonaws.com" under
// "amazonaws.com" (s3.amazonaws.com is a private-section suffix), so the
// name belongs to a tenant of that suffix, not to the operator of suffix.
// Package policy never lets an allow wildcard over suffix match such a
// name. It does not allocate.
func UnderDeeperPublicSuffix(name, suffix string) bool {
	ps, _ := publicsuffix.PublicSuffix(name)
	return len(ps) > len(suffix) && ps != name
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
