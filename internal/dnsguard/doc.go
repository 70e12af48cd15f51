// Package dnsguard is BotBox's DNS guard: a DNS responder for the app's
// queries (the init rules redirect every port-53 packet of every UID but
// BotBox's to it) that lets a query leave the Pod only when the policy
// allows its name, so DNS cannot carry data to names nobody allowed.
//
// Contract, per query (Guard.ServeDNS; the tests named hold each point):
//
//   - Exactly one question, opcode QUERY, no answer or authority records,
//     at most one additional record (the OPT): anything else is answered
//     FORMERR or NOTIMP locally and never forwarded (TestMalformed,
//     FuzzServeDNS).
//   - The name inspector, when set (the placeholder tripwire), runs first:
//     a name it refuses gets NXDOMAIN and the name is not logged
//     (TestNameInspector).
//   - The name is canonicalised as package policy does; it is allowed when
//     policy.NameRule allows it (an allow rule's host, a name under an
//     allowed wildcard, any name a rule does not deny under
//     default_action: allow). Anything else, including IP literals, names
//     with escaped bytes and Kubernetes search-domain expansions
//     ("api.example.test.default.svc.cluster.local"), gets NXDOMAIN built
//     locally, at once (TestAllowDeny). Report mode forwards such a name
//     and logs report_deny.
//   - Only A, AAAA, CNAME, HTTPS and SVCB are forwarded for an allowed
//     name; any other type gets an empty NOERROR answer locally
//     (TestTypes).
//   - What is forwarded is a new query built by the guard: a fresh random
//     ID, the canonical (lower-case) name, class IN, RD, the client's CD
//     bit and, when the client sent EDNS0, an OPT record with the client's
//     DO bit and no options (options could carry data). A reply that does
//     not match that query (ID, and name, type, class of the question), or
//     whose rcode is not NOERROR or NXDOMAIN, is not used: the next
//     upstream is asked, and the client gets SERVFAIL when none answers
//     (TestUpstreamMismatch, TestEDNS0). A truncated UDP reply is asked
//     again over TCP (TestSanitize).
//   - The answer keeps the client's ID and question, in the client's case
//     (0x20), and its owner names that equal the question are written in
//     the client's case too (TestCase0x20). It carries A, AAAA, CNAME,
//     DNAME, HTTPS, SVCB and RRSIG records of the answer section and SOA
//     records of the authority section, nothing else; A and AAAA records
//     the AddrFilter refuses are removed, and so are refused addresses in
//     the ipv4hint and ipv6hint of HTTPS and SVCB records
//     (TestAddrFilter). A client that sent EDNS0 gets an OPT record back
//     (TestEDNS0); UDP answers are truncated (TC) to the client's size.
//   - Answers are cached per (name, type, DO, CD); every TTL served is
//     capped at MaxTTL and counts down in the cache (TestCacheTTL).
//   - A slow or dead upstream gets SERVFAIL once Timeout has passed, never
//     a hang (TestUpstreamTimeout). At most maxPending queries wait for
//     upstream answers and maxUpstreamInFlight exchanges run at once;
//     beyond the first bound a query gets SERVFAIL at once
//     (TestPendingBounded), so a flood cannot pile up goroutines.
//
// Every answer is counted in botbox_dns_queries_total{result} and every
// locally refused name gets a decision line, rate-limited (a burst of
// logBurst lines, then logPerSecond a second) so that a flood of queries
// cannot fill the disk; the lines left out are counted in a summary line
// (TestDecisionLogRateLimited).
//
// The guard serves UDP and TCP (Guard.Serve on sockets the caller binds).
// UDP queries are read into a maxQuerySize buffer; TCP connections are
// bounded in number (maxTCPConns, TestTCPLimits), idle time
// (tcpIdleTimeout, TestTCPIdleClosed) and queries per connection
// (maxTCPQueries, enforced by miekg/dns's server, not tested here).
//
// Typical use:
//
//	g, err := dnsguard.New(dnsguard.Options{Policies: cur, Upstreams: ups, MaxTTL: time.Minute, Logger: log, Metrics: m})
//	err = g.Serve(ctx, packetConns, listeners) // returns when ctx is cancelled
package dnsguard
