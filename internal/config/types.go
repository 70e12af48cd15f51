package config

import (
	"log/slog"
	"net/netip"
	"time"
)

// Config is the validated configuration BotBox runs with. It is produced
// only by Parse/Load, with every default filled in; ApplyEnv may then
// override fields from the environment. After that it is read-only: it is
// shared by every goroutine without locks, slices included, so nothing may
// modify it once the server starts.
type Config struct {
	// ListenAddr is the plain HTTP proxy listener address (default 127.0.0.1).
	ListenAddr netip.Addr
	// ListenAddrExplicit is false when listen_addr was omitted: the proxy then
	// also listens on [::1] when the kernel has IPv6 (redirected IPv6 lands there).
	ListenAddrExplicit bool
	// ListenPort is the plain HTTP proxy port (default 8080).
	ListenPort uint16
	// MetricsPort is the metrics/health port (default 9090).
	MetricsPort uint16
	// MetricsListenAddr is the address the metrics/health listener binds
	// (default 127.0.0.1, the reference's). When it is neither loopback nor
	// unspecified (0.0.0.0, ::), BotBox also listens on 127.0.0.1 at
	// MetricsPort, so exec probes on loopback keep working. The admin port
	// serves only /metrics, /healthz and /readyz (package admin), so a
	// non-loopback address needs no allow_non_loopback.
	MetricsListenAddr netip.Addr
	// SecretsDir is the watched secret directory (default /var/run/secrets/botbox).
	SecretsDir string
	// MaxConnections bounds concurrent downstream connections across every
	// proxy listener (default 1024, at least 1).
	MaxConnections int
	// MaxConcurrentRequests bounds requests in flight across every proxy
	// listener, HTTP/2 streams and WebSocket tunnels included (default
	// 2 × MaxConnections).
	MaxConcurrentRequests int
	// HTTP2MaxConcurrentStreams is the HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS
	// the interception listener announces per connection (default 100).
	HTTP2MaxConcurrentStreams int
	// HTTP1Engine is the server of HTTP/1.1 connections on both proxy
	// listeners: EngineBotBox (default; package engine, which hands the
	// unusual ones to net/http) or EngineNetHTTP (net/http for all).
	HTTP1Engine string
	// AllowNonLoopback permits a non-loopback ListenAddr (default false).
	AllowNonLoopback bool
	// Policy is the egress policy.
	Policy Policy
	// Interception is the HTTPS interception block; Enabled is false when absent.
	Interception Interception
	// Placeholders is the placeholders block; Enabled is false when absent.
	Placeholders Placeholders
	// DNSGuard is the dns_guard block; Enabled is false when absent.
	DNSGuard DNSGuard
	// UpstreamCAFile is an optional PEM bundle of extra roots trusted for
	// upstream TLS, added to the system roots ("" = none).
	UpstreamCAFile string
	// LogLevel is the minimum log level (default info; BOTBOX_LOG_LEVEL overrides).
	LogLevel slog.Level
	// Timeouts holds every timeout, reference values by default.
	Timeouts Timeouts
	// SecretsReloadDebounce is the delay between a file event and the reload (default 2s).
	SecretsReloadDebounce time.Duration
	// SecretsResyncInterval is the periodic full re-read of the secret directory,
	// a fallback for missed events (default 30s).
	SecretsResyncInterval time.Duration
	// UpstreamMaxConnsPerHost bounds the upstream connections (dialling,
	// active and idle) to one origin host:port (default 512, at least 1).
	// Requests over the bound wait for a connection.
	UpstreamMaxConnsPerHost int
	// UpstreamMaxIdleConns bounds the idle pooled upstream connections across
	// every origin (default 1024, at least 1).
	UpstreamMaxIdleConns int
	// AddressGuard is the address_guard block (SPEC §5.3): which upstream
	// addresses BotBox refuses to dial (package addrguard).
	AddressGuard AddressGuard
	// Credentials are the named credentials (credentials:), sorted by
	// name; a rule refers to one by Rule.Credential. Empty, never nil,
	// after Parse.
	Credentials []Credential
	// Warnings are non-fatal findings (e.g. default_action allow).
	Warnings []Warning
}

// AddressGuard is the address_guard section.
type AddressGuard struct {
	// Disabled is address_guard.enabled: false. The guard is on by default
	// (a documented difference from the reference), and so in a zero
	// Config: BotBox refuses to dial loopback, link-local and metadata,
	// private, CGNAT, ULA and the other special ranges of package addrguard
	// unless an opt-in opens them.
	Disabled bool
	// AllowedCIDRs are ranges never refused (masked, no IPv4-mapped
	// prefixes; a bare IP is a /32 or /128). Empty, never nil, after Parse.
	AllowedCIDRs []netip.Prefix
}

