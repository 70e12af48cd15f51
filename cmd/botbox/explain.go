package main

import (
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/policy"
)

// runExplain prints the decision the proxy would take for one request, with
// the same canonicalisation and policy code as the proxy. Secret values are
// never read: only header names and secret refs are shown.
func runExplain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("botbox explain", stderr)
	path := configFlag(fs)
	method := fs.String("method", "GET", "request method")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: botbox explain -c PATH [--method M] URL")
		return exitUsage
	}
	raw := fs.Arg(0)
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return exitError
	}
	pol, err := policy.Compile(cfg.Policy)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return exitError
	}
	target := raw
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		fmt.Fprintf(stdout, "decision: deny (400 invalid request target)\nreason:   cannot parse %q as a URL\n", raw)
		return exitOK
	}
	m := strings.ToUpper(*method)
	if m == "CONNECT" {
		fmt.Fprintln(stdout, "decision: deny (405 CONNECT method not allowed)\nreason:   CONNECT tunnels are never allowed")
		return exitOK
	}
	if u.User != nil {
		fmt.Fprintln(stdout, "decision: deny (400 invalid host)\nreason:   userinfo in the request target")
		return exitOK
	}
	hp, err := hostport.Parse(u.Host)
	if err != nil {
		fmt.Fprintf(stdout, "decision: deny (400 invalid host)\nreason:   %v\n", err)
		return exitOK
	}
	d := pol.Decide(policy.Target{Host: hp, Method: m, Path: u.Path})
	fmt.Fprintf(stdout, "request:  %s %s\n", m, raw)
	fmt.Fprintf(stdout, "host:     %s\nport:     %d", hp.Host, d.Port)
	if !hp.HasPort {
		fmt.Fprint(stdout, " (no port given: evaluated as 443)")
	}
	fmt.Fprintln(stdout)
	if !d.Allowed() {
		fmt.Fprintf(stdout, "decision: deny (403 host not allowed)\nreason:   %s\n", d.Reason)
		if d.Rule != nil {
			fmt.Fprintf(stdout, "rule:     egress_policy.rules[%d] (host %s)\n", d.Rule.Index, d.Rule.Host)
			if len(d.Rule.AllowedPorts) > 0 {
				fmt.Fprintf(stdout, "ports:    allowed_ports %v\n", d.Rule.AllowedPorts)
			} else {
				fmt.Fprintln(stdout, "ports:    443 only (allowed_ports not set)")
			}
		}
		return exitOK
	}
	fmt.Fprintf(stdout, "decision: allow\nreason:   %s\n", d.Reason)
	fmt.Fprintf(stdout, "upstream: https://%s%s\n", hp.Authority(443), pathOrSlash(u.EscapedPath()))
	if d.Rule == nil {
		fmt.Fprintln(stdout, "rule:     none (default_action: allow; no header rewrites)")
		return exitOK
	}
	fmt.Fprintf(stdout, "rule:     egress_policy.rules[%d] (host %s)\n", d.Rule.Index, d.Rule.Host)
	if len(d.Rule.AllowedPorts) > 0 {
		fmt.Fprintf(stdout, "ports:    allowed_ports %v\n", d.Rule.AllowedPorts)
	} else {
		fmt.Fprintln(stdout, "ports:    443 only (allowed_ports not set)")
	}
	rws := cfg.Policy.Rules[d.Rule.Index].HeaderRewrites
	if len(rws) == 0 {
		fmt.Fprintln(stdout, "headers:  none injected")
	}
	for _, rw := range rws {
		if rw.SecretRef != "" {
			fmt.Fprintf(stdout, "header:   %s (replaces any client value; from secret %q)\n", rw.Name, rw.SecretRef)
		} else {
			fmt.Fprintf(stdout, "header:   %s (replaces any client value; static)\n", rw.Name)
		}
	}
	return exitOK
}

func pathOrSlash(p string) string {
	if p == "" {
		return "/"
	}
	return p
}
