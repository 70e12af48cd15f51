package netfilter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// Install applies the ruleset of s, per family and per table atomically
// (iptables-restore --noflush), touching only BotBox's chains and its
// OUTPUT jumps. It is idempotent: running it again rebuilds the chains and
// leaves exactly one jump per chain, at OUTPUT position 1.
//
// In order it:
//
//   - checks the tools: iptables, iptables-restore, iptables-save; with IPv6,
//     ip6tables, ip6tables-restore and ip6tables-save (reference §8.2 step 3
//     message when missing) and that `ip6tables -w N -t nat -L -n` works
//     (the NAT table message otherwise);
//
//   - prints "Installing BotBox iptables rules..." and the parameter lines;
//
//   - per family: reads iptables-save (one snapshot), renders with the
//     existing jumps (Render), restores, reads back and verifies that each
//     chain has its rules and exactly one jump, at position 1;
//
//   - lists the chains (`-L CHAIN -v -n`) like the reference script.
//
//   - with IPv6, sets net.ipv6.conf.all.force_mld_version and
//     net.ipv6.conf.default.force_mld_version to 1 (MLDv1 reports, which the
//     filter can match by group); a failure is a note on stderr, not an
//     error (the rules drop every MLD report then).
//
// Failed checks are *CheckError values with the script's messages. stderr
// is reserved for notes that are not errors.
func Install(ctx context.Context, s Settings, r Runner, stdout, stderr io.Writer) error {
	rs := Plan(s)
	wait := strconv.FormatUint(uint64(s.WaitSeconds), 10)

	if err := lookTools(r, IPv4); err != nil {
		return checkError(
			"ERROR: iptables is not available ("+err.Error()+").",
			"  Install iptables (it provides iptables, iptables-save and iptables-restore).")
	}
	if s.IPv6 {
		if err := lookTools(r, IPv6); err != nil {
			return errIP6tablesMissing(err)
		}
		if _, err := r.Run(ctx, nil, "ip6tables", "-w", wait, "-t", "nat", "-L", "-n"); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("checking the ip6tables nat table: %w", ctx.Err())
			}
			return errIP6NATMissing(err)
		}
	}

	fmt.Fprintln(stdout, "Installing BotBox iptables rules...")
	printParameters(s, stdout)
	if err := setMLDVersion(ctx, s, r, stderr); err != nil {
		return err
	}

	for _, f := range rs.Families() {
		before, err := readSaved(ctx, r, f)
		if err != nil {
			return err
		}
		payload := Render(rs, f, before)
		if _, err := r.Run(ctx, []byte(payload), f.RestoreCommand(), restoreArgs(s.WaitSeconds)...); err != nil {
			return fmt.Errorf("applying %s rules: %w", f, err)
		}
		after, err := readSaved(ctx, r, f)
		if err != nil {
			return err
		}
		if err := verifyInstalled(rs.Chains(f), after); err != nil {
			return fmt.Errorf("verifying %s rules: %w", f, err)
		}
	}

	for _, f := range rs.Families() {
		fmt.Fprintf(stdout, "%s rules installed:\n", f.Command())
		for _, c := range rs.Chains(f) {
			out, err := r.Run(ctx, nil, f.Command(), "-w", wait, "-t", c.Table, "-L", c.Name, "-v", "-n")
			if err != nil {
				return fmt.Errorf("listing %s chain %s: %w", f, c.Name, err)
			}
			if _, err := stdout.Write(out); err != nil {
				return fmt.Errorf("writing the listing: %w", err)
			}
		}
	}
	return nil
}

