package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/botbox/botbox/internal/addrguard"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/reqpath"
	"github.com/botbox/botbox/internal/secretref"
)

// Defaults. The reference's values where it has the key or hard-codes the
// behaviour; docs/config.md lists them.
const (
	defaultListenAddr  = "127.0.0.1"
	defaultListenPort  = 8080
	defaultMetricsPort = 9090
	// defaultMetricsListenAddr is the reference's fixed metrics address.
	defaultMetricsListenAddr = "127.0.0.1"
	defaultSecretsDir        = "/var/run/secrets/botbox"
	defaultMaxConnections    = 1024
	defaultLogLevel          = "info"
	defaultPlaceholderDir    = "/var/run/botbox/placeholders"

	defaultUpstreamConnectTimeoutMS        = 10000
	defaultUpstreamResponseHeaderTimeoutMS = 600_000 // 10 min, the LLM SDKs' own request timeout (the reference: 30 s)
	defaultUpstreamIdleConnTimeoutSeconds  = 90
	defaultReadHeaderTimeoutMS             = 10000
	defaultIdleTimeoutSeconds              = 120
	defaultShutdownTimeoutSeconds          = 25
	defaultSecretsReloadDebounceMS         = 2000
	defaultSecretsResyncSeconds            = 30
	// defaultTunnelIdleTimeoutSeconds: realtime APIs keep a WebSocket
	// silent between turns for minutes; 10 minutes cuts only abandoned
	// tunnels.
	defaultTunnelIdleTimeoutSeconds = 600

	defaultUpstreamMaxConnsPerHost = 512
	defaultUpstreamMaxIdleConns    = 1024
	// One source address reaches one origin ip:port through at most ~64k
	// ephemeral ports: a larger per-host bound could never be reached.
	upstreamMaxConnsPerHostLimit = 65535
	upstreamMaxIdleConnsLimit    = 1 << 20
	// Bound of upstream_response_header_timeout_ms and of a rule's
	// response_header_timeout_ms (1 hour).
	responseHeaderTimeoutMSLimit = 3_600_000

	// max_concurrent_requests defaults to this many times max_connections:
	// 1, because each in-flight request toward an HTTP/1.1 origin costs
	// about 100 KiB (test/flood, docs/performance.md "Memory model"), and
	// 2 × 1024 of them came within 10% of the manifest's 256 MiB.
	defaultRequestsPerConnection         = 1
	defaultHTTP2MaxConcurrentStreams     = 100
	http2MaxConcurrentStreamsLimit       = 1000
	defaultDownstreamWriteTimeoutSeconds = 60

	defaultInterceptionListenPort = 8443
	defaultCertTTLSeconds         = 86400
	defaultCertCacheSize          = 1024
	defaultCertCacheTTLSeconds    = 3600
	defaultHandshakeTimeoutMS     = 5000

	defaultDNSGuardListenPort    = 8053
	defaultDNSGuardMaxTTLSeconds = 60
	dnsGuardMaxTTLSecondsLimit   = 86400
	dnsGuardMaxUpstreams         = 8

	maxConnectionsLimit = min(1<<32-1, math.MaxInt) // the reference's u32 (capped on 32-bit platforms)
	certCacheSizeLimit  = 1 << 20
)

// Warning messages, worded as the reference logs them.
const (
	warnNonLoopback  = "allow_non_loopback is enabled; ensure compensating controls (NetworkPolicy, mTLS) are in place"
	warnDefaultAllow = "default_action is 'allow'; this is discouraged for production use (SEC-009: unbounded metrics cardinality, SEC-003: open proxy risk)"
)

// checker accumulates problems and warnings during validation.
type checker struct {
	idx      *posIndex
	problems []*FieldError
	warnings []Warning
	// creds are the valid credentials by name (credentials.go), read by
	// the rules; usedCreds the names some rule uses.
	creds     map[string]*Credential
	usedCreds map[string]bool
}

func (c *checker) errorf(path, format string, args ...any) {
	c.problems = append(c.problems, &FieldError{Path: path, Line: c.idx.line(path), Msg: fmt.Sprintf(format, args...)})
}

func (c *checker) warn(path, msg string) {
	c.warnings = append(c.warnings, Warning{Path: path, Message: msg})
}

// intIn returns *v (or def when nil) and reports a value outside [lo, hi].
func (c *checker) intIn(path string, v *int64, def, lo, hi int64) int64 {
	if v == nil {
		return def
	}
	if *v < lo || *v > hi {
		c.errorf(path, "%d must be between %d and %d", *v, lo, hi)
		return def
	}
	return *v
}

// port returns *v (or def when nil) and reports a port outside 1-65535.
func (c *checker) port(path string, v *int64, def uint16) uint16 {
	if v == nil {
		return def
	}
	if *v < 1 || *v > 65535 {
		c.errorf(path, "port %d out of range 1-65535", *v)
		return def
	}
	return uint16(*v)
}

// portOK reports whether an optional port is absent or valid (so that a
// collision is not reported against a default substituted for a bad value).
func portOK(v *int64) bool { return v == nil || *v >= 1 && *v <= 65535 }

func (c *checker) ms(path string, v *int64, def, lo, hi int64) time.Duration {
	return time.Duration(c.intIn(path, v, def, lo, hi)) * time.Millisecond
}

func (c *checker) seconds(path string, v *int64, def, lo, hi int64) time.Duration {
	return time.Duration(c.intIn(path, v, def, lo, hi)) * time.Second
}

func str(v *string, def string) string {
	if v == nil {
		return def
	}
	return *v
}

func boolean(v *bool, def bool) bool {
	if v == nil {
		return def
	}
	return *v
}

