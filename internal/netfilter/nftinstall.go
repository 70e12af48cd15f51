package netfilter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// NFTDialer opens a netlink connection to nf_tables in the network
// namespace the rules are for. InstallNFTables, RemoveNFTables and
// ProbeNFTables reach the kernel only through it.
type NFTDialer interface {
	// DialNFT returns a lasting connection; the caller closes it with
	// CloseLasting.
	DialNFT() (*nftables.Conn, error)
}

// NetlinkDialer is the real NFTDialer: no external program, only a netlink
// socket.
type NetlinkDialer struct {
	// NetNS is a network namespace file such as /run/netns/pod1 to act in;
	// "" is the calling process's namespace (the init container's).
	NetNS string
}

// DialNFT implements NFTDialer.
func (d NetlinkDialer) DialNFT() (*nftables.Conn, error) {
	if d.NetNS == "" {
		c, err := nftables.New(nftables.AsLasting())
		if err != nil {
			return nil, fmt.Errorf("opening a netlink socket to nf_tables: %w", err)
		}
		return c, nil
	}
	ns, err := os.Open(d.NetNS)
	if err != nil {
		return nil, fmt.Errorf("opening network namespace: %w", err)
	}
	defer ns.Close() // the socket keeps the namespace once created
	c, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(int(ns.Fd())))
	if err != nil {
		return nil, fmt.Errorf("opening a netlink socket to nf_tables in %s: %w", d.NetNS, err)
	}
	return c, nil
}

// nftTables translates the plan of s for every family it has.
func nftTables(rs Ruleset) ([]nftTable, error) {
	var out []nftTable
	for _, f := range rs.Families() {
		t, err := nftPlan(rs, f)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// PrintNFTables writes the ruleset of s for families in nft syntax, without
// touching the kernel: a comment naming the backend, then what `nft -f`
// would load to do what InstallNFTables does.
func PrintNFTables(s Settings, families []Family, w io.Writer) error {
	rs := Plan(s)
	var tables []nftTable
	for _, f := range families {
		t, err := nftPlan(rs, f)
		if err != nil {
			return err
		}
		tables = append(tables, t)
	}
	text := "# nftables (BOTBOX_NETFILTER_BACKEND=nftables), one transaction: nft -f -\n" + nftText(tables)
	if _, err := io.WriteString(w, text); err != nil {
		return fmt.Errorf("writing rules: %w", err)
	}
	return nil
}

// InstallNFTables applies the ruleset of s with nftables over netlink: the
// tables "ip botbox" and (with IPv6) "ip6 botbox", each created, deleted
// and created again with its chains and rules, all families in ONE netlink
// batch, so the kernel applies everything or nothing and a re-run replaces
// the tables with identical ones (idempotent). No other table is read or
// changed; installing without IPv6 leaves an earlier "ip6 botbox" alone, as
// the iptables backend does. It then reads the tables back and compares
// every chain and every expression with what it sent, and sets
// force_mld_version like Install. The rules are translated before anything
// is sent: an untranslatable rule fails with nothing changed.
func InstallNFTables(ctx context.Context, s Settings, d NFTDialer, r Runner, stdout, stderr io.Writer) error {
	tables, err := nftTables(Plan(s))
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("installing nftables rules: %w", err)
	}
	conn, err := d.DialNFT()
	if err != nil {
		return errNFTUnavailable(err)
	}
	defer func() { _ = conn.CloseLasting() }()

	fmt.Fprintln(stdout, "Installing BotBox nftables rules...")
	printParameters(s, stdout)
	if err := setMLDVersion(ctx, s, r, stderr); err != nil {
		return err
	}

	if err := applyNFT(conn, tables); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "nftables rules installed:")
	if _, err := io.WriteString(stdout, nftText(tables)); err != nil {
		return fmt.Errorf("writing the listing: %w", err)
	}
	return nil
}

