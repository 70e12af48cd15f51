// Package mitm is everything TLS on BotBox's HTTPS interception listener: it
// loads (and, for development, creates) the interception CA, validates the
// SNI of each ClientHello, issues a short-lived per-host leaf certificate
// signed by that CA, and caches leaves in a bounded LRU with a TTL and an
// expiry safety margin, with single-flight issuance so that N concurrent
// first handshakes for one host sign once.
//
// It deliberately does not accept connections, speak HTTP, decide policy or
// export metrics: the listener and the HTTP checks live in package proxy,
// the allow decision is injected as an [Authorizer], and counters are reported
// through the consumer-side [Observer] interface. It imports only two leaves
// of BotBox: hostport (server names follow the one host grammar, see
// [ValidateSNI]) and echo (how much of a bad name an error repeats).
//
// Typical use:
//
//	ca, err := mitm.LoadCA(cfg.CACertPath, cfg.CAKeyPath, logger)
//	if err != nil { ... } // fail fast at start-up
//	ic, err := mitm.New(mitm.Options{
//		CA:                ca,
//		CertTTL:           cfg.CertTTL,
//		CacheTTL:          cfg.CertCacheTTL,
//		CacheSize:         cfg.CertCacheSize,
//		DenyDisallowedSNI: cfg.DenyHandshakeOnDisallowedSNI,
//		Allowed:           func(host string) bool { return pol.Decide(...).Allowed() },
//		Observer:          metricsAdapter,
//		Logger:            logger,
//	})
//	tlsConf := ic.TLSConfig() // package server gives it to the interception listener
//
// See README.md in this directory for the design.
package mitm
