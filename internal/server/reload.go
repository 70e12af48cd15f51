package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/volwatch"
)

// Reload triggers besides volwatch's (which are "start", "event",
// "resync").
const (
	// TriggerSIGHUP: the process received SIGHUP (cmd/botbox wires it).
	TriggerSIGHUP = "sighup"
)

// restartKeys are the config keys baked into listeners, servers, the
// transport or the secret watcher at start-up: a reload that changes one
// logs "requires restart" naming it, and its old value stays in force.
// Everything not listed here and not in a generation (policy, rewrites,
// enforce_sni_host_match) or log_level is baked too, so a new Config field
// must be added here or to the generation (TestRestartKeysCoverConfig).
var restartKeys = []struct {
	key string
	get func(*config.Config) any
}{
	{"listen_addr", func(c *config.Config) any { return [2]any{c.ListenAddr, c.ListenAddrExplicit} }},
	{"listen_port", func(c *config.Config) any { return c.ListenPort }},
	{"metrics_port", func(c *config.Config) any { return c.MetricsPort }},
	{"metrics_listen_addr", func(c *config.Config) any { return c.MetricsListenAddr }},
	{"secrets_dir", func(c *config.Config) any { return c.SecretsDir }},
	{"max_connections", func(c *config.Config) any { return c.MaxConnections }},
	{"max_concurrent_requests", func(c *config.Config) any { return c.MaxConcurrentRequests }},
	{"http2_max_concurrent_streams", func(c *config.Config) any { return c.HTTP2MaxConcurrentStreams }},
	{"http1_engine", func(c *config.Config) any { return c.HTTP1Engine }},
	{"allow_non_loopback", func(c *config.Config) any { return c.AllowNonLoopback }},
	{"upstream_ca_file", func(c *config.Config) any { return c.UpstreamCAFile }},
	{"upstream_connect_timeout_ms", func(c *config.Config) any { return c.Timeouts.UpstreamConnect }},
	{"upstream_response_header_timeout_ms", func(c *config.Config) any { return c.Timeouts.UpstreamResponseHeader }},
	{"upstream_idle_conn_timeout_seconds", func(c *config.Config) any { return c.Timeouts.UpstreamIdleConn }},
	{"read_header_timeout_ms", func(c *config.Config) any { return c.Timeouts.DownstreamReadHeader }},
	{"idle_timeout_seconds", func(c *config.Config) any { return c.Timeouts.DownstreamIdle }},
	{"downstream_write_timeout_seconds", func(c *config.Config) any { return c.Timeouts.DownstreamWrite }},
	{"shutdown_timeout_seconds", func(c *config.Config) any { return c.Timeouts.Shutdown }},
	{"tunnel_idle_timeout_seconds", func(c *config.Config) any { return c.Timeouts.TunnelIdle }},
	{"secrets_reload_debounce_ms", func(c *config.Config) any { return c.SecretsReloadDebounce }},
	{"secrets_resync_seconds", func(c *config.Config) any { return c.SecretsResyncInterval }},
	{"upstream_max_conns_per_host", func(c *config.Config) any { return c.UpstreamMaxConnsPerHost }},
	{"upstream_max_idle_conns", func(c *config.Config) any { return c.UpstreamMaxIdleConns }},
	{"https_interception.enabled", func(c *config.Config) any { return c.Interception.Enabled }},
	{"https_interception.listen_addr", func(c *config.Config) any {
		return [2]any{c.Interception.ListenAddr, c.Interception.ListenAddrExplicit}
	}},
	{"https_interception.listen_port", func(c *config.Config) any { return c.Interception.ListenPort }},
	{"https_interception.ca_cert_path", func(c *config.Config) any { return c.Interception.CACertPath }},
	{"https_interception.ca_key_path", func(c *config.Config) any { return c.Interception.CAKeyPath }},
	{"https_interception.deny_handshake_on_disallowed_sni", func(c *config.Config) any { return c.Interception.DenyHandshakeOnDisallowedSNI }},
	{"https_interception.cert_ttl_seconds", func(c *config.Config) any { return c.Interception.CertTTL }},
	{"https_interception.cert_cache_size", func(c *config.Config) any { return c.Interception.CertCacheSize }},
	{"https_interception.cert_cache_ttl_seconds", func(c *config.Config) any { return c.Interception.CertCacheTTL }},
	{"https_interception.handshake_timeout_ms", func(c *config.Config) any { return c.Interception.HandshakeTimeout }},
	{"placeholders.enabled", func(c *config.Config) any { return c.Placeholders.Enabled }},
	{"placeholders.dir", func(c *config.Config) any { return c.Placeholders.Dir }},
	{"dns_guard.enabled", func(c *config.Config) any { return c.DNSGuard.Enabled }},
	{"dns_guard.listen_port", func(c *config.Config) any { return c.DNSGuard.ListenPort }},
	// A slice is not comparable: compare its text.
	{"dns_guard.upstream", func(c *config.Config) any { return fmt.Sprint(c.DNSGuard.Upstream) }},
	{"dns_guard.max_ttl_seconds", func(c *config.Config) any { return c.DNSGuard.MaxTTL }},
}

