package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ruleset is an iptables-save dump reduced to what matters: per table, the
// chain declarations (without counters) and the rules, in order.
type ruleset map[string][]string

// parseSave reduces iptables-save output to a ruleset.
func parseSave(out string) ruleset {
	rs := ruleset{}
	table := ""
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = strings.TrimPrefix(line, "*")
			rs[table] = []string{}
		case strings.HasPrefix(line, ":"):
			if i := strings.LastIndex(line, " ["); i > 0 {
				line = line[:i]
			}
			rs[table] = append(rs[table], line)
		case strings.HasPrefix(line, "-"):
			rs[table] = append(rs[table], line)
		}
	}
	return rs
}

// output returns the table's OUTPUT rules in order.
func (rs ruleset) output(table string) []string {
	var out []string
	for _, l := range rs[table] {
		if strings.HasPrefix(l, "-A OUTPUT ") {
			out = append(out, l)
		}
	}
	return out
}

// chain returns the rules of chain in table.
func (rs ruleset) chain(table, chain string) []string {
	var out []string
	for _, l := range rs[table] {
		if strings.HasPrefix(l, "-A "+chain+" ") {
			out = append(out, l)
		}
	}
	return out
}

// mentions reports whether any line names s.
func (rs ruleset) mentions(s string) bool {
	for _, lines := range rs {
		for _, l := range lines {
			if strings.Contains(l, s) {
				return true
			}
		}
	}
	return false
}

// The init step, with each backend: `print` touches nothing; `install` is
// atomic and idempotent (iptables: twice leaves exactly one OUTPUT jump per
// BotBox chain, at position 1, and the same chains; nftables: the same
// tables ip botbox and ip6 botbox), keeps foreign rules (iptables and
// nftables ones), uses only its own backend, and contains the app with real
// packets; `remove` restores the namespace to no BotBox rules and is itself
// idempotent; the fail-fast checks of reference §8.2 change nothing.
func TestNetfilterInstallIdempotentAndRemove(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testNetfilterInstallIdempotentAndRemove)
}

