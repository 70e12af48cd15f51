package main

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/botbox/botbox/internal/netfilter"
	"github.com/botbox/botbox/internal/netfilter/netfiltertest"
)

// ipv6Warn are the three [WARN] lines of BOTBOX_ENABLE_IPV6=0.
var ipv6Warn = []string{
	"[WARN] BOTBOX_ENABLE_IPV6=0: IPv6 traffic control is DISABLED.",
	"  In dual-stack environments, IPv6 traffic may bypass the proxy.",
	"  Ensure IPv6 is disabled (sysctl) or blocked via NetworkPolicy.",
}

const (
	envIPv6         = netfilter.EnvIPv6
	envInterception = netfilter.EnvHTTPSInterception
)

func mustParseEnv(t *testing.T, env map[string]string) netfilter.Settings {
	t.Helper()
	s, _, err := netfilter.ParseEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("ParseEnv(%v): %v", env, err)
	}
	return s
}

// TestNetfilterCommand covers the CLI around the rules: usage, exit
// statuses, messages. Install and Remove themselves are tested in
// internal/netfilter (modelled kernel, real kernel) and test/e2e.
func TestNetfilterCommand(t *testing.T) {
	ipv6NotSet := "ERROR: BOTBOX_ENABLE_IPV6 is not set.\n" +
		"  Set BOTBOX_ENABLE_IPV6=1 to mirror rules via ip6tables (recommended for dual-stack).\n" +
		"  Set BOTBOX_ENABLE_IPV6=0 for IPv4-only (ensure IPv6 is disabled or blocked separately).\n"
	warn := strings.Join(ipv6Warn, "\n") + "\n"
	printed := func(env map[string]string) string {
		var b strings.Builder
		if err := netfilter.Print(mustParseEnv(t, env), &b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}

	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		setup      func(*netfiltertest.Runner)
		wantCode   int
		wantStdout string // exact unless empty and wantOutHas is set
		wantOutHas string
		wantStderr string
		wantErrHas string
	}{
		{name: "no args", args: nil, wantCode: 2, wantErrHas: "Usage: botbox netfilter install|print|remove"},
		{name: "unknown", args: []string{"apply"}, wantCode: 2, wantErrHas: `unknown command "apply"`},
		{name: "help", args: []string{"help"}, wantCode: 0, wantOutHas: "Usage: botbox netfilter"},
		{name: "help names BOTBOX_REJECT", args: []string{"help"}, wantCode: 0, wantOutHas: "\n  BOTBOX_REJECT                    0      1 refuses"},
		{name: "install -h", args: []string{"install", "-h"}, wantCode: 0, wantErrHas: "Usage: botbox netfilter"},
		{name: "install extra arg", args: []string{"install", "now"}, env: map[string]string{envIPv6: "0"},
			wantCode: 2, wantErrHas: `unexpected argument "now"`},
		{name: "install bad flag", args: []string{"install", "-family", "ipv4"}, wantCode: 2,
			wantErrHas: "flag provided but not defined: -family"},
		{name: "install without ipv6", args: []string{"install"}, wantCode: 1, wantStderr: ipv6NotSet},
		{name: "print without ipv6", args: []string{"print"}, wantCode: 1, wantStderr: ipv6NotSet},
		{
			name: "install conflict warns then fails", args: []string{"install"},
			env:      map[string]string{envIPv6: "0", envInterception: "1", netfilter.EnvRedirectFromPort: "443"},
			wantCode: 1,
			wantStderr: warn +
				"ERROR: BOTBOX_ENABLE_HTTPS_INTERCEPTION=1 and BOTBOX_REDIRECT_FROM_PORT=443 conflict.\n" +
				"  Port 443 traffic would be redirected to the HTTP proxy (port 8080)\n" +
				"  instead of the HTTPS interception listener (port 8443).\n" +
				"  Use BOTBOX_REDIRECT_FROM_PORT=80 (default) with BOTBOX_ENABLE_HTTPS_INTERCEPTION=1.\n",
		},
		{
			// The fake keeps no rules, so the read-back check fails: an
			// error that is not a failed check gets the "ERROR: " prefix.
			name: "install ipv6=0, read-back fails", args: []string{"install"}, env: map[string]string{envIPv6: "0"},
			wantCode: 1, wantOutHas: "Installing BotBox iptables rules...\n",
			wantStderr: warn + "ERROR: verifying IPv4 rules: nat chain EGRESS_REDIRECT is missing\nfilter chain EGRESS_FILTER is missing\n",
		},
		{
			name: "install ip6tables missing", args: []string{"install"}, env: map[string]string{envIPv6: "1"},
			setup:    func(k *netfiltertest.Runner) { k.Missing = map[string]bool{"ip6tables": true} },
			wantCode: 1,
			wantStderr: "ERROR: BOTBOX_ENABLE_IPV6=1 but ip6tables is not available (looking up ip6tables: executable file not found in $PATH).\n" +
				"  Install ip6tables (the iptables package provides ip6tables, ip6tables-save and ip6tables-restore).\n",
		},
		{
			// Issue 9 §7: without root the real error is shown, and the
			// advice keeps IPv6 contained.
			name: "install ipv6 without root", args: []string{"install"}, env: map[string]string{envIPv6: "1"},
			setup: func(k *netfiltertest.Runner) {
				k.Fail = map[string]string{"ip6tables -w 5 -t nat -L -n": "ip6tables v1.8.9 (nf_tables): Could not fetch rule set generation id: Permission denied (you must be root)\n"}
			},
			wantCode: 1,
			wantStderr: "ERROR: BOTBOX_ENABLE_IPV6=1 but ip6tables NAT table is not available (running ip6tables -w 5 -t nat -L -n: exit status 1: ip6tables v1.8.9 (nf_tables): Could not fetch rule set generation id: Permission denied (you must be root)).\n" +
				"  Run `botbox netfilter install` as root with CAP_NET_ADMIN in the Pod's network namespace (the init container's securityContext).\n",
		},
		{
			name: "install restore fails", args: []string{"install"}, env: map[string]string{envIPv6: "1"},
			setup:      func(k *netfiltertest.Runner) { k.Fail = map[string]string{"iptables-restore": "line 2 failed"} },
			wantCode:   1,
			wantOutHas: "Installing BotBox iptables rules...\n",
			wantStderr: "ERROR: applying IPv4 rules: running iptables-restore -w 5 --noflush: exit status 1: line 2 failed\n",
		},
		{
			name: "print", args: []string{"print"}, env: map[string]string{envIPv6: "1"},
			wantCode: 0, wantStdout: printed(map[string]string{envIPv6: "1"}),
		},
		{
			name: "print reject", args: []string{"print"}, env: map[string]string{envIPv6: "1", netfilter.EnvReject: "1"},
			wantCode: 0, wantStdout: printed(map[string]string{envIPv6: "1", netfilter.EnvReject: "1"}),
			wantOutHas: "-A EGRESS_FILTER -p tcp -m addrtype --src-type LOCAL -j REJECT --reject-with tcp-reset\n" +
				"-A EGRESS_FILTER -m addrtype --src-type LOCAL -j REJECT --reject-with icmp6-port-unreachable\n" +
				"-A EGRESS_FILTER -j DROP\n",
		},
		{
			name: "print reject not a switch", args: []string{"print"}, env: map[string]string{envIPv6: "1", netfilter.EnvReject: "true"},
			wantCode: 1, wantStderr: "ERROR: BOTBOX_REJECT must be 0 or 1 (got 'true').\n",
		},
		{
			name: "print ipv6 only", args: []string{"print", "-family", "ipv6"}, env: map[string]string{envIPv6: "1"},
			wantCode: 0, wantStdout: "# IPv6: ip6tables-restore -w 5 --noflush\n" + netfilter.Render(netfilter.Plan(mustParseEnv(t, map[string]string{envIPv6: "1"})), netfilter.IPv6, nil),
		},
		{
			name: "print ipv4 only", args: []string{"print", "--family=ipv4"}, env: map[string]string{envIPv6: "1"},
			wantCode: 0, wantStdout: "# IPv4: iptables-restore -w 5 --noflush\n" + netfilter.Render(netfilter.Plan(mustParseEnv(t, map[string]string{envIPv6: "1"})), netfilter.IPv4, nil),
		},
		{
			name: "print ipv6 when disabled", args: []string{"print", "-family=ipv6"}, env: map[string]string{envIPv6: "0"},
			wantCode: 1, wantStderr: warn + "ERROR: -family ipv6 needs BOTBOX_ENABLE_IPV6=1.\n",
		},
		{
			name: "print bad family", args: []string{"print", "-family=ipv5"}, env: map[string]string{envIPv6: "1"},
			wantCode: 2, wantErrHas: `-family must be ipv4 or ipv6 (got "ipv5")`,
		},
		{
			name: "remove without ipv6", args: []string{"remove"}, wantCode: 0,
			wantStdout: "Removing BotBox iptables rules...\n  iptables: nothing to remove\n  ip6tables: nothing to remove\nBotBox iptables rules removed.\n",
		},
		{
			name: "remove auto without nf_tables removes the iptables rules", args: []string{"remove"},
			env:      map[string]string{netfilter.EnvBackend: "auto"},
			wantCode: 0, wantOutHas: "BotBox iptables rules removed.\n",
			wantStderr: "[NOTE] BOTBOX_NETFILTER_BACKEND=auto: nftables is not available (nf_tables is not modelled by netfiltertest); nftables rules skipped.\n",
		},
		{
			name: "install auto without nf_tables falls back to iptables", args: []string{"install"},
			env:      map[string]string{envIPv6: "1", netfilter.EnvBackend: "auto"},
			wantCode: 1, wantOutHas: "Installing BotBox iptables rules...\n",
			wantErrHas: "[NOTE] BOTBOX_NETFILTER_BACKEND=auto: nftables is not available (nf_tables is not modelled by netfiltertest); using iptables.\n",
		},
		{
			name: "remove auto with neither backend", args: []string{"remove"},
			env:      map[string]string{netfilter.EnvBackend: "auto"},
			setup:    func(k *netfiltertest.Runner) { k.Missing = map[string]bool{"iptables": true} },
			wantCode: 1,
			wantStderr: "[NOTE] BOTBOX_NETFILTER_BACKEND=auto: nftables is not available (nf_tables is not modelled by netfiltertest); nftables rules skipped.\n" +
				"ERROR: neither nftables nor iptables is available (looking up iptables: executable file not found in $PATH).\n" +
				"  Run `botbox netfilter remove` where the rules were installed, as root with CAP_NET_ADMIN.\n",
		},
		{
			name: "print auto without nf_tables prints iptables", args: []string{"print"},
			env:      map[string]string{envIPv6: "1", netfilter.EnvBackend: "auto"},
			wantCode: 0, wantStdout: printed(map[string]string{envIPv6: "1"}),
			wantStderr: "[NOTE] BOTBOX_NETFILTER_BACKEND=auto: nftables is not available (nf_tables is not modelled by netfiltertest); printing the iptables rules.\n",
		},
		{
			name: "print nftables", args: []string{"print"},
			env:      map[string]string{envIPv6: "1", netfilter.EnvBackend: "nftables"},
			wantCode: 0, wantOutHas: "table ip6 botbox {\n",
		},
		{
			name: "install nftables without nf_tables", args: []string{"install"},
			env:      map[string]string{envIPv6: "1", netfilter.EnvBackend: "nftables"},
			wantCode: 1,
			wantStderr: "ERROR: nftables is not available (nf_tables is not modelled by netfiltertest).\n" +
				"  Use a kernel with nf_tables (and nft_chain_nat), or set BOTBOX_NETFILTER_BACKEND=iptables.\n",
		},
		{
			name: "install bad backend", args: []string{"install"},
			env:      map[string]string{envIPv6: "1", netfilter.EnvBackend: "nft"},
			wantCode: 1, wantStderr: "ERROR: BOTBOX_NETFILTER_BACKEND must be nftables, iptables or auto (got 'nft').\n",
		},
		{
			name: "remove bad reject", args: []string{"remove"}, env: map[string]string{netfilter.EnvReject: "2"},
			wantCode:   1,
			wantStderr: "ERROR: BOTBOX_REJECT must be 0 or 1 (got '2').\n",
		},
		{
			name: "remove bad chain", args: []string{"remove"}, env: map[string]string{netfilter.EnvFilterChain: "A B"},
			wantCode:   1,
			wantStderr: "ERROR: BOTBOX_FILTER_CHAIN is not a valid chain name (got 'A B'): only letters, digits, '_' and '-' are allowed.\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := &netfiltertest.Runner{}
			if tt.setup != nil {
				tt.setup(k)
			}
			var stdout, stderr strings.Builder
			lookup := func(key string) (string, bool) {
				v, ok := tt.env[key]
				if !ok && key == netfilter.EnvBackend {
					// The fake models iptables; the backend cases set it.
					return "iptables", true
				}
				return v, ok && v != ""
			}
			code := netfilterCommand(context.Background(), tt.args, lookup, netfilter.System{Runner: k, NFT: netfiltertest.NoNFTables{}}, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			if tt.wantStdout != "" {
				if d := cmp.Diff(tt.wantStdout, stdout.String()); d != "" {
					t.Errorf("stdout (-want +got):\n%s", d)
				}
			}
			if tt.wantOutHas != "" && !strings.Contains(stdout.String(), tt.wantOutHas) {
				t.Errorf("stdout lacks %q:\n%s", tt.wantOutHas, stdout.String())
			}
			if strings.Contains(stderr.String(), "ERROR") && strings.Contains(stderr.String(), "set "+envIPv6+"=0") {
				t.Errorf("a failure advises switching IPv6 containment off:\n%s", stderr.String())
			}
			if tt.wantErrHas != "" {
				if !strings.Contains(stderr.String(), tt.wantErrHas) {
					t.Errorf("stderr lacks %q:\n%s", tt.wantErrHas, stderr.String())
				}
			} else if d := cmp.Diff(tt.wantStderr, stderr.String()); d != "" {
				t.Errorf("stderr (-want +got):\n%s", d)
			}
		})
	}
}
