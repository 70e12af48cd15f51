// Package telemetry holds BotBox's observability plumbing: the JSON log
// handler, the log-key constants, and the Prometheus metrics with their
// closed sets of label values.
//
// Logs are JSON lines shaped like the reference's tracing-subscriber output,
// so existing log pipelines keep working:
//
//	{"timestamp":"2026-01-02T03:04:05.123456789Z","level":"INFO","message":"proxy decision","target":"botbox::proxy","request_id":"…","host":"api.example.com","decision":"allow",…}
//
// (the full decision line, as package proxy writes it, is golden-tested in
// internal/proxy/testdata/decision.golden).
//
// Every event field is flattened to the top level. Keys are the Key…
// constants; never log a key named "time", "level" or "msg" yourself, because
// the handler renames those.
//
// Metrics live on a private registry (never the global default one) that also
// carries the Go runtime and process collectors. Metric names, types, label
// names and help strings are those of the reference (plus BotBox's own,
// marked on their field), and label values come only from closed sets: the
// Decision…, Host…, Handshake…, Upstream… and Abort… constants of this
// package, the certificate results package mitm defines (mitm may not
// import telemetry), a policy rule's canonical host, and numeric status
// codes. A requested host that is not a rule host is never a label value
// (it would give attackers unbounded cardinality and a covert channel).
//
// The package does not decide what to log or count; it imports nothing
// internal, so every other package may use it.
//
// Typical use:
//
//	log := telemetry.NewLogger(os.Stdout, cfg.LogLevel)
//	proxyLog := telemetry.WithTarget(log, telemetry.TargetProxy)
//	m := telemetry.NewMetrics()
//	hm := m.ForHost(rule.Host) // or telemetry.HostDefaultAllow
//	hm.Requests.Inc()
//	hm.Duration.Observe(time.Since(start).Seconds())
//	admin.NewHandler(m.Registry, store.Ready, probeKey)
package telemetry