// Warning is a non-fatal configuration finding, logged at start-up.
type Warning struct {
	// Path is the key path, e.g. "egress_policy.default_action".
	Path    string
	Message string
}

// Action is a policy action.
type Action string

// The two policy actions.
const (
	ActionAllow Action = "allow"
	ActionDeny  Action = "deny"
)

// Policy is the egress policy section.
type Policy struct {
	// DefaultAction applies to hosts no rule names (default deny).
	DefaultAction Action
	// Rules in file order; hosts are unique after canonicalisation.
	Rules []Rule
	// Mode is enforce (default) or report.
	Mode Mode
}

// Rule is one egress_policy.rules entry.
type Rule struct {
	// Host is the canonical host (lowercase, punycode, no trailing dot, IP
	// literals in canonical form without brackets), no port.
	Host string
	// RawHost is the host as written in the file (for messages).
	RawHost string
	// Index is the rule's position in egress_policy.rules (0-based).
	Index int
	// Line is the line of the rule in the config file (0 if unknown).
	Line   int
	Action Action
	// HeaderRewrites are applied, in order, to allowed requests.
	HeaderRewrites []HeaderRewrite
	// QueryRewrites are applied, in order, to the query of allowed
	// requests: every parameter of the name is deleted, then one is
	// added. Names are unique within the rule.
	QueryRewrites []QueryRewrite
	// AllowedPorts is nil when omitted: then only 443 is allowed.
	AllowedPorts []uint16
	// RemoveHeaders are header names (as configured, valid tokens, unique
	// under case folding, none reserved/hop-by-hop, none set by
	// HeaderRewrites) deleted from allowed requests and never added: the
	// credentials a client may send that this rule does not own.
	RemoveHeaders []string
	// ResponseHeaderTimeout overrides Timeouts.UpstreamResponseHeader for
	// requests this rule allows; 0 when omitted (the global value applies).
	ResponseHeaderTimeout time.Duration
	// Routes is nil when omitted: every method and path is allowed. Else
	// the first route matching the request's method and canonical path
	// decides, and a request no route matches is denied. Only allow rules
	// have routes.
	Routes []Route
	// MaxRequestBodyBytes bounds the body of a request this rule allows
	// (0 = no bound): a larger body gets 413 and is never forwarded whole.
	MaxRequestBodyBytes int64
	// RateLimit is the rule's token bucket (nil = no rate limit).
	RateLimit *RateLimit
	// ScrubResponses masks every secret BotBox holds (not only those this
	// rule's header_rewrites inject) wherever the origin reflects it in a
	// response to a request into which the rule injected a secret (package
	// scrub); true unless the rule says scrub_responses: false. Always
	// false for a deny rule.
	ScrubResponses bool
	// ScrubAlways (scrub_responses: true written out on a rule that
	// injects no secret: InjectsSecret false) scrubs this rule's responses
	// for every secret BotBox holds although the rule injects none; unset,
	// a rule that injects nothing is not scrubbed.
	ScrubAlways bool
	// AllowPrivateAddresses (allow rules only) lets the address guard dial
	// private, CGNAT, ULA and site-local addresses for requests this rule
	// allows; never loopback, link-local or metadata addresses.
	AllowPrivateAddresses bool
	// PlainHTTP is set when the rule says upstream_tls: false (the zero
	// value is TLS, so a Rule built without it never goes in the clear):
	// BotBox then speaks plain HTTP to the origin, on the port the policy
	// evaluated, and the dial guard refuses any address that is not
	// loopback or private (upstream.DialPolicy.Cleartext), so a credential
	// never crosses a public network in the clear. Valid only on an allow
	// rule whose host is an IP/CIDR or that sets allow_private_addresses,
	// with allowed_ports.
	PlainHTTP bool
	// Credential names the entry of Config.Credentials that authenticates
	// the requests this rule allows ("" = none). Never set together with
	// HeaderRewrites or QueryRewrites; only on an allow rule.
	Credential string
}

// Route is one routes entry of an allow rule.
type Route struct {
	// Methods are upper-case method tokens; nil (omitted or "*") is any
	// method. CONNECT is never listed (it is refused everywhere).
	Methods []string
	// Paths are canonical path globs (package reqpath); nil (omitted) is any
	// path.
	Paths []string
	// Action is allow (the default) or deny.
	Action Action
}

// RateLimit is a rule's rate_limit: a token bucket refilled at
// RequestsPerSecond and holding at most Burst tokens (full at start).
type RateLimit struct {
	RequestsPerSecond float64
	Burst             int
}

// The values of http1_engine.
const (
	EngineBotBox  = "botbox"
	EngineNetHTTP = "net/http"
)

