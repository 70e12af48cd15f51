// Package server runs a BotBox process: it binds every listener (plain
// proxy, HTTPS interception, loopback metrics/health), starts the secret
// watcher, tracks readiness, bounds what clients can hold (connections per
// listener, requests in flight, HTTP/2 streams, stalled writes), and shuts
// everything down together within one deadline, hijacked connections
// (WebSocket tunnels) included.
//
// It composes the other packages and owns their lifetimes; it holds no
// request logic (package proxy) and parses no files (packages config,
// secrets, mitm).
//
// Typical use:
//
//	srv, err := server.New(cfg, server.Options{Logger: logger})
//	err = srv.Run(ctx) // returns after ctx is cancelled and the drain ends
package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/botbox/botbox/internal/admin"
	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/credential"
	"github.com/botbox/botbox/internal/credential/broker"
	"github.com/botbox/botbox/internal/dnsguard"
	"github.com/botbox/botbox/internal/engine"
	"github.com/botbox/botbox/internal/generation"
	"github.com/botbox/botbox/internal/listener"
	"github.com/botbox/botbox/internal/mitm"
	"github.com/botbox/botbox/internal/placeholder"
	"github.com/botbox/botbox/internal/proxy"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/upstream"
)

// ListenFunc opens a TCP listener; tests replace it to bind ephemeral ports.
type ListenFunc func(network, address string) (net.Listener, error)

// Options are the process-level dependencies of a Server.
type Options struct {
	// Logger receives every log line (required).
	Logger *slog.Logger
	// Metrics is the registry to use (default: a new one).
	Metrics *telemetry.Metrics
	// Listen binds listeners (default net.Listen).
	Listen ListenFunc
	// UpstreamRoots replaces the upstream trust roots (tests); nil = system
	// roots plus upstream_ca_file.
	UpstreamRoots *x509.CertPool
	// Dial replaces the upstream dialer (tests).
	Dial upstream.DialFunc
	// ProbeKeyFile is where Run writes the per-start probe key that
	// `botbox probe` reads ("" = no key: probes get no authentication
	// header and `botbox probe` fails).
	ProbeKeyFile string
	// ConfigPath is the config file cfg was loaded from ("" = no reload:
	// Reload fails and the file is not watched). Run watches its directory
	// and Reload re-reads it.
	ConfigPath string
	// Getenv is the environment of config.ApplyEnv at reload (default: an
	// empty environment).
	Getenv func(string) string
	// LogLevel, when set, follows log_level (and BOTBOX_LOG_LEVEL) at reload.
	LogLevel *slog.LevelVar
	// ListenPacket binds the DNS guard's UDP sockets (default
	// net.ListenPacket).
	ListenPacket func(network, address string) (net.PacketConn, error)
	// ResolvConf is the file whose nameservers the DNS guard forwards to
	// when dns_guard.upstream is empty (default /etc/resolv.conf).
	ResolvConf string
	// DNSAddrFilter, when set, removes the addresses it refuses from the
	// DNS guard's answers (the address guard).
	DNSAddrFilter dnsguard.AddrFilter
	// DNSNameInspector, when set, can refuse a query name before the
	// policy is asked (the placeholder tripwire).
	DNSNameInspector dnsguard.NameInspector
}

// Admin port bounds. The port is reachable by the app by design, so it must
// never be a lever on the process: a small budget of connections where the
// longest-idle one makes room for a new one (listener.IdlePool), and short
// timeouts. Probes and scrapes send one small request and read a response
// of a few kilobytes to a few hundred.
const (
	adminMaxConnections    = 32
	adminReadHeaderTimeout = 2 * time.Second
	adminReadTimeout       = 5 * time.Second
	adminWriteTimeout      = 5 * time.Second
	adminIdleTimeout       = 5 * time.Second
	adminMaxHeaderBytes    = 8 << 10
)

