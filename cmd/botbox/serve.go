package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/botbox/botbox/internal/admin"
	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/server"
	"github.com/botbox/botbox/internal/telemetry"
)

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := newFlagSet("botbox run", stderr)
	path := configFlag(fs)
	probeKeyFile := fs.String("probe-key-file", getenv(envProbeKeyFile), "`FILE` where to write the per-start key `botbox probe` checks; readable only in this container (env "+envProbeKeyFile+"; default $XDG_RUNTIME_DIR/botbox/probe-METRICSPORT.key, else /tmp/botbox-UID/probe-METRICSPORT.key)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "botbox run: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	level := new(slog.LevelVar)
	base := telemetry.NewLogger(stdout, level)
	logger := telemetry.WithTarget(base, telemetry.TargetMain)
	slog.SetDefault(logger)
	logger.Info("loading configuration", slog.String(telemetry.KeyConfigPath, *path))
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "botbox run: %v\n", err)
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintln(stderr, "(name the configuration with --config PATH, e.g. examples/config.yaml; `botbox help` lists the commands)")
		}
		return exitError
	}
	if err := config.ApplyEnv(cfg, getenv); err != nil {
		fmt.Fprintf(stderr, "botbox run: %v\n", err)
		return exitError
	}
	level.Set(cfg.LogLevel)
	for _, w := range cfg.Warnings {
		logger.Warn(w.Message, slog.String(telemetry.KeyField, w.Path))
	}
	if *probeKeyFile == "" {
		*probeKeyFile = defaultProbeKeyFile(getenv, cfg.MetricsPort)
		if err := admin.PrepareProbeKeyDir(filepath.Dir(*probeKeyFile), os.Getuid()); err != nil {
			fmt.Fprintf(stderr, "botbox run: %v\n", err)
			return exitError
		}
	}
	srv, err := server.New(cfg, server.Options{Logger: base, ProbeKeyFile: *probeKeyFile, ConfigPath: *path, Getenv: getenv, LogLevel: level})
	if err != nil {
		logger.Error("startup failed", slog.String(telemetry.KeyError, err.Error()))
		fmt.Fprintf(stderr, "botbox run: %v\n", err)
		return exitError
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go reloadOnSignal(ctx, hup, srv.Reload)
	if err := srv.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "botbox run: %v\n", err)
		return exitError
	}
	return exitOK
}

// reloadOnSignal calls reload(server.TriggerSIGHUP) for every signal on sig
// until ctx is done. reload logs and counts its own outcome.
func reloadOnSignal(ctx context.Context, sig <-chan os.Signal, reload func(trigger string) error) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sig:
			_ = reload(server.TriggerSIGHUP)
		}
	}
}
