// Command profile runs the real BotBox server (internal/server, the code
// behind `botbox --config`) with CPU and allocation profiling, so that the
// botbox binary itself never links net/http/pprof or runtime/pprof.
//
//	profile -config botbox.yaml -cpuprofile cpu.prof -memprofile allocs.prof
//
// The CPU profile covers the whole run (start-up is negligible next to a
// load test); the allocation profile is written at exit (SIGTERM/SIGINT).
// bench/run.sh uses it when PROFILE=DIR is set.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/server"
	"github.com/botbox/botbox/internal/telemetry"
)

func main() {
	cfgPath := flag.String("config", "", "BotBox configuration")
	cpuOut := flag.String("cpuprofile", "", "CPU profile output")
	memOut := flag.String("memprofile", "", "allocation profile output")
	memRate := flag.Int("memprofilerate", 64<<10, "runtime.MemProfileRate (bytes per sample)")
	flag.Parse()
	if err := run(*cfgPath, *cpuOut, *memOut, *memRate); err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		os.Exit(1)
	}
}

func run(cfgPath, cpuOut, memOut string, memRate int) error {
	runtime.MemProfileRate = memRate
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	logger := telemetry.NewLogger(os.Stdout, cfg.LogLevel)
	srv, err := server.New(cfg, server.Options{Logger: logger})
	if err != nil {
		return err
	}
	if cpuOut != "" {
		f, err := os.Create(cpuOut)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := srv.Run(ctx); err != nil {
		return err
	}
	if memOut != "" {
		f, err := os.Create(memOut)
		if err != nil {
			return err
		}
		defer f.Close()
		return pprof.Lookup("allocs").WriteTo(f, 0)
	}
	return nil
}