// Addrs are the bound listener addresses, published once Run has bound them.
type Addrs struct {
	Proxy     []net.Addr
	Intercept []net.Addr
	Metrics   net.Addr
	// MetricsLoopback is the extra 127.0.0.1 admin listener bound when
	// metrics_listen_addr does not cover 127.0.0.1 itself (nil otherwise).
	MetricsLoopback net.Addr
	// DNSUDP and DNSTCP are the DNS guard's sockets (empty when it is
	// disabled).
	DNSUDP []net.Addr
	DNSTCP []net.Addr
}

// Server is one BotBox process.
type Server struct {
	cfg       *config.Config
	opts      Options
	logger    *slog.Logger
	decisions *slog.Logger // target proxy: the lines of requests refused before the handler
	metrics   *telemetry.Metrics
	sm        *telemetry.ServerMetrics
	store     *secrets.Store
	// placeholders is nil unless placeholders.enabled (placeholders.go).
	placeholders *placeholder.Manager
	handler      *proxy.Handler
	interceptor  *mitm.Interceptor
	probeKey     []byte
	requests     chan struct{}       // max_concurrent_requests permits
	gen          *generation.Current // the policy generation in force
	transport    *upstream.Transport // upstream; its idle connections close at reload
	dns          *dnsguard.Guard     // nil unless dns_guard.enabled
	broker       *broker.Broker      // nil when no credential is configured
	dnsPCs       []net.PacketConn    // bound by bind, served by Run
	dnsLns       []net.Listener

	reloadMu   sync.Mutex
	lastConfig []byte         // the config file's bytes last read (reloadMu)
	live       *config.Config // the configuration whose policy is in force (reloadMu)

	secretsReady atomic.Bool
	serving      atomic.Bool
	draining     atomic.Bool
	failed       atomic.Bool // a listener failed permanently

	boundOnce sync.Once
	bound     chan struct{}
	addrs     Addrs
	bindErr   error // set before bound is closed when Run failed to bind
}

