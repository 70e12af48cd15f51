package main

import (
	"context"
	"io"

	"github.com/botbox/botbox/internal/netfilter"
)

// runNetfilter is the init container's job: `botbox netfilter install|print|remove`.
func runNetfilter(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	return netfilter.RunCommandLookup(ctx, args, lookupEnv, stdout, stderr)
}
