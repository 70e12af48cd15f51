package netfilter

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// fuzzEnvVars is the order of FuzzParseEnv's string arguments.
func fuzzEnvVars() []string {
	return []string{EnvIPv6, EnvUID, EnvProxyPort, EnvRedirectFromPort, EnvHTTPSInterception,
		EnvHTTPSInterceptionPort, EnvNATChain, EnvFilterChain, EnvWaitSeconds, EnvDNSServers, EnvDropICMP,
		EnvMetricsPort, EnvReject, EnvDNSGuardPort}
}

// checkPayload asserts that a rendered payload has exactly the lines the
// ruleset calls for (plus one "-D OUTPUT" line per expected jump), that each
// rule line splits back into exactly its rule's arguments, and that it
// contains nothing but printable ASCII and newlines.
func checkPayload(t *testing.T, rs Ruleset, f Family, payload string, jumps map[string]int) {
	t.Helper()
	for i := 0; i < len(payload); i++ {
		if c := payload[i]; c != '\n' && (c < 0x20 || c > 0x7e) {
			t.Fatalf("payload has byte %#x at %d:\n%s", c, i, payload)
		}
	}
	lines := strings.Split(strings.TrimSuffix(payload, "\n"), "\n")
	n := 0
	next := func() string {
		if n >= len(lines) {
			t.Fatalf("payload too short:\n%s", payload)
		}
		n++
		return lines[n-1]
	}
	for _, c := range rs.Chains(f) {
		if got := next(); got != "*"+c.Table {
			t.Fatalf("line %d = %q, want table %s", n, got, c.Table)
		}
		if got := next(); got != ":"+c.Name+" - [0:0]" {
			t.Fatalf("line %d = %q, want declaration of %s", n, got, c.Name)
		}
		for range jumps[c.Table] {
			if got := next(); !strings.HasPrefix(got, "-D OUTPUT ") {
				t.Fatalf("line %d = %q, want -D OUTPUT", n, got)
			}
		}
		for _, r := range c.Rules {
			got := next()
			want := append([]string{"-A", c.Name}, r...)
			if fmt.Sprint(splitArgs(got)) != fmt.Sprint(want) || strings.ContainsAny(got, "\"\\#") {
				t.Fatalf("line %d = %q, want the arguments %q", n, got, want)
			}
		}
		if got := next(); got != "-I OUTPUT 1 "+c.Jump.String() {
			t.Fatalf("line %d = %q, want the jump", n, got)
		}
		if got := next(); got != "COMMIT" {
			t.Fatalf("line %d = %q, want COMMIT", n, got)
		}
	}
	if n != len(lines) {
		t.Fatalf("payload has %d extra lines:\n%s", len(lines)-n, payload)
	}
}