// New loads the secrets and (when enabled) the interception CA, and builds
// the pipeline. Nothing is bound until Run.
func New(cfg *config.Config, opts Options) (*Server, error) {
	if opts.Logger == nil {
		return nil, errors.New("server: Logger is required")
	}
	if opts.Metrics == nil {
		opts.Metrics = telemetry.NewMetrics()
	}
	if opts.Listen == nil {
		opts.Listen = net.Listen
	}
	if opts.ListenPacket == nil {
		opts.ListenPacket = net.ListenPacket
	}
	if opts.ResolvConf == "" {
		opts.ResolvConf = "/etc/resolv.conf"
	}
	// opts.Logger carries no target; each component adds its own.
	s := &Server{
		cfg: cfg, opts: opts, logger: telemetry.WithTarget(opts.Logger, telemetry.TargetMain),
		decisions: telemetry.WithTarget(opts.Logger, telemetry.TargetProxy),
		metrics:   opts.Metrics, sm: telemetry.NewServerMetrics(opts.Metrics.Registry),
		requests: make(chan struct{}, max(cfg.MaxConcurrentRequests, 1)),
		bound:    make(chan struct{}),
	}
	key, err := admin.NewProbeKey()
	if err != nil {
		return nil, err
	}
	s.probeKey = key
	s.live = cfg
	if opts.ConfigPath != "" {
		// What a watch trigger compares with: the file as it is now, which
		// is the file cfg was loaded from unless it changed since.
		s.lastConfig, _ = os.ReadFile(opts.ConfigPath)
	}

	store, err := secrets.Open(secrets.Options{
		Dir:      cfg.SecretsDir,
		Required: cfg.ReadySecretRefs(),
		Debounce: cfg.SecretsReloadDebounce,
		Resync:   cfg.SecretsResyncInterval,
		Logger:   telemetry.WithTarget(opts.Logger, telemetry.TargetSecrets),
		OnReady:  func(ready bool) { s.secretsReady.Store(ready) },
		// Run starts after New has set s.placeholders.
		OnChange: func() { s.refreshPlaceholders() },
	})
	if err != nil {
		return nil, fmt.Errorf("loading secrets from %q: %w", cfg.SecretsDir, err)
	}
	s.store = store
	s.secretsReady.Store(store.Ready())
	if err := s.openPlaceholders(cfg); err != nil {
		return nil, err
	}
	if s.gen, err = generation.New(cfg); err != nil {
		return nil, err
	}

	tr, err := upstream.NewTransport(upstream.Options{
		CAFile:                cfg.UpstreamCAFile,
		RootCAs:               opts.UpstreamRoots,
		ConnectTimeout:        cfg.Timeouts.UpstreamConnect,
		ResponseHeaderTimeout: cfg.Timeouts.UpstreamResponseHeader,
		IdleConnTimeout:       cfg.Timeouts.UpstreamIdleConn,
		MaxConnsPerHost:       cfg.UpstreamMaxConnsPerHost,
		MaxIdleConns:          cfg.UpstreamMaxIdleConns,
		Dial:                  opts.Dial,
		// The address guard: each request's DialPolicy (its generation's
		// address_guard and its rule's exceptions) judges every address
		// dialled, an injected Dial's included.
		Guard: upstream.CheckAddress,
	})
	if err != nil {
		return nil, err
	}
	s.transport = tr
	var creds proxy.CredentialSource
	if len(cfg.Credentials) > 0 {
		if s.broker, err = s.newBroker(cfg, store, tr); err != nil {
			return nil, err
		}
		creds = s.broker
	}
	s.handler, err = proxy.New(proxy.Options{
		Credentials: creds,
		Config:      cfg,
		Generation:  s.gen,
		Secrets:     store,
		Transport:   tr,
		// The requests BotBox's HTTP/1.1 engine serves go out through
		// the synchronous pool (the same dialer, guard and bounds).
		EngineTransport: tr.Sync(),
		Metrics:         s.metrics,
		Logger:          telemetry.WithTarget(opts.Logger, telemetry.TargetProxy),
		// CONNECT on the plain listener is intercepted when interception
		// is on; s.interceptor is set below, before anything is served.
		ConnectTLS: func() *tls.Config {
			if s.interceptor == nil {
				return nil
			}
			return s.interceptor.TLSConfig()
		},
		// A tunnel's requests get the interception listener's server
		// settings and request budget.
		ConnectServer: func(h http.Handler) *http.Server {
			return s.newHTTPServer(s.guard(telemetry.ListenerHTTPS, h))
		},
		Placeholders: s.placeholderSource(),
	})
	if err != nil {
		return nil, err
	}

	if ic := cfg.Interception; ic.Enabled {
		s.logger.Info("HTTPS interception mode enabled, loading CA material")
		ca, err := mitm.LoadCA(ic.CACertPath, ic.CAKeyPath, telemetry.WithTarget(opts.Logger, telemetry.TargetInterception))
		if err != nil {
			return nil, err
		}
		s.interceptor, err = mitm.New(mitm.Options{
			CA:                ca,
			CertTTL:           ic.CertTTL,
			CacheTTL:          ic.CertCacheTTL,
			CacheSize:         ic.CertCacheSize,
			DenyDisallowedSNI: ic.DenyHandshakeOnDisallowedSNI,
			Allowed: func(host string) bool {
				// Report mode refuses nothing the policy denies, handshakes
				// included (TestReportModeAdmitsDeniedSNI).
				g := s.gen.Load()
				return g.Report || g.Policy.AllowsHost(host)
			},
			Observer: mitmObserver{s.metrics},
			Logger:   telemetry.WithTarget(opts.Logger, telemetry.TargetInterception),
		})
		if err != nil {
			return nil, fmt.Errorf("configuring HTTPS interception: %w", err)
		}
	}
	if cfg.DNSGuard.Enabled {
		if s.dns, err = s.newDNSGuard(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Ready reports what /healthz answers: secrets present, listeners bound,
// no listener failed, and not shutting down.
func (s *Server) Ready() bool {
	return s.secretsReady.Load() && s.serving.Load() && !s.failed.Load() && !s.draining.Load() && s.broker.Ready()
}

// newBroker builds the credentials of cfg. Token endpoints are reached
// through tr (verified TLS) under the address guard in force, like any
// upstream, with no rule's exceptions.
func (s *Server) newBroker(cfg *config.Config, store *secrets.Store, tr http.RoundTripper) (*broker.Broker, error) {
	b, err := broker.New(broker.Options{
		Credentials: cfg.Credentials,
		Secrets:     func() credential.Lookup { return store.Snapshot() },
		Client: broker.NewClient(tr, func(host string) upstream.DialPolicy {
			g := s.gen.Load()
			return upstream.DialPolicy{Host: host, Guard: g.AddrGuard, Unguarded: g.AddrGuardOff}
		}),
		Registerer: s.metrics.Registry,
		Logger:     telemetry.WithTarget(s.opts.Logger, telemetry.TargetCredentials),
	})
	if err != nil {
		return nil, fmt.Errorf("configuring credentials: %w", err)
	}
	return b, nil
}

// Bound is closed once Run has bound every listener or failed to; Addrs
// tells which.
func (s *Server) Bound() <-chan struct{} { return s.bound }

// Addrs waits until Run has bound every listener or failed to, and returns
// the bound addresses or the error that stopped Run before serving.
func (s *Server) Addrs() (Addrs, error) {
	<-s.bound
	if s.bindErr != nil {
		return Addrs{}, s.bindErr
	}
	return s.addrs, nil
}

type namedServer struct {
	name string
	srv  servingServer
	lns  []net.Listener
}

// servingServer is what Run needs of a server: *http.Server, and
// *engine.Server, which serves HTTP/1.1 itself and hands the rest to an
// *http.Server.
type servingServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// Run binds every listener (any failure is fatal), serves until ctx is
// cancelled or a listener fails for good, then drains: readiness turns 503
// at once, every listener stops accepting together, idle keep-alive
// connections are closed, in-flight requests and hijacked connections get
// until the shutdown deadline, and whatever is still open then is closed.
// It returns the listener failure, if that is what ended it, so that the
// process exits.
func (s *Server) Run(ctx context.Context) (err error) {
	defer func() {
		if !s.serving.Load() {
			s.bindErr = err
			if s.bindErr == nil {
				s.bindErr = errors.New("server stopped before binding")
			}
		}
		s.boundOnce.Do(func() { close(s.bound) })
	}()
	servers, limit, err := s.bind()
	if err != nil {
		return err
	}
	if s.opts.ProbeKeyFile != "" {
		written, err := admin.WriteProbeKey(s.opts.ProbeKeyFile, s.probeKey)
		if err != nil {
			s.closeAll(servers)
			return err
		}
		s.logger.Info("probe key written", slog.String(telemetry.KeyFile, written.Path()))
		// Only the file this Run wrote is removed: a key another
		// instance put at the same path stays (TestRunRemovesOnlyItsProbeKey).
		defer func() {
			if removed, err := written.Remove(); err != nil {
				s.logger.Warn("could not remove the probe key file", slog.String(telemetry.KeyFile, written.Path()), slog.String(telemetry.KeyError, err.Error()))
			} else if !removed {
				s.logger.Info("probe key file replaced by another process; left in place", slog.String(telemetry.KeyFile, written.Path()))
			}
		}()
	}

	for _, a := range s.addrs.Proxy {
		s.logger.Info("starting proxy server", slog.String(telemetry.KeyAddr, a.String()))
	}
	for _, a := range s.addrs.Intercept {
		s.logger.Info("starting HTTPS interception TLS listener", slog.String(telemetry.KeyAddr, a.String()))
	}
	s.logger.Info("metrics server listening", slog.String(telemetry.KeyAddr, s.addrs.Metrics.String()))
	if s.addrs.MetricsLoopback != nil {
		s.logger.Info("metrics server listening for loopback probes", slog.String(telemetry.KeyAddr, s.addrs.MetricsLoopback.String()))
	}
	for _, a := range append(slices.Clone(s.addrs.DNSUDP), s.addrs.DNSTCP...) {
		s.logger.Info("DNS guard listening", slog.String(telemetry.KeyAddr, a.Network()+"://"+a.String()))
	}

	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		if err := s.store.Run(watchCtx); err != nil && !errors.Is(err, context.Canceled) {
			s.logger.Error("secret watcher stopped", slog.String(telemetry.KeyError, err.Error()))
		}
	}()
	defer func() { stopWatch(); <-watchDone }()
	if s.broker != nil {
		// Stopped after the drain (defers run last-in first-out): the
		// requests in flight keep their token, then the tokens are revoked.
		brokerCtx, stopBroker := context.WithCancel(context.WithoutCancel(ctx))
		brokerDone := make(chan struct{})
		go func() {
			defer close(brokerDone)
			if err := s.broker.Run(brokerCtx); err != nil {
				s.logger.Warn("credential revocation failed at shutdown", slog.String(telemetry.KeyError, err.Error()))
			}
		}()
		defer func() { stopBroker(); <-brokerDone }()
	}
	reportDone := make(chan struct{})
	go func() { defer close(reportDone); s.reportLoop(watchCtx) }()
	defer func() { stopWatch(); <-reportDone }()
	if s.opts.ConfigPath != "" {
		cfgDone := make(chan struct{})
		go func() {
			defer close(cfgDone)
			if err := s.watchConfig(watchCtx); err != nil {
				s.logger.Error("config watcher stopped", slog.String(telemetry.KeyError, err.Error()))
			}
		}()
		defer func() { stopWatch(); <-cfgDone }()
	}

	n := 0
	for _, ns := range servers {
		n += len(ns.lns)
	}
	// One slot per listener and one for the DNS guard: every
	// serveListener can report and exit without a reader, so wg.Wait
	// never blocks on the channel.
	serveErr := make(chan error, n+1)
	var wg sync.WaitGroup
	for _, ns := range servers {
		for _, ln := range ns.lns {
			wg.Add(1)
			go serveListener(&wg, ns, ln, serveErr)
		}
	}
	dnsCtx, stopDNS := context.WithCancel(context.WithoutCancel(ctx))
	defer stopDNS()
	if s.dns != nil {
		wg.Add(1)
		go serveDNS(dnsCtx, &wg, s.dns, s.dnsPCs, s.dnsLns, serveErr)
	}
	s.serving.Store(true)
	s.boundOnce.Do(func() { close(s.bound) })

	var runErr error
	select {
	case <-ctx.Done():
		s.logger.Info("shutdown signal received, draining connections", slog.Int(telemetry.KeyInFlight, limit.InUse()))
	case runErr = <-serveErr:
		s.failed.Store(true)
		s.logger.Error("listener failed, shutting down", slog.String(telemetry.KeyError, runErr.Error()))
	}
	// The DNS guard has nothing to drain: it stops with the drain's start.
	stopDNS()
	s.shutdown(servers, limit)
	wg.Wait()
	s.logger.Info("proxy server stopped")
	return runErr
}

func (s *Server) closeAll(servers []*namedServer) {
	for _, ns := range servers {
		for _, ln := range ns.lns {
			_ = ln.Close()
		}
	}
	for _, pc := range s.dnsPCs {
		_ = pc.Close()
	}
	for _, ln := range s.dnsLns {
		_ = ln.Close()
	}
}

// bind binds every listener and builds the three servers: admin first,
// then plain proxy, then interception. Every bind happens before anything
// serves, so a bind failure leaves nothing half-running.
func (s *Server) bind() (servers []*namedServer, limit *listener.ConnLimit, err error) {
	cfg := s.cfg
	defer func() {
		if err != nil {
			s.closeAll(servers)
		}
	}()
	metricsLns, err := s.bindMetrics()
	if err != nil {
		return nil, nil, err
	}
	pool := listener.NewIdlePool(adminMaxConnections, s.dropOptions(telemetry.ListenerAdmin, "admin port connection budget full, closing the longest-idle connection"))
	adminSrv := &namedServer{name: "metrics", srv: &http.Server{
		Handler:           admin.NewHandler(s.metrics.Registry, s.Ready, s.probeKey, admin.WithReadyNote(s.readyNote)),
		ReadHeaderTimeout: adminReadHeaderTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    adminMaxHeaderBytes,
		ConnState:         pool.ConnState,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
	}}
	for _, ln := range metricsLns {
		adminSrv.lns = append(adminSrv.lns, pool.Listener(ln))
	}
	servers = append(servers, adminSrv)
	s.addrs.Metrics = metricsLns[0].Addr()
	if len(metricsLns) > 1 {
		s.addrs.MetricsLoopback = metricsLns[1].Addr()
	}

	limit = listener.NewConnLimit(cfg.MaxConnections)
	proxyLns, err := s.bindAll(cfg.ListenAddr, cfg.ListenAddrExplicit, cfg.ListenPort)
	if err != nil {
		return servers, nil, err
	}
	plainHTTP := s.newHTTPServer(s.guard(telemetry.ListenerHTTP, s.handler.Plain()))
	plainHTTP.Protocols = plainProtocols()
	plainSrv, err := s.http1Server(plainHTTP)
	if err != nil {
		return servers, nil, err
	}
	plain := &namedServer{name: "proxy", srv: plainSrv}
	for _, ln := range proxyLns {
		limited := limit.Listener(ln, s.dropOptions(telemetry.ListenerHTTP, "connection limit reached, dropping connection"))
		plain.lns = append(plain.lns, listener.ObserveEarlyErrors(limited, s.earlyError(telemetry.ListenerHTTP)))
		s.addrs.Proxy = append(s.addrs.Proxy, ln.Addr())
	}
	servers = append(servers, plain)

	if s.interceptor != nil {
		ic := cfg.Interception
		lns, err := s.bindAll(ic.ListenAddr, ic.ListenAddrExplicit, ic.ListenPort)
		if err != nil {
			return servers, nil, err
		}
		tlsCfg := s.interceptor.TLSConfig()
		icHTTP := s.newHTTPServer(s.guard(telemetry.ListenerHTTPS, s.handler.Intercepted()))
		// TLSListener terminates TLS, but http.Server.Serve still needs the
		// config: it serves HTTP/2 on a *tls.Conn only when
		// TLSConfig.NextProtos lists "h2". Do not remove.
		icHTTP.TLSConfig = tlsCfg
		icEngine, err := s.http1Server(icHTTP)
		if err != nil {
			return servers, nil, err
		}
		icSrv := &namedServer{name: "https_interception", srv: icEngine}
		for _, ln := range lns {
			limited := limit.Listener(ln, s.dropOptions(telemetry.ListenerHTTPS, "HTTPS interception connection limit reached, dropping connection"))
			tl := listener.NewTLSListener(limited, tlsCfg, ic.HandshakeTimeout, s.metrics, s.logger)
			icSrv.lns = append(icSrv.lns, listener.ObserveEarlyErrors(tl, s.earlyError(telemetry.ListenerHTTPS)))
			s.addrs.Intercept = append(s.addrs.Intercept, ln.Addr())
		}
		servers = append(servers, icSrv)
	}
	if s.dns != nil {
		if err := s.bindDNS(); err != nil {
			return servers, nil, err
		}
	}
	return servers, limit, nil
}

func (s *Server) dropOptions(name, msg string) listener.DropOptions {
	return listener.DropOptions{Name: name, Logger: s.logger, Message: msg, OnDrop: s.sm.ConnectionsDropped.WithLabelValues(name).Inc}
}

func serveListener(wg *sync.WaitGroup, ns *namedServer, ln net.Listener, errs chan<- error) {
	defer wg.Done()
	if err := ns.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs <- fmt.Errorf("%s listener %s: %w", ns.name, ln.Addr(), err)
	}
}

// shutdown drains the proxy listeners together within one deadline, then
// the metrics server (so /healthz shows 503 during the drain).
// http.Server.Shutdown neither waits for nor closes hijacked connections
// (WebSocket tunnels): they get until the same deadline to end, then the
// connection limit, which tracks every proxy connection, closes them
// (TestShutdownClosesHijackedAtDeadline).
func (s *Server) shutdown(servers []*namedServer, limit *listener.ConnLimit) {
	s.draining.Store(true)
	deadline := s.cfg.Timeouts.Shutdown
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	adminSrv, proxies := servers[0], servers[1:]
	var wg sync.WaitGroup
	for _, ns := range proxies {
		wg.Add(1)
		go func(ns *namedServer) {
			defer wg.Done()
			if err := ns.srv.Shutdown(ctx); err != nil {
				s.logger.Warn("drain timeout reached, closing remaining connections", slog.String(telemetry.KeyListener, ns.name))
				_ = ns.srv.Close()
			}
		}(ns)
	}
	wg.Wait()
	if !limit.Wait(ctx) {
		// The proxy handler closes its upgrade tunnels first, so each one's
		// decision line says reason=shutdown; the limit then closes
		// whatever is left, hijacked or not.
		s.handler.CloseTunnels()
		n := limit.CloseAll()
		s.logger.Warn("drain timeout reached, closing hijacked connections", slog.Int(telemetry.KeyCount, n))
	}
	// Repeated-denial summaries still pending in their one-second window
	// are written now, before the process exits (the metrics have them
	// already).
	s.handler.FlushLogs()
	s.logger.Info("all connections drained")
	actx, acancel := context.WithTimeout(context.Background(), time.Second)
	defer acancel()
	if err := adminSrv.srv.Shutdown(actx); err != nil {
		_ = adminSrv.srv.Close()
	}
}

// http1Server is the server of a proxy listener: srv itself with
// http1_engine: net/http, else BotBox's HTTP/1.1 engine with srv (its
// handler, timeouts and protocols) serving the connections the engine
// hands over (package engine). Both serve the same handler, so every
// request goes through the same guard and pipeline.
func (s *Server) http1Server(srv *http.Server) (servingServer, error) {
	if s.cfg.HTTP1Engine == config.EngineNetHTTP {
		return srv, nil
	}
	e, err := engine.New(engine.Options{
		Handler:           srv.Handler,
		Fallback:          srv,
		ReadHeaderTimeout: srv.ReadHeaderTimeout,
		IdleTimeout:       srv.IdleTimeout,
		Logger:            s.logger,
	})
	if err != nil {
		return nil, fmt.Errorf("starting the HTTP/1.1 engine: %w", err)
	}
	return e, nil
}

func (s *Server) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.cfg.Timeouts.DownstreamReadHeader,
		IdleTimeout:       s.cfg.Timeouts.DownstreamIdle,
		MaxHeaderBytes:    64 << 10, // the reference's 64 KiB request-head cap
		// Explicit, so that max_connections × streams is a number the
		// operator chose (Go's default is 250); WriteByteTimeout closes a
		// connection on which nothing can be written at all.
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: s.cfg.HTTP2MaxConcurrentStreams,
			WriteByteTimeout:     s.cfg.Timeouts.DownstreamWrite,
		},
		// "OPTIONS *" must reach the pipeline (and be refused with 400), not
		// be answered 200 by net/http on BotBox's behalf.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
	}
}

