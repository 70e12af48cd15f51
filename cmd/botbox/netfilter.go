package main

import (
	"context"
	"io"

	"github.com/botbox/botbox/internal/netfilter"
)

// runNetfilter is the init container's job: `botbox netfilter install|print|remove`.
func runNetfilter(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return netfilter.RunCommand(ctx, args, getenv, stdout, stderr)
}
