package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/generation"
	"github.com/botbox/botbox/internal/proxy"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/telemetry"
)

// explainPlaceholder is the value every present secret has during explain:
// the secret files are checked for presence only, never read.
const explainPlaceholder = "explain-placeholder"

// runExplain prints what BotBox would do with one request. It does not
// repeat the proxy's checks: it runs the request through the real handler
// (proxy.New with the loaded configuration) with a transport that records
// the outbound request and answers 200 without touching the network, and
// an in-memory secret source holding a placeholder for every referenced
// secret whose file exists in secrets_dir (presence only: values are never
// read). The decision, reason and status are those of the handler's own
// decision line, so explain cannot disagree with the proxy.
//
// Exit codes: 0 the request would be forwarded, 1 it would not (denied,
// refused, or failing, e.g. a missing secret), 2 usage or an unloadable
// configuration (no decision).
func runExplain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("botbox explain", stderr)
	path := configFlag(fs)
	method := fs.String("method", "GET", "request method")
	setUsage(fs, "botbox explain -c PATH [--method M] URL")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	const use = "usage: botbox explain -c PATH [--method M] URL"
	switch {
	case fs.NArg() == 0:
		return usageError(stderr, "botbox explain -c PATH [--method M] URL", "botbox explain: the URL to explain is missing")
	case fs.NArg() > 1:
		return usageError(stderr, "botbox explain -c PATH [--method M] URL", "botbox explain: unexpected argument %q", fs.Arg(1))
	}
	raw := fs.Arg(0)
	m := strings.ToUpper(*method)
	if !httpguts.ValidHeaderFieldName(m) { // a method is a token
		fmt.Fprintf(stderr, "botbox explain: invalid method %q\n%s\n", *method, use)
		return exitUsage
	}
	target := raw
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	u, err := url.Parse(target)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || strings.ContainsAny(raw, " \t\r\n") {
		fmt.Fprintf(stderr, "botbox explain: %q is not an http:// or https:// URL\n%s\n", raw, use)
		return exitUsage
	}
	cfg, err := config.Load(*path)
	if err != nil {
		printConfigError(stderr, "botbox explain", *path, err)
		return exitUsage
	}

	e, err := newExplainer(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "botbox explain: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stdout, "request:  %s %s\n", m, raw)
	res, err := e.run(m, u)
	if err != nil {
		fmt.Fprintf(stderr, "botbox explain: %v\n", err)
		return exitUsage
	}
	return e.print(stdout, u, res)
}

// explainer holds the real handler and its recording dependencies.
type explainer struct {
	cfg     *config.Config
	handler *proxy.Handler
	rt      *recordingTransport
	logs    *bytes.Buffer
	missing map[string]string // secret_ref -> the path that does not exist
}

func newExplainer(cfg *config.Config) (*explainer, error) {
	e := &explainer{cfg: cfg, rt: &recordingTransport{}, logs: &bytes.Buffer{}, missing: map[string]string{}}
	values := map[string]secrets.Value{}
	for _, ref := range cfg.ReadySecretRefs() {
		p := filepath.Join(cfg.SecretsDir, ref)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			values[ref] = secrets.NewValue([]byte(explainPlaceholder))
		} else {
			e.missing[ref] = p
		}
	}
	opts := proxy.Options{
		Config:    cfg,
		Secrets:   staticSecrets{secrets.NewSnapshot(values)},
		Transport: e.rt,
		Metrics:   telemetry.NewMetrics(),
		Logger:    telemetry.NewLogger(e.logs, slog.LevelDebug),
	}
	if len(cfg.Credentials) > 0 {
		opts.Credentials = explainCredentials{cfg, e.missing}
	}
	if cfg.Interception.Enabled {
		// CONNECT is served with interception on: the handler's refusals
		// (port, policy) are its own; an opened tunnel is modelled by run
		// (DecideConnect, then the request inside). No certificate is
		// ever issued.
		opts.ConnectTLS = func() *tls.Config { return &tls.Config{} }
	}
	h, err := proxy.New(opts)
	if err != nil {
		return nil, err
	}
	e.handler = h
	return e, nil
}