// applyNFT replaces BotBox's tables with tables in one batch, then verifies
// them.
func applyNFT(conn *nftables.Conn, tables []nftTable) error {
	for _, t := range tables {
		addNFTTable(conn, t)
	}
	if err := conn.Flush(); err != nil {
		return errNFTApply("applying nftables rules (one transaction: nothing was changed)", err)
	}
	for _, t := range tables {
		if err := verifyNFTTable(conn, t); err != nil {
			return fmt.Errorf("verifying nftables table %s %s: %w", nftFamilyName(t.family), NFTTable, err)
		}
	}
	return nil
}

// addNFTTable queues, in conn's batch, the replacement of t: add (a no-op
// when it exists), delete, add, then its chains (regular chains before the
// base chains that jump to them) and rules in order.
func addNFTTable(conn *nftables.Conn, t nftTable) {
	tab := &nftables.Table{Family: nftFamily(t.family), Name: NFTTable}
	conn.AddTable(tab)
	conn.DelTable(tab)
	conn.AddTable(tab)
	chains := map[string]*nftables.Chain{}
	for _, c := range t.chains {
		ch := &nftables.Chain{Name: c.name, Table: tab}
		switch c.base {
		case TableNAT:
			ch.Type, ch.Hooknum, ch.Priority = nftables.ChainTypeNAT, nftables.ChainHookOutput, nftables.ChainPriorityNATDest
		case TableFilter:
			ch.Type, ch.Hooknum, ch.Priority = nftables.ChainTypeFilter, nftables.ChainHookOutput, nftables.ChainPriorityFilter
		}
		if c.base != "" {
			accept := nftables.ChainPolicyAccept
			ch.Policy = &accept
		}
		chains[c.name] = conn.AddChain(ch)
	}
	for _, c := range t.chains {
		for _, r := range c.rules {
			conn.AddRule(&nftables.Rule{Table: tab, Chain: chains[c.name], Exprs: r.exprs(t.family)})
		}
	}
}

// verifyNFTTable reads t back: exactly t's chains, base chains hooked as
// planned, and in each chain exactly the planned expressions in order.
func verifyNFTTable(conn *nftables.Conn, t nftTable) error {
	tab := &nftables.Table{Family: nftFamily(t.family), Name: NFTTable}
	all, err := conn.ListChainsOfTableFamily(tab.Family)
	if err != nil {
		return fmt.Errorf("listing chains: %w", err)
	}
	got := map[string]*nftables.Chain{}
	for _, c := range all {
		if c.Table != nil && c.Table.Name == NFTTable {
			got[c.Name] = c
		}
	}
	if len(got) != len(t.chains) {
		return fmt.Errorf("%d chains, want %d", len(got), len(t.chains))
	}
	var errs []error
	for _, c := range t.chains {
		kc := got[c.name]
		if kc == nil {
			errs = append(errs, fmt.Errorf("chain %s is missing", c.name))
			continue
		}
		if isBase := kc.Hooknum != nil; isBase != (c.base != "") || (isBase && *kc.Hooknum != *nftables.ChainHookOutput) {
			errs = append(errs, fmt.Errorf("chain %s is not hooked as planned", c.name))
		}
		rules, err := conn.GetRules(tab, kc)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading chain %s: %w", c.name, err))
			continue
		}
		if len(rules) != len(c.rules) {
			errs = append(errs, fmt.Errorf("chain %s has %d rules, want %d", c.name, len(rules), len(c.rules)))
			continue
		}
		for i, r := range rules {
			if want := c.rules[i].exprs(t.family); !sameExprs(r.Exprs, want) {
				errs = append(errs, fmt.Errorf("chain %s rule %d differs from the plan (%s)", c.name, i+1, c.rules[i].text(t.family)))
			}
		}
	}
	return errors.Join(errs...)
}

// sameExprs compares expressions read from the kernel with planned ones.
// The kernel dumps a redirect's port register as both minimum and maximum
// (nft_redir_dump), where the plan names only the minimum: the same range.
func sameExprs(got, want []expr.Any) bool {
	return len(got) == len(want) && slices.EqualFunc(got, want, func(a, b expr.Any) bool {
		if ra, ok := a.(*expr.Redir); ok {
			if rb, ok := b.(*expr.Redir); ok && rb.RegisterProtoMax == 0 && ra.RegisterProtoMax == ra.RegisterProtoMin {
				n := *ra
				n.RegisterProtoMax = 0
				a = &n
			}
		}
		return reflect.DeepEqual(a, b)
	})
}