// validate fills in defaults, checks every value and builds the Config.
func validate(w *wireConfig, idx *posIndex) (*Config, []*FieldError) {
	c := &checker{idx: idx}
	cfg := &Config{}

	cfg.ListenAddrExplicit = w.ListenAddr != nil
	cfg.AllowNonLoopback = boolean(w.AllowNonLoopback, false)
	if a, ok := c.ipLiteral("listen_addr", str(w.ListenAddr, defaultListenAddr)); ok {
		cfg.ListenAddr = a
		if !a.IsLoopback() && !cfg.AllowNonLoopback {
			c.errorf("listen_addr", "'%s' is not loopback; set allow_non_loopback: true to permit non-loopback binding", a)
		}
	}
	if cfg.AllowNonLoopback {
		c.warn("listen_addr", warnNonLoopback)
	}
	cfg.ListenPort = c.port("listen_port", w.ListenPort, defaultListenPort)
	cfg.MetricsPort = c.port("metrics_port", w.MetricsPort, defaultMetricsPort)
	if a, ok := c.ipLiteral("metrics_listen_addr", str(w.MetricsListenAddr, defaultMetricsListenAddr)); ok {
		cfg.MetricsListenAddr = a
	}
	if cfg.ListenPort == cfg.MetricsPort && portOK(w.ListenPort) && portOK(w.MetricsPort) {
		if w.MetricsPort != nil {
			c.errorf("metrics_port", "metrics_port %d collides with listen_port %d", cfg.MetricsPort, cfg.ListenPort)
		} else {
			c.errorf("listen_port", "listen_port %d collides with metrics_port %d", cfg.ListenPort, cfg.MetricsPort)
		}
	}
	cfg.SecretsDir = str(w.SecretsDir, defaultSecretsDir)
	if strings.TrimSpace(cfg.SecretsDir) == "" {
		c.errorf("secrets_dir", "must not be empty")
	}
	if w.MaxConnections != nil && *w.MaxConnections == 0 {
		c.errorf("max_connections", "0 must be between 1 and %d (0 would refuse every connection)", int64(maxConnectionsLimit))
	} else {
		cfg.MaxConnections = int(c.intIn("max_connections", w.MaxConnections, defaultMaxConnections, 1, maxConnectionsLimit))
	}

	level := str(w.LogLevel, defaultLogLevel)
	if l, err := parseLevel(level); err != nil {
		c.errorf("log_level", "%v", err)
	} else {
		cfg.LogLevel = l
	}
	cfg.UpstreamCAFile = str(w.UpstreamCAFile, "")

	cfg.Timeouts = Timeouts{
		UpstreamConnect:        c.ms("upstream_connect_timeout_ms", w.UpstreamConnectTimeoutMS, defaultUpstreamConnectTimeoutMS, 1, 300_000),
		UpstreamResponseHeader: c.ms("upstream_response_header_timeout_ms", w.UpstreamResponseHeaderTimeoutMS, defaultUpstreamResponseHeaderTimeoutMS, 1, responseHeaderTimeoutMSLimit),
		UpstreamIdleConn:       c.seconds("upstream_idle_conn_timeout_seconds", w.UpstreamIdleConnTimeoutSeconds, defaultUpstreamIdleConnTimeoutSeconds, 1, 3600),
		DownstreamReadHeader:   c.ms("read_header_timeout_ms", w.ReadHeaderTimeoutMS, defaultReadHeaderTimeoutMS, 1, 600_000),
		DownstreamIdle:         c.seconds("idle_timeout_seconds", w.IdleTimeoutSeconds, defaultIdleTimeoutSeconds, 1, 3600),
		Shutdown:               c.seconds("shutdown_timeout_seconds", w.ShutdownTimeoutSeconds, defaultShutdownTimeoutSeconds, 1, 3600),
		TunnelIdle:             c.seconds("tunnel_idle_timeout_seconds", w.TunnelIdleTimeoutSeconds, defaultTunnelIdleTimeoutSeconds, 1, 86400),
	}
	cfg.Timeouts.DownstreamWrite = c.seconds("downstream_write_timeout_seconds", w.DownstreamWriteTimeoutSeconds, defaultDownstreamWriteTimeoutSeconds, 1, 3600)
	cfg.MaxConcurrentRequests = int(c.intIn("max_concurrent_requests", w.MaxConcurrentRequests,
		min(int64(defaultRequestsPerConnection)*int64(max(cfg.MaxConnections, 1)), int64(maxConnectionsLimit)), 1, maxConnectionsLimit))
	cfg.HTTP1Engine = EngineBotBox
	if w.HTTP1Engine != nil {
		switch e := *w.HTTP1Engine; e {
		case EngineBotBox, EngineNetHTTP:
			cfg.HTTP1Engine = e
		default:
			c.errorf("http1_engine", "must be botbox or net/http, got '%s'", clip(e))
		}
	}
	cfg.HTTP2MaxConcurrentStreams = int(c.intIn("http2_max_concurrent_streams", w.HTTP2MaxConcurrentStreams, defaultHTTP2MaxConcurrentStreams, 1, http2MaxConcurrentStreamsLimit))
	cfg.SecretsReloadDebounce = c.ms("secrets_reload_debounce_ms", w.SecretsReloadDebounceMS, defaultSecretsReloadDebounceMS, 1, 60_000)
	cfg.SecretsResyncInterval = c.seconds("secrets_resync_seconds", w.SecretsResyncSeconds, defaultSecretsResyncSeconds, 1, 3600)
	cfg.UpstreamMaxConnsPerHost = int(c.intIn("upstream_max_conns_per_host", w.UpstreamMaxConnsPerHost, defaultUpstreamMaxConnsPerHost, 1, upstreamMaxConnsPerHostLimit))
	cfg.UpstreamMaxIdleConns = int(c.intIn("upstream_max_idle_conns", w.UpstreamMaxIdleConns, defaultUpstreamMaxIdleConns, 1, upstreamMaxIdleConnsLimit))

	cfg.Credentials = c.credentials(w.Credentials)
	c.creds, c.usedCreds = map[string]*Credential{}, map[string]bool{}
	for i := range cfg.Credentials {
		c.creds[cfg.Credentials[i].Name] = &cfg.Credentials[i]
	}
	cfg.Policy = c.policy(w.EgressPolicy)
	c.credentialWarnings(cfg.Credentials)
	cfg.Interception = c.interception(w.HTTPSInterception, cfg)
	cfg.AddressGuard = c.addressGuard(w.AddressGuard)
	cfg.Placeholders = c.placeholders(w.Placeholders, cfg)
	cfg.DNSGuard = c.dnsGuard(w.DNSGuard, cfg)
	cfg.Warnings = c.warnings

	if len(c.problems) > 0 {
		return nil, c.problems
	}
	return cfg, nil
}

// ipLiteral parses an IP address without zone.
func (c *checker) ipLiteral(path, v string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(v)
	if err != nil || a.Zone() != "" {
		c.errorf(path, "must be an IP literal, got '%s'", clip(v))
		return netip.Addr{}, false
	}
	return a, true
}