func testNetfilterInstallIdempotentAndRemove(t *testing.T, backend string) {
	p := newPod(t, podConfig{noInstall: true, noBotBox: true})
	env := []string{"BOTBOX_ENABLE_IPV6=1", "BOTBOX_ENABLE_HTTPS_INTERCEPTION=1", "BOTBOX_NETFILTER_BACKEND=" + backend}
	nft := backend == "nftables"

	// Someone else's rules, which BotBox must leave alone.
	for _, bin := range []string{"iptables", "ip6tables"} {
		for _, args := range [][]string{
			{"-t", "filter", "-A", "OUTPUT", "-p", "tcp", "--dport", "12345", "-j", "ACCEPT"},
			{"-t", "nat", "-A", "OUTPUT", "-p", "tcp", "--dport", "12346", "-j", "RETURN"},
		} {
			if _, errOut, code := p.run(t, p.podNS, uidRoot, nil, append([]string{bin, "-w", "5"}, args...)...); code != 0 {
				t.Fatalf("%s %v: %s", bin, args, errOut)
			}
		}
	}
	// A foreign nftables table too.
	if _, errOut, code := p.run(t, p.podNS, uidRoot, nil, "nft", "add table inet foreign; add chain inet foreign out { type filter hook output priority 10; }; add rule inet foreign out tcp dport 12347 accept"); code != 0 {
		t.Fatalf("nft: %s", errOut)
	}
	saves := func() map[string]ruleset {
		return map[string]ruleset{"IPv4": parseSave(p.save(t, false)), "IPv6": parseSave(p.save(t, true)), "nft": p.nftRuleset(t)}
	}
	baseline := saves()

	t.Run("print touches nothing", func(t *testing.T) {
		out, errOut, code := p.netfilter(t, env, "print")
		if code != 0 || !strings.Contains(out, "EGRESS_REDIRECT") || !strings.Contains(out, "EGRESS_FILTER") || strings.Contains(out, "table ip6 botbox {") != nft {
			t.Fatalf("botbox netfilter print: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		if d := cmp.Diff(baseline, saves()); d != "" {
			t.Errorf("print changed the kernel's rules (-before +after):\n%s", d)
		}
	})

	install := func(t *testing.T) {
		t.Helper()
		out, errOut, code := p.netfilter(t, env, "install")
		if code != 0 || !strings.Contains(out, "Installing BotBox "+backend+" rules...") {
			t.Fatalf("botbox netfilter install: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
	}
	install(t)
	first := saves()
	install(t)
	second := saves()

	t.Run("install is idempotent", func(t *testing.T) {
		if d := cmp.Diff(first, second); d != "" {
			t.Errorf("second install changed the rules (-first +second):\n%s", d)
		}
		for _, family := range []string{"IPv4", "IPv6"} {
			rs := second[family]
			for table := range map[string]bool{"nat": true, "filter": true} {
				for _, foreign := range baseline[family].output(table) {
					if !slices.Contains(rs.output(table), foreign) {
						t.Errorf("%s %s: foreign rule %q removed by install", family, table, foreign)
					}
				}
			}
			if nft {
				if rs.mentions("EGRESS_") {
					t.Errorf("the nftables backend wrote iptables rules (%s):\n%s", family, strings.Join(flatten(rs), "\n"))
				}
				continue
			}
			for table, jump := range map[string]string{"nat": "-A OUTPUT -p tcp -j EGRESS_REDIRECT", "filter": "-A OUTPUT -j EGRESS_FILTER"} {
				out := rs.output(table)
				if n := countOf(out, jump); n != 1 || len(out) == 0 || out[0] != jump {
					t.Errorf("%s %s OUTPUT = %q, want exactly one %q, first", family, table, out, jump)
				}
			}
			if got := rs.chain("nat", "EGRESS_REDIRECT"); countOf(got, "--to-ports 8443") != 1 || countOf(got, "--to-ports 8080") != 1 {
				t.Errorf("%s nat EGRESS_REDIRECT = %q, want one redirect to 8080 and one to 8443", family, got)
			}
			if got := rs.chain("filter", "EGRESS_FILTER"); len(got) == 0 || !strings.HasSuffix(got[len(got)-1], "-j DROP") {
				t.Errorf("%s filter EGRESS_FILTER = %q, want it to end in DROP", family, got)
			}
		}
		tables := second["nft"].botboxTables()
		if !nft {
			if len(tables) > 0 {
				t.Errorf("the iptables backend made nftables tables %q", tables)
			}
			return
		}
		for _, fam := range []string{"ip", "ip6"} {
			got := tables[fam]
			if countOf(got, "redirect to :8443") != 1 || countOf(got, "redirect to :8080") != 1 {
				t.Errorf("table %s botbox = %q, want one redirect to 8080 and one to 8443", fam, got)
			}
			if !slices.Contains(got, "chain output.nat { type nat hook output priority -100; policy accept; meta l4proto tcp jump EGRESS_REDIRECT }") ||
				!slices.Contains(got, "chain output.filter { type filter hook output priority filter; policy accept; jump EGRESS_FILTER }") {
				t.Errorf("table %s botbox lacks its base chains:\n%s", fam, strings.Join(got, "\n"))
			}
			if !slices.ContainsFunc(got, func(c string) bool {
				return strings.HasPrefix(c, "chain EGRESS_FILTER {") && strings.HasSuffix(c, " drop }")
			}) {
				t.Errorf("table %s botbox: EGRESS_FILTER does not end in drop:\n%s", fam, strings.Join(got, "\n"))
			}
		}
	})

	t.Run("installed rules contain the app", func(t *testing.T) {
		for _, dst := range []string{p.addr4(8443).String(), p.addr6(8443).String()} {
			mark := p.mark(t)
			assertNoConnection(t, "connect "+dst, p.app(t, "tcp", "-addr", dst))
			p.assertNoTCP(t, mark, p.addr4(8443))
			p.assertNoTCP(t, mark, p.addr6(8443))
		}
	})

	t.Run("remove restores no BotBox rules", func(t *testing.T) {
		for i := range 2 { // the second remove finds nothing to do
			if out, errOut, code := p.netfilter(t, env, "remove"); code != 0 {
				t.Fatalf("botbox netfilter remove #%d: exit %d\nstdout:\n%s\nstderr:\n%s", i+1, code, out, errOut)
			}
			after := saves()
			for _, family := range []string{"IPv4", "IPv6"} {
				if after[family].mentions("EGRESS_") {
					t.Errorf("remove #%d left BotBox rules in %s:\n%s", i+1, family, strings.Join(flatten(after[family]), "\n"))
				}
			}
			if tables := after["nft"].botboxTables(); len(tables) > 0 {
				t.Errorf("remove #%d left nftables tables %q", i+1, tables)
			}
			if d := cmp.Diff(baseline, after); d != "" {
				t.Errorf("remove #%d did not restore the rules as before install (-before +after):\n%s", i+1, d)
			}
		}
		for _, dst := range []string{p.addr4(8443).String(), p.addr6(8443).String()} {
			if r := p.app(t, "tcp", "-addr", dst); !r.Connected {
				t.Errorf("after remove, connect %s: %s, want connected (no rules left)", dst, r.Error)
			}
		}
	})

	t.Run("fail-fast checks change nothing", func(t *testing.T) {
		for _, tt := range []struct {
			env  []string
			want string
		}{
			{nil, "BOTBOX_ENABLE_IPV6 is not set"},
			// Reference §8.2: set-but-empty fails the 0-or-1 check; BotBox
			// reads the environment through getenv and reports it as unset.
			// Either way it must fail closed.
			{[]string{"BOTBOX_ENABLE_IPV6="}, "BOTBOX_ENABLE_IPV6"},
			{[]string{"BOTBOX_ENABLE_IPV6=yes"}, "BOTBOX_ENABLE_IPV6 must be 0 or 1"},
			{[]string{"BOTBOX_ENABLE_IPV6=0", "BOTBOX_ENABLE_HTTPS_INTERCEPTION=1", "BOTBOX_REDIRECT_FROM_PORT=443"}, "conflict"},
		} {
			out, errOut, code := p.netfilter(t, append(tt.env, "BOTBOX_NETFILTER_BACKEND="+backend), "install")
			if code != 1 || !strings.Contains(errOut, tt.want) {
				t.Errorf("install with %q: exit %d, stderr %q, want exit 1 and %q\nstdout: %s", tt.env, code, errOut, tt.want, out)
			}
		}
		if d := cmp.Diff(baseline, saves()); d != "" {
			t.Errorf("failed installs changed the rules (-before +after):\n%s", d)
		}
	})
}

// nftRuleset is `nft list ruleset` in the pod as a ruleset with one entry
// "nft": each chain on one line ("chain NAME { rule; rule }") prefixed with
// its table, counters removed (they change with traffic).
func (p *pod) nftRuleset(t *testing.T) ruleset {
	t.Helper()
	out, errOut, code := p.run(t, p.podNS, uidRoot, nil, "nft", "list", "ruleset")
	if code != 0 {
		t.Fatalf("nft list ruleset: exit %d: %s", code, errOut)
	}
	counters := regexp.MustCompile(`counter packets \d+ bytes \d+ ?`)
	var chains []string
	table, chain := "", ""
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(counters.ReplaceAllString(line, ""))
		switch {
		case line == "":
		case strings.HasPrefix(line, "table "):
			table = strings.TrimSuffix(line, " {")
		case strings.HasPrefix(line, "chain "):
			chain = line
		case line == "}" && chain != "":
			chains = append(chains, table+": "+chain+" }")
			chain = ""
		case line == "}":
			table = ""
		case chain != "":
			sep := "; "
			if strings.HasSuffix(chain, "{") || strings.HasSuffix(chain, ";") {
				sep = " "
			}
			chain += sep + line
		}
	}
	return ruleset{"nft": chains}
}

// botboxTables returns, per family ("ip", "ip6"), the chains of BotBox's
// nftables table in an nftRuleset, without the table prefix.
func (rs ruleset) botboxTables() map[string][]string {
	out := map[string][]string{}
	for _, l := range rs["nft"] {
		for _, fam := range []string{"ip", "ip6"} {
			if c, ok := strings.CutPrefix(l, "table "+fam+" botbox: "); ok {
				out[fam] = append(out[fam], c)
			}
		}
	}
	return out
}

// countOf counts the lines containing s.
func countOf(lines []string, s string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// flatten renders a ruleset for a message.
func flatten(rs ruleset) []string {
	var out []string
	for table, lines := range rs {
		for _, l := range lines {
			out = append(out, fmt.Sprintf("%s: %s", table, l))
		}
	}
	slices.Sort(out)
	return out
}