// staticSecrets is a proxy.SecretSource with a fixed snapshot.
type staticSecrets struct{ snap *secrets.Snapshot }

func (s staticSecrets) Snapshot() *secrets.Snapshot { return s.snap }

// recordingTransport records the request the handler would send upstream
// and answers 200 with an empty body. It never dials.
type recordingTransport struct {
	out *http.Request
}

func (t *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.out = r
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: http.NoBody, Request: r,
	}, nil
}

// explainResult is what the handler did.
type explainResult struct {
	listener string // proxy.ListenerHTTP or proxy.ListenerHTTPS
	// httpsWithoutInterception: an https:// URL with interception off; the
	// request was run as the CONNECT an explicit-proxy client sends.
	httpsWithoutInterception bool
	// connect is the verdict of an intercepted CONNECT (--method CONNECT
	// with interception on) whose tunnel opens; the request explained is
	// then the GET of the URL's path inside the tunnel.
	connect *proxy.ConnectVerdict
	status  int
	line    map[string]any // the handler's decision line
}

// run builds the request as the listener would receive it and serves it.
func (e *explainer) run(method string, u *url.URL) (*explainResult, error) {
	res := &explainResult{listener: proxy.ListenerHTTP}
	var head string
	var h http.Handler
	authority := u.Host
	if u.Port() == "" {
		authority = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	if method == http.MethodConnect && e.cfg.Interception.Enabled {
		v, err := e.handler.DecideConnect(authority)
		if err == nil && v.Open {
			// An HTTPS_PROXY agent: the tunnel opens on host and port,
			// and the request inside is decided on its own, routes
			// included.
			res.connect = &v
			res.listener = proxy.ListenerConnect
			method = http.MethodGet
		}
	}
	switch {
	case res.connect != nil:
		head = fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", u.RequestURI(), u.Hostname())
		h = e.handler.Tunnel()
	case u.Scheme == "https" && e.cfg.Interception.Enabled && method != http.MethodConnect:
		// Transparent interception: origin-form on a TLS connection whose
		// SNI is the URL's host.
		res.listener = proxy.ListenerHTTPS
		head = fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n\r\n", method, u.RequestURI(), u.Host)
		h = e.handler.Intercepted()
	case u.Scheme == "https" || method == http.MethodConnect:
		// With interception off an https:// request reaches BotBox only as
		// an explicit proxy's CONNECT (transparent 443 traffic is dropped).
		res.httpsWithoutInterception = u.Scheme == "https" && !e.cfg.Interception.Enabled
		head = fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
		h = e.handler.Plain()
	default:
		// The plain listener, as an explicit proxy client sends it
		// (absolute-form); a transparently redirected client sends the
		// same host in its Host header, which the handler treats alike.
		v := *u
		v.Fragment, v.RawFragment = "", ""
		head = fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n\r\n", method, v.String(), u.Host)
		h = e.handler.Plain()
	}
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head)))
	if err != nil {
		return nil, fmt.Errorf("building the request: %w", err)
	}
	req.RemoteAddr = "127.0.0.1:1"
	if res.listener == proxy.ListenerHTTPS || res.listener == proxy.ListenerConnect {
		sni := u.Hostname()
		if _, err := netip.ParseAddr(sni); err == nil {
			sni = "" // clients send no SNI for an IP literal
		}
		req.TLS = &tls.ConnectionState{HandshakeComplete: true, ServerName: sni, Version: tls.VersionTLS13}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res.status = rec.Code
	for line := range strings.Lines(e.logs.String()) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m[telemetry.KeyDecision] != nil {
			res.line = m
		}
	}
	if res.line == nil {
		return nil, fmt.Errorf("the handler logged no decision line (status %d)", res.status)
	}
	return res, nil
}

