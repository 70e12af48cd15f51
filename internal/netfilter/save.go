package netfilter

import (
	"fmt"
	"slices"
	"strings"
)

// Saved is an iptables-save (or ip6tables-save) dump, parsed per table.
// Install reads it to find the OUTPUT jumps it must delete before inserting
// its own, Remove to find what exists, and both to verify the result.
type Saved map[string]*SavedTable

// SavedTable is one table of a dump.
type SavedTable struct {
	// Chains are the declared chains (":NAME POLICY [p:b]" lines), built-in
	// and user-defined, in dump order.
	Chains []string
	// Rules are the rule specifications of each chain (the text after
	// "-A CHAIN "), in order, exactly as printed.
	Rules map[string][]string
}

// ParseSave parses iptables-save output. Comments and blank lines are
// skipped; anything else that is not a table header, chain declaration,
// "-A" rule or COMMIT is an error (an unexpected dump must not be guessed at).
func ParseSave(dump string) (Saved, error) {
	out := Saved{}
	var cur *SavedTable
	for i, line := range strings.Split(dump, "\n") {
		line = strings.TrimSuffix(line, "\r")
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			name := line[1:]
			if name == "" || cur != nil {
				return nil, fmt.Errorf("parsing iptables-save output: line %d: unexpected table header", i+1)
			}
			cur = out[name]
			if cur == nil {
				cur = &SavedTable{Rules: map[string][]string{}}
				out[name] = cur
			}
		case line == "COMMIT":
			if cur == nil {
				return nil, fmt.Errorf("parsing iptables-save output: line %d: COMMIT outside a table", i+1)
			}
			cur = nil
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			if cur == nil || name == "" {
				return nil, fmt.Errorf("parsing iptables-save output: line %d: bad chain declaration", i+1)
			}
			if !slices.Contains(cur.Chains, name) {
				cur.Chains = append(cur.Chains, name)
			}
		case strings.HasPrefix(line, "-A "):
			chain, spec, _ := strings.Cut(line[len("-A "):], " ")
			if cur == nil || chain == "" {
				return nil, fmt.Errorf("parsing iptables-save output: line %d: bad rule", i+1)
			}
			cur.Rules[chain] = append(cur.Rules[chain], spec)
		default:
			return nil, fmt.Errorf("parsing iptables-save output: line %d: unexpected line", i+1)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("parsing iptables-save output: missing COMMIT")
	}
	return out, nil
}

// HasChain reports whether chain is declared in table.
func (s Saved) HasChain(table, chain string) bool {
	t := s[table]
	return t != nil && slices.Contains(t.Chains, chain)
}

// Jumps returns the OUTPUT rule specs of table that jump (-j) or go (-g)
// to chain, in order: the ones Install deletes and Remove deletes.
func (s Saved) Jumps(table, chain string) []string {
	t := s[table]
	if t == nil {
		return nil
	}
	var out []string
	for _, spec := range t.Rules["OUTPUT"] {
		if jumpsTo(spec, chain) {
			out = append(out, spec)
		}
	}
	return out
}

// jumpsTo reports whether a rule spec has "-j chain" or "-g chain". It
// splits like iptables-restore does (double quotes group, backslash
// escapes), so a quoted comment such as "-j X" is one argument. It looks at
// every "-j"/"-g" argument, not only the first: iptables-save prints a
// one-word comment unquoted, so "--comment -j -j X" is a jump to X. A value
// "-j" of some other option cannot be followed by a chain name (the next
// argument is an option, and chain names never start with '-').
func jumpsTo(spec, chain string) bool {
	toks := splitArgs(spec)
	for i := 0; i+1 < len(toks); i++ {
		switch toks[i] {
		case "-j", "-g", "--jump", "--goto":
			if toks[i+1] == chain {
				return true
			}
		}
	}
	return false
}

// splitArgs splits a rule spec into arguments: whitespace separates,
// double quotes group, a backslash escapes the next byte.
func splitArgs(s string) []string {
	var out []string
	var b strings.Builder
	inTok, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
			inTok = true
		case c == '"':
			quoted = !quoted
			inTok = true
		case (c == ' ' || c == '\t') && !quoted:
			if inTok {
				out = append(out, b.String())
				b.Reset()
				inTok = false
			}
		default:
			b.WriteByte(c)
			inTok = true
		}
	}
	if inTok {
		out = append(out, b.String())
	}
	return out
}
