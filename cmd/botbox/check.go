package main

import (
	"fmt"
	"io"

	"github.com/botbox/botbox/internal/config"
)

// runCheck validates a config file: the effective config on stdout and exit
// 0, or every problem (key path and line) on stderr and exit 1.
func runCheck(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := newFlagSet("botbox check", stderr)
	path := configFlag(fs)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	cfg, err := config.Load(*path)
	if err == nil {
		err = config.ApplyEnv(cfg, getenv)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: invalid configuration:\n", *path)
		for _, e := range flatten(err) {
			fmt.Fprintf(stderr, "  %v\n", e)
		}
		return exitError
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(stderr, "warning: %s: %s\n", w.Path, w.Message)
	}
	out, err := cfg.Effective()
	if err != nil {
		fmt.Fprintf(stderr, "rendering effective config: %v\n", err)
		return exitError
	}
	_, _ = stdout.Write(out)
	return exitOK
}

// flatten lists the leaves of a joined error.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	if err == nil {
		return nil
	}
	return []error{err}
}