// Remove deletes BotBox's OUTPUT jumps and chains (the chain names of s) in
// the nat and filter tables, for IPv4 and, whatever s.IPv6 says, for IPv6
// when ip6tables is available: when the ip6tables programs are missing or
// ip6tables-save fails, IPv6 is skipped with a note on stderr; IPv4
// failures are errors. Each family is removed atomically, then read back to
// verify. Nothing to remove is not an error.
func Remove(ctx context.Context, s Settings, r Runner, stdout, stderr io.Writer) error {
	if err := lookTools(r, IPv4); err != nil {
		return checkError(
			"ERROR: iptables is not available ("+err.Error()+").",
			"  Install iptables (it provides iptables, iptables-save and iptables-restore).")
	}
	fmt.Fprintln(stdout, "Removing BotBox iptables rules...")
	for _, f := range []Family{IPv4, IPv6} {
		optional := f == IPv6
		if optional {
			if err := lookTools(r, f); err != nil {
				fmt.Fprintf(stderr, "[WARN] ip6tables is not available (%v): IPv6 skipped.\n", err)
				continue
			}
		}
		cur, err := readSaved(ctx, r, f)
		if err != nil {
			if optional && ctx.Err() == nil {
				fmt.Fprintf(stderr, "[WARN] %s: IPv6 skipped.\n", err)
				continue
			}
			return err
		}
		payload := RenderRemove(s, cur)
		if payload == "" {
			fmt.Fprintf(stdout, "  %s: nothing to remove\n", f.Command())
			continue
		}
		if _, err := r.Run(ctx, []byte(payload), f.RestoreCommand(), restoreArgs(s.WaitSeconds)...); err != nil {
			return fmt.Errorf("removing %s rules: %w", f, err)
		}
		after, err := readSaved(ctx, r, f)
		if err != nil {
			return err
		}
		if err := verifyRemoved(s, after); err != nil {
			return fmt.Errorf("verifying %s removal: %w", f, err)
		}
		fmt.Fprintf(stdout, "  %s: removed %s\n", f.Command(), describeRemoval(s, cur))
	}
	fmt.Fprintln(stdout, "BotBox iptables rules removed.")
	return nil
}

// lookTools checks that the family's three programs exist.
func lookTools(r Runner, f Family) error {
	for _, name := range []string{f.Command(), f.RestoreCommand(), f.SaveCommand()} {
		if _, err := r.LookPath(name); err != nil {
			return err
		}
	}
	return nil
}

// readSaved runs `iptables-save` (or ip6tables-save) once, a consistent
// snapshot of every table, and keeps nat and filter. A table the dump does
// not show does not exist yet (iptables-nft creates tables on first use) and
// is returned empty.
func readSaved(ctx context.Context, r Runner, f Family) (Saved, error) {
	out, err := r.Run(ctx, nil, f.SaveCommand())
	if err != nil {
		return nil, fmt.Errorf("reading %s tables: %w", f, err)
	}
	saved, err := ParseSave(string(out))
	if err != nil {
		return nil, fmt.Errorf("reading %s tables: %w", f, err)
	}
	all := Saved{}
	for _, table := range []string{TableNAT, TableFilter} {
		if t := saved[table]; t != nil {
			all[table] = t
		} else {
			all[table] = &SavedTable{Rules: map[string][]string{}}
		}
	}
	return all, nil
}

// verifyInstalled checks the read-back state structurally (rule counts and
// jump positions, not rule text, which differs a little between iptables
// versions): each chain exists with len(Rules) rules, and OUTPUT has exactly
// one jump to it, as its first rule.
func verifyInstalled(chains []Chain, after Saved) error {
	var errs []error
	for _, c := range chains {
		t := after[c.Table]
		if !after.HasChain(c.Table, c.Name) {
			errs = append(errs, fmt.Errorf("%s chain %s is missing", c.Table, c.Name))
			continue
		}
		if got := len(t.Rules[c.Name]); got != len(c.Rules) {
			errs = append(errs, fmt.Errorf("%s chain %s has %d rules, want %d", c.Table, c.Name, got, len(c.Rules)))
		}
		jumps := after.Jumps(c.Table, c.Name)
		output := t.Rules["OUTPUT"]
		if len(jumps) != 1 || len(output) == 0 || !jumpsTo(output[0], c.Name) {
			errs = append(errs, fmt.Errorf("%s OUTPUT has %d jumps to %s, want exactly one at position 1", c.Table, len(jumps), c.Name))
		}
	}
	return errors.Join(errs...)
}

