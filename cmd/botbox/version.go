package main

import (
	"fmt"
	"io"

	"github.com/botbox/botbox/internal/buildinfo"
)

const versionUsage = "botbox version"

// runVersion prints the build's version, commit and Go version. It takes
// no arguments.
func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("botbox version", stderr)
	setUsage(fs, versionUsage)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := noArgs(fs, "botbox version", versionUsage, stderr); !ok {
		return code
	}
	fmt.Fprintln(stdout, buildinfo.String())
	return exitOK
}
