package main

import (
	"fmt"
	"io"

	"github.com/botbox/botbox/internal/buildinfo"
)

func runVersion(stdout io.Writer) int {
	fmt.Fprintln(stdout, buildinfo.String())
	return exitOK
}
