package netfilter

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Environment variables read by ParseEnv. The first nine are the reference
// init script's (reference §8.1); BOTBOX_DNS_SERVERS and BOTBOX_DROP_ICMP are
// BotBox hardening options, off by default; BOTBOX_METRICS_PORT names
// BotBox's third listening port for the port-squat rules; BOTBOX_REJECT makes
// the final deny answer the app (fail fast) instead of dropping silently;
// BOTBOX_NETFILTER_BACKEND chooses nftables or iptables (backend.go).
const (
	EnvUID                   = "BOTBOX_UID"
	EnvProxyPort             = "BOTBOX_PROXY_PORT"
	EnvRedirectFromPort      = "BOTBOX_REDIRECT_FROM_PORT"
	EnvHTTPSInterception     = "BOTBOX_ENABLE_HTTPS_INTERCEPTION"
	EnvHTTPSInterceptionPort = "BOTBOX_HTTPS_INTERCEPTION_PORT"
	EnvIPv6                  = "BOTBOX_ENABLE_IPV6"
	EnvNATChain              = "BOTBOX_NAT_CHAIN"
	EnvFilterChain           = "BOTBOX_FILTER_CHAIN"
	EnvWaitSeconds           = "BOTBOX_IPTABLES_WAIT_SECONDS"
	EnvDNSServers            = "BOTBOX_DNS_SERVERS"
	EnvDropICMP              = "BOTBOX_DROP_ICMP"
	EnvMetricsPort           = "BOTBOX_METRICS_PORT"
	EnvReject                = "BOTBOX_REJECT"
	EnvBackend               = "BOTBOX_NETFILTER_BACKEND"
)

// Limits enforced by ParseEnv.
const (
	// MaxUID is the largest owner-match UID; 4294967295 is (uid_t)-1.
	MaxUID = 4294967294
	// MaxWaitSeconds caps BOTBOX_IPTABLES_WAIT_SECONDS (an init step that
	// waits an hour for the xtables lock is already broken).
	MaxWaitSeconds = 3600
	// MaxChainNameLen is the longest chain name iptables accepts
	// (XT_EXTENSION_MAXNAMELEN - 1).
	MaxChainNameLen = 28
)

// Settings are the validated inputs of the init rules. The zero value is not
// useful; start from DefaultSettings or ParseEnv.
type Settings struct {
	// UID is exempted from redirect and filter by owner match: BotBox itself
	// (BOTBOX_UID, default 1337).
	UID uint32
	// ProxyPort is where TCP to RedirectFromPort is redirected: BotBox's plain
	// HTTP listener (BOTBOX_PROXY_PORT, default 8080).
	ProxyPort uint16
	// RedirectFromPort is the destination port redirected to ProxyPort
	// (BOTBOX_REDIRECT_FROM_PORT, default 80).
	RedirectFromPort uint16
	// HTTPSInterception adds the 443 → HTTPSInterceptionPort redirect
	// (BOTBOX_ENABLE_HTTPS_INTERCEPTION, 0 or 1, default 0).
	HTTPSInterception bool
	// HTTPSInterceptionPort is BotBox's interception listener
	// (BOTBOX_HTTPS_INTERCEPTION_PORT, default 8443).
	HTTPSInterceptionPort uint16
	// IPv6 mirrors every rule with ip6tables (BOTBOX_ENABLE_IPV6, required
	// for install and print, 0 or 1).
	IPv6 bool
	// NATChain is BotBox's chain in the nat table (BOTBOX_NAT_CHAIN,
	// default EGRESS_REDIRECT).
	NATChain string
	// FilterChain is BotBox's chain in the filter table (BOTBOX_FILTER_CHAIN,
	// default EGRESS_FILTER).
	FilterChain string
	// WaitSeconds is passed as -w to every iptables call
	// (BOTBOX_IPTABLES_WAIT_SECONDS, default 5).
	WaitSeconds uint32
	// DNSServers, when not empty, restricts the port-53 exemption to these
	// resolvers, per family (BOTBOX_DNS_SERVERS, comma-separated IP
	// addresses, default empty: port 53 open to any destination, as in the
	// reference). A family without a server gets no port-53 exemption at all.
	DNSServers []netip.Addr
	// DropICMP drops ICMP from the app; for IPv6 the neighbour-discovery
	// types are kept (BOTBOX_DROP_ICMP, 0 or 1, default 0). Without it,
	// ICMP is returned explicitly by the default-deny filter chain.
	DropICMP bool
	// MetricsPort is BotBox's metrics and health listener
	// (BOTBOX_METRICS_PORT, default 9090, BotBox's metrics_port). With
	// ProxyPort and HTTPSInterceptionPort it is one of the ports whose
	// handshakes only BotBox's UID may answer (the port-squat rules).
	MetricsPort uint16
	// Reject puts REJECT rules before the filter chain's final DROP
	// (BOTBOX_REJECT, 0 or 1, default 0): the app's blocked TCP gets a
	// reset and everything else an ICMP port-unreachable, generated
	// locally and delivered to the app, so clients fail at once with
	// "connection refused" instead of waiting for their own timeout.
	// Only how a denied packet ends changes (finalDeny), never what is
	// allowed.
	Reject bool
	// Backend is how the rules reach the kernel (BOTBOX_NETFILTER_BACKEND:
	// nftables, iptables or auto, default auto: nftables when the kernel
	// answers, else iptables). It never changes the rules.
	Backend Backend
}

