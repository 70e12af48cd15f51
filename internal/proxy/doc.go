// Package proxy holds BotBox's request pipeline: the http.Handlers behind the
// plain HTTP listener and the HTTPS interception listener, the shared
// connection limit, and the one mapping from failure to status code.
//
// Every request takes the same path: canonicalise the target host (package
// hostport), decide with one immutable policy snapshot (package policy;
// for a rule with routes, on the canonical path of package reqpath, which
// is then the path forwarded: TestRouteForwardsCanonicalPath), forward
// through an httputil.ReverseProxy whose Rewrite sets the https upstream
// URL, Host and path and applies the rule's header rewrites with one
// secret snapshot (package rewrite), and emit exactly one canonical
// "proxy decision" log line plus the reference's Prometheus metrics.
//
// For a rule that injected secret values (and scrub_responses, the
// default), the response is scrubbed on its way back (scrub.go, package
// scrub): every reflected value, in its echo encodings, reaches the agent
// masked at the same length; a body it cannot inspect is a 502.
//
// The decision line tells what happened, not only what was decided: a body
// cut by the origin or a client gone is logged with its reason and error at
// WARN; an upgrade tunnel (WebSocket, the only upgrade forwarded) is logged
// when it closes, with the bytes of both directions; free-form fields are
// bounded and repeated identical denials on one connection are aggregated,
// so the audited agent cannot flood the trail. A CONNECT on the plain
// listener (an agent with HTTPS_PROXY) becomes a tunnel only with
// interception (Options.ConnectTLS): BotBox ends TLS inside it for the
// CONNECT host and runs the interception pipeline on each request in it
// (connect.go); otherwise it is 405. Every response BotBox writes
// itself names its reason in the X-Botbox-Reason header. The reasons are
// documented for users in docs/troubleshooting.md.
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
