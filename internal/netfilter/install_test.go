package netfilter

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustParseEnv(t *testing.T, env map[string]string) Settings {
	t.Helper()
	s, _, err := ParseEnv(getenvFrom(env))
	if err != nil {
		t.Fatalf("ParseEnv(%v): %v", env, err)
	}
	return s
}

// ruleStrings is what the kernel should hold in a chain after Install.
func ruleStrings(c Chain) []string {
	out := make([]string, len(c.Rules))
	for i, r := range c.Rules {
		out[i] = r.String()
	}
	return out
}

// checkInstalled asserts the fake holds exactly the planned chains, with one
// jump each at OUTPUT position 1, followed by the given foreign rules.
func checkInstalled(t *testing.T, k *fakeKernel, s Settings, foreign map[string][]string) {
	t.Helper()
	rs := Plan(s)
	for _, f := range rs.Families() {
		for _, c := range rs.Chains(f) {
			if d := cmp.Diff(ruleStrings(c), k.rules(f, c.Table, c.Name)); d != "" {
				t.Errorf("%s %s/%s rules (-want +got):\n%s", f, c.Table, c.Name, d)
			}
			want := append([]string{c.Jump.String()}, foreign[c.Table]...)
			if d := cmp.Diff(want, k.rules(f, c.Table, "OUTPUT")); d != "" {
				t.Errorf("%s %s/OUTPUT (-want +got):\n%s", f, c.Table, d)
			}
		}
	}
}

func TestInstallFresh(t *testing.T) {
	k := newFakeKernel()
	s := mustParseEnv(t, map[string]string{EnvIPv6: "0", EnvHTTPSInterception: "1"})
	var stdout, stderr strings.Builder
	if err := Install(context.Background(), s, k, &stdout, &stderr); err != nil {
		t.Fatalf("Install: %v", err)
	}
	checkInstalled(t, k, s, nil)
	if k.hasChain(IPv6, TableNAT, "EGRESS_REDIRECT") || len(k.calls) == 0 {
		t.Errorf("IPv6 touched with BOTBOX_ENABLE_IPV6=0")
	}
	for _, c := range k.calls {
		if strings.HasPrefix(c, "ip6") {
			t.Errorf("unexpected IPv6 call %q", c)
		}
	}
	wantOut := `Installing BotBox iptables rules...
  proxy_uid=1337 proxy_port=8080 redirect_from_port=80 ipv6=0
  https_interception_port=8443 (HTTPS interception enabled)
  botbox_ports=8080,8443,9090 (handshakes from these ports answered only by UID 1337)
iptables rules installed:
Chain EGRESS_REDIRECT (1 references)
    0     0 -o lo -j RETURN
    0     0 -m owner --uid-owner 1337 -j RETURN
    0     0 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 8080
    0     0 -p tcp -m tcp --dport 443 -j REDIRECT --to-ports 8443
Chain EGRESS_FILTER (1 references)
    0     0 -m addrtype ! --src-type LOCAL -m owner --socket-exists -j DROP
    0     0 -p tcp -m tcp --sport 8080 --tcp-flags SYN SYN -m owner ! --uid-owner 1337 -j DROP
    0     0 -p tcp -m tcp --sport 8443 --tcp-flags SYN SYN -m owner ! --uid-owner 1337 -j DROP
    0     0 -p tcp -m tcp --sport 9090 --tcp-flags SYN SYN -m owner ! --uid-owner 1337 -j DROP
    0     0 -o lo -j RETURN
    0     0 -m owner --uid-owner 1337 -j RETURN
    0     0 -d 127.0.0.0/8 -j RETURN
    0     0 -p udp -m udp --dport 53 -j RETURN
    0     0 -p tcp -m tcp --dport 53 -j RETURN
    0     0 -p icmp -j RETURN
    0     0 -j DROP
`
	if d := cmp.Diff(wantOut, stdout.String()); d != "" {
		t.Errorf("stdout (-want +got):\n%s", d)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr = %q, want empty", stderr.String())
	}
	wantCalls := []string{
		"iptables-save",
		"iptables-restore -w 5 --noflush <<" + Render(Plan(s), IPv4, nil),
		"iptables-save",
		"iptables -w 5 -t nat -L EGRESS_REDIRECT -v -n",
		"iptables -w 5 -t filter -L EGRESS_FILTER -v -n",
	}
	if d := cmp.Diff(wantCalls, k.calls); d != "" {
		t.Errorf("calls (-want +got):\n%s", d)
	}
}