// changedRestartKeys lists the restart keys whose value differs between
// the configuration in force (old) and a reloaded one (next), in
// restartKeys order.
func changedRestartKeys(old, next *config.Config) []string {
	var keys []string
	for _, k := range restartKeys {
		if k.get(old) != k.get(next) {
			keys = append(keys, k.key)
		}
	}
	return keys
}

// ErrReloadDisabled is Reload's error when the server was built without
// Options.ConfigPath.
var ErrReloadDisabled = errors.New("config reload needs the config file path (server.Options.ConfigPath)")

// Reload re-reads the config file and, when it parses and validates exactly
// as at start-up (config.Parse, then config.ApplyEnv), makes its policy the
// generation in force. It prepares first (the generation is compiled once,
// generation.Current.Prepare), then commits: the secrets' required set
// follows the new policy (readiness waits for a newly referenced secret),
// the placeholders follow its secret_refs, log_level follows when
// Options.LogLevel is set, the success is counted, and the generation is
// swapped in last (generation.Current.Swap; a request in flight finishes on
// the generation it loaded). After the swap idle upstream connections are
// closed, and every open tunnel (WebSocket, CONNECT) whose host, port or
// route the new policy no longer allows is closed with a decision line,
// reason policy_reloaded (proxy.Handler.CloseRevokedTunnels). Keys in restartKeys that changed
// are logged at WARN as requiring a restart and keep their old value.
//
// When the file is missing or invalid, or the policy does not compile,
// nothing changes: the last good configuration stays, an ERROR line names
// the problem, botbox_config_reloads_total{result="failure"} counts it and
// botbox_config_last_reload_success turns 0. Reload returns that error.
//
// Reloads are serialised. Watch triggers (volwatch's) skip a file whose
// bytes equal the last ones read, so a periodic resync of an unchanged
// file neither logs nor counts; TriggerSIGHUP always reloads.
func (s *Server) Reload(trigger string) error {
	if s.opts.ConfigPath == "" {
		return ErrReloadDisabled
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	data, err := os.ReadFile(s.opts.ConfigPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("config file not found: %s", s.opts.ConfigPath)
		} else {
			err = fmt.Errorf("reading config file %s: %w", s.opts.ConfigPath, err)
		}
		return s.reloadFailed(trigger, err)
	}
	if trigger != TriggerSIGHUP && s.lastConfig != nil && bytes.Equal(data, s.lastConfig) {
		return nil
	}
	s.lastConfig = data
	cfg, err := config.Parse(data)
	if err == nil {
		getenv := s.opts.Getenv
		if getenv == nil {
			getenv = func(string) string { return "" }
		}
		err = config.ApplyEnv(cfg, getenv)
	}
	if err != nil {
		return s.reloadFailed(trigger, err)
	}
	// Prepare: everything that can fail, with no effect on what is in
	// force. Compiled once; Swap publishes this very generation.
	g, err := s.gen.Prepare(cfg)
	if err != nil {
		return s.reloadFailed(trigger, err)
	}
	if !slices.EqualFunc(s.cfg.Credentials, cfg.Credentials, config.SameCredential) {
		// The broker's credentials (tokens minted, revoked at shutdown)
		// are made once, at start.
		return s.reloadFailed(trigger, errors.New("the credentials block changed: restart BotBox to apply it (the running credentials stay)"))
	}
	// Commit: what depends on the new configuration first, the policy
	// last, so that nothing observes the new policy before the rest of
	// the reload (required secrets, placeholder table and files, log
	// level, the success metric) is in place (TestReloadCommitsPolicyLast).
	// SetRequired is the one step that may still refuse; it changes
	// nothing when it does.
	if err := s.store.SetRequired(cfg.ReadySecretRefs()); err != nil {
		return s.reloadFailed(trigger, err)
	}
	s.updatePlaceholders(cfg.PlaceholderRefs(), cfg.PlaceholderAliases())
	if s.opts.LogLevel != nil {
		s.opts.LogLevel.Set(cfg.LogLevel)
	}
	s.live = cfg
	s.sm.ConfigReloads.WithLabelValues(telemetry.ReloadSuccess).Inc()
	s.sm.ConfigLastReloadSuccess.Set(1)
	if err := s.gen.Swap(g); err != nil {
		// Only a generation published twice is refused: a bug, not a bad file.
		return fmt.Errorf("reloading %s: %w", s.opts.ConfigPath, err)
	}
	// Consequences of the swap: pooled connections and open tunnels were
	// admitted by the previous policy.
	s.transport.CloseIdleConnections()
	s.handler.CloseRevokedTunnels(g)
	s.logger.Info("configuration reloaded",
		slog.String(telemetry.KeyConfigPath, s.opts.ConfigPath),
		slog.String(telemetry.KeyTrigger, trigger),
		slog.Uint64(telemetry.KeyGeneration, g.Seq))
	for _, w := range cfg.Warnings {
		s.logger.Warn(w.Message, slog.String(telemetry.KeyField, w.Path))
	}
	s.warnReportMode()
	if keys := changedRestartKeys(s.cfg, cfg); len(keys) > 0 {
		s.logger.Warn("configuration keys changed that require a restart; their old values stay in force until then",
			slog.String(telemetry.KeyKeys, strings.Join(keys, ",")))
	}
	return nil
}

func (s *Server) reloadFailed(trigger string, err error) error {
	s.sm.ConfigReloads.WithLabelValues(telemetry.ReloadFailure).Inc()
	s.sm.ConfigLastReloadSuccess.Set(0)
	s.logger.Error("configuration reload failed, keeping the last good configuration",
		slog.String(telemetry.KeyConfigPath, s.opts.ConfigPath),
		slog.String(telemetry.KeyTrigger, trigger),
		slog.String(telemetry.KeyError, err.Error()))
	return fmt.Errorf("reloading %s: %w", s.opts.ConfigPath, err)
}

// watchConfig watches the config file's directory (a ConfigMap volume
// swaps its "..data" symlink) until ctx is done, reloading on change.
func (s *Server) watchConfig(ctx context.Context) error {
	return volwatch.Run(ctx, volwatch.Options{
		Dir:      filepath.Dir(s.opts.ConfigPath),
		Debounce: s.cfg.SecretsReloadDebounce,
		Resync:   s.cfg.SecretsResyncInterval,
		Logger:   s.logger,
		Reload:   func(trigger string) { _ = s.Reload(trigger) },
	})
}