// print writes the explanation and returns the exit code.
func (e *explainer) print(w io.Writer, u *url.URL, res *explainResult) int {
	str := func(k string) string { s, _ := res.line[k].(string); return s }
	listener := "plain proxy listener"
	switch res.listener {
	case proxy.ListenerHTTPS:
		listener = "HTTPS interception listener"
	case proxy.ListenerConnect:
		listener = "inside a CONNECT tunnel of the plain listener, intercepted"
	}
	fmt.Fprintf(w, "listener: %s (%s)\n", res.listener, listener)
	if v := res.connect; v != nil {
		how := "allowed on host and port"
		if v.Reason != "" {
			how = "reported (report mode; enforce would refuse it: " + v.Reason + ")"
		}
		fmt.Fprintf(w, "connect:  CONNECT %s:443 answered 200, %s; TLS is ended inside the tunnel and every\n"+
			"          request in it is decided on its own, routes included: below, GET %s\n", u.Hostname(), how, u.RequestURI())
	}
	if e.cfg.Policy.Mode == config.ModeReport {
		fmt.Fprintln(w, "mode:     report (egress_policy.mode: what the policy denies is FORWARDED without header rewrites and logged as report_deny)")
	}
	if host := str(telemetry.KeyHost); host != "" {
		fmt.Fprintf(w, "host:     %s\n", host)
	}
	if port, ok := res.line[telemetry.KeyPort].(float64); ok && port > 0 {
		fmt.Fprintf(w, "port:     %d", int(port))
		if u.Port() == "" && res.listener == proxy.ListenerHTTP && !res.httpsWithoutInterception {
			fmt.Fprint(w, " (no port given: evaluated as 443, the upstream is always TLS)")
		}
		fmt.Fprintln(w)
	}

	forwarded := e.rt.out != nil && res.status == http.StatusOK
	decision := str(telemetry.KeyDecision)
	switch {
	case forwarded && decision == telemetry.DecisionReportDeny:
		fmt.Fprintln(w, "decision: report_deny (enforce mode would refuse it; report mode forwards it without header rewrites)")
	case forwarded:
		fmt.Fprintln(w, "decision: allow")
	case decision == telemetry.DecisionAllow:
		fmt.Fprintln(w, "decision: allow by policy, but the request fails before leaving")
	case decision == telemetry.DecisionDeny || decision == "":
		fmt.Fprintln(w, "decision: deny")
	default:
		fmt.Fprintf(w, "decision: deny (%s)\n", decision)
	}
	fmt.Fprintf(w, "status:   %d", res.status)
	if forwarded {
		fmt.Fprint(w, " (the origin's status; explain does not contact it)")
	}
	fmt.Fprintln(w)
	if reason := str(telemetry.KeyReason); reason != "" {
		fmt.Fprintf(w, "reason:   %s\n", reason)
	}
	rule := e.rule(str(telemetry.KeyRule))
	if rule != nil {
		fmt.Fprintf(w, "rule:     egress_policy.rules[%d] (host %s, action %s)\n", rule.Index, rule.Host, rule.Action)
		if rule.AllowedPorts != nil {
			fmt.Fprintf(w, "ports:    allowed_ports %v\n", rule.AllowedPorts)
		} else {
			fmt.Fprintln(w, "ports:    443 only (allowed_ports not set)")
		}
		e.printRoute(w, rule, res.line[telemetry.KeyRoute])
		printLimits(w, rule)
	} else if decision == telemetry.DecisionAllow {
		fmt.Fprintln(w, "rule:     none (default_action: allow; no header rewrites)")
	}
	if forwarded {
		fmt.Fprintf(w, "upstream: %s\n", e.rt.out.URL.String())
		if decision == telemetry.DecisionReportDeny {
			fmt.Fprintln(w, "headers:  none injected (report mode never rewrites a request the policy denies)")
		} else {
			e.printHeaders(w, rule)
			e.printCredential(w, rule)
			printScrub(w, rule)
		}
		e.printAddressGuard(w, rule)
	}
	if !forwarded && rule != nil && rule.Credential != "" && res.status == 500 {
		e.printCredential(w, rule)
	}
	if decision == telemetry.DecisionAllow && !forwarded && rule != nil {
		for _, rw := range rule.HeaderRewrites {
			if p, ok := e.missing[rw.SecretRef]; ok && rw.SecretRef != "" {
				fmt.Fprintf(w, "secret:   %q for header %s: no file %s; the real request gets %d and is not forwarded\n", rw.SecretRef, rw.Name, p, res.status)
			}
		}
		for _, q := range rule.QueryRewrites {
			if p, ok := e.missing[q.SecretRef]; ok {
				fmt.Fprintf(w, "secret:   %q for query parameter %s: no file %s; the real request gets %d and is not forwarded\n", q.SecretRef, q.Name, p, res.status)
			}
		}
	}
	if res.httpsWithoutInterception {
		plain := *u
		plain.Scheme = "http"
		fmt.Fprintf(w, `note:     https_interception is disabled, so BotBox never sees an https:// request:
          transparently redirected, TCP to port 443 is dropped by the init rules (the client
          sees a connection timeout); as an explicit proxy (HTTPS_PROXY) the client sends
          CONNECT, answered %d (above). Use %s (BotBox originates TLS to the origin)
          or enable https_interception.
`, res.status, plain.String())
	}
	if res.listener == proxy.ListenerHTTP && !res.httpsWithoutInterception && u.Port() != "" && u.Port() != "80" {
		fmt.Fprintf(w, "note:     this is the answer for a client using BotBox as HTTP_PROXY; transparently redirected,\n"+
			"          only TCP to port 80 (BOTBOX_REDIRECT_FROM_PORT of the init step) reaches BotBox, and\n"+
			"          TCP to port %s is dropped\n", u.Port())
	}
	if res.listener == proxy.ListenerHTTPS && !forwarded && e.cfg.Interception.DenyHandshakeOnDisallowedSNI && decision == telemetry.DecisionDeny {
		fmt.Fprintln(w, "note:     deny_handshake_on_disallowed_sni is on: a client whose SNI is not allowed gets a TLS handshake failure instead of this response")
	}
	if forwarded {
		return exitOK
	}
	return exitError
}