// TestInstallMLDVersion: with IPv6, Install asks for MLDv1 reports (the
// filter can match them by group); where the sysctl cannot be written it
// notes that every report is dropped and still installs.
func TestInstallMLDVersion(t *testing.T) {
	want := map[string]string{"net.ipv6.conf.all.force_mld_version": "1", "net.ipv6.conf.default.force_mld_version": "1"}
	k := newFakeKernel()
	var stderr strings.Builder
	if err := Install(context.Background(), mustParseEnv(t, map[string]string{EnvIPv6: "1"}), k, &strings.Builder{}, &stderr); err != nil {
		t.Fatalf("Install: %v", err)
	}
	if d := cmp.Diff(want, k.sysctls); d != "" || stderr.Len() != 0 {
		t.Errorf("sysctls (-want +got):\n%s\nstderr: %q", d, stderr.String())
	}

	k = newFakeKernel()
	if err := Install(context.Background(), mustParseEnv(t, map[string]string{EnvIPv6: "0"}), k, &strings.Builder{}, &strings.Builder{}); err != nil {
		t.Fatalf("Install: %v", err)
	}
	if len(k.sysctls) != 0 {
		t.Errorf("IPv4 only: sysctls %v, want none", k.sysctls)
	}

	k = newFakeKernel()
	k.sysctlErr = errors.New("open /proc/sys/net/ipv6/conf/all/force_mld_version: read-only file system")
	stderr.Reset()
	s := mustParseEnv(t, map[string]string{EnvIPv6: "1"})
	if err := Install(context.Background(), s, k, &strings.Builder{}, &stderr); err != nil {
		t.Fatalf("Install with a read-only /proc/sys: %v", err)
	}
	checkInstalled(t, k, s, nil)
	wantNote := "[NOTE] could not set net.ipv6.conf.all.force_mld_version=1 (open /proc/sys/net/ipv6/conf/all/force_mld_version: read-only file system): " +
		"every MLD report is dropped; neighbour discovery still works unless the link has an MLD-snooping switch with an active querier.\n"
	if d := cmp.Diff(wantNote, stderr.String()); d != "" {
		t.Errorf("stderr (-want +got):\n%s", d)
	}
}

