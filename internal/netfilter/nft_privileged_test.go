package netfilter

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// Privileged tests of the nftables backend: real nf_tables in namespaces
// made by the test. The backend itself needs no program; the tests use
// `nft` (Debian's nftables package) to read the kernel independently and to
// load the printed ruleset.

// nsSystem is the System acting inside ns.
func nsSystem(ns string) System {
	return System{
		Runner: ExecRunner{Prefix: []string{"ip", "netns", "exec", ns}},
		NFT:    NetlinkDialer{NetNS: "/run/netns/" + ns},
	}
}

func nftInstall(t *testing.T, ns string, s Settings) string {
	t.Helper()
	var out, errOut strings.Builder
	sys := nsSystem(ns)
	if err := InstallNFTables(context.Background(), s, sys.NFT, sys.Runner, &out, &errOut); err != nil {
		t.Fatalf("InstallNFTables: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	return out.String()
}

func nftRemove(t *testing.T, ns string) string {
	t.Helper()
	var out strings.Builder
	if err := RemoveNFTables(context.Background(), nsSystem(ns).NFT, &out); err != nil {
		t.Fatalf("RemoveNFTables: %v\n%s", err, out.String())
	}
	return out.String()
}

// foreignNFT is a table and an iptables rule of somebody else that every
// operation must leave as it is.
const foreignNFT = `table inet foreign {
	chain out {
		type filter hook output priority 10; policy accept;
		meta skuid 4242 counter packets 0 bytes 0 accept
	}
}
`

// TestPrivilegedNFTInstallEveryCombination applies every golden
// combination to a real kernel over netlink and checks, with nft as an
// independent reader, that: the kernel holds exactly what `print` shows (the
// printed text loaded with `nft -f` in a second namespace lists identically,
// so the expressions sent equal those nft builds from the text); a second
// install changes nothing; remove deletes both BotBox tables and nothing
// else (a foreign nftables table and a foreign iptables rule stay).
func TestPrivilegedNFTInstallEveryCombination(t *testing.T) {
	requireRoot(t, "nft")
	for _, tc := range envCombinations() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := mustParseEnv(t, tc.env)
			ns, ref := newNetns(t), newNetns(t)
			nsExec(t, ns, foreignNFT, "nft", "-f", "-")
			nsExec(t, ns, "", "iptables", "-w", "5", "-A", "OUTPUT", "-m", "owner", "--uid-owner", "4242", "-j", "ACCEPT")
			foreign := nsExec(t, ns, "", "nft", "list", "table", "inet", "foreign")
			foreignIPT := nsExec(t, ns, "", "iptables-save", "-t", "filter")

			out := nftInstall(t, ns, s)
			var printed strings.Builder
			if err := PrintNFTables(s, Plan(s).Families(), &printed); err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(out, strings.SplitN(printed.String(), "\n", 2)[1]) {
				t.Errorf("install output does not end with the printed ruleset:\n%s", out)
			}
			nsExec(t, ref, printed.String(), "nft", "-f", "-")
			want := botboxListing(t, ref)
			if got := botboxListing(t, ns); got != want {
				t.Errorf("netlink install and `nft -f` of print differ (-print +install):\n%s", cmp.Diff(want, got))
			}

			nftInstall(t, ns, s)
			if got := botboxListing(t, ns); got != want {
				t.Errorf("second install changed the ruleset (-first +second):\n%s", cmp.Diff(want, got))
			}

			rm := nftRemove(t, ns)
			if !strings.Contains(rm, "  ip botbox: removed\n") {
				t.Errorf("remove output:\n%s", rm)
			}
			if got := botboxListing(t, ns); got != "" {
				t.Errorf("BotBox tables left after remove:\n%s", got)
			}
			if got := nsExec(t, ns, "", "nft", "list", "table", "inet", "foreign"); got != foreign {
				t.Errorf("foreign table changed (-before +after):\n%s", cmp.Diff(foreign, got))
			}
			if got := nsExec(t, ns, "", "iptables-save", "-t", "filter"); stripSaveComments(got) != stripSaveComments(foreignIPT) {
				t.Errorf("foreign iptables rule changed (-before +after):\n%s", cmp.Diff(foreignIPT, got))
			}
			if rm := nftRemove(t, ns); !strings.Contains(rm, "  ip botbox: nothing to remove\n  ip6 botbox: nothing to remove\n") {
				t.Errorf("second remove:\n%s", rm)
			}
		})
	}
}

// botboxListing is `nft list table` of BotBox's tables in ns ("" when
// there are none).
func botboxListing(t *testing.T, ns string) string {
	t.Helper()
	var b strings.Builder
	tables := nsExec(t, ns, "", "nft", "list", "tables")
	for _, fam := range []string{"ip", "ip6"} {
		if strings.Contains(tables, "table "+fam+" "+NFTTable+"\n") {
			b.WriteString(nsExec(t, ns, "", "nft", "list", "table", fam, NFTTable))
		}
	}
	return b.String()
}

