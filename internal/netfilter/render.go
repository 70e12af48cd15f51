package netfilter

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Render returns the iptables-restore --noflush payload that installs the
// chains of family f: per table (nat, then filter), one atomic commit that
//
//   - declares the chain (":NAME - [0:0]"), which creates it or, under
//     --noflush, flushes it;
//   - deletes every OUTPUT rule that current shows jumping to it
//     ("-D OUTPUT <spec as printed by iptables-save>");
//   - appends the rules;
//   - inserts the jump at OUTPUT position 1.
//
// current is the family's iptables-save dump as read just before; nil means
// "no jumps exist" (Print). Render is pure. Every line it writes is built from
// validated settings and fixed keywords, or copied from a single line of
// current, so no input can add a line.
func Render(rs Ruleset, f Family, current Saved) string {
	var b strings.Builder
	for _, c := range rs.Chains(f) {
		fmt.Fprintf(&b, "*%s\n", c.Table)
		fmt.Fprintf(&b, ":%s - [0:0]\n", c.Name)
		for _, spec := range current.Jumps(c.Table, c.Name) {
			fmt.Fprintf(&b, "-D OUTPUT %s\n", spec)
		}
		for _, r := range c.Rules {
			fmt.Fprintf(&b, "-A %s %s\n", c.Name, r)
		}
		fmt.Fprintf(&b, "-I OUTPUT 1 %s\n", c.Jump)
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// RenderRemove returns the iptables-restore --noflush payload that removes
// BotBox from one family: per table, delete every OUTPUT jump to BotBox's
// chain, then flush and delete the chain. Tables with nothing of BotBox's
// are left out; "" means there is nothing to remove. Chains of other names
// (for example after BOTBOX_NAT_CHAIN was changed) are not touched.
func RenderRemove(s Settings, current Saved) string {
	var b strings.Builder
	for _, tc := range []struct{ table, chain string }{
		{TableNAT, s.NATChain},
		{TableFilter, s.FilterChain},
	} {
		jumps := current.Jumps(tc.table, tc.chain)
		exists := current.HasChain(tc.table, tc.chain)
		if len(jumps) == 0 && !exists {
			continue
		}
		fmt.Fprintf(&b, "*%s\n", tc.table)
		for _, spec := range jumps {
			fmt.Fprintf(&b, "-D OUTPUT %s\n", spec)
		}
		if exists {
			fmt.Fprintf(&b, "-F %s\n", tc.chain)
			fmt.Fprintf(&b, "-X %s\n", tc.chain)
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// Print writes the payloads Install would apply on a system with no BotBox
// jumps yet, without touching the kernel: for each family a comment naming
// the command, then the payload (which can be fed to that command as is).
func Print(s Settings, w io.Writer) error {
	return PrintFamilies(s, Plan(s).Families(), w)
}

// PrintFamilies is Print for the given families only (`print -family`).
func PrintFamilies(s Settings, families []Family, w io.Writer) error {
	rs := Plan(s)
	var b strings.Builder
	for _, f := range families {
		fmt.Fprintf(&b, "# %s: %s\n", f, restoreCommandLine(f, s.WaitSeconds))
		b.WriteString(Render(rs, f, nil))
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("writing rules: %w", err)
	}
	return nil
}

func restoreCommandLine(f Family, wait uint32) string {
	return strings.Join(append([]string{f.RestoreCommand()}, restoreArgs(wait)...), " ")
}

func restoreArgs(wait uint32) []string {
	return []string{"-w", strconv.FormatUint(uint64(wait), 10), "--noflush"}
}