// plainProtocols is what the plain listener speaks: HTTP/1 and HTTP/2 with
// prior knowledge (a connection that opens with the HTTP/2 preface, as
// plaintext gRPC and curl --http2-prior-knowledge do). Each HTTP/2 stream
// goes through the same handler as an HTTP/1 request, judged on its own
// :authority (net/http puts it in Request.Host), under the same
// http2_max_concurrent_streams, max_concurrent_requests and write
// deadlines as the interception listener (TestPlainPriorKnowledgeH2).
// net/http does not implement the "Upgrade: h2c" path: such an offer stays
// an HTTP/1.1 request, and the proxy drops the Upgrade header
// (TestPlainH2CUpgradeServedAsHTTP1).
func plainProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

// bindAll binds addr:port and, when the address was left at its loopback
// default, [::1]:port too, because ip6tables REDIRECT sends IPv6 traffic to
// ::1 (reference §10.3 #2). A kernel without IPv6 skips the second bind.
func (s *Server) bindAll(addr netip.Addr, explicit bool, port uint16) ([]net.Listener, error) {
	ln, err := s.opts.Listen("tcp", netip.AddrPortFrom(addr, port).String())
	if err != nil {
		return nil, fmt.Errorf("binding %s: %w", netip.AddrPortFrom(addr, port), err)
	}
	lns := []net.Listener{ln}
	if explicit || addr != netip.MustParseAddr("127.0.0.1") {
		return lns, nil
	}
	v6 := netip.AddrPortFrom(netip.IPv6Loopback(), port)
	if ln.Addr().(*net.TCPAddr).Port != int(port) {
		// Ephemeral port (tests): bind the same number on ::1.
		v6 = netip.AddrPortFrom(netip.IPv6Loopback(), uint16(ln.Addr().(*net.TCPAddr).Port))
	}
	ln6, err := s.opts.Listen("tcp", v6.String())
	if err != nil {
		if errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT) {
			s.logger.Info("IPv6 loopback not available, listening on IPv4 only", slog.String(telemetry.KeyAddr, v6.String()))
			return lns, nil
		}
		_ = ln.Close()
		return nil, fmt.Errorf("binding %s: %w", v6, err)
	}
	return append(lns, ln6), nil
}