func TestInstallIPv6Messages(t *testing.T) {
	s := mustParseEnv(t, map[string]string{EnvIPv6: "1", EnvDNSServers: "10.96.0.10", EnvDropICMP: "1", EnvReject: "1"})
	k := newFakeKernel()
	var stdout strings.Builder
	if err := Install(context.Background(), s, k, &stdout, &strings.Builder{}); err != nil {
		t.Fatalf("Install: %v", err)
	}
	checkInstalled(t, k, s, nil)
	for _, want := range []string{
		"  proxy_uid=1337 proxy_port=8080 redirect_from_port=80 ipv6=1\n" +
			"  dns_servers=10.96.0.10 (port 53 allowed only to these resolvers)\n" +
			"  drop_icmp=1 (ICMP dropped; ICMPv6 neighbour discovery kept)\n" +
			"  reject=1 (blocked packets answered at once: TCP reset, ICMP port unreachable)\n" +
			"  botbox_ports=8080,8443,9090 (handshakes from these ports answered only by UID 1337)\n" +
			"iptables rules installed:\n",
		"\nip6tables rules installed:\nChain EGRESS_REDIRECT",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	if k.calls[0] != "ip6tables -w 5 -t nat -L -n" {
		t.Errorf("first call = %q, want the ip6tables nat probe", k.calls[0])
	}
}

// TestInstallTwice is the idempotency contract: a second run (and a run over
// duplicated jumps) leaves one jump per chain at position 1 and keeps
// foreign rules.
func TestInstallTwice(t *testing.T) {
	for _, v6 := range []string{"0", "1"} {
		t.Run("ipv6="+v6, func(t *testing.T) {
			k := newFakeKernel()
			s := mustParseEnv(t, map[string]string{EnvIPv6: v6, EnvDropICMP: "1"})
			families := Plan(s).Families()
			for _, f := range families {
				// Stale state from an old run plus a foreign rule in between.
				k.seed(f, TableNAT, "OUTPUT", "-p tcp -j EGRESS_REDIRECT", "-d 10.9.9.9/32 -j ACCEPT", "-p tcp -j EGRESS_REDIRECT")
				k.seed(f, TableNAT, "EGRESS_REDIRECT", "-j ACCEPT")
				k.seed(f, TableFilter, "OUTPUT", "-j OTHER", `-m comment --comment "x -j EGRESS_FILTER" -j EGRESS_FILTER`)
				k.seed(f, TableFilter, "OTHER")
			}
			foreign := map[string][]string{TableNAT: {"-d 10.9.9.9/32 -j ACCEPT"}, TableFilter: {"-j OTHER"}}
			for run := range 3 {
				if err := Install(context.Background(), s, k, &strings.Builder{}, &strings.Builder{}); err != nil {
					t.Fatalf("Install run %d: %v", run+1, err)
				}
				checkInstalled(t, k, s, foreign)
			}
		})
	}
}

func TestInstallFailures(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		setup   func(k *fakeKernel)
		wantErr string
		check   bool // wantErr is a *CheckError
	}{
		{
			name:  "ip6tables missing",
			env:   map[string]string{EnvIPv6: "1"},
			setup: func(k *fakeKernel) { k.missing["ip6tables"] = true },
			wantErr: "ERROR: BOTBOX_ENABLE_IPV6=1 but ip6tables is not available (looking up ip6tables: executable file not found in $PATH).\n" +
				"  Install ip6tables (the iptables package provides ip6tables, ip6tables-save and ip6tables-restore).",
			check: true,
		},
		{
			name:  "ip6tables-restore missing",
			env:   map[string]string{EnvIPv6: "1"},
			setup: func(k *fakeKernel) { k.missing["ip6tables-restore"] = true },
			wantErr: "ERROR: BOTBOX_ENABLE_IPV6=1 but ip6tables is not available (looking up ip6tables-restore: executable file not found in $PATH).\n" +
				"  Install ip6tables (the iptables package provides ip6tables, ip6tables-save and ip6tables-restore).",
			check: true,
		},
		{
			name: "ip6tables nat missing",
			env:  map[string]string{EnvIPv6: "1"},
			setup: func(k *fakeKernel) {
				k.fail["ip6tables -w 5 -t nat -L -n"] = errors.New("can't initialize ip6tables table `nat'")
			},
			wantErr: "ERROR: BOTBOX_ENABLE_IPV6=1 but ip6tables NAT table is not available (running ip6tables -w 5 -t nat -L -n: exit status 1: can't initialize ip6tables table `nat').\n" +
				"  The kernel may not support ip6table_nat: load the module on the node (modprobe ip6table_nat).",
			check: true,
		},
		{
			// Issue 9 §7: the real error, and a fix that keeps IPv6 contained.
			name: "ip6tables without root",
			env:  map[string]string{EnvIPv6: "1"},
			setup: func(k *fakeKernel) {
				k.fail["ip6tables -w 5 -t nat -L -n"] = errors.New("ip6tables v1.8.9 (nf_tables): Could not fetch rule set generation id: Permission denied (you must be root)")
			},
			wantErr: "ERROR: BOTBOX_ENABLE_IPV6=1 but ip6tables NAT table is not available (running ip6tables -w 5 -t nat -L -n: exit status 1: ip6tables v1.8.9 (nf_tables): Could not fetch rule set generation id: Permission denied (you must be root)).\n" +
				"  Run `botbox netfilter install` as root with CAP_NET_ADMIN in the Pod's network namespace (the init container's securityContext).",
			check: true,
		},
		{
			name:  "iptables missing",
			env:   map[string]string{EnvIPv6: "0"},
			setup: func(k *fakeKernel) { k.missing["iptables-save"] = true },
			wantErr: "ERROR: iptables is not available (looking up iptables-save: executable file not found in $PATH).\n" +
				"  Install iptables (it provides iptables, iptables-save and iptables-restore).",
			check: true,
		},
		{
			name:    "restore fails",
			env:     map[string]string{EnvIPv6: "0"},
			setup:   func(k *fakeKernel) { k.fail["iptables-restore"] = errors.New("iptables-restore: line 3 failed\n") },
			wantErr: "applying IPv4 rules: running iptables-restore -w 5 --noflush: exit status 1: iptables-restore: line 3 failed",
		},
		{
			name:    "save fails",
			env:     map[string]string{EnvIPv6: "0"},
			setup:   func(k *fakeKernel) { k.fail["iptables-save"] = errors.New("boom") },
			wantErr: "reading IPv4 tables: running iptables-save: exit status 1: boom",
		},
		{
			name:  "restore silently does nothing",
			env:   map[string]string{EnvIPv6: "0"},
			setup: func(k *fakeKernel) { k.noop = true },
			wantErr: "verifying IPv4 rules: nat chain EGRESS_REDIRECT is missing\n" +
				"filter chain EGRESS_FILTER is missing",
		},
		{
			name: "a foreign rule lands first",
			env:  map[string]string{EnvIPv6: "0"},
			setup: func(k *fakeKernel) {
				k.noop = true
				k.seed(IPv4, TableNAT, "OUTPUT", "-j ACCEPT", "-p tcp -j EGRESS_REDIRECT")
				k.seed(IPv4, TableNAT, "EGRESS_REDIRECT", "a", "b", "c")
				k.seed(IPv4, TableFilter, "OUTPUT", "-j EGRESS_FILTER")
				k.seed(IPv4, TableFilter, "EGRESS_FILTER", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k")
			},
			wantErr: "verifying IPv4 rules: nat OUTPUT has 1 jumps to EGRESS_REDIRECT, want exactly one at position 1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newFakeKernel()
			tt.setup(k)
			var stdout strings.Builder
			err := Install(context.Background(), mustParseEnv(t, tt.env), k, &stdout, &strings.Builder{})
			if err == nil {
				t.Fatal("Install succeeded, want error")
			}
			if err.Error() != tt.wantErr {
				t.Errorf("Install error:\n%s\nwant:\n%s", err, tt.wantErr)
			}
			if _, ok := errors.AsType[*CheckError](err); ok != tt.check {
				t.Errorf("error is *CheckError = %v, want %v", ok, tt.check)
			}
			if strings.Contains(err.Error(), EnvIPv6+"=0") {
				t.Errorf("a failure advises switching IPv6 containment off: %q", err)
			}
			if tt.check && stdout.Len() != 0 {
				t.Errorf("a failed check printed to stdout: %q", stdout.String())
			}
		})
	}
}