// printRoute names the route that decided (the decision line's route
// field), or says that none of the rule's routes matched.
func (e *explainer) printRoute(w io.Writer, rule *config.Rule, idx any) {
	if rule.Routes == nil {
		return
	}
	i, ok := idx.(float64)
	if !ok || int(i) < 0 || int(i) >= len(rule.Routes) {
		fmt.Fprintf(w, "route:    none of the rule's %d routes decided (refused before matching, or no route matches)\n", len(rule.Routes))
		return
	}
	rt := rule.Routes[int(i)]
	methods, paths := "any", "any"
	if rt.Methods != nil {
		methods = strings.Join(rt.Methods, ", ")
	}
	if rt.Paths != nil {
		paths = strings.Join(rt.Paths, ", ")
	}
	fmt.Fprintf(w, "route:    egress_policy.rules[%d].routes[%d] (methods %s; paths %s; action %s)\n", rule.Index, int(i), methods, paths, rt.Action)
}

// printLimits names the rule's limits that are set (issue 11 point 8):
// they apply to every request the rule allows, whichever route decided.
func printLimits(w io.Writer, rule *config.Rule) {
	if rule.MaxRequestBodyBytes > 0 {
		fmt.Fprintf(w, "limit:    max_request_body_bytes %d (a larger body gets 413 and is never forwarded whole)\n", rule.MaxRequestBodyBytes)
	}
	if rl := rule.RateLimit; rl != nil {
		fmt.Fprintf(w, "limit:    rate_limit %s requests/s, burst %d (per rule; over it: 429 with Retry-After)\n", strconv.FormatFloat(rl.RequestsPerSecond, 'g', -1, 64), rl.Burst)
	}
	if rule.ResponseHeaderTimeout > 0 {
		fmt.Fprintf(w, "limit:    response_header_timeout_ms %d (overrides upstream_response_header_timeout_ms; no response head in time: 504)\n", rule.ResponseHeaderTimeout.Milliseconds())
	}
}