// DefaultSettings returns the reference defaults with IPv6 disabled.
func DefaultSettings() Settings {
	return Settings{
		UID:                   1337,
		ProxyPort:             8080,
		RedirectFromPort:      80,
		HTTPSInterceptionPort: 8443,
		MetricsPort:           9090,
		NATChain:              "EGRESS_REDIRECT",
		FilterChain:           "EGRESS_FILTER",
		WaitSeconds:           5,
		Backend:               BackendAuto,
	}
}

// CheckError is a failed fail-fast check. Its message is printed verbatim to
// stderr: it keeps the reference script's wording ("ERROR: …" plus indented
// hint lines), which operators and tests may match, so it is not a
// lowercase Go-style message.
type CheckError struct {
	Lines []string
}

func (e *CheckError) Error() string { return strings.Join(e.Lines, "\n") }

func checkError(lines ...string) *CheckError { return &CheckError{Lines: lines} }

// Messages of the reference script (reference §8.2).
func errIPv6NotSet() *CheckError {
	return checkError(
		"ERROR: BOTBOX_ENABLE_IPV6 is not set.",
		"  Set BOTBOX_ENABLE_IPV6=1 to mirror rules via ip6tables (recommended for dual-stack).",
		"  Set BOTBOX_ENABLE_IPV6=0 for IPv4-only (ensure IPv6 is disabled or blocked separately).",
	)
}

func errNotBool(name, raw string) *CheckError {
	return checkError(fmt.Sprintf("ERROR: %s must be 0 or 1 (got '%s').", name, shown(raw)))
}

// errIP6tablesMissing and errIP6NATMissing keep the reference's first line
// but never suggest BOTBOX_ENABLE_IPV6=0 as the fix (the reference does):
// that would switch IPv6 containment off. They name what failed, with the
// program's own error, and the fix that keeps IPv6 contained.
// TestInstallFailures holds the exact text.
func errIP6tablesMissing(err error) *CheckError {
	return checkError(
		"ERROR: BOTBOX_ENABLE_IPV6=1 but ip6tables is not available ("+err.Error()+").",
		"  Install ip6tables (the iptables package provides ip6tables, ip6tables-save and ip6tables-restore).",
	)
}

func errIP6NATMissing(err error) *CheckError {
	lines := []string{"ERROR: BOTBOX_ENABLE_IPV6=1 but ip6tables NAT table is not available (" + err.Error() + ")."}
	if permissionDenied(err) {
		return checkError(append(lines, permissionHint)...)
	}
	return checkError(append(lines,
		"  The kernel may not support ip6table_nat: load the module on the node (modprobe ip6table_nat).")...)
}

// permissionHint is the fix for "Permission denied (you must be root)".
const permissionHint = "  Run `botbox netfilter install` as root with CAP_NET_ADMIN in the Pod's network namespace (the init container's securityContext)."

// permissionDenied reports whether a failed iptables call was refused for
// lack of privilege: iptables says "Permission denied (you must be root)".
func permissionDenied(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Permission denied")
}

func errConflict443(proxyPort, httpsPort string) *CheckError {
	return checkError(
		"ERROR: BOTBOX_ENABLE_HTTPS_INTERCEPTION=1 and BOTBOX_REDIRECT_FROM_PORT=443 conflict.",
		"  Port 443 traffic would be redirected to the HTTP proxy (port "+shown(proxyPort)+")",
		"  instead of the HTTPS interception listener (port "+shown(httpsPort)+").",
		"  Use BOTBOX_REDIRECT_FROM_PORT=80 (default) with BOTBOX_ENABLE_HTTPS_INTERCEPTION=1.",
	)
}

