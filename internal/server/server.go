// Package server runs a BotBox process: it binds every listener (plain
// proxy, HTTPS interception, loopback metrics/health), starts the secret
// watcher, tracks readiness, and shuts everything down together within one
// deadline.
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
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/botbox/botbox/internal/admin"
	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/generation"
	"github.com/botbox/botbox/internal/mitm"
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
}

// Addrs are the bound listener addresses, published once Run has bound them.
type Addrs struct {
	Proxy     []net.Addr
	Intercept []net.Addr
	Metrics   net.Addr
}

// Server is one BotBox process.
type Server struct {
	cfg     *config.Config
	opts    Options
	logger  *slog.Logger
	metrics *telemetry.Metrics
	store   *secrets.Store
	handler *proxy.Handler
	icpt    *mitm.Interceptor
	gen     *generation.Current // the policy generation in force

	secretsReady atomic.Bool
	serving      atomic.Bool
	draining     atomic.Bool

	boundOnce sync.Once
	bound     chan struct{}
	addrs     Addrs
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
	// opts.Logger carries no target; each component adds its own.
	s := &Server{cfg: cfg, opts: opts, logger: telemetry.WithTarget(opts.Logger, telemetry.TargetMain), metrics: opts.Metrics, bound: make(chan struct{})}

	store, err := secrets.Open(secrets.Options{
		Dir:      cfg.SecretsDir,
		Required: cfg.RequiredSecretRefs(),
		Debounce: cfg.SecretsReloadDebounce,
		Resync:   cfg.SecretsResyncInterval,
		Logger:   telemetry.WithTarget(opts.Logger, telemetry.TargetSecrets),
		OnReady:  func(ready bool) { s.secretsReady.Store(ready) },
	})
	if err != nil {
		return nil, fmt.Errorf("loading secrets from %q: %w", cfg.SecretsDir, err)
	}
	s.store = store
	s.secretsReady.Store(store.Ready())
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
	})
	if err != nil {
		return nil, err
	}
	s.handler, err = proxy.New(proxy.Options{
		Config:     cfg,
		Generation: s.gen,
		Secrets:    store,
		Transport:  tr,
		Metrics:    s.metrics,
		Logger:     telemetry.WithTarget(opts.Logger, telemetry.TargetProxy),
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
		s.icpt, err = mitm.New(mitm.Options{
			CA:                ca,
			CertTTL:           ic.CertTTL,
			CacheTTL:          ic.CertCacheTTL,
			CacheSize:         ic.CertCacheSize,
			DenyDisallowedSNI: ic.DenyHandshakeOnDisallowedSNI,
			Allowed: func(host string) bool {
				return s.gen.Load().Policy.AllowsHost(host)
			},
			Observer: mitmObserver{s.metrics},
			Logger:   telemetry.WithTarget(opts.Logger, telemetry.TargetInterception),
		})
		if err != nil {
			return nil, fmt.Errorf("configuring HTTPS interception: %w", err)
		}
	}
	return s, nil
}

// Ready reports what /healthz answers: secrets present, listeners bound,
// and not shutting down.
func (s *Server) Ready() bool {
	return s.secretsReady.Load() && s.serving.Load() && !s.draining.Load()
}

// Bound is closed once every listener is bound; Addrs is valid after it.
func (s *Server) Bound() <-chan struct{} { return s.bound }

// Addrs returns the bound addresses (valid after Bound is closed).
func (s *Server) Addrs() Addrs { <-s.bound; return s.addrs }

// Secrets returns the secret store (for tests and the explain command).
func (s *Server) Secrets() *secrets.Store { return s.store }

type namedServer struct {
	name string
	srv  *http.Server
	lns  []net.Listener
}

