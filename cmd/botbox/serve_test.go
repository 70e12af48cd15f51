package main

import (
	"context"
	"os"
	"syscall"
	"testing"

	"github.com/botbox/botbox/internal/server"
)

func TestReloadOnSignalCallsReloadPerSignal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal)
	got := make(chan string)
	done := make(chan struct{})
	go func() {
		defer close(done)
		reloadOnSignal(ctx, sig, func(trigger string) error { got <- trigger; return nil })
	}()
	for range 2 {
		sig <- syscall.SIGHUP
		if tr := <-got; tr != server.TriggerSIGHUP {
			t.Errorf("trigger = %q, want %q", tr, server.TriggerSIGHUP)
		}
	}
	cancel()
	<-done
}
