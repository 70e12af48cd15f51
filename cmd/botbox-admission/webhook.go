package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/webhook"
)

const webhookUsage = "botbox-admission webhook --tls-cert FILE --tls-key FILE [--listen ADDR] [--metrics-listen ADDR] [inject options]"

// runWebhook implements `botbox-admission webhook`: the admission webhook for Pods,
// injecting (POST /mutate) and enforcing (POST /validate) what
// `botbox-admission inject` does, with the same options.
func runWebhook(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := newFlagSet("botbox-admission webhook", stderr)
	listen := fs.String("listen", ":8443", "HTTPS `ADDR` of /mutate, /validate and /healthz")
	metricsListen := fs.String("metrics-listen", ":9090", "plain HTTP `ADDR` of /metrics and /healthz (empty: none)")
	certFile := fs.String("tls-cert", "", "serving certificate `FILE` (PEM, reloaded when it changes)")
	keyFile := fs.String("tls-key", "", "private key `FILE` of the serving certificate (PEM)")
	opts := injectFlags(fs)
	setUsage(fs, webhookUsage)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := noArgs(fs, "botbox-admission webhook", webhookUsage, stderr); !ok {
		return code
	}
	if *certFile == "" || *keyFile == "" {
		return usageError(stderr, webhookUsage, "botbox-admission webhook: --tls-cert and --tls-key are required")
	}
	level := new(slog.LevelVar)
	if v := getenv("BOTBOX_LOG_LEVEL"); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return usageError(stderr, webhookUsage, "botbox-admission webhook: BOTBOX_LOG_LEVEL %q: want debug, info, warn or error", v)
		}
	}
	logger := telemetry.NewLogger(stdout, level)
	err := webhook.Serve(ctx, webhook.Config{
		Listen: *listen, MetricsListen: *metricsListen, CertFile: *certFile, KeyFile: *keyFile,
		Options: opts(), Logger: logger,
	})
	if err != nil {
		fmt.Fprintf(stderr, "botbox-admission webhook: %v\n", err)
		return exitError
	}
	return exitOK
}