// Mode is egress_policy.mode.
type Mode string

// The two policy modes.
const (
	// ModeEnforce refuses what the policy denies (the default).
	ModeEnforce Mode = "enforce"
	// ModeReport forwards, without any header rewrite, what enforce mode
	// would refuse for host, port, body size or rate, and logs it as
	// report_deny.
	ModeReport Mode = "report"
)

// InjectsSecret reports whether one of the rule's header rewrites fills a
// secret (a secret_ref), it has query_rewrites (each fills one) or a
// credential: the rules whose responses are scrubbed by default.
func (r *Rule) InjectsSecret() bool {
	for i := range r.HeaderRewrites {
		if r.HeaderRewrites[i].SecretRef != "" {
			return true
		}
	}
	return len(r.QueryRewrites) > 0 || r.Credential != ""
}

// HeaderRewrite is one header_rewrites entry.
type HeaderRewrite struct {
	// Name is the header name as configured (validated token).
	Name string
	// Value is the template (ParseTemplate) when SecretRef is set: "{value}"
	// is replaced by the secret, or "{basic:USER}" builds a Basic
	// credential; else the static value, used literally.
	Value string
	// SecretRef is the secret key (file name in SecretsDir), "" for static values.
	SecretRef string
}

// QueryRewrite is one query_rewrites entry: a credential an API takes in
// the query string.
type QueryRewrite struct {
	// Name is the parameter name, compared exactly with the decoded name
	// of each parameter of a request (QueryParamName).
	Name string
	// Value is the template (ParseTemplate, without {basic:...}); the
	// filled value is query-escaped when added.
	Value string
	// SecretRef is the secret key; always set.
	SecretRef string
}

// Interception is the https_interception section.
type Interception struct {
	Enabled                      bool
	ListenAddr                   netip.Addr
	ListenAddrExplicit           bool
	ListenPort                   uint16
	CACertPath                   string
	CAKeyPath                    string
	EnforceSNIHostMatch          bool
	DenyHandshakeOnDisallowedSNI bool
	CertTTL                      time.Duration
	CertCacheSize                int
	CertCacheTTL                 time.Duration
	HandshakeTimeout             time.Duration
}

// Placeholders is the placeholders section: stand-in credentials with the
// shape of each referenced secret, written for the app to use, swapped for
// the real value towards the secret's own hosts and refused (the tripwire)
// towards any other.
type Placeholders struct {
	// Enabled turns placeholders and the tripwire on (default false).
	Enabled bool
	// Dir is where BotBox writes one file per secret_ref, the env file and
	// its per-Pod key (default /var/run/botbox/placeholders).
	Dir string
}

// Timeouts are the proxy's timeouts. Zero never means "none" after Parse.
type Timeouts struct {
	// UpstreamConnect bounds DNS + TCP connect + TLS handshake to an origin (default 10s).
	UpstreamConnect time.Duration
	// UpstreamResponseHeader bounds the wait for the origin's response head
	// (default 10 min; a rule's ResponseHeaderTimeout overrides it).
	UpstreamResponseHeader time.Duration
	// UpstreamIdleConn closes pooled idle upstream connections (default 90s).
	UpstreamIdleConn time.Duration
	// DownstreamReadHeader bounds reading a client's request head (default 10s).
	DownstreamReadHeader time.Duration
	// DownstreamIdle closes idle client keep-alive connections (default 120s).
	DownstreamIdle time.Duration
	// DownstreamWrite bounds each single write of a response to the client
	// (a client that stops reading); not the response as a whole (default 60s).
	DownstreamWrite time.Duration
	// Shutdown is the single drain deadline after SIGTERM (default 25s, below
	// Kubernetes' 30s grace period).
	Shutdown time.Duration
	// TunnelIdle closes an upgrade tunnel (WebSocket) after this long with
	// no byte in either direction (default 600s; at least 1s).
	TunnelIdle time.Duration
}

// DNSGuard is the dns_guard section: BotBox's DNS responder for the app
// (package dnsguard), fed by the init rules' port-53 redirect
// (BOTBOX_DNS_GUARD_PORT).
type DNSGuard struct {
	// Enabled serves the guard (default false).
	Enabled bool
	// ListenPort is the UDP and TCP port, bound on the proxy's listen_addr
	// addresses (default 8053).
	ListenPort uint16
	// Upstream are the resolvers allowed queries are sent to, in order;
	// empty (the default) means the nameservers of BotBox's own
	// /etc/resolv.conf, read at start-up. Port 53 when the entry has none.
	Upstream []netip.AddrPort
	// MaxTTL caps every TTL the guard serves and how long it caches an
	// answer (default 60s; 0 caches nothing).
	MaxTTL time.Duration
}
