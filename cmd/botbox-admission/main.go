// Command botbox-admission puts BotBox into Kubernetes workloads: `inject`
// rewrites manifests offline, `webhook` is the mutating and validating
// admission webhook for Pods. It is a binary of its own so that the
// sidecar (cmd/botbox) links no Kubernetes module (internal/meta's
// TestSidecarLinksNoKubernetes holds that); the container image carries both
// binaries. The Pod invariants both commands enforce live in internal/inject
// and internal/webhook.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/botbox/botbox/internal/buildinfo"
)

const usage = `botbox-admission — BotBox's Kubernetes injection and admission webhook

Usage:
  botbox-admission inject -f FILE [options]          write Kubernetes workloads with BotBox injected (docs/deploy.md)
  botbox-admission webhook --tls-cert F --tls-key F  the mutating and validating admission webhook for Pods
  botbox-admission version                           print version information

Flags may come before or after the arguments. Exit codes: 0 ok, 1 error, 2 usage.
Docs: docs/deploy.md ("botbox-admission inject and webhook"), docs/kubernetes.md.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches on the subcommand and returns the process exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "inject":
		return runInject(rest, stdin, stdout, stderr)
	case "webhook":
		return runWebhook(ctx, rest, getenv, stdout, stderr)
	case "version", "--version", "-version", "-V", "-v":
		fmt.Fprintln(stdout, strings.Replace(buildinfo.String(), "botbox", "botbox-admission", 1))
		return exitOK
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "botbox-admission: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}
