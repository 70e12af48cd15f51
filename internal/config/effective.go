package config

import (
	"bytes"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// The eff* structs give the rendering order of Effective: the reference's
// keys first, then the additions, then the two blocks.
type effConfig struct {
	ListenAddr        string `yaml:"listen_addr,omitempty"`
	ListenPort        uint16 `yaml:"listen_port"`
	MetricsPort       uint16 `yaml:"metrics_port"`
	MetricsListenAddr string `yaml:"metrics_listen_addr"`
	SecretsDir        string `yaml:"secrets_dir"`
	MaxConnections    int    `yaml:"max_connections"`
	AllowNonLoopback  bool   `yaml:"allow_non_loopback"`

	LogLevel       string `yaml:"log_level"`
	UpstreamCAFile string `yaml:"upstream_ca_file"`

	UpstreamConnectTimeoutMS        int64 `yaml:"upstream_connect_timeout_ms"`
	UpstreamResponseHeaderTimeoutMS int64 `yaml:"upstream_response_header_timeout_ms"`
	UpstreamIdleConnTimeoutSeconds  int64 `yaml:"upstream_idle_conn_timeout_seconds"`
	ReadHeaderTimeoutMS             int64 `yaml:"read_header_timeout_ms"`
	IdleTimeoutSeconds              int64 `yaml:"idle_timeout_seconds"`
	ShutdownTimeoutSeconds          int64 `yaml:"shutdown_timeout_seconds"`
	SecretsReloadDebounceMS         int64 `yaml:"secrets_reload_debounce_ms"`
	SecretsResyncSeconds            int64 `yaml:"secrets_resync_seconds"`
	TunnelIdleTimeoutSeconds        int64 `yaml:"tunnel_idle_timeout_seconds"`

	UpstreamMaxConnsPerHost int `yaml:"upstream_max_conns_per_host"`
	UpstreamMaxIdleConns    int `yaml:"upstream_max_idle_conns"`

	MaxConcurrentRequests         int    `yaml:"max_concurrent_requests"`
	HTTP2MaxConcurrentStreams     int    `yaml:"http2_max_concurrent_streams"`
	HTTP1Engine                   string `yaml:"http1_engine"`
	DownstreamWriteTimeoutSeconds int64  `yaml:"downstream_write_timeout_seconds"`

	EgressPolicy      effPolicy       `yaml:"egress_policy"`
	HTTPSInterception effInterception `yaml:"https_interception"`
	AddressGuard      effAddressGuard `yaml:"address_guard"`
	Placeholders      effPlaceholders `yaml:"placeholders"`
	DNSGuard          effDNSGuard     `yaml:"dns_guard"`
	// Credentials name refs and settings, never a value (there is none in
	// the config: every secret is a file in secrets_dir).
	Credentials map[string]effCredential `yaml:"credentials,omitempty"`
}

type effCredential struct {
	Type               string            `yaml:"type"`
	AccessKeyIDRef     string            `yaml:"access_key_id_ref,omitempty"`
	SecretAccessKeyRef string            `yaml:"secret_access_key_ref,omitempty"`
	SessionTokenRef    string            `yaml:"session_token_ref,omitempty"`
	Region             string            `yaml:"region,omitempty"`
	Service            string            `yaml:"service,omitempty"`
	AppID              int64             `yaml:"app_id,omitempty"`
	PrivateKeyRef      string            `yaml:"private_key_ref,omitempty"`
	InstallationID     int64             `yaml:"installation_id,omitempty"`
	Repositories       []string          `yaml:"repositories,omitempty,flow"`
	Permissions        map[string]string `yaml:"permissions,omitempty,flow"`
	APIURL             string            `yaml:"api_url,omitempty"`
	TokenURL           string            `yaml:"token_url,omitempty"`
	ClientIDRef        string            `yaml:"client_id_ref,omitempty"`
	ClientSecretRef    string            `yaml:"client_secret_ref,omitempty"`
	Scopes             []string          `yaml:"scopes,omitempty,flow"`
	KeyRef             string            `yaml:"key_ref,omitempty"`
}

type effAddressGuard struct {
	Enabled      bool     `yaml:"enabled"`
	AllowedCIDRs []string `yaml:"allowed_cidrs,flow"`
}

type effPlaceholders struct {
	Enabled bool   `yaml:"enabled"`
	Dir     string `yaml:"dir"`
}

type effDNSGuard struct {
	Enabled       bool     `yaml:"enabled"`
	ListenPort    uint16   `yaml:"listen_port"`
	Upstream      []string `yaml:"upstream,flow"`
	MaxTTLSeconds int64    `yaml:"max_ttl_seconds"`
}

type effPolicy struct {
	DefaultAction Action    `yaml:"default_action"`
	Mode          Mode      `yaml:"mode"`
	Rules         []effRule `yaml:"rules"`
}

type effRule struct {
	Host           string       `yaml:"host"`
	Action         Action       `yaml:"action"`
	AllowedPorts   []uint16     `yaml:"allowed_ports,flow"`
	HeaderRewrites []effRewrite `yaml:"header_rewrites,omitempty"`
	QueryRewrites  []effRewrite `yaml:"query_rewrites,omitempty"`

	RemoveHeaders           []string      `yaml:"remove_headers,omitempty,flow"`
	ResponseHeaderTimeoutMS int64         `yaml:"response_header_timeout_ms,omitempty"`
	Routes                  []effRoute    `yaml:"routes,omitempty"`
	MaxRequestBodyBytes     int64         `yaml:"max_request_body_bytes,omitempty"`
	RateLimit               *effRateLimit `yaml:"rate_limit,omitempty,flow"`
	ScrubResponses          *bool         `yaml:"scrub_responses,omitempty"`
	AllowPrivateAddresses   bool          `yaml:"allow_private_addresses,omitempty"`
	UpstreamTLS             *bool         `yaml:"upstream_tls,omitempty"`
	Credential              string        `yaml:"credential,omitempty"`
}

// effRoute is a route; omitted methods or paths mean any.
type effRoute struct {
	Methods []string `yaml:"methods,flow,omitempty"`
	Paths   []string `yaml:"paths,flow,omitempty"`
	Action  Action   `yaml:"action"`
}

type effRateLimit struct {
	RequestsPerSecond float64 `yaml:"requests_per_second"`
	Burst             int     `yaml:"burst"`
}

type effRewrite struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	SecretRef string `yaml:"secret_ref,omitempty"`
}

