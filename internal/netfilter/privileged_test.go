package netfilter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Privileged tests: real iptables/ip6tables in a network namespace made by
// the test, deleted in cleanup. They need root, iproute2 and iptables; see
// requireRoot.

// requireRoot skips the test (or fails it when CI is set) unless it runs as
// root with the given programs (plus ip, iptables, iptables-save,
// iptables-restore) on PATH.
func requireRoot(t *testing.T, programs ...string) {
	t.Helper()
	reason := ""
	if os.Geteuid() != 0 {
		reason = "not running as root"
	} else {
		for _, p := range append([]string{"ip", "iptables", "iptables-save", "iptables-restore"}, programs...) {
			if _, err := exec.LookPath(p); err != nil {
				reason = p + " not found"
				break
			}
		}
	}
	if reason == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("privileged test cannot run in CI: %s", reason)
	}
	t.Skipf("privileged test skipped: %s (run as root with iproute2 and iptables; with CI set this fails)", reason)
}

// newNetns makes a fresh network namespace bbnf-<random> and deletes it
// when the test ends.
func newNetns(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := "bbnf-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return name
}

// nsExec runs a command inside the namespace and returns its combined output.
func nsExec(t *testing.T, ns string, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns exec %s %s: %v: %s", ns, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// kernelSaved reads both tables of one family inside the namespace.
func kernelSaved(t *testing.T, ns string, f Family) Saved {
	t.Helper()
	cur, err := readSaved(context.Background(), ExecRunner{Prefix: []string{"ip", "netns", "exec", ns}}, f)
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

// checkKernel asserts the namespace holds exactly the planned chains with
// the planned rule text, one jump per chain at OUTPUT position 1 (followed
// by foreign), and no BotBox chain in families the plan does not cover.
func checkKernel(t *testing.T, ns string, s Settings, foreign map[string][]string) {
	t.Helper()
	rs := Plan(s)
	for _, f := range []Family{IPv4, IPv6} {
		cur := kernelSaved(t, ns, f)
		chains := rs.Chains(f)
		if len(chains) == 0 {
			for _, tc := range [][2]string{{TableNAT, s.NATChain}, {TableFilter, s.FilterChain}} {
				if cur.HasChain(tc[0], tc[1]) || len(cur.Jumps(tc[0], tc[1])) > 0 {
					t.Errorf("%s %s/%s present although the family is disabled", f, tc[0], tc[1])
				}
			}
			continue
		}
		for _, c := range chains {
			if d := cmp.Diff(ruleStrings(c), cur[c.Table].Rules[c.Name]); d != "" {
				t.Errorf("%s %s/%s in the kernel (-want +got):\n%s", f, c.Table, c.Name, d)
			}
			want := append([]string{c.Jump.String()}, foreign[c.Table]...)
			if d := cmp.Diff(want, cur[c.Table].Rules["OUTPUT"]); d != "" {
				t.Errorf("%s %s/OUTPUT in the kernel (-want +got):\n%s", f, c.Table, d)
			}
		}
	}
}

// checkNoBotBox asserts that neither family has BotBox chains or jumps.
func checkNoBotBox(t *testing.T, ns string, s Settings) {
	t.Helper()
	for _, f := range []Family{IPv4, IPv6} {
		cur := kernelSaved(t, ns, f)
		for _, tc := range [][2]string{{TableNAT, s.NATChain}, {TableFilter, s.FilterChain}} {
			if cur.HasChain(tc[0], tc[1]) {
				t.Errorf("%s %s/%s still exists after remove", f, tc[0], tc[1])
			}
			if n := len(cur.Jumps(tc[0], tc[1])); n > 0 {
				t.Errorf("%s %s/OUTPUT still has %d jumps to %s", f, tc[0], n, tc[1])
			}
		}
	}
}

// TestPrivilegedInstallEveryCombination applies every golden combination to
// a real kernel through the command (install, install again, remove without
// BOTBOX_ENABLE_IPV6), so every rule BotBox can render is accepted by
// iptables and reads back exactly as rendered.
func TestPrivilegedInstallEveryCombination(t *testing.T) {
	requireRoot(t, "ip6tables", "ip6tables-save", "ip6tables-restore")
	for _, tc := range envCombinations() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := newNetns(t)
			r := ExecRunner{Prefix: []string{"ip", "netns", "exec", ns}}
			s := mustParseEnv(t, tc.env)
			ctx := context.Background()
			for run := 1; run <= 2; run++ {
				var stdout, stderr strings.Builder
				if err := Install(ctx, s, r, &stdout, &stderr); err != nil || stderr.Len() != 0 {
					t.Fatalf("install run %d: %v\nstdout:\n%s\nstderr:\n%s", run, err, stdout.String(), stderr.String())
				}
				if !strings.Contains(stdout.String(), "Chain "+s.FilterChain+" (1 references)") {
					t.Errorf("install output lacks the listing:\n%s", stdout.String())
				}
				checkKernel(t, ns, s, nil)
			}
			removeEnv := map[string]string{EnvNATChain: tc.env[EnvNATChain], EnvFilterChain: tc.env[EnvFilterChain]}
			if s.IPv6 {
				out := nsExec(t, ns, "", "cat", "/proc/sys/net/ipv6/conf/all/force_mld_version")
				if strings.TrimSpace(out) != "1" {
					t.Errorf("net.ipv6.conf.all.force_mld_version = %q after install, want 1", out)
				}
			}
			rs, err := ParseEnvForRemove(lookupOf(getenvFrom(removeEnv)))
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr strings.Builder
			if err := Remove(ctx, rs, r, &stdout, &stderr); err != nil {
				t.Fatalf("remove: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			checkNoBotBox(t, ns, s)
		})
	}
}

// TestPrivilegedInstallOverExistingJumps seeds duplicated and commented
// jumps, a goto, stale chain contents and foreign rules, then installs:
// exactly one jump per chain at position 1, foreign rules kept in order.
func TestPrivilegedInstallOverExistingJumps(t *testing.T) {
	requireRoot(t, "ip6tables", "ip6tables-save", "ip6tables-restore")
	for _, tc := range []envCase{
		{"default ipv6=1", map[string]string{EnvIPv6: "1"}},
		{"custom ipv6=1", func() map[string]string { env := customEnv(); env[EnvIPv6] = "1"; return env }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := newNetns(t)
			s := mustParseEnv(t, tc.env)
			dump := existingDump(s.NATChain, s.FilterChain)
			for _, f := range []Family{IPv4, IPv6} {
				nsExec(t, ns, dump, f.RestoreCommand())
			}
			r := ExecRunner{Prefix: []string{"ip", "netns", "exec", ns}}
			if err := Install(context.Background(), s, r, &strings.Builder{}, &strings.Builder{}); err != nil {
				t.Fatalf("Install: %v", err)
			}
			foreign := map[string][]string{
				TableNAT:    {"-m owner --uid-owner 4242 -j ACCEPT"},
				TableFilter: {"-j OTHER", "-m comment --comment " + s.FilterChain + " -j ACCEPT"},
			}
			checkKernel(t, ns, s, foreign)

			if err := Remove(context.Background(), s, r, &strings.Builder{}, &strings.Builder{}); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			checkNoBotBox(t, ns, s)
			for _, f := range []Family{IPv4, IPv6} {
				cur := kernelSaved(t, ns, f)
				if d := cmp.Diff(foreign[TableFilter], cur[TableFilter].Rules["OUTPUT"]); d != "" {
					t.Errorf("%s foreign filter rules after remove (-want +got):\n%s", f, d)
				}
			}
		})
	}
}

