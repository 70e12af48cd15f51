// Command botbox is the BotBox egress proxy and its companion commands
// (config check and explain, the iptables init step, a development CA).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	// Embedded Mozilla roots, used only when the system has none (scratch
	// and distroless images); SSL_CERT_FILE/SSL_CERT_DIR still win.
	_ "golang.org/x/crypto/x509roots/fallback"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