// parseLevel parses one of the four lowercase level names.
func parseLevel(s string) (slog.Level, error) {
	switch s {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("invalid log level %q (want debug, info, warn or error)", clip(s))
}

// levelName is the inverse of parseLevel.
func levelName(l slog.Level) string {
	switch {
	case l <= slog.LevelDebug:
		return "debug"
	case l <= slog.LevelInfo:
		return "info"
	case l <= slog.LevelWarn:
		return "warn"
	}
	return "error"
}

func parseAction(s string) (Action, bool) {
	switch Action(s) {
	case ActionAllow, ActionDeny:
		return Action(s), true
	}
	return "", false
}

func (c *checker) policy(w *wirePolicy) Policy {
	const base = "egress_policy"
	p := Policy{DefaultAction: ActionDeny, Rules: []Rule{}}
	if w == nil {
		c.errorf(base, "required key is missing")
		return p
	}
	if w.DefaultAction != nil {
		a, ok := parseAction(*w.DefaultAction)
		if !ok {
			c.errorf(base+".default_action", "must be allow or deny, got '%s'", clip(*w.DefaultAction))
		} else {
			p.DefaultAction = a
		}
	}
	if p.DefaultAction == ActionAllow {
		c.warn(base+".default_action", warnDefaultAllow)
	}
	p.Mode = ModeEnforce
	if w.Mode != nil {
		switch m := Mode(*w.Mode); m {
		case ModeEnforce, ModeReport:
			p.Mode = m
		default:
			c.errorf(base+".mode", "must be enforce or report, got '%s'", clip(*w.Mode))
		}
	}
	if p.Mode == ModeReport {
		c.warn(base+".mode", warnReportMode)
	}
	if w.Rules == nil && !c.isEmptyList(base+".rules") {
		c.errorf(base+".rules", "required key is missing (use rules: [] for none)")
	}
	seen := map[string]int{} // canonical host -> rule index
	for i, wr := range w.Rules {
		path := fmt.Sprintf("%s.rules[%d]", base, i)
		r, ok := c.rule(path, i, wr)
		if !ok {
			continue
		}
		if j, dup := seen[r.Host]; dup {
			first := fmt.Sprintf("%s.rules[%d]", base, j)
			c.errorf(path+".host", "duplicate host in egress policy after normalization: %s (first at %s, line %d)", r.Host, first, c.idx.line(first))
			continue
		}
		seen[r.Host] = i
		p.Rules = append(p.Rules, r)
	}
	c.policyWarnings(p)
	return p
}

// isEmptyList reports whether path is present as an explicit empty list.
func (c *checker) isEmptyList(path string) bool {
	n := c.idx.values[path]
	return n != nil && n.ShortTag() == "!!seq" && len(n.Content) == 0
}

// rule validates one rule; ok is false when its host is unusable.
func (c *checker) rule(path string, i int, w wireRule) (Rule, bool) {
	r := Rule{Index: i, Line: c.idx.line(path)}
	host, hostOK := c.ruleHost(path+".host", w.Host)
	r.Host, r.RawHost = host, str(w.Host, "")
	label := host
	if !hostOK {
		label = clip(r.RawHost)
	}

	switch {
	case w.Action == nil:
		c.errorf(path+".action", "required key is missing (allow or deny)")
	default:
		a, ok := parseAction(*w.Action)
		if !ok {
			c.errorf(path+".action", "must be allow or deny, got '%s'", clip(*w.Action))
		}
		r.Action = a
	}

	if w.AllowedPorts != nil || c.isEmptyList(path+".allowed_ports") {
		if len(w.AllowedPorts) == 0 {
			c.errorf(path+".allowed_ports", "allowed_ports cannot be empty for host '%s' (omit the key to allow only port 443)", label)
		}
		r.AllowedPorts = make([]uint16, 0, len(w.AllowedPorts))
		for j, p := range w.AllowedPorts {
			r.AllowedPorts = append(r.AllowedPorts, c.port(fmt.Sprintf("%s.allowed_ports[%d]", path, j), &p, 0))
		}
	}

	for j, wh := range w.HeaderRewrites {
		if h, ok := c.rewrite(fmt.Sprintf("%s.header_rewrites[%d]", path, j), label, wh); ok {
			r.HeaderRewrites = append(r.HeaderRewrites, h)
		}
	}

	if hostOK && r.Action == ActionAllow && strings.HasPrefix(host, hostport.WildcardPrefix) {
		// A deny wildcard may name a public suffix (it denies every
		// tenant); an allow one would admit them all, with this rule's
		// header_rewrites.
		if err := hostport.CheckWildcardAllow(strings.TrimPrefix(host, hostport.WildcardPrefix)); err != nil {
			c.errorf(path+".host", "%v", err)
		}
	}
	if hostOK && r.Action == ActionAllow && hostport.IsCIDR(host) {
		if pfx, err := netip.ParsePrefix(host); err == nil && (pfx.Addr().Is4() && pfx.Bits() < minAllowBits4 || pfx.Addr().Is6() && pfx.Bits() < minAllowBits6) {
			c.errorf(path+".host", "CIDR %s is too wide for an allow rule (at most /%d for IPv4, /%d for IPv6); split it or use a deny rule", host, minAllowBits4, minAllowBits6)
		}
	}
	r.Routes = c.routes(path, label, r.Action, w)
	r.RemoveHeaders = c.removeHeaders(path+".remove_headers", label, w)
	r.QueryRewrites = c.queryRewrites(path+".query_rewrites", label, w.QueryRewrites)
	if w.ResponseHeaderTimeoutMS != nil {
		r.ResponseHeaderTimeout = c.ms(path+".response_header_timeout_ms", w.ResponseHeaderTimeoutMS, 0, 1, responseHeaderTimeoutMSLimit)
	}
	c.limits(path, &r, w)
	switch {
	case w.ScrubResponses != nil && r.Action == ActionDeny:
		c.errorf(path+".scrub_responses", "scrub_responses applies only to an allow rule (this rule denies every request)")
	case r.Action == ActionAllow:
		r.ScrubResponses = w.ScrubResponses == nil || *w.ScrubResponses
		// Meaningful only where nothing is injected (a rule that injects is
		// scrubbed anyway): Effective then round-trips.
		r.ScrubAlways = w.ScrubResponses != nil && *w.ScrubResponses && !r.InjectsSecret()
	}
	if w.AllowPrivateAddresses != nil {
		r.AllowPrivateAddresses = *w.AllowPrivateAddresses
		if r.AllowPrivateAddresses && r.Action == ActionDeny {
			c.errorf(path+".allow_private_addresses", "applies only to an allow rule (this rule denies every request)")
		}
	}
	c.upstreamTLS(path, label, host, hostOK, &r, w)
	c.ruleCredential(path, label, &r, w)
	if r.Credential != "" && r.Action == ActionAllow {
		r.ScrubResponses = w.ScrubResponses == nil || *w.ScrubResponses
		r.ScrubAlways = false
	}
	return r, hostOK
}

// The widest CIDR an allow rule may name: wider prefixes are almost always
// a mistake that opens a large part of the address space.
const (
	minAllowBits4 = 8
	minAllowBits6 = 32
)

// routes validates a rule's routes (nil when the key is omitted).
func (c *checker) routes(path, label string, action Action, w wireRule) []Route {
	if w.Routes == nil && !c.isEmptyList(path+".routes") {
		return nil
	}
	if len(w.Routes) == 0 {
		c.errorf(path+".routes", "routes cannot be empty for host '%s' (omit the key to allow every method and path)", label)
		return nil
	}
	if action == ActionDeny {
		c.errorf(path+".routes", "routes are only allowed on an allow rule (host '%s' is denied as a whole)", label)
	}
	out := make([]Route, 0, len(w.Routes))
	for j, wr := range w.Routes {
		rp := fmt.Sprintf("%s.routes[%d]", path, j)
		rt := Route{Action: ActionAllow}
		if wr.Action != nil {
			a, ok := parseAction(*wr.Action)
			if !ok {
				c.errorf(rp+".action", "must be allow or deny, got '%s'", clip(*wr.Action))
			}
			rt.Action = a
		}
		if wr.Methods != nil || c.isEmptyList(rp+".methods") {
			if len(wr.Methods) == 0 {
				c.errorf(rp+".methods", "methods cannot be empty (omit the key or write [\"*\"] for any method)")
			}
			rt.Methods = make([]string, 0, len(wr.Methods))
			for k, m := range wr.Methods {
				mp := fmt.Sprintf("%s.methods[%d]", rp, k)
				switch {
				case m == "*":
				case !httpguts.ValidHeaderFieldName(m): // the token grammar
					c.errorf(mp, "invalid method '%s' (an HTTP method token such as GET)", clip(m))
				case strings.ToUpper(m) != m:
					c.errorf(mp, "method '%s' must be upper-case (methods are case-sensitive: write %s)", clip(m), strings.ToUpper(m))
				case m == "CONNECT":
					c.errorf(mp, "CONNECT cannot be allowed by a route (BotBox always refuses CONNECT with 405)")
				default:
					rt.Methods = append(rt.Methods, m)
				}
			}
			if slices.Contains(wr.Methods, "*") {
				rt.Methods = nil
			}
		}
		if wr.Paths != nil || c.isEmptyList(rp+".paths") {
			if len(wr.Paths) == 0 {
				c.errorf(rp+".paths", "paths cannot be empty (omit the key or write [\"/**\"] for any path)")
			}
			for k, ps := range wr.Paths {
				g, err := reqpath.ParsePattern(ps)
				if err != nil {
					c.errorf(fmt.Sprintf("%s.paths[%d]", rp, k), "%v", err)
					continue
				}
				rt.Paths = append(rt.Paths, g.String())
			}
		}
		out = append(out, rt)
	}
	return out
}

// removeHeaders validates a rule's remove_headers: valid, unique (under
// case folding) names, none reserved/hop-by-hop (ReverseProxy already drops
// those, and Host is the proxy's), and none that the same rule's
// header_rewrites sets: a rewrite already deletes every client value of its
// header, so naming it in both places is a contradiction (remove, or set?)
// that is refused rather than resolved silently. nil when the key is absent
// or empty.
func (c *checker) removeHeaders(path, host string, w wireRule) []string {
	if len(w.RemoveHeaders) == 0 {
		return nil
	}
	out := make([]string, 0, len(w.RemoveHeaders))
	seen := map[string]int{} // lower-case name -> index
	for j, name := range w.RemoveHeaders {
		p := fmt.Sprintf("%s[%d]", path, j)
		lower := strings.ToLower(name)
		switch {
		case name == "":
			c.errorf(p, "empty header name in remove_headers for host '%s'", host)
			continue
		case !httpguts.ValidHeaderFieldName(name):
			c.errorf(p, "invalid header name '%s' in remove_headers for host '%s'", clip(name), host)
			continue
		case ReservedHeader(name):
			c.errorf(p, "header '%s' cannot be used in remove_headers (reserved/hop-by-hop) for host '%s'", name, host)
			continue
		}
		if k, dup := seen[lower]; dup {
			c.errorf(p, "header '%s' is listed twice in remove_headers for host '%s' (first at %s[%d])", name, host, path, k)
			continue
		}
		seen[lower] = j
		if k := slices.IndexFunc(w.HeaderRewrites, func(h wireRewrite) bool { return h.Name != nil && strings.EqualFold(*h.Name, name) }); k >= 0 {
			c.errorf(p, "header '%s' is both in remove_headers and set by header_rewrites[%d] for host '%s'; a header rewrite already replaces every value the client sent, so drop it from remove_headers", name, k, host)
			continue
		}
		out = append(out, name)
	}
	return out
}

// ruleHost canonicalises a rule host. "host:port" is accepted like the
// reference (the port is ignored) with a warning.
func (c *checker) ruleHost(path string, raw *string) (string, bool) {
	if raw == nil || strings.TrimSpace(*raw) == "" {
		c.errorf(path, "empty host in egress policy rule")
		return "", false
	}
	if strings.TrimSpace(*raw) != *raw {
		c.errorf(path, "host '%s' has leading/trailing whitespace in egress policy rule", clip(*raw))
		return "", false
	}
	switch {
	case hostport.IsWildcard(*raw):
		h, _, err := hostport.ParseWildcard(*raw)
		if err != nil {
			c.errorf(path, "%v", err)
			return "", false
		}
		return h, true
	case hostport.IsCIDR(*raw) && looksLikeIP(*raw):
		// Anything else with a '/' ("api.x.com/v1") falls through to the
		// host error and its "write the bare host" hint.
		_, h, err := hostport.ParseCIDR(*raw)
		if err != nil {
			c.errorf(path, "%v", err)
			return "", false
		}
		return h, true
	}
	h, err := hostport.ParseHost(*raw)
	if err == nil {
		return h, true
	}
	hp, err2 := hostport.Parse(*raw)
	if err2 != nil || !hp.HasPort {
		c.errorf(path, "%v%s", err, hostHint(*raw))
		return "", false
	}
	c.warn(path, fmt.Sprintf("port %d in host '%s' is ignored; only allowed_ports selects ports (without it only 443 is allowed)%s", hp.Port, clip(*raw), portHint(hp)))
	return hp.Host, true
}

// looksLikeIP reports whether the text before a '/' is an IP address, so
// a CIDR error (not a "write the bare host" hint) explains the problem.
func looksLikeIP(raw string) bool {
	before, _, _ := strings.Cut(raw, "/")
	_, err := netip.ParseAddr(before)
	return err == nil
}

// rewrite validates one header rewrite.
func (c *checker) rewrite(path, host string, w wireRewrite) (HeaderRewrite, bool) {
	ok := true
	h := HeaderRewrite{Name: str(w.Name, ""), Value: str(w.Value, ""), SecretRef: str(w.SecretRef, "")}
	switch {
	case h.Name == "":
		c.errorf(path+".name", "empty header name in rewrite for host '%s'", host)
		ok = false
	case !httpguts.ValidHeaderFieldName(h.Name):
		c.errorf(path+".name", "invalid header name '%s' in rewrite for host '%s'", clip(h.Name), host)
		ok = false
	case ReservedHeader(h.Name):
		c.errorf(path+".name", "header '%s' cannot be used in rewrites (reserved/hop-by-hop) for host '%s'", h.Name, host)
		ok = false
	}
	name := clip(h.Name)

	if w.Value == nil {
		c.errorf(path+".value", "required key is missing")
		ok = false
	}
	// The value is never quoted in messages: a static value may be a credential.
	if w.SecretRef != nil {
		if !secretref.Valid(h.SecretRef) {
			c.errorf(path+".secret_ref", "secret_ref '%s' for header '%s' must be %s", clip(h.SecretRef), name, secretref.Rule)
			ok = false
		}
		if w.Value != nil {
			if t, err := ParseTemplate(h.Value, true); errors.Is(err, ErrNoValueToken) {
				c.errorf(path+".value", "value of header '%s' for host '%s' has secret_ref '%s' but no {value} placeholder, so the secret would never be sent", name, host, clip(h.SecretRef))
				ok = false
			} else if err != nil {
				c.errorf(path+".value", "value template of header '%s' for host '%s' (secret_ref '%s'): %v", name, host, clip(h.SecretRef), err)
				ok = false
			} else if !t.Basic && !httpguts.ValidHeaderFieldValue(strings.Join(t.Parts, "")) {
				c.errorf(path+".value", "value template of header '%s' for host '%s' contains characters not allowed in a header value (CR, LF, NUL or another control character)", name, host)
				ok = false
			}
		}
	} else if !httpguts.ValidHeaderFieldValue(h.Value) {
		c.errorf(path+".value", "static value of header '%s' for host '%s' contains characters not allowed in a header value (CR, LF, NUL or another control character)", name, host)
		ok = false
	} else if strings.Contains(h.Value, templateBasicOpen) {
		c.errorf(path+".value", "value of header '%s' for host '%s' uses {basic:USER} without a secret_ref; add the secret_ref whose value is the password", name, host)
		ok = false
	}
	return h, ok
}

// queryRewrites validates a rule's query_rewrites: each a valid parameter
// name (ValidQueryParamName), unique within the rule (compared exactly, as
// the rewrite matches), a valid secret_ref (required) and a template with
// {value} (ParseTemplate; no {basic:...}) whose literal parts are valid
// UTF-8 without control characters.
func (c *checker) queryRewrites(path, host string, ws []wireRewrite) []QueryRewrite {
	var out []QueryRewrite
	seen := map[string]int{}
	for j, w := range ws {
		p := fmt.Sprintf("%s[%d]", path, j)
		q := QueryRewrite{Name: str(w.Name, ""), Value: str(w.Value, ""), SecretRef: str(w.SecretRef, "")}
		ok := true
		switch {
		case q.Name == "":
			c.errorf(p+".name", "empty query parameter name in query_rewrites for host '%s'", host)
			ok = false
		case !ValidQueryParamName(q.Name):
			c.errorf(p+".name", "invalid query parameter name '%s' in query_rewrites for host '%s' (1 to %d of A-Z a-z 0-9 - . _ ~)", clip(q.Name), host, maxQueryParamName)
			ok = false
		default:
			if k, dup := seen[q.Name]; dup {
				c.errorf(p+".name", "query parameter '%s' is set twice in query_rewrites for host '%s' (first at %s[%d])", q.Name, host, path, k)
				ok = false
			}
			seen[q.Name] = j
		}
		switch {
		case w.SecretRef == nil:
			c.errorf(p+".secret_ref", "required key is missing: a query rewrite injects a secret")
			ok = false
		case !secretref.Valid(q.SecretRef):
			c.errorf(p+".secret_ref", "secret_ref '%s' for query parameter '%s' must be %s", clip(q.SecretRef), clip(q.Name), secretref.Rule)
			ok = false
		}
		if w.Value == nil {
			c.errorf(p+".value", "required key is missing")
			ok = false
		} else if t, err := ParseTemplate(q.Value, false); err != nil {
			c.errorf(p+".value", "value template of query parameter '%s' for host '%s': %v", clip(q.Name), host, err)
			ok = false
		} else if !validQueryLiteral(strings.Join(t.Parts, "")) {
			c.errorf(p+".value", "value template of query parameter '%s' for host '%s' is not valid UTF-8 or has a control character", clip(q.Name), host)
			ok = false
		}
		if ok {
			out = append(out, q)
		}
	}
	return out
}

// maxQueryParamName bounds a query_rewrites name.
const maxQueryParamName = 128

// ValidQueryParamName reports whether name may be a query_rewrites name:
// 1 to 128 unreserved characters (RFC 3986: letters, digits, '-', '.',
// '_', '~'), so that it is sent as written and no origin reads a
// separator (';', '&', '=') or an escape into it.
func ValidQueryParamName(name string) bool {
	if name == "" || len(name) > maxQueryParamName {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') {
			return false
		}
	}
	return true
}