// ipv6DisabledWarning is printed to stderr when BOTBOX_ENABLE_IPV6=0.
func ipv6DisabledWarning() []string {
	return []string{
		"[WARN] BOTBOX_ENABLE_IPV6=0: IPv6 traffic control is DISABLED.",
		"  In dual-stack environments, IPv6 traffic may bypass the proxy.",
		"  Ensure IPv6 is disabled (sysctl) or blocked via NetworkPolicy.",
	}
}

// ParseEnv reads the settings of `botbox netfilter install` and `print`
// from the environment. It runs the environment checks of reference §8.2 in
// the script's order, failing fast with the script's messages:
//
//  1. BOTBOX_ENABLE_IPV6 unset (getenv returns "" — with os.Getenv an empty
//     value is indistinguishable from an unset one, so it also gets this message);
//  2. BOTBOX_ENABLE_IPV6 not 0 or 1;
//  3. BOTBOX_ENABLE_IPV6=0: the three [WARN] lines are returned as warnings
//     (the ip6tables checks of the same step need the system; Install runs them);
//  4. BOTBOX_ENABLE_HTTPS_INTERCEPTION=1 with BOTBOX_REDIRECT_FROM_PORT=443.
//
// Then every variable is validated strictly (the reference passes them to
// iptables unchecked); all such problems are reported together, one
// "ERROR: …" line each. Empty variables take their defaults. Warnings are
// returned even when err is not nil, so the caller can print them first as
// the script does. Errors are *CheckError values (possibly joined).
func ParseEnv(getenv func(string) string) (s Settings, warnings []string, err error) {
	return parseEnv(lookupOf(getenv), true)
}

// ParseEnvLookup is ParseEnv with os.LookupEnv semantics: a variable set to
// the empty string counts as set, so an empty BOTBOX_ENABLE_IPV6 fails the
// "must be 0 or 1 (got ”)" check, exactly as in the reference script, rather
// than the "is not set" one.
func ParseEnvLookup(lookup func(string) (string, bool)) (s Settings, warnings []string, err error) {
	return parseEnv(lookup, true)
}

// lookupOf adapts a getenv function: "" means unset.
func lookupOf(getenv func(string) string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v := getenv(k)
		return v, v != ""
	}
}

// ParseEnvForRemove is ParseEnvLookup for `remove`: BOTBOX_ENABLE_IPV6 is
// optional (Remove always cleans IPv6 when ip6tables exists), there are no
// warnings and no conflict check, but every value that is set is still
// validated.
func ParseEnvForRemove(lookup func(string) (string, bool)) (Settings, error) {
	s, _, err := parseEnv(lookup, false)
	return s, err
}

