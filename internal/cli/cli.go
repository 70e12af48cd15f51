// Package cli holds the command-line conventions the botbox and
// botbox-admission binaries share: exit codes, flag sets that report to
// stderr instead of exiting, -h output in the README's spelling (--name),
// flags after positional arguments, and usage errors.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Exit codes of every command.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// NewFlagSet returns a FlagSet that reports errors to stderr and does not
// exit. name is "BINARY COMMAND" ("botbox check"); its -h output is
// "usage: NAME [flags]" and the flags in the README's spelling (--config);
// SetUsage replaces the first line with one that names the command's
// arguments.
func NewFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	SetUsage(fs, name+" [flags]")
	return fs
}

// SetUsage makes fs's -h output start with the command's usage line (which
// names its positional arguments) before the flag list, and end by naming
// the binary's help command (the first word of fs's name).
func SetUsage(fs *flag.FlagSet, line string) {
	binary, _, _ := strings.Cut(fs.Name(), " ")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n\nFlags:\n", line)
		printFlags(fs)
		fmt.Fprintf(fs.Output(), "\n`%s help` lists every command.\n", binary)
	}
}

// isString reports whether f holds a string (its default is then quoted).
func isString(f *flag.Flag) bool {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	_, ok = g.Get().(string)
	return ok
}

// printFlags lists fs's flags as the README writes them: --name for long
// names, -c for one letter (Go's flag package accepts both dashes for both).
func printFlags(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		name, usage := flag.UnquoteUsage(f)
		line := "  " + dash + f.Name
		if name != "" {
			line += " " + name
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		switch {
		case f.DefValue == "" || f.DefValue == "false" || f.DefValue == "0":
		case isString(f):
			line += fmt.Sprintf(" (default %q)", f.DefValue)
		default:
			line += " (default " + f.DefValue + ")"
		}
		fmt.Fprintln(fs.Output(), line)
	})
}

// ParseFlags parses and maps flag errors to exit codes; ok is false when the
// caller should return code. Flags may follow positional arguments
// ("check FILE --files", "explain URL -c FILE"): parsing resumes after each
// argument, until a "--" ends the flags. fs.Args() is then the positional
// arguments in order.
func ParseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return ExitOK, false
			}
			return ExitUsage, false
		}
		rest := fs.Args()
		consumed := args[:len(args)-len(rest)]
		if len(rest) == 0 || len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	// Re-parse only the positional arguments, behind "--", so that
	// fs.Args() returns them; flag values already set are kept.
	if err := fs.Parse(append([]string{"--"}, positional...)); err != nil {
		return ExitUsage, false
	}
	return 0, true
}

// UsageError prints the message and the usage line, and returns ExitUsage.
func UsageError(stderr io.Writer, line, format string, args ...any) int {
	fmt.Fprintf(stderr, format+"\nusage: %s\n", append(args, line)...)
	return ExitUsage
}

// NoArgs refuses positional arguments for a command that takes none.
func NoArgs(fs *flag.FlagSet, name, line string, stderr io.Writer) (int, bool) {
	if fs.NArg() > 0 {
		return UsageError(stderr, line, "%s: unexpected argument %q", name, fs.Arg(0)), false
	}
	return 0, true
}