func validQueryLiteral(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// ReservedHeader reports (case-insensitively) the headers a rewrite may not
// set: Host, which the proxy sets from the upstream authority, and the
// hop-by-hop headers, which would change how the upstream connection
// behaves (the reference's list). Package rewrite refuses the same list.
func ReservedHeader(name string) bool {
	switch strings.ToLower(name) {
	case "host", "connection", "keep-alive", "proxy-connection", "proxy-authenticate",
		"proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade":
		return true
	}
	return false
}

func (c *checker) interception(w *wireInterception, cfg *Config) Interception {
	const base = "https_interception"
	in := Interception{
		ListenAddr:          netip.MustParseAddr(defaultListenAddr),
		ListenPort:          defaultInterceptionListenPort,
		EnforceSNIHostMatch: true,
		CertTTL:             defaultCertTTLSeconds * time.Second,
		CertCacheSize:       defaultCertCacheSize,
		CertCacheTTL:        defaultCertCacheTTLSeconds * time.Second,
		HandshakeTimeout:    defaultHandshakeTimeoutMS * time.Millisecond,
	}
	if w == nil {
		return in
	}
	if w.Enabled == nil {
		c.errorf(base+".enabled", "required key is missing when the https_interception block is present (true or false)")
	}
	in.Enabled = boolean(w.Enabled, false)
	in.ListenAddrExplicit = w.ListenAddr != nil
	in.CACertPath = str(w.CACertPath, "")
	in.CAKeyPath = str(w.CAKeyPath, "")
	in.EnforceSNIHostMatch = boolean(w.EnforceSNIHostMatch, true)
	in.DenyHandshakeOnDisallowedSNI = boolean(w.DenyHandshakeOnDisallowedSNI, false)

	// Like the reference, the values of a disabled block are kept but not
	// checked; they are rendered by Effective as written.
	if !in.Enabled {
		if a, err := netip.ParseAddr(str(w.ListenAddr, defaultListenAddr)); err == nil {
			in.ListenAddr = a
		}
		if w.ListenPort != nil && *w.ListenPort >= 1 && *w.ListenPort <= 65535 {
			in.ListenPort = uint16(*w.ListenPort)
		}
		setIf(&in.CertTTL, w.CertTTLSeconds, time.Second)
		setIf(&in.CertCacheTTL, w.CertCacheTTLSeconds, time.Second)
		setIf(&in.HandshakeTimeout, w.HandshakeTimeoutMS, time.Millisecond)
		if w.CertCacheSize != nil && *w.CertCacheSize >= 1 && *w.CertCacheSize <= certCacheSizeLimit {
			in.CertCacheSize = int(*w.CertCacheSize)
		}
		return in
	}

	if a, ok := c.ipLiteral(base+".listen_addr", str(w.ListenAddr, defaultListenAddr)); ok {
		in.ListenAddr = a
		if !a.IsLoopback() {
			c.errorf(base+".listen_addr", "'%s' must be loopback; HTTPS interception listener must bind to loopback only", a)
		}
	}
	in.ListenPort = c.port(base+".listen_port", w.ListenPort, defaultInterceptionListenPort)
	if in.ListenPort == cfg.ListenPort && portOK(w.ListenPort) {
		c.errorf(base+".listen_port", "https_interception.listen_port %d collides with listen_port %d", in.ListenPort, cfg.ListenPort)
	}
	if in.ListenPort == cfg.MetricsPort && portOK(w.ListenPort) {
		c.errorf(base+".listen_port", "https_interception.listen_port %d collides with metrics_port %d", in.ListenPort, cfg.MetricsPort)
	}
	certEmpty, keyEmpty := strings.TrimSpace(in.CACertPath) == "", strings.TrimSpace(in.CAKeyPath) == ""
	switch {
	case certEmpty && keyEmpty:
		c.errorf(base, "https_interception.ca_cert_path and https_interception.ca_key_path must not be empty when enabled")
	case certEmpty:
		c.errorf(base+".ca_cert_path", "https_interception.ca_cert_path must not be empty when enabled")
	case keyEmpty:
		c.errorf(base+".ca_key_path", "https_interception.ca_key_path must not be empty when enabled")
	}
	if w.CertCacheSize != nil && *w.CertCacheSize <= 0 {
		c.errorf(base+".cert_cache_size", "https_interception.cert_cache_size must be greater than 0, got %d", *w.CertCacheSize)
	} else {
		in.CertCacheSize = int(c.intIn(base+".cert_cache_size", w.CertCacheSize, defaultCertCacheSize, 1, certCacheSizeLimit))
	}
	in.CertTTL = c.seconds(base+".cert_ttl_seconds", w.CertTTLSeconds, defaultCertTTLSeconds, 60, 604800)
	in.HandshakeTimeout = c.ms(base+".handshake_timeout_ms", w.HandshakeTimeoutMS, defaultHandshakeTimeoutMS, 100, 60000)
	cacheTTL := int64(defaultCertCacheTTLSeconds)
	if w.CertCacheTTLSeconds != nil {
		cacheTTL = *w.CertCacheTTLSeconds
	}
	switch ttl := int64(in.CertTTL / time.Second); {
	case cacheTTL < 0:
		c.errorf(base+".cert_cache_ttl_seconds", "%d must not be negative", cacheTTL)
	case cacheTTL > ttl:
		c.errorf(base+".cert_cache_ttl_seconds", "https_interception.cert_cache_ttl_seconds (%d) must not exceed https_interception.cert_ttl_seconds (%d)", cacheTTL, ttl)
	default:
		in.CertCacheTTL = time.Duration(cacheTTL) * time.Second
	}
	return in
}

// placeholderEnvFile is the name of the env file in placeholders.dir
// (package placeholder writes it); a secret_ref of that name would collide.
const placeholderEnvFile = "env"

// placeholders validates the placeholders block. Like https_interception, a
// disabled block keeps its values unchecked. When enabled, dir must not be
// secrets_dir, inside it or above it (the app mounts dir: it must never see
// a real secret, and BotBox must never write into the secret volume), no
// secret_ref may be named like the env file, and no two secret_refs may
// give the same environment variable name.
func (c *checker) placeholders(w *wirePlaceholders, cfg *Config) Placeholders {
	const base = "placeholders"
	p := Placeholders{Dir: defaultPlaceholderDir}
	if w == nil {
		return p
	}
	if w.Enabled == nil {
		c.errorf(base+".enabled", "required key is missing when the placeholders block is present (true or false)")
	}
	p.Enabled = boolean(w.Enabled, false)
	p.Dir = str(w.Dir, defaultPlaceholderDir)
	if !p.Enabled {
		return p
	}
	if strings.TrimSpace(p.Dir) == "" || !filepath.IsAbs(p.Dir) {
		c.errorf(base+".dir", "must be an absolute path, got %q", clip(p.Dir))
		return p
	}
	// A relative secrets_dir is relative to the working directory, as the
	// secret store resolves it.
	dir, secretsDir := filepath.Clean(p.Dir), cfg.SecretsDir
	if abs, err := filepath.Abs(secretsDir); err == nil {
		secretsDir = abs
	}
	if within(dir, secretsDir) || within(secretsDir, dir) {
		c.errorf(base+".dir", "%q overlaps secrets_dir %q: the app mounts this directory, so it must never hold or contain the real secrets", clip(p.Dir), clip(cfg.SecretsDir))
	}
	seen := map[string]string{}
	for _, ref := range cfg.RequiredSecretRefs() {
		if ref == placeholderEnvFile {
			c.errorf(base, "secret_ref %q collides with the env file of placeholders.dir; rename the secret", ref)
			continue
		}
		name := secretref.EnvName(ref)
		if other, ok := seen[name]; ok {
			c.errorf(base, "secret_refs %q and %q both give the environment variable %s; rename one", other, ref, name)
			continue
		}
		seen[name] = ref
	}
	return p
}

// within reports whether path is dir or inside it (both cleaned).
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// setIf sets *d to *v units when v is present and not negative.
func setIf(d *time.Duration, v *int64, unit time.Duration) {
	if v != nil && *v >= 0 && *v <= int64(1<<62)/int64(unit) {
		*d = time.Duration(*v) * unit
	}
}

// RequiredSecretRefs returns every secret_ref of every rule (deny rules
// too), sorted and without duplicates. The proxy is ready only when all exist.
func (c *Config) RequiredSecretRefs() []string {
	refs := []string{}
	for _, r := range c.Policy.Rules {
		for _, h := range r.HeaderRewrites {
			if h.SecretRef != "" {
				refs = append(refs, h.SecretRef)
			}
		}
		for _, q := range r.QueryRewrites {
			refs = append(refs, q.SecretRef)
		}
	}
	slices.Sort(refs)
	return slices.Compact(refs)
}

// ApplyEnv applies the environment overrides: BOTBOX_LOG_LEVEL (debug,
// info, warn or error) replaces log_level; BOTBOX_DNS_GUARD_PORT serves the
// DNS guard on that port (applyDNSGuardPort). An empty variable changes
// nothing; any other value is an error, never a silent default.
func ApplyEnv(c *Config, getenv func(string) string) error {
	if err := applyDNSGuardPort(c, getenv); err != nil {
		return err
	}
	if v := getenv("BOTBOX_LOG_LEVEL"); v != "" {
		l, err := parseLevel(v)
		if err != nil {
			return fmt.Errorf("BOTBOX_LOG_LEVEL: %w", err)
		}
		c.LogLevel = l
	}
	// The injector and the chart set BOTBOX_METRICS_LISTEN_ADDR from the
	// downward API (status.podIP), which a ConfigMap cannot express.
	if v := getenv("BOTBOX_METRICS_LISTEN_ADDR"); v != "" {
		a, err := netip.ParseAddr(v)
		if err != nil || a.Zone() != "" {
			return fmt.Errorf("BOTBOX_METRICS_LISTEN_ADDR: %q is not an IP address", v)
		}
		c.MetricsListenAddr = a.Unmap()
	}
	return nil
}

// Bounds of the per-rule limits.
const (
	maxBodyLimit = int64(1) << 40 // 1 TiB: larger is "no limit"; omit the key
	maxRate      = 1e6            // requests per second
	maxBurst     = 1_000_000
)

// warnReportMode is the start-up (and reload) warning of mode: report.
const warnReportMode = "egress_policy.mode is report: requests the policy denies are FORWARDED (without header rewrites) and only logged as report_deny; use it to build a policy, never in production"

// limits validates max_request_body_bytes and rate_limit into r. They
// bound what an allow rule lets through, so a deny rule cannot have them.
// upstreamTLS validates a rule's upstream_tls (true when omitted). Plain
// HTTP is for origins that never leave the host or the site: false is
// accepted only on an allow rule with allowed_ports whose host is a
// loopback or private IP or CIDR, or that sets allow_private_addresses
// (the dial guard then refuses every address that is not loopback or
// private, upstream.DialPolicy.Cleartext). TestUpstreamTLSValidation.
func (c *checker) upstreamTLS(path, label, host string, hostOK bool, r *Rule, w wireRule) {
	r.PlainHTTP = w.UpstreamTLS != nil && !*w.UpstreamTLS
	if !r.PlainHTTP || !hostOK {
		return
	}
	key := path + ".upstream_tls"
	if r.Action == ActionDeny {
		c.errorf(key, "applies only to an allow rule (this rule denies every request)")
		return
	}
	if w.AllowedPorts == nil {
		c.errorf(key, "upstream_tls: false needs allowed_ports, the origin's plain-HTTP port (e.g. [8000]); without it only 443 is allowed")
	}
	var pfx netip.Prefix
	if a, err := netip.ParseAddr(host); err == nil {
		pfx = netip.PrefixFrom(a, a.BitLen())
	} else if hostport.IsCIDR(host) {
		pfx, _ = netip.ParsePrefix(host)
	}
	switch {
	case pfx.IsValid():
		if class, ok := addrguard.CleartextPrefixAllowed(pfx); !ok {
			c.errorf(key, "upstream_tls: false would send requests for '%s' in the clear to a %s address; plain HTTP is only for loopback and private (RFC 1918, ULA) origins", label, class)
		}
	case !r.AllowPrivateAddresses:
		c.errorf(key, "upstream_tls: false for the name '%s' needs allow_private_addresses: true (plain HTTP goes only to private addresses; BotBox refuses a public one at connect time), or write the origin's IP or CIDR as the host", label)
	}
}

func (c *checker) limits(path string, r *Rule, w wireRule) {
	if (w.MaxRequestBodyBytes != nil || w.RateLimit != nil) && r.Action == ActionDeny {
		c.errorf(path, "max_request_body_bytes and rate_limit apply only to an allow rule (this rule denies every request)")
	}
	if v := w.MaxRequestBodyBytes; v != nil {
		if *v < 1 || *v > maxBodyLimit {
			c.errorf(path+".max_request_body_bytes", "must be between 1 and %d bytes, got %d (omit the key for no limit)", maxBodyLimit, *v)
		} else {
			r.MaxRequestBodyBytes = *v
		}
	}
	if rl := w.RateLimit; rl != nil {
		ok := true
		if rl.RequestsPerSecond == nil {
			c.errorf(path+".rate_limit.requests_per_second", "required key is missing")
			ok = false
		} else if v := *rl.RequestsPerSecond; !(v > 0 && v <= maxRate) {
			c.errorf(path+".rate_limit.requests_per_second", "must be above 0 and at most %g, got %g", float64(maxRate), v)
			ok = false
		}
		burst := int64(0)
		if rl.Burst == nil {
			if ok {
				// Default: one second's worth of requests, at least one.
				burst = max(1, int64(math.Ceil(*rl.RequestsPerSecond)))
			}
		} else if burst = *rl.Burst; burst < 1 || burst > maxBurst {
			c.errorf(path+".rate_limit.burst", "must be between 1 and %d, got %d", maxBurst, burst)
			ok = false
		}
		if ok {
			r.RateLimit = &RateLimit{RequestsPerSecond: *rl.RequestsPerSecond, Burst: int(burst)}
		}
	}
}

// dnsGuard validates dns_guard. The block's values are checked whether or
// not it is enabled (unlike https_interception, nothing in it depends on
// files that may be absent while disabled).
func (c *checker) dnsGuard(w *wireDNSGuard, cfg *Config) DNSGuard {
	const base = "dns_guard"
	g := DNSGuard{ListenPort: defaultDNSGuardListenPort, MaxTTL: defaultDNSGuardMaxTTLSeconds * time.Second}
	if w == nil {
		return g
	}
	if w.Enabled == nil {
		c.errorf(base+".enabled", "required key is missing when the dns_guard block is present (true or false)")
	}
	g.Enabled = boolean(w.Enabled, false)
	g.ListenPort = c.port(base+".listen_port", w.ListenPort, defaultDNSGuardListenPort)
	if g.Enabled && portOK(w.ListenPort) {
		if key, taken := dnsGuardPortTaken(cfg, g.ListenPort); taken {
			c.errorf(base+".listen_port", "dns_guard.listen_port %d collides with %s %d (the guard also listens on TCP)", g.ListenPort, key, g.ListenPort)
		}
	}
	g.MaxTTL = c.seconds(base+".max_ttl_seconds", w.MaxTTLSeconds, defaultDNSGuardMaxTTLSeconds, 0, dnsGuardMaxTTLSecondsLimit)
	if len(w.Upstream) > dnsGuardMaxUpstreams {
		c.errorf(base+".upstream", "%d resolvers listed; at most %d", len(w.Upstream), dnsGuardMaxUpstreams)
		return g
	}
	seen := map[netip.AddrPort]bool{}
	for i, raw := range w.Upstream {
		path := fmt.Sprintf("%s.upstream[%d]", base, i)
		ap, err := ParseResolver(raw)
		switch {
		case err != nil:
			c.errorf(path, "%v", err)
		case seen[ap]:
			c.errorf(path, "'%s' is listed twice", ap)
		case g.Enabled && ap.Port() == g.ListenPort && (ap.Addr().IsLoopback() || ap.Addr() == cfg.ListenAddr):
			c.errorf(path, "'%s' is the guard itself; name the resolver the guard forwards to (for example the cluster DNS service, 10.96.0.10:53)", ap)
		default:
			seen[ap] = true
			g.Upstream = append(g.Upstream, ap)
		}
	}
	return g
}

// Warnings of the address_guard block.
const (
	warnAddressGuardOff = "address_guard is disabled: BotBox may connect to loopback, link-local (cloud metadata) and private addresses an allowed name resolves to, or that default_action: allow lets through (SSRF)"
	warnMetadataAllowed = "this range contains a cloud metadata address (%s): requests may reach the metadata service and its credentials"
)

// addressGuard validates address_guard (absent: enabled, nothing allowed).
func (c *checker) addressGuard(w *wireAddressGuard) AddressGuard {
	const base = "address_guard"
	g := AddressGuard{AllowedCIDRs: []netip.Prefix{}}
	if w == nil {
		return g
	}
	g.Disabled = !boolean(w.Enabled, true)
	if g.Disabled {
		c.warn(base+".enabled", warnAddressGuardOff)
	}
	seen := map[netip.Prefix]int{}
	for i, s := range w.AllowedCIDRs {
		path := fmt.Sprintf("%s.allowed_cidrs[%d]", base, i)
		p, err := allowedCIDR(s)
		if err != nil {
			c.errorf(path, "%v", err)
			continue
		}
		if j, dup := seen[p]; dup {
			c.errorf(path, "duplicate range %s (also allowed_cidrs[%d])", p, j)
			continue
		}
		seen[p] = i
		for _, m := range addrguard.MetadataAddrs() {
			if p.Contains(m) {
				c.warn(path, fmt.Sprintf(warnMetadataAllowed, m))
			}
		}
		g.AllowedCIDRs = append(g.AllowedCIDRs, p)
	}
	return g
}

// ParseResolver parses a dns_guard.upstream entry (errors quote the entry
// with %q: it may hold any bytes, FuzzParseResolver): an IP address with an
// optional port ("10.96.0.10", "10.96.0.10:53", "fd00::a", "[fd00::a]:53");
// port 53 when omitted. Names (which would need DNS to reach DNS), zones,
// IPv4-mapped addresses, the unspecified address and port 0 are refused.
func ParseResolver(raw string) (netip.AddrPort, error) {
	s := strings.TrimSpace(raw)
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		a, aerr := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
		if aerr != nil {
			return netip.AddrPort{}, fmt.Errorf("%q is not an IP address or IP:port (a resolver is named by address)", clip(raw))
		}
		ap = netip.AddrPortFrom(a, 53)
	}
	switch a := ap.Addr(); {
	case a.Zone() != "":
		return netip.AddrPort{}, fmt.Errorf("%q has a zone", clip(raw))
	case a.Is4In6():
		return netip.AddrPort{}, fmt.Errorf("%q is an IPv4-mapped IPv6 address; write %s", clip(raw), netip.AddrPortFrom(a.Unmap(), ap.Port()))
	case a.IsUnspecified():
		return netip.AddrPort{}, fmt.Errorf("%q is the unspecified address", clip(raw))
	case ap.Port() == 0:
		return netip.AddrPort{}, fmt.Errorf("%q has port 0", clip(raw))
	}
	return ap, nil
}

// allowedCIDR parses one allowed_cidrs entry: a CIDR in canonical form
// (hostport.ParseCIDR: no host bits, no zone, no IPv4-mapped prefix) or a
// bare IP address, which is its /32 or /128.
func allowedCIDR(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		switch {
		case err != nil || a.Zone() != "":
			return netip.Prefix{}, fmt.Errorf("'%s' is neither a CIDR (e.g. 10.0.0.0/8) nor an IP address without zone", clip(s))
		case a.Is4In6():
			return netip.Prefix{}, fmt.Errorf("'%s' is an IPv4-mapped IPv6 address; write the IPv4 address instead", clip(s))
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, _, err := hostport.ParseCIDR(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return p, nil
}