func FuzzParseEnv(f *testing.F) {
	add := func(env map[string]string) {
		f.Add(env[EnvIPv6], env[EnvUID], env[EnvProxyPort], env[EnvRedirectFromPort], env[EnvHTTPSInterception],
			env[EnvHTTPSInterceptionPort], env[EnvNATChain], env[EnvFilterChain], env[EnvWaitSeconds],
			env[EnvDNSServers], env[EnvDropICMP], env[EnvMetricsPort], env[EnvReject], env[EnvDNSGuardPort])
	}
	for _, tc := range envErrorCases {
		add(tc.env)
	}
	for _, tc := range envCombinations() {
		add(tc.env)
	}
	f.Fuzz(func(t *testing.T, ipv6, uid, proxyPort, redirectFrom, https, httpsPort, nat, filter, wait, dns, icmp, metricsPort, reject, dnsGuard string) {
		vals := []string{ipv6, uid, proxyPort, redirectFrom, https, httpsPort, nat, filter, wait, dns, icmp, metricsPort, reject, dnsGuard}
		env := map[string]string{}
		for i, k := range fuzzEnvVars() {
			env[k] = vals[i]
		}
		s, warnings, err := ParseEnv(getenvFrom(env))
		for _, w := range warnings {
			if strings.ContainsAny(w, "\n\r") {
				t.Fatalf("warning with a line break: %q", w)
			}
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "ERROR: ") {
				t.Fatalf("error without the ERROR: prefix: %q", err)
			}
			for line := range strings.SplitSeq(err.Error(), "\n") {
				if !strings.HasPrefix(line, "ERROR: ") && !strings.HasPrefix(line, "  ") {
					t.Fatalf("error line %q could pass for something else:\n%s", line, err)
				}
			}
			return
		}
		rs := Plan(s)
		for _, fam := range rs.Families() {
			checkPayload(t, rs, fam, Render(rs, fam, nil), nil)
			filter := rs.Chains(fam)[len(rs.Chains(fam))-1].Rules
			if last := filter[len(filter)-1]; last.String() != "-j DROP" {
				t.Fatalf("%v filter chain ends with %q, not the default-deny DROP", fam, last)
			}
			for _, r := range filter {
				if slices.Contains(r, "REJECT") && (!s.Reject || !slices.Contains(r, "LOCAL")) {
					t.Fatalf("%v rule %q with BOTBOX_REJECT=%q: REJECT only with BOTBOX_REJECT=1, and only for local sources", fam, r, reject)
				}
			}
		}
		// With the DNS guard no port-53 packet is exempted in the filter
		// chain, and the nat chain redirects it before anything else.
		for _, fam := range rs.Families() {
			chains := rs.Chains(fam)
			for _, r := range chains[len(chains)-1].Rules {
				if s.DNSGuardPort != 0 && slices.Contains(r, "53") && slices.Contains(r, "RETURN") {
					t.Fatalf("%v filter rule %q exempts port 53 with the DNS guard on", fam, r)
				}
			}
			if s.DNSGuardPort != 0 && !slices.Contains(chains[0].Rules[0], "REDIRECT") {
				t.Fatalf("%v nat chain starts with %q, not the DNS redirect", fam, chains[0].Rules[0])
			}
		}
		if s.IPv6 != (ipv6 == "1") {
			t.Fatalf("IPv6 = %v for %q", s.IPv6, ipv6)
		}
		var b strings.Builder
		if err := Print(s, &b); err != nil {
			t.Fatal(err)
		}
		remove := RenderRemove(s, nil)
		if remove != "" {
			t.Fatalf("RenderRemove with no state = %q, want empty", remove)
		}
	})
}

// FuzzParseSave feeds arbitrary dumps: no panic, and the install payload
// rendered against a parsed dump gains exactly one "-D OUTPUT" line per
// jump found, never a line of its own.
func FuzzParseSave(f *testing.F) {
	for _, tc := range saveCases {
		f.Add(tc.dump)
	}
	f.Add(existingDump("EGRESS_REDIRECT", "EGRESS_FILTER"))
	f.Fuzz(func(t *testing.T, dump string) {
		cur, err := ParseSave(dump)
		if err != nil {
			return
		}
		s := DefaultSettings()
		rs := Plan(s)
		jumps := map[string]int{
			TableNAT:    len(cur.Jumps(TableNAT, s.NATChain)),
			TableFilter: len(cur.Jumps(TableFilter, s.FilterChain)),
		}
		payload := Render(rs, IPv4, cur)
		// Specs are copied verbatim from the dump, so only the line
		// structure is checked; bytes other than '\n' may be anything.
		lines := strings.Split(strings.TrimSuffix(payload, "\n"), "\n")
		want := jumps[TableNAT] + jumps[TableFilter]
		for _, c := range rs.Chains(IPv4) {
			want += 4 + len(c.Rules)
		}
		if len(lines) != want {
			t.Fatalf("payload has %d lines, want %d:\n%s", len(lines), want, payload)
		}
		for _, spec := range append(cur.Jumps(TableNAT, s.NATChain), cur.Jumps(TableFilter, s.FilterChain)...) {
			if strings.Contains(spec, "\n") {
				t.Fatalf("spec with a newline: %q", spec)
			}
		}
	})
}