// RemoveNFTables deletes BotBox's tables ("ip botbox" and "ip6 botbox",
// whatever BOTBOX_ENABLE_IPV6 says) in one netlink batch and checks that
// they are gone. Nothing to remove is not an error; no other table is
// touched (so rules of the iptables backend, iptables-nft's included, stay).
func RemoveNFTables(ctx context.Context, d NFTDialer, stdout io.Writer) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("removing nftables rules: %w", err)
	}
	conn, err := d.DialNFT()
	if err != nil {
		return errNFTUnavailable(err)
	}
	defer func() { _ = conn.CloseLasting() }()
	fmt.Fprintln(stdout, "Removing BotBox nftables rules...")
	present, err := botboxTables(conn)
	if err != nil {
		return errNFTApply("listing nftables tables", err)
	}
	for _, f := range []Family{IPv4, IPv6} {
		if !slices.Contains(present, f) {
			fmt.Fprintf(stdout, "  %s %s: nothing to remove\n", nftFamilyName(f), NFTTable)
			continue
		}
		conn.DelTable(&nftables.Table{Family: nftFamily(f), Name: NFTTable})
	}
	if len(present) > 0 {
		if err := conn.Flush(); err != nil {
			return errNFTApply("removing nftables tables (one transaction: nothing was changed)", err)
		}
		left, err := botboxTables(conn)
		if err != nil {
			return errNFTApply("listing nftables tables", err)
		}
		if len(left) > 0 {
			return fmt.Errorf("verifying nftables removal: table %s still exists for %v", NFTTable, left)
		}
		for _, f := range present {
			fmt.Fprintf(stdout, "  %s %s: removed\n", nftFamilyName(f), NFTTable)
		}
	}
	fmt.Fprintln(stdout, "BotBox nftables rules removed.")
	return nil
}

// botboxTables returns the families that have a BotBox table.
func botboxTables(conn *nftables.Conn) ([]Family, error) {
	var out []Family
	for _, f := range []Family{IPv4, IPv6} {
		ts, err := conn.ListTablesOfFamily(nftFamily(f))
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			if t.Name == NFTTable {
				out = append(out, f)
			}
		}
	}
	return out, nil
}

// ProbeNFTables reports whether nf_tables answers in the target namespace,
// read-only: it lists the IPv4 tables (the kernel loads nf_tables on
// demand). ErrNFTPermission when the caller may not use it.
func ProbeNFTables(d NFTDialer) error {
	conn, err := d.DialNFT()
	if err != nil {
		return err
	}
	defer func() { _ = conn.CloseLasting() }()
	if _, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4); err != nil {
		if errors.Is(err, syscall.EPERM) {
			return fmt.Errorf("%w: %w", ErrNFTPermission, err)
		}
		return fmt.Errorf("listing nftables tables: %w", err)
	}
	return nil
}

// ErrNFTPermission: nf_tables refused the caller (no CAP_NET_ADMIN in the
// namespace). Auto-detection does not fall back to iptables then, which
// would fail the same way with a less helpful message.
var ErrNFTPermission = errors.New("nf_tables: permission denied")

func errNFTUnavailable(err error) *CheckError {
	return checkError(
		"ERROR: nftables is not available ("+err.Error()+").",
		"  Use a kernel with nf_tables (and nft_chain_nat), or set BOTBOX_NETFILTER_BACKEND=iptables.")
}

// errNFTApply wraps a failed netlink call, with the fix for the usual
// causes.
func errNFTApply(what string, err error) error {
	switch {
	case errors.Is(err, syscall.EPERM):
		return checkError("ERROR: "+what+": "+err.Error()+".", permissionHint)
	case errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.ENOENT):
		return checkError("ERROR: "+what+": "+err.Error()+".",
			"  The kernel may lack nf_tables NAT or fib support (nft_chain_nat, nft_redir, nft_fib_inet, nft_reject_inet): load the modules on the node, or set BOTBOX_NETFILTER_BACKEND=iptables.")
	}
	return fmt.Errorf("%s: %w", what, err)
}