// TestPrivilegedIPv6NATProbe checks the probe Install uses for reference
// §8.2 step 3 against the real ip6tables in a fresh namespace.
func TestPrivilegedIPv6NATProbe(t *testing.T) {
	requireRoot(t, "ip6tables")
	ns := newNetns(t)
	nsExec(t, ns, "", "ip6tables", "-w", "5", "-t", "nat", "-L", "-n")
}

// TestPrivilegedDropICMPKeepsNeighbourDiscovery proves the ICMPv6 choice of
// BOTBOX_DROP_ICMP=1: BotBox's UID can still reach an IPv6 neighbour (the
// kernel's neighbour solicitations have no socket owner, so only the NDP
// allowance lets them out), while a catch-all ICMPv6 drop would cut it off.
func TestPrivilegedDropICMPKeepsNeighbourDiscovery(t *testing.T) {
	requireRoot(t, "ip6tables", "ip6tables-save", "ip6tables-restore", "setpriv", "bash", "timeout")
	if testing.Short() {
		t.Skip("slow (waits for a neighbour resolution to fail)")
	}
	tests := []struct {
		name        string
		dropAllICMP bool
		wantRefused bool
	}{
		{"neighbour discovery kept", false, true},
		{"control: dropping all ICMPv6 breaks it", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pod, peer := newNetns(t), newNetns(t)
			if out, err := exec.Command("ip", "link", "add", "vpod", "netns", pod, "type", "veth", "peer", "name", "vpeer", "netns", peer).CombinedOutput(); err != nil {
				t.Fatalf("ip link add: %v: %s", err, out)
			}
			for _, c := range [][]string{
				{"ip", "-n", pod, "link", "set", "lo", "up"},
				{"ip", "-n", pod, "link", "set", "vpod", "up"},
				{"ip", "-n", peer, "link", "set", "vpeer", "up"},
				{"ip", "-n", pod, "-6", "addr", "add", "fd00:b0b::2/64", "dev", "vpod", "nodad"},
				{"ip", "-n", peer, "-6", "addr", "add", "fd00:b0b::1/64", "dev", "vpeer", "nodad"},
			} {
				if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
					t.Fatalf("%v: %v: %s", c, err, out)
				}
			}
			s := mustParseEnv(t, map[string]string{EnvIPv6: "1", EnvDropICMP: "1"})
			r := ExecRunner{Prefix: []string{"ip", "netns", "exec", pod}}
			if err := Install(context.Background(), s, r, &strings.Builder{}, &strings.Builder{}); err != nil {
				t.Fatalf("Install: %v", err)
			}
			if tt.dropAllICMP {
				nsExec(t, pod, "", "ip6tables", "-w", "5", "-I", s.FilterChain, "1", "-p", "ipv6-icmp", "-j", "DROP")
			}
			// BotBox's UID connects to a closed port of the neighbour: with
			// neighbour discovery working the answer is an immediate RST.
			start := time.Now()
			cmd := exec.Command("ip", "netns", "exec", pod, "setpriv", "--reuid", "1337", "--regid", "1337", "--clear-groups",
				"timeout", "4", "bash", "-c", "exec 3<>/dev/tcp/fd00:b0b::1/9")
			out, _ := cmd.CombinedOutput()
			refused := strings.Contains(string(out), "Connection refused")
			if refused != tt.wantRefused {
				t.Errorf("connection refused = %v after %v, want %v; output: %s", refused, time.Since(start).Round(time.Millisecond), tt.wantRefused, out)
			}
			neigh := nsExec(t, pod, "", "ip", "-6", "neigh", "show", "dev", "vpod")
			resolved := strings.Contains(neigh, "fd00:b0b::1") && !strings.Contains(neigh, "FAILED") && !strings.Contains(neigh, "INCOMPLETE")
			if resolved != tt.wantRefused {
				t.Errorf("neighbour resolved = %v, want %v: %s", resolved, tt.wantRefused, neigh)
			}
		})
	}
}