func TestRemove(t *testing.T) {
	t.Run("both families whatever BOTBOX_ENABLE_IPV6 says", func(t *testing.T) {
		k := newFakeKernel()
		s := mustParseEnv(t, map[string]string{EnvIPv6: "1"})
		k.seed(IPv4, TableFilter, "OUTPUT", "-j OTHER")
		k.seed(IPv4, TableFilter, "OTHER", "-j ACCEPT")
		if err := Install(context.Background(), s, k, &strings.Builder{}, &strings.Builder{}); err != nil {
			t.Fatal(err)
		}
		k.seed(IPv6, TableFilter, "OUTPUT", "-j EGRESS_FILTER") // a duplicate
		rs, err := ParseEnvForRemove(lookupOf(getenvFrom(nil)))
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr strings.Builder
		if err := Remove(context.Background(), rs, k, &stdout, &stderr); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		for _, f := range []Family{IPv4, IPv6} {
			for _, tc := range [][2]string{{TableNAT, "EGRESS_REDIRECT"}, {TableFilter, "EGRESS_FILTER"}} {
				if k.hasChain(f, tc[0], tc[1]) {
					t.Errorf("%s %s/%s still exists", f, tc[0], tc[1])
				}
			}
		}
		if d := cmp.Diff([]string{"-j OTHER"}, k.rules(IPv4, TableFilter, "OUTPUT")); d != "" {
			t.Errorf("foreign rules (-want +got):\n%s", d)
		}
		wantOut := "Removing BotBox iptables rules...\n" +
			"  iptables: removed nat/EGRESS_REDIRECT (1 OUTPUT jump(s)), filter/EGRESS_FILTER (1 OUTPUT jump(s))\n" +
			"  ip6tables: removed nat/EGRESS_REDIRECT (1 OUTPUT jump(s)), filter/EGRESS_FILTER (2 OUTPUT jump(s))\n" +
			"BotBox iptables rules removed.\n"
		if d := cmp.Diff(wantOut, stdout.String()); d != "" {
			t.Errorf("stdout (-want +got):\n%s", d)
		}
		if stderr.Len() != 0 {
			t.Errorf("stderr = %q", stderr.String())
		}

		// Removing again finds nothing and succeeds.
		stdout.Reset()
		if err := Remove(context.Background(), rs, k, &stdout, &stderr); err != nil {
			t.Fatalf("second Remove: %v", err)
		}
		wantOut = "Removing BotBox iptables rules...\n  iptables: nothing to remove\n  ip6tables: nothing to remove\nBotBox iptables rules removed.\n"
		if d := cmp.Diff(wantOut, stdout.String()); d != "" {
			t.Errorf("second stdout (-want +got):\n%s", d)
		}
	})

	t.Run("ip6tables missing is skipped", func(t *testing.T) {
		k := newFakeKernel()
		k.missing["ip6tables-save"] = true
		k.seed(IPv4, TableNAT, "OUTPUT", "-p tcp -j EGRESS_REDIRECT")
		k.seed(IPv4, TableNAT, "EGRESS_REDIRECT", "-o lo -j RETURN")
		var stdout, stderr strings.Builder
		if err := Remove(context.Background(), DefaultSettings(), k, &stdout, &stderr); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		if k.hasChain(IPv4, TableNAT, "EGRESS_REDIRECT") || len(k.rules(IPv4, TableNAT, "OUTPUT")) != 0 {
			t.Errorf("IPv4 not removed")
		}
		want := "[WARN] ip6tables is not available (looking up ip6tables-save: executable file not found in $PATH): IPv6 skipped.\n"
		if stderr.String() != want {
			t.Errorf("stderr = %q, want %q", stderr.String(), want)
		}
	})

	t.Run("ip6tables-save failing is skipped", func(t *testing.T) {
		k := newFakeKernel()
		k.fail["ip6tables-save"] = errors.New("no kernel support")
		k.seed(IPv4, TableFilter, "OUTPUT", "-j EGRESS_FILTER")
		k.seed(IPv4, TableFilter, "EGRESS_FILTER", "-p udp -j DROP")
		var stderr strings.Builder
		if err := Remove(context.Background(), DefaultSettings(), k, &strings.Builder{}, &stderr); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		if k.hasChain(IPv4, TableFilter, "EGRESS_FILTER") {
			t.Errorf("IPv4 filter chain not removed")
		}
		if want := "[WARN] reading IPv6 tables: running ip6tables-save: exit status 1: no kernel support: IPv6 skipped.\n"; stderr.String() != want {
			t.Errorf("stderr = %q, want %q", stderr.String(), want)
		}
	})

	t.Run("ipv4 failure is an error", func(t *testing.T) {
		k := newFakeKernel()
		k.fail["iptables-save"] = errors.New("boom")
		err := Remove(context.Background(), DefaultSettings(), k, &strings.Builder{}, &strings.Builder{})
		if want := "reading IPv4 tables: running iptables-save: exit status 1: boom"; err == nil || err.Error() != want {
			t.Errorf("Remove error = %v, want %q", err, want)
		}
	})

	t.Run("chain referenced elsewhere fails atomically", func(t *testing.T) {
		k := newFakeKernel()
		k.seed(IPv4, TableFilter, "EGRESS_FILTER", "-j DROP")
		k.seed(IPv4, TableFilter, "OTHER", "-j EGRESS_FILTER")
		k.seed(IPv4, TableFilter, "OUTPUT", "-j EGRESS_FILTER")
		err := Remove(context.Background(), DefaultSettings(), k, &strings.Builder{}, &strings.Builder{})
		if err == nil || !strings.HasPrefix(err.Error(), "removing IPv4 rules: running iptables-restore -w 5 --noflush: exit status 1:") {
			t.Fatalf("Remove error = %v", err)
		}
		if d := cmp.Diff([]string{"-j EGRESS_FILTER"}, k.rules(IPv4, TableFilter, "OUTPUT")); d != "" {
			t.Errorf("partial removal (-want +got):\n%s", d)
		}
	})
}