// bindMetrics binds the admin port on metrics_listen_addr and, unless that
// address already covers it (127.0.0.1 itself, or the wildcard 0.0.0.0 /
// "::", which Go binds dual-stack), on 127.0.0.1 too: exec probes
// (`botbox probe http://127.0.0.1:PORT/healthz`) then work whatever the
// scrape address is (TestMetricsListenAddr). An unset address (a Config not
// made by config.Parse) means 127.0.0.1, never a wider bind. Both listeners
// share one port number, so a probe needs only the port.
func (s *Server) bindMetrics() ([]net.Listener, error) {
	loopback := netip.MustParseAddr("127.0.0.1")
	addr := s.cfg.MetricsListenAddr
	if !addr.IsValid() {
		addr = loopback
	}
	first := netip.AddrPortFrom(addr, s.cfg.MetricsPort)
	ln, err := s.opts.Listen("tcp", first.String())
	if err != nil {
		return nil, fmt.Errorf("binding metrics server on %s (metrics_listen_addr, metrics_port): %w", first, err)
	}
	lns := []net.Listener{ln}
	if addr == loopback || addr.IsUnspecified() {
		return lns, nil
	}
	port := s.cfg.MetricsPort
	if p := ln.Addr().(*net.TCPAddr).Port; p != int(port) {
		port = uint16(p) // ephemeral port (tests): the same number on loopback
	}
	lo := netip.AddrPortFrom(loopback, port)
	ln2, err := s.opts.Listen("tcp", lo.String())
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("binding metrics server on %s for loopback probes (metrics_listen_addr is %s): %w", lo, addr, err)
	}
	return append(lns, ln2), nil
}

// mitmObserver adapts the Prometheus metrics to mitm's observer interface.
type mitmObserver struct{ m *telemetry.Metrics }

func (o mitmObserver) CertIssued(result string) { o.m.CertIssued.WithLabelValues(result).Inc() }
func (o mitmObserver) CertError(kind string)    { o.m.CertErrors.WithLabelValues(kind).Inc() }
func (o mitmObserver) CertCache(result string)  { o.m.CertCache.WithLabelValues(result).Inc() }
