// Package proxy holds BotBox's request pipeline: the http.Handlers behind the
// plain HTTP listener and the HTTPS interception listener, the shared
// connection limit, and the one mapping from failure to status code.
//
// Every request takes the same path: canonicalise the target host (package
// hostport), decide with one immutable policy snapshot (package policy),
// forward through an httputil.ReverseProxy whose Rewrite sets the https
// upstream URL and Host and applies the rule's header rewrites with one
// secret snapshot (package rewrite), and emit exactly one canonical
// "proxy decision" log line plus the reference's Prometheus metrics.
//
// It does not own listeners' lifetimes (package server does), load
// configuration, or read secret files: secrets arrive through the
// consumer-side SecretSource interface.
//
// Typical use:
//
//	h, err := proxy.New(proxy.Options{Config: cfg, Secrets: store, Transport: tr, Metrics: m, Logger: log})
//	srv := &http.Server{Handler: h.Plain()}
package proxy