// TestPrivilegedRenameLeavesOldChains documents the reference behaviour kept
// on purpose: installing with new chain names does not remove the old ones.
func TestPrivilegedRenameLeavesOldChains(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	r := ExecRunner{Prefix: []string{"ip", "netns", "exec", ns}}
	old := mustParseEnv(t, map[string]string{EnvIPv6: "0"})
	renamed := mustParseEnv(t, map[string]string{EnvIPv6: "0", EnvNATChain: "BB_NAT", EnvFilterChain: "BB_FILTER"})
	for _, s := range []Settings{old, renamed} {
		if err := Install(context.Background(), s, r, &strings.Builder{}, &strings.Builder{}); err != nil {
			t.Fatalf("Install: %v", err)
		}
	}
	cur := kernelSaved(t, ns, IPv4)
	for _, tc := range [][2]string{{TableNAT, "EGRESS_REDIRECT"}, {TableNAT, "BB_NAT"}, {TableFilter, "EGRESS_FILTER"}, {TableFilter, "BB_FILTER"}} {
		if !cur.HasChain(tc[0], tc[1]) {
			t.Errorf("%s/%s missing", tc[0], tc[1])
		}
	}
	if got := cur[TableFilter].Rules["OUTPUT"]; !slices.Equal(got, []string{"-j BB_FILTER", "-j EGRESS_FILTER"}) {
		t.Errorf("filter OUTPUT = %q", got)
	}
}