type effInterception struct {
	Enabled                      bool   `yaml:"enabled"`
	ListenAddr                   string `yaml:"listen_addr,omitempty"`
	ListenPort                   uint16 `yaml:"listen_port"`
	CACertPath                   string `yaml:"ca_cert_path"`
	CAKeyPath                    string `yaml:"ca_key_path"`
	EnforceSNIHostMatch          bool   `yaml:"enforce_sni_host_match"`
	DenyHandshakeOnDisallowedSNI bool   `yaml:"deny_handshake_on_disallowed_sni"`
	CertTTLSeconds               int64  `yaml:"cert_ttl_seconds"`
	CertCacheSize                int    `yaml:"cert_cache_size"`
	CertCacheTTLSeconds          int64  `yaml:"cert_cache_ttl_seconds"`
	HandshakeTimeoutMS           int64  `yaml:"handshake_timeout_ms"`
}

// listenAddrComment explains an omitted listen_addr: the address then
// depends on the host (127.0.0.1, plus ::1 when IPv6 is available), which
// writing "127.0.0.1" would change.
const listenAddrComment = "listen_addr not set: 127.0.0.1, and also ::1 when the host has IPv6"

// Effective renders the configuration as YAML with every default filled in
// and hosts in canonical form, for `botbox check`. Parsing the output gives
// back an equivalent Config. An omitted listen_addr stays omitted (with a
// comment), because an explicit one changes the IPv6 behaviour; an omitted
// allowed_ports is shown as [443]; the https_interception, address_guard
// and placeholders blocks are always shown.
func (c *Config) Effective() ([]byte, error) {
	e := effConfig{
		ListenPort:        c.ListenPort,
		MetricsPort:       c.MetricsPort,
		MetricsListenAddr: c.MetricsListenAddr.String(),
		SecretsDir:        c.SecretsDir,
		MaxConnections:    c.MaxConnections,
		AllowNonLoopback:  c.AllowNonLoopback,
		LogLevel:          levelName(c.LogLevel),
		UpstreamCAFile:    c.UpstreamCAFile,

		UpstreamConnectTimeoutMS:        c.Timeouts.UpstreamConnect.Milliseconds(),
		UpstreamResponseHeaderTimeoutMS: c.Timeouts.UpstreamResponseHeader.Milliseconds(),
		UpstreamIdleConnTimeoutSeconds:  seconds(c.Timeouts.UpstreamIdleConn),
		ReadHeaderTimeoutMS:             c.Timeouts.DownstreamReadHeader.Milliseconds(),
		IdleTimeoutSeconds:              seconds(c.Timeouts.DownstreamIdle),
		ShutdownTimeoutSeconds:          seconds(c.Timeouts.Shutdown),
		SecretsReloadDebounceMS:         c.SecretsReloadDebounce.Milliseconds(),
		SecretsResyncSeconds:            seconds(c.SecretsResyncInterval),
		TunnelIdleTimeoutSeconds:        seconds(c.Timeouts.TunnelIdle),

		UpstreamMaxConnsPerHost: c.UpstreamMaxConnsPerHost,
		UpstreamMaxIdleConns:    c.UpstreamMaxIdleConns,

		MaxConcurrentRequests:         c.MaxConcurrentRequests,
		HTTP2MaxConcurrentStreams:     c.HTTP2MaxConcurrentStreams,
		HTTP1Engine:                   c.HTTP1Engine,
		DownstreamWriteTimeoutSeconds: seconds(c.Timeouts.DownstreamWrite),

		EgressPolicy: effPolicy{DefaultAction: c.Policy.DefaultAction, Rules: []effRule{}, Mode: c.Policy.Mode},
	}
	if c.ListenAddrExplicit {
		e.ListenAddr = c.ListenAddr.String()
	}
	for _, r := range c.Policy.Rules {
		er := effRule{Host: r.Host, Action: r.Action, AllowedPorts: r.AllowedPorts,
			RemoveHeaders: r.RemoveHeaders, ResponseHeaderTimeoutMS: r.ResponseHeaderTimeout.Milliseconds()}
		if er.AllowedPorts == nil {
			er.AllowedPorts = []uint16{443}
		}
		for _, h := range r.HeaderRewrites {
			er.HeaderRewrites = append(er.HeaderRewrites, effRewrite(h))
		}
		for _, q := range r.QueryRewrites {
			er.QueryRewrites = append(er.QueryRewrites, effRewrite(q))
		}
		for _, rt := range r.Routes {
			er.Routes = append(er.Routes, effRoute(rt))
		}
		er.MaxRequestBodyBytes = r.MaxRequestBodyBytes
		er.Credential = r.Credential
		er.AllowPrivateAddresses = r.AllowPrivateAddresses
		if r.PlainHTTP {
			er.UpstreamTLS = new(bool) // shown only when off
		}
		if rl := r.RateLimit; rl != nil {
			er.RateLimit = &effRateLimit{RequestsPerSecond: rl.RequestsPerSecond, Burst: rl.Burst}
		}
		if r.Action == ActionAllow && (r.InjectsSecret() || r.ScrubAlways) {
			// Shown where it acts: a rule that injects a secret, or one
			// that asked for scrubbing without injecting.
			er.ScrubResponses = &r.ScrubResponses
		}
		e.EgressPolicy.Rules = append(e.EgressPolicy.Rules, er)
	}
	in := c.Interception
	e.HTTPSInterception = effInterception{
		Enabled:                      in.Enabled,
		ListenPort:                   in.ListenPort,
		CACertPath:                   in.CACertPath,
		CAKeyPath:                    in.CAKeyPath,
		EnforceSNIHostMatch:          in.EnforceSNIHostMatch,
		DenyHandshakeOnDisallowedSNI: in.DenyHandshakeOnDisallowedSNI,
		CertTTLSeconds:               seconds(in.CertTTL),
		CertCacheSize:                in.CertCacheSize,
		CertCacheTTLSeconds:          seconds(in.CertCacheTTL),
		HandshakeTimeoutMS:           in.HandshakeTimeout.Milliseconds(),
	}
	if in.ListenAddrExplicit {
		e.HTTPSInterception.ListenAddr = in.ListenAddr.String()
	}
	e.AddressGuard = effAddressGuard{Enabled: !c.AddressGuard.Disabled, AllowedCIDRs: []string{}}
	for _, p := range c.AddressGuard.AllowedCIDRs {
		e.AddressGuard.AllowedCIDRs = append(e.AddressGuard.AllowedCIDRs, p.String())
	}
	e.Placeholders = effPlaceholders(c.Placeholders)
	e.DNSGuard = effDNSGuard{Enabled: c.DNSGuard.Enabled, ListenPort: c.DNSGuard.ListenPort,
		Upstream: []string{}, MaxTTLSeconds: seconds(c.DNSGuard.MaxTTL)}
	for _, u := range c.DNSGuard.Upstream {
		e.DNSGuard.Upstream = append(e.DNSGuard.Upstream, u.String())
	}

	for _, cr := range c.Credentials {
		if e.Credentials == nil {
			e.Credentials = map[string]effCredential{}
		}
		e.Credentials[cr.Name] = effCredential{Type: cr.Type,
			AccessKeyIDRef: cr.AccessKeyIDRef, SecretAccessKeyRef: cr.SecretAccessKeyRef, SessionTokenRef: cr.SessionTokenRef,
			Region: cr.Region, Service: cr.Service,
			AppID: cr.AppID, PrivateKeyRef: cr.PrivateKeyRef, InstallationID: cr.InstallationID,
			Repositories: cr.Repositories, Permissions: cr.Permissions, APIURL: cr.APIURL,
			TokenURL: cr.TokenURL, ClientIDRef: cr.ClientIDRef, ClientSecretRef: cr.ClientSecretRef,
			Scopes: cr.Scopes, KeyRef: cr.KeyRef}
	}

	var root yaml.Node
	if err := root.Encode(&e); err != nil {
		return nil, fmt.Errorf("rendering effective config: %w", err)
	}
	if !c.ListenAddrExplicit {
		commentBefore(&root, "listen_port", listenAddrComment)
	}
	if !in.ListenAddrExplicit {
		if n := valueOf(&root, "https_interception"); n != nil {
			commentBefore(n, "listen_port", listenAddrComment)
		}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, fmt.Errorf("rendering effective config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("rendering effective config: %w", err)
	}
	return buf.Bytes(), nil
}

func seconds(d time.Duration) int64 { return int64(d / time.Second) }

// commentBefore puts a head comment on key in mapping m.
func commentBefore(m *yaml.Node, key, comment string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i].HeadComment = comment
			return
		}
	}
}

// valueOf returns the value of key in mapping m.
func valueOf(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