func parseEnv(lookup func(string) (string, bool), install bool) (Settings, []string, error) {
	getenv := func(k string) string { v, _ := lookup(k); return v }
	s := DefaultSettings()
	var warnings []string

	v6, v6Set := lookup(EnvIPv6)
	if install && !v6Set {
		return Settings{}, nil, errIPv6NotSet()
	}
	if (v6 != "" || install) && v6 != "0" && v6 != "1" {
		return Settings{}, nil, errNotBool(EnvIPv6, v6)
	}
	s.IPv6 = v6 == "1"
	if install && !s.IPv6 {
		warnings = append(warnings, ipv6DisabledWarning()...)
	}

	if install && getenv(EnvHTTPSInterception) == "1" && getenv(EnvRedirectFromPort) == "443" {
		return Settings{}, warnings, errConflict443(
			orDefault(getenv(EnvProxyPort), "8080"),
			orDefault(getenv(EnvHTTPSInterceptionPort), "8443"))
	}

	var errs []error
	for _, v := range envTable() {
		raw := getenv(v.name)
		if raw == "" {
			continue
		}
		if err := v.parse(&s, raw); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 && s.HTTPSInterception && s.HTTPSInterceptionPort == s.ProxyPort {
		errs = append(errs, checkError(fmt.Sprintf(
			"ERROR: BOTBOX_HTTPS_INTERCEPTION_PORT and BOTBOX_PROXY_PORT must differ (both %d).", s.ProxyPort)))
	}
	if len(errs) == 0 && s.MetricsPort == s.ProxyPort {
		errs = append(errs, checkError(fmt.Sprintf(
			"ERROR: BOTBOX_METRICS_PORT and BOTBOX_PROXY_PORT must differ (both %d).", s.ProxyPort)))
	}
	if len(errs) == 0 && s.HTTPSInterception && s.MetricsPort == s.HTTPSInterceptionPort {
		errs = append(errs, checkError(fmt.Sprintf(
			"ERROR: BOTBOX_METRICS_PORT and BOTBOX_HTTPS_INTERCEPTION_PORT must differ (both %d).", s.MetricsPort)))
	}
	if len(errs) > 0 {
		return Settings{}, warnings, errors.Join(errs...)
	}
	if install && s.UID == 0 {
		warnings = append(warnings,
			"[WARN] BOTBOX_UID=0: every process running as root bypasses the proxy and the egress filter.")
	}
	return s, warnings, nil
}

// envVar is one row of the environment table: a variable and how its
// non-empty value sets a field.
type envVar struct {
	name  string
	parse func(s *Settings, raw string) error
}

// envTable maps each variable to its Settings field, in reference §8.1 order.
// BOTBOX_ENABLE_IPV6 is handled before the table (it gates the checks).
func envTable() []envVar {
	return []envVar{
		{EnvUID, func(s *Settings, raw string) error {
			n, ok := parseDecimal(raw, 0, MaxUID)
			if !ok {
				return errRange(EnvUID, "an integer from 0 to 4294967294", raw)
			}
			s.UID = uint32(n)
			return nil
		}},
		{EnvProxyPort, portField(EnvProxyPort, func(s *Settings) *uint16 { return &s.ProxyPort })},
		{EnvRedirectFromPort, portField(EnvRedirectFromPort, func(s *Settings) *uint16 { return &s.RedirectFromPort })},
		{EnvHTTPSInterception, boolField(EnvHTTPSInterception, func(s *Settings) *bool { return &s.HTTPSInterception })},
		{EnvHTTPSInterceptionPort, portField(EnvHTTPSInterceptionPort, func(s *Settings) *uint16 { return &s.HTTPSInterceptionPort })},
		{EnvNATChain, chainField(EnvNATChain, func(s *Settings) *string { return &s.NATChain })},
		{EnvFilterChain, chainField(EnvFilterChain, func(s *Settings) *string { return &s.FilterChain })},
		{EnvWaitSeconds, func(s *Settings, raw string) error {
			n, ok := parseDecimal(raw, 0, MaxWaitSeconds)
			if !ok {
				return errRange(EnvWaitSeconds, "an integer from 0 to 3600", raw)
			}
			s.WaitSeconds = uint32(n)
			return nil
		}},
		{EnvDNSServers, func(s *Settings, raw string) error {
			addrs, err := ParseDNSServers(raw)
			if err != nil {
				return checkError(fmt.Sprintf(
					"ERROR: BOTBOX_DNS_SERVERS must be a comma-separated list of IP addresses (got '%s'): %s.",
					shown(raw), err))
			}
			s.DNSServers = addrs
			return nil
		}},
		{EnvDropICMP, boolField(EnvDropICMP, func(s *Settings) *bool { return &s.DropICMP })},
		{EnvMetricsPort, portField(EnvMetricsPort, func(s *Settings) *uint16 { return &s.MetricsPort })},
		{EnvReject, boolField(EnvReject, func(s *Settings) *bool { return &s.Reject })},
		{EnvBackend, func(s *Settings, raw string) error {
			b := Backend(raw)
			if b != BackendAuto && b != BackendNFTables && b != BackendIPTables {
				return checkError(fmt.Sprintf("ERROR: %s must be nftables, iptables or auto (got '%s').", EnvBackend, shown(raw)))
			}
			s.Backend = b
			return nil
		}},
	}
}

func portField(name string, field func(*Settings) *uint16) func(*Settings, string) error {
	return func(s *Settings, raw string) error {
		n, ok := parseDecimal(raw, 1, 65535)
		if !ok {
			return errRange(name, "a port number from 1 to 65535", raw)
		}
		*field(s) = uint16(n)
		return nil
	}
}

func boolField(name string, field func(*Settings) *bool) func(*Settings, string) error {
	return func(s *Settings, raw string) error {
		switch raw {
		case "0":
			*field(s) = false
		case "1":
			*field(s) = true
		default:
			return errNotBool(name, raw)
		}
		return nil
	}
}

func chainField(name string, field func(*Settings) *string) func(*Settings, string) error {
	return func(s *Settings, raw string) error {
		if err := ValidateChainName(raw); err != nil {
			return checkError(fmt.Sprintf("ERROR: %s is not a valid chain name (got '%s'): %s.", name, shown(raw), err))
		}
		*field(s) = raw
		return nil
	}
}

func errRange(name, want, raw string) *CheckError {
	return checkError(fmt.Sprintf("ERROR: %s must be %s (got '%s').", name, want, shown(raw)))
}

// parseDecimal accepts only plain decimal digits without sign, spaces or
// leading zeros, within [lo, hi].
func parseDecimal(raw string, lo, hi uint64) (uint64, bool) {
	if raw == "" || len(raw) > 10 || (len(raw) > 1 && raw[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] < '0' || raw[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(raw, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, false
	}
	return n, true
}

// reservedChainNames are the built-in chains and the target names iptables
// refuses as chain names ("chain name may not clash with target name"),
// compared case-insensitively so that look-alikes are refused too.
func reservedChainNames() []string {
	return []string{
		"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING",
		"ACCEPT", "DROP", "RETURN", "QUEUE", "STANDARD", "ERROR", "JUMP", "GOTO",
		"AUDIT", "CHECKSUM", "CLASSIFY", "CLUSTERIP", "CONNMARK", "CONNSECMARK", "CT",
		"DNAT", "DNPT", "DSCP", "ECN", "HL", "HMARK", "IDLETIMER", "LED", "LOG", "MARK",
		"MASQUERADE", "MIRROR", "NAT", "NETMAP", "NFLOG", "NFQUEUE", "NOTRACK", "RATEEST",
		"REDIRECT", "REJECT", "SAME", "SECMARK", "SET", "SNAT", "SNPT", "SYNPROXY",
		"TCPMSS", "TCPOPTSTRIP", "TEE", "TOS", "TPROXY", "TRACE", "TTL", "ULOG",
	}
}

// ValidateChainName reports whether name is usable as a BotBox chain:
// 1 to 28 characters from [A-Za-z0-9_-], not starting with '-', and not a
// built-in chain or target name. This is stricter than iptables (which
// allows most printable characters) so that a name can never change the
// meaning of a rule or of the restore payload.
func ValidateChainName(name string) error {
	switch {
	case name == "":
		return errors.New("empty")
	case len(name) > MaxChainNameLen:
		return fmt.Errorf("longer than %d characters", MaxChainNameLen)
	case name[0] == '-':
		return errors.New("starts with '-'")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return errors.New("only letters, digits, '_' and '-' are allowed")
		}
	}
	for _, r := range reservedChainNames() {
		if strings.EqualFold(name, r) {
			return errors.New("a built-in chain or target name")
		}
	}
	return nil
}

// ParseDNSServers parses BOTBOX_DNS_SERVERS: comma-separated IPv4 or IPv6
// addresses (spaces around entries allowed, duplicates dropped, order kept).
// Zones, prefixes, empty entries and IPv4-mapped IPv6 addresses are refused
// (write the IPv4 form instead).
func ParseDNSServers(raw string) ([]netip.Addr, error) {
	var out []netip.Addr
	seen := make(map[netip.Addr]bool)
	for i, part := range strings.Split(raw, ",") {
		part = strings.Trim(part, " \t")
		if part == "" {
			return nil, fmt.Errorf("entry %d is empty", i+1)
		}
		a, err := netip.ParseAddr(part)
		if err != nil {
			return nil, fmt.Errorf("entry %d is not an IP address", i+1)
		}
		switch {
		case a.Zone() != "":
			return nil, fmt.Errorf("entry %d has a zone", i+1)
		case a.Is4In6():
			return nil, fmt.Errorf("entry %d is an IPv4-mapped IPv6 address; write %s", i+1, a.Unmap())
		case a.IsUnspecified():
			return nil, fmt.Errorf("entry %d is the unspecified address", i+1)
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// shown makes an environment value safe to echo in a message: values with
// control or non-ASCII bytes are Go-quoted, long ones truncated.
func shown(v string) string {
	const max = 64
	trunc := ""
	if len(v) > max {
		v, trunc = v[:max], "..."
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] >= 0x7f {
			q := strconv.Quote(v)
			return q[1:len(q)-1] + trunc
		}
	}
	return v + trunc
}
