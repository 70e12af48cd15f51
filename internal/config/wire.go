package config

// The wire structs mirror the YAML file one to one. Pointers mark keys whose
// absence differs from their zero value (absent = default). They have no
// custom UnmarshalYAML on purpose: the node walk of parse.go (nodeChecker) does not
// reach inside custom unmarshalers. Special scalars (addresses, actions,
// levels, ranges) are interpreted after decoding, in validate.go.

// wireConfig is the top level of the file.
type wireConfig struct {
	ListenAddr  *string `yaml:"listen_addr"`
	ListenPort  *int64  `yaml:"listen_port"`
	MetricsPort *int64  `yaml:"metrics_port"`
	// MetricsListenAddr is new (the reference always binds 127.0.0.1).
	MetricsListenAddr *string `yaml:"metrics_listen_addr"`
	SecretsDir        *string `yaml:"secrets_dir"`
	MaxConnections    *int64  `yaml:"max_connections"`
	AllowNonLoopback  *bool   `yaml:"allow_non_loopback"`

	LogLevel       *string `yaml:"log_level"`
	UpstreamCAFile *string `yaml:"upstream_ca_file"`

	UpstreamConnectTimeoutMS        *int64 `yaml:"upstream_connect_timeout_ms"`
	UpstreamResponseHeaderTimeoutMS *int64 `yaml:"upstream_response_header_timeout_ms"`
	UpstreamIdleConnTimeoutSeconds  *int64 `yaml:"upstream_idle_conn_timeout_seconds"`
	ReadHeaderTimeoutMS             *int64 `yaml:"read_header_timeout_ms"`
	IdleTimeoutSeconds              *int64 `yaml:"idle_timeout_seconds"`
	ShutdownTimeoutSeconds          *int64 `yaml:"shutdown_timeout_seconds"`
	SecretsReloadDebounceMS         *int64 `yaml:"secrets_reload_debounce_ms"`
	SecretsResyncSeconds            *int64 `yaml:"secrets_resync_seconds"`
	TunnelIdleTimeoutSeconds        *int64 `yaml:"tunnel_idle_timeout_seconds"`

	UpstreamMaxConnsPerHost *int64 `yaml:"upstream_max_conns_per_host"`
	UpstreamMaxIdleConns    *int64 `yaml:"upstream_max_idle_conns"`

	// Request budget and downstream stream bounds (server).
	MaxConcurrentRequests         *int64  `yaml:"max_concurrent_requests"`
	HTTP2MaxConcurrentStreams     *int64  `yaml:"http2_max_concurrent_streams"`
	HTTP1Engine                   *string `yaml:"http1_engine"`
	DownstreamWriteTimeoutSeconds *int64  `yaml:"downstream_write_timeout_seconds"`

	EgressPolicy      *wirePolicy       `yaml:"egress_policy"`
	HTTPSInterception *wireInterception `yaml:"https_interception"`
	AddressGuard      *wireAddressGuard `yaml:"address_guard"`
	Placeholders      *wirePlaceholders `yaml:"placeholders"`
	DNSGuard          *wireDNSGuard     `yaml:"dns_guard"`
	// Credentials are the named credentials rules refer to (credential:).
	Credentials map[string]wireCredential `yaml:"credentials"`
}

// wireAddressGuard is address_guard.
type wireAddressGuard struct {
	Enabled      *bool    `yaml:"enabled"`
	AllowedCIDRs []string `yaml:"allowed_cidrs"`
}

// wirePlaceholders is placeholders.
type wirePlaceholders struct {
	Enabled *bool   `yaml:"enabled"`
	Dir     *string `yaml:"dir"`
}

// wirePolicy is egress_policy.
type wirePolicy struct {
	DefaultAction *string    `yaml:"default_action"`
	Rules         []wireRule `yaml:"rules"`
	Mode          *string    `yaml:"mode"`
}