// rule returns the configured rule for a canonical host, nil if none.
func (e *explainer) rule(host string) *config.Rule {
	if host == "" {
		return nil
	}
	i := slices.IndexFunc(e.cfg.Policy.Rules, func(r config.Rule) bool { return r.Host == host })
	if i < 0 {
		return nil
	}
	return &e.cfg.Policy.Rules[i]
}

// printHeaders lists the headers the handler injected into the outbound
// request: names and secret refs, never values.
func (e *explainer) printHeaders(w io.Writer, rule *config.Rule) {
	if rule == nil {
		fmt.Fprintln(w, "headers:  none injected")
		return
	}
	for _, name := range rule.RemoveHeaders {
		fmt.Fprintf(w, "removes:  %s (deleted if the client sends it; never added)\n", name)
	}
	e.printQuery(w, rule)
	if len(rule.HeaderRewrites) == 0 {
		fmt.Fprintln(w, "headers:  none injected")
		return
	}
	for _, rw := range rule.HeaderRewrites {
		if len(e.rt.out.Header.Values(rw.Name)) == 0 {
			continue // not sent: never claim an injection the handler did not make
		}
		if rw.SecretRef != "" {
			fmt.Fprintf(w, "header:   %s (replaces any client value; from secret %q)\n", rw.Name, rw.SecretRef)
		} else {
			fmt.Fprintf(w, "header:   %s (replaces any client value; static)\n", rw.Name)
		}
	}
}

// printQuery lists the query parameters the handler set in the outbound
// request (query_rewrites): names and secret refs, never values.
func (e *explainer) printQuery(w io.Writer, rule *config.Rule) {
	sent := e.rt.out.URL.Query()
	for _, q := range rule.QueryRewrites {
		if len(sent[q.Name]) == 0 {
			continue // not sent: never claim an injection the handler did not make
		}
		fmt.Fprintf(w, "query:    %s (replaces every %s parameter the client sent; from secret %q)\n", q.Name, q.Name, q.SecretRef)
	}
}

// printScrub says whether the response to a request whose rule injects a
// secret is scrubbed of reflected values (scrub_responses).
func printScrub(w io.Writer, rule *config.Rule) {
	if rule == nil || !rule.InjectsSecret() {
		return
	}
	if rule.ScrubResponses {
		fmt.Fprintln(w, "response: injected values masked wherever the origin reflects them (scrub_responses)")
	} else {
		fmt.Fprintln(w, "response: NOT scrubbed (scrub_responses: false): the agent sees the credential if the origin reflects it")
	}
}

// printAddressGuard says which upstream addresses BotBox would refuse to
// dial for this request (address_guard and the rule's opt-ins).
func (e *explainer) printAddressGuard(w io.Writer, rule *config.Rule) {
	if e.cfg.AddressGuard.Disabled {
		fmt.Fprintln(w, "address:  address_guard disabled: BotBox dials whatever the name resolves to, loopback and metadata included")
		return
	}
	var opens []string
	if rule != nil {
		o := generation.RuleAddrOpts(*rule)
		if o.AllowPrivate {
			opens = append(opens, "private, CGNAT, ULA and site-local (allow_private_addresses)")
		}
		if o.Rule.IsValid() {
			opens = append(opens, o.Rule.String()+" (the rule's own range)")
		}
	}
	for _, p := range e.cfg.AddressGuard.AllowedCIDRs {
		opens = append(opens, p.String()+" (address_guard.allowed_cidrs)")
	}
	line := "address:  loopback, link-local (cloud metadata), private and other non-public addresses are refused at dial (403 address_guard)"
	if len(opens) > 0 {
		line += "; allowed here: " + strings.Join(opens, ", ")
	}
	fmt.Fprintln(w, line)
}