func verifyRemoved(s Settings, after Saved) error {
	var errs []error
	for _, tc := range []struct{ table, chain string }{{TableNAT, s.NATChain}, {TableFilter, s.FilterChain}} {
		if after[tc.table] == nil {
			continue
		}
		if after.HasChain(tc.table, tc.chain) {
			errs = append(errs, fmt.Errorf("%s chain %s still exists", tc.table, tc.chain))
		}
		if n := len(after.Jumps(tc.table, tc.chain)); n > 0 {
			errs = append(errs, fmt.Errorf("%s OUTPUT still has %d jumps to %s", tc.table, n, tc.chain))
		}
	}
	return errors.Join(errs...)
}

func describeRemoval(s Settings, cur Saved) string {
	var parts []string
	for _, tc := range []struct{ table, chain string }{{TableNAT, s.NATChain}, {TableFilter, s.FilterChain}} {
		n := len(cur.Jumps(tc.table, tc.chain))
		if n == 0 && !cur.HasChain(tc.table, tc.chain) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s/%s (%d OUTPUT jump(s))", tc.table, tc.chain, n))
	}
	return strings.Join(parts, ", ")
}

// The sysctls Install sets with IPv6 (see mldRules).
const (
	mldVersionAll     = "net.ipv6.conf.all.force_mld_version"
	mldVersionDefault = "net.ipv6.conf.default.force_mld_version"
)

// joinPorts renders distinct ports as "8080,8443,9090", in order.
func joinPorts(ports ...uint16) string {
	var parts []string
	seen := map[uint16]bool{}
	for _, p := range ports {
		if !seen[p] {
			seen[p] = true
			parts = append(parts, strconv.Itoa(int(p)))
		}
	}
	return strings.Join(parts, ",")
}

func boolDigit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func joinAddrs(addrs []netip.Addr) string {
	parts := make([]string, len(addrs))
	for i, a := range addrs {
		parts[i] = a.String()
	}
	return strings.Join(parts, ",")
}

// printParameters writes the parameter lines both backends print after
// their "Installing ..." line.
func printParameters(s Settings, stdout io.Writer) {
	fmt.Fprintf(stdout, "  proxy_uid=%d proxy_port=%d redirect_from_port=%d ipv6=%s\n",
		s.UID, s.ProxyPort, s.RedirectFromPort, boolDigit(s.IPv6))
	if s.HTTPSInterception {
		fmt.Fprintf(stdout, "  https_interception_port=%d (HTTPS interception enabled)\n", s.HTTPSInterceptionPort)
	}
	if len(s.DNSServers) > 0 {
		fmt.Fprintf(stdout, "  dns_servers=%s (port 53 allowed only to these resolvers)\n", joinAddrs(s.DNSServers))
	}
	if s.DropICMP {
		fmt.Fprintln(stdout, "  drop_icmp=1 (ICMP dropped; ICMPv6 neighbour discovery kept)")
	}
	if s.Reject {
		fmt.Fprintln(stdout, "  reject=1 (blocked packets answered at once: TCP reset, ICMP port unreachable)")
	}
	fmt.Fprintf(stdout, "  botbox_ports=%s (handshakes from these ports answered only by UID %d)\n",
		joinPorts(s.ProxyPort, s.HTTPSInterceptionPort, s.MetricsPort), s.UID)
}

// setMLDVersion sets force_mld_version with IPv6 (both backends; see
// mldRules). Only a cancelled context is an error.
func setMLDVersion(ctx context.Context, s Settings, r Runner, stderr io.Writer) error {
	if s.IPv6 {
		// MLDv1 reports go to the group they announce, so the filter can
		// keep solicited-node reports and drop the rest (mldRules). The
		// sysctl is per network namespace. Where /proc/sys is read-only
		// (an unprivileged container), every MLD report is dropped, which
		// is the safe side: the note says what it costs.
		for _, key := range []string{mldVersionAll, mldVersionDefault} {
			if err := r.WriteSysctl(ctx, key, "1"); err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("setting %s: %w", key, ctx.Err())
				}
				fmt.Fprintf(stderr, "[NOTE] could not set %s=1 (%v): every MLD report is dropped; "+
					"neighbour discovery still works unless the link has an MLD-snooping switch with an active querier.\n", key, err)
				break
			}
		}
	}
	return nil
}