// wireRule is one egress_policy.rules entry.
type wireRule struct {
	Host           *string       `yaml:"host"`
	Action         *string       `yaml:"action"`
	HeaderRewrites []wireRewrite `yaml:"header_rewrites"`
	QueryRewrites  []wireRewrite `yaml:"query_rewrites"`
	AllowedPorts   []int64       `yaml:"allowed_ports"`

	RemoveHeaders           []string       `yaml:"remove_headers"`
	ResponseHeaderTimeoutMS *int64         `yaml:"response_header_timeout_ms"`
	Routes                  []wireRoute    `yaml:"routes"`
	MaxRequestBodyBytes     *int64         `yaml:"max_request_body_bytes"`
	RateLimit               *wireRateLimit `yaml:"rate_limit"`
	ScrubResponses          *bool          `yaml:"scrub_responses"`
	AllowPrivateAddresses   *bool          `yaml:"allow_private_addresses"`
	UpstreamTLS             *bool          `yaml:"upstream_tls"`
	// Credential names an entry of credentials (credentials.go).
	Credential *string `yaml:"credential"`
}

// wireRoute is one routes entry of a rule.
type wireRoute struct {
	Methods []string `yaml:"methods"`
	Paths   []string `yaml:"paths"`
	Action  *string  `yaml:"action"`
}

// wireRateLimit is a rule's rate_limit.
type wireRateLimit struct {
	RequestsPerSecond *float64 `yaml:"requests_per_second"`
	Burst             *int64   `yaml:"burst"`
}

// wireRewrite is one header_rewrites or query_rewrites entry.
type wireRewrite struct {
	Name      *string `yaml:"name"`
	Value     *string `yaml:"value"`
	SecretRef *string `yaml:"secret_ref"`
}

// wireInterception is https_interception.
type wireInterception struct {
	Enabled                      *bool   `yaml:"enabled"`
	ListenAddr                   *string `yaml:"listen_addr"`
	ListenPort                   *int64  `yaml:"listen_port"`
	CACertPath                   *string `yaml:"ca_cert_path"`
	CAKeyPath                    *string `yaml:"ca_key_path"`
	EnforceSNIHostMatch          *bool   `yaml:"enforce_sni_host_match"`
	DenyHandshakeOnDisallowedSNI *bool   `yaml:"deny_handshake_on_disallowed_sni"`
	CertTTLSeconds               *int64  `yaml:"cert_ttl_seconds"`
	CertCacheSize                *int64  `yaml:"cert_cache_size"`
	CertCacheTTLSeconds          *int64  `yaml:"cert_cache_ttl_seconds"`
	HandshakeTimeoutMS           *int64  `yaml:"handshake_timeout_ms"`
}

// wireDNSGuard is dns_guard.
type wireDNSGuard struct {
	Enabled       *bool    `yaml:"enabled"`
	ListenPort    *int64   `yaml:"listen_port"`
	Upstream      []string `yaml:"upstream"`
	MaxTTLSeconds *int64   `yaml:"max_ttl_seconds"`
}

// wireCredential is one entry of credentials; which keys apply depends on
// its type (credentials.go).
type wireCredential struct {
	Type *string `yaml:"type"`
	// aws_sigv4
	AccessKeyIDRef     *string `yaml:"access_key_id_ref"`
	SecretAccessKeyRef *string `yaml:"secret_access_key_ref"`
	SessionTokenRef    *string `yaml:"session_token_ref"`
	Region             *string `yaml:"region"`
	Service            *string `yaml:"service"`
	// github_app
	AppID          *int64            `yaml:"app_id"`
	PrivateKeyRef  *string           `yaml:"private_key_ref"`
	InstallationID *int64            `yaml:"installation_id"`
	Repositories   []string          `yaml:"repositories"`
	Permissions    map[string]string `yaml:"permissions"`
	APIURL         *string           `yaml:"api_url"`
	// oauth2_client_credentials
	TokenURL        *string  `yaml:"token_url"`
	ClientIDRef     *string  `yaml:"client_id_ref"`
	ClientSecretRef *string  `yaml:"client_secret_ref"`
	Scopes          []string `yaml:"scopes"`
	// google_service_account
	KeyRef *string `yaml:"key_ref"`
}