// Run binds every listener (any failure is fatal), serves until ctx is
// cancelled, then drains: readiness turns 503 at once, every listener stops
// accepting together, idle keep-alive connections are closed, in-flight
// requests get until the shutdown deadline.
func (s *Server) Run(ctx context.Context) error {
	cfg := s.cfg
	limit := proxy.NewConnLimit(cfg.MaxConnections)
	var servers []*namedServer
	closeAll := func() {
		for _, ns := range servers {
			for _, ln := range ns.lns {
				_ = ln.Close()
			}
		}
	}

	// Metrics and health first in the list, but every bind happens before
	// anything serves, so a bind failure leaves nothing half-running.
	metricsLn, err := s.opts.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(cfg.MetricsPort))))
	if err != nil {
		return fmt.Errorf("binding metrics server on 127.0.0.1:%d: %w", cfg.MetricsPort, err)
	}
	adminSrv := &namedServer{name: "metrics", lns: []net.Listener{metricsLn}, srv: &http.Server{
		Handler:           admin.NewHandler(s.metrics.Registry, s.Ready),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       30 * time.Second,
	}}
	servers = append(servers, adminSrv)
	s.addrs.Metrics = metricsLn.Addr()

	proxyLns, err := s.bindAll(cfg.ListenAddr, cfg.ListenAddrExplicit, cfg.ListenPort)
	if err != nil {
		closeAll()
		return err
	}
	plain := &namedServer{name: "proxy", srv: s.newHTTPServer(s.handler.Plain())}
	for _, ln := range proxyLns {
		plain.lns = append(plain.lns, limit.Listener(ln, s.logger, "connection limit reached, dropping connection"))
		s.addrs.Proxy = append(s.addrs.Proxy, ln.Addr())
	}
	servers = append(servers, plain)

	if s.icpt != nil {
		ic := cfg.Interception
		lns, err := s.bindAll(ic.ListenAddr, ic.ListenAddrExplicit, ic.ListenPort)
		if err != nil {
			closeAll()
			return err
		}
		tlsCfg := s.icpt.TLSConfig()
		icSrv := &namedServer{name: "https_interception", srv: s.newHTTPServer(s.handler.Intercepted())}
		icSrv.srv.TLSConfig = tlsCfg
		for _, ln := range lns {
			limited := limit.Listener(ln, s.logger, "HTTPS interception connection limit reached, dropping connection")
			icSrv.lns = append(icSrv.lns, proxy.NewTLSListener(limited, tlsCfg, ic.HandshakeTimeout, s.metrics, s.logger))
			s.addrs.Intercept = append(s.addrs.Intercept, ln.Addr())
		}
		servers = append(servers, icSrv)
	}

	for _, a := range s.addrs.Proxy {
		s.logger.Info("starting proxy server", slog.String("addr", a.String()))
	}
	for _, a := range s.addrs.Intercept {
		s.logger.Info("starting HTTPS interception TLS listener", slog.String("addr", a.String()))
	}
	s.logger.Info("metrics server listening", slog.String("addr", s.addrs.Metrics.String()))

	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		if err := s.store.Run(watchCtx); err != nil && !errors.Is(err, context.Canceled) {
			s.logger.Error("secret watcher stopped", slog.String(telemetry.KeyError, err.Error()))
		}
	}()
	defer func() { stopWatch(); <-watchDone }()

	serveErr := make(chan error, 8)
	var wg sync.WaitGroup
	for _, ns := range servers {
		for _, ln := range ns.lns {
			wg.Add(1)
			go serveListener(&wg, ns, ln, serveErr)
		}
	}
	s.serving.Store(true)
	s.boundOnce.Do(func() { close(s.bound) })

	var runErr error
	select {
	case <-ctx.Done():
		s.logger.Info("shutdown signal received, draining connections", slog.Int("in_flight", limit.InUse()))
	case runErr = <-serveErr:
		s.logger.Error("listener failed, shutting down", slog.String(telemetry.KeyError, runErr.Error()))
	}
	s.shutdown(servers, adminSrv)
	wg.Wait()
	s.logger.Info("proxy server stopped")
	return runErr
}

func serveListener(wg *sync.WaitGroup, ns *namedServer, ln net.Listener, errs chan<- error) {
	defer wg.Done()
	if err := ns.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs <- fmt.Errorf("%s listener %s: %w", ns.name, ln.Addr(), err)
	}
}

// shutdown drains the proxy listeners together within one deadline, then
// the metrics server (so /healthz shows 503 during the drain).
func (s *Server) shutdown(servers []*namedServer, adminSrv *namedServer) {
	s.draining.Store(true)
	deadline := s.cfg.Timeouts.Shutdown
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var wg sync.WaitGroup
	for _, ns := range servers {
		if ns == adminSrv {
			continue
		}
		wg.Add(1)
		go func(ns *namedServer) {
			defer wg.Done()
			if err := ns.srv.Shutdown(ctx); err != nil {
				s.logger.Warn("drain timeout reached, closing remaining connections", slog.String("listener", ns.name))
				_ = ns.srv.Close()
			}
		}(ns)
	}
	wg.Wait()
	s.logger.Info("all connections drained")
	actx, acancel := context.WithTimeout(context.Background(), time.Second)
	defer acancel()
	if err := adminSrv.srv.Shutdown(actx); err != nil {
		_ = adminSrv.srv.Close()
	}
}

func (s *Server) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.cfg.Timeouts.DownstreamReadHeader,
		IdleTimeout:       s.cfg.Timeouts.DownstreamIdle,
		MaxHeaderBytes:    64 << 10, // the reference's 64 KiB request-head cap
		// "OPTIONS *" must reach the pipeline (and be refused with 400), not
		// be answered 200 by net/http on BotBox's behalf.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
	}
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
			s.logger.Info("IPv6 loopback not available, listening on IPv4 only", slog.String("addr", v6.String()))
			return lns, nil
		}
		_ = ln.Close()
		return nil, fmt.Errorf("binding %s: %w", v6, err)
	}
	return append(lns, ln6), nil
}

// mitmObserver adapts the Prometheus metrics to mitm's observer interface.
type mitmObserver struct{ m *telemetry.Metrics }

func (o mitmObserver) CertIssued(result string) { o.m.CertIssued.WithLabelValues(result).Inc() }
func (o mitmObserver) CertError(kind string)    { o.m.CertErrors.WithLabelValues(kind).Inc() }
func (o mitmObserver) CertCache(result string)  { o.m.CertCache.WithLabelValues(result).Inc() }