// stripSaveComments drops iptables-save's timestamp comments.
func stripSaveComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestPrivilegedNFTVerifyDetectsChanges: the read-back check compares every
// expression, so a rule added, changed or removed behind BotBox's back is
// reported.
func TestPrivilegedNFTVerifyDetectsChanges(t *testing.T) {
	requireRoot(t, "nft")
	s := mustParseEnv(t, map[string]string{EnvIPv6: "1"})
	ns := newNetns(t)
	nftInstall(t, ns, s)
	tab, err := nftPlan(Plan(s), IPv4)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := nsSystem(ns).NFT.DialNFT()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.CloseLasting() }()
	if err := verifyNFTTable(conn, tab); err != nil {
		t.Fatalf("fresh install: %v", err)
	}
	// The same number of rules, one different: the last DNS exemption (tcp)
	// to port 54.
	ch := &nftables.Chain{Name: s.FilterChain, Table: &nftables.Table{Family: nftables.TableFamilyIPv4, Name: NFTTable}}
	rules, err := conn.GetRules(ch.Table, ch)
	if err != nil {
		t.Fatal(err)
	}
	var dns *nftables.Rule
	for _, r := range rules {
		for _, e := range r.Exprs {
			if c, ok := e.(*expr.Cmp); ok && len(c.Data) == 2 && c.Data[0] == 0 && c.Data[1] == 53 {
				c.Data = []byte{0, 54}
				dns = r
			}
		}
	}
	if dns == nil {
		t.Fatal("no port-53 rule found")
	}
	conn.ReplaceRule(dns)
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := verifyNFTTable(conn, tab); err == nil || !strings.Contains(err.Error(), "differs from the plan (tcp dport 53 return)") {
		t.Errorf("changed rule: %v", err)
	}
	nsExec(t, ns, "", "nft", "add", "rule", "ip", NFTTable, s.FilterChain, "accept")
	if err := verifyNFTTable(conn, tab); err == nil || !strings.Contains(err.Error(), "rules, want") {
		t.Errorf("added rule: %v", err)
	}
	nsExec(t, ns, "", "nft", "add", "chain", "ip", NFTTable, "extra")
	if err := verifyNFTTable(conn, tab); err == nil || !strings.Contains(err.Error(), "chains, want") {
		t.Errorf("added chain: %v", err)
	}
}

// TestPrivilegedBackendsCoexist defines what two backends in one namespace
// do: each install and each remove with an explicit backend touches only
// its own objects. With both installed a packet passes both rule sets (the
// stricter wins; the redirects are identical); removing one leaves the
// other exactly as it was; remove with auto removes both.
func TestPrivilegedBackendsCoexist(t *testing.T) {
	requireRoot(t, "nft", "ip6tables", "ip6tables-save", "ip6tables-restore")
	s := mustParseEnv(t, map[string]string{EnvIPv6: "1"})
	ns := newNetns(t)
	sys := nsSystem(ns)
	ctx := context.Background()
	if err := Install(ctx, s, sys.Runner, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	nftInstall(t, ns, s)
	checkKernel(t, ns, s, nil)
	listing := botboxListing(t, ns)

	nftRemove(t, ns)
	checkKernel(t, ns, s, nil)
	if got := botboxListing(t, ns); got != "" {
		t.Errorf("nftables remove left:\n%s", got)
	}

	nftInstall(t, ns, s)
	if err := Remove(ctx, s, sys.Runner, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	checkNoBotBox(t, ns, s)
	if got := botboxListing(t, ns); got != listing {
		t.Errorf("iptables remove changed the nftables tables (-before +after):\n%s", cmp.Diff(listing, got))
	}

	// remove with auto removes what either backend installed.
	if err := Install(ctx, s, sys.Runner, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	auto := s
	auto.Backend = BackendAuto
	var out strings.Builder
	if err := RemoveWith(ctx, auto, sys, &out, &out); err != nil {
		t.Fatalf("RemoveWith auto: %v\n%s", err, out.String())
	}
	checkNoBotBox(t, ns, s)
	if got := botboxListing(t, ns); got != "" {
		t.Errorf("remove with auto left:\n%s", got)
	}
}

// TestPrivilegedNFTProbe: auto picks nftables where nf_tables answers, and
// iptables (with a note) where it cannot be reached.
func TestPrivilegedNFTProbe(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	var note strings.Builder
	b, err := ResolveBackend(BackendAuto, nsSystem(ns), &note)
	if err != nil || b != BackendNFTables || note.Len() != 0 {
		t.Errorf("auto in a namespace: %q, %v, note %q; want nftables", b, err, note.String())
	}
	b, err = ResolveBackend(BackendAuto, System{NFT: NetlinkDialer{NetNS: "/run/netns/does-not-exist"}}, &note)
	if err != nil || b != BackendIPTables || !strings.Contains(note.String(), "[NOTE] BOTBOX_NETFILTER_BACKEND=auto: nftables is not available (") {
		t.Errorf("auto without nf_tables: %q, %v, note %q; want iptables", b, err, note.String())
	}
	if b, err := ResolveBackend(BackendIPTables, System{}, &note); b != BackendIPTables || err != nil {
		t.Errorf("explicit iptables: %q, %v", b, err)
	}
}

// TestPrivilegedNFTDNSGuardShapes: the DNS guard's rules (udp and tcp
// REDIRECT with a negated owner match) are accepted by the kernel over
// netlink, read back identical, and equal what `nft -f` builds from their
// text.
func TestPrivilegedNFTDNSGuardShapes(t *testing.T) {
	requireRoot(t, "nft")
	rs := dnsGuardRuleset()
	tables, err := nftTables(rs)
	if err != nil {
		t.Fatal(err)
	}
	ns, ref := newNetns(t), newNetns(t)
	conn, err := nsSystem(ns).NFT.DialNFT()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.CloseLasting() }()
	if err := applyNFT(conn, tables); err != nil {
		t.Fatal(err)
	}
	nsExec(t, ref, nftText(tables), "nft", "-f", "-")
	got, want := botboxListing(t, ns), botboxListing(t, ref)
	if got != want {
		t.Errorf("netlink and nft -f differ (-nft +netlink):\n%s", cmp.Diff(want, got))
	}
	for _, w := range []string{"udp dport 53 jump EGRESS_REDIRECT.4", "udp dport 53 redirect to :15053", "table ip6 botbox"} {
		if !strings.Contains(got, w) {
			t.Errorf("listing lacks %q:\n%s", w, got)
		}
	}
}
