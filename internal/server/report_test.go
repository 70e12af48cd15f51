package server

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/generation"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/logcapture"
)

func TestReportModeWarnsEveryMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := &config.Config{Policy: config.Policy{DefaultAction: config.ActionDeny, Mode: config.ModeReport}}
		cur, err := generation.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		logs := &logcapture.Buffer{}
		s := &Server{gen: cur, logger: telemetry.NewLogger(logs, nil)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); s.reportLoop(ctx) }()
		count := func() int { return strings.Count(logs.String(), "REPORT mode") }
		synctest.Wait()
		if n := count(); n != 1 {
			t.Fatalf("at start: %d warnings, want 1", n)
		}
		time.Sleep(3*reportWarnInterval + time.Second)
		synctest.Wait()
		if n := count(); n != 4 {
			t.Fatalf("after 3 intervals: %d warnings, want 4", n)
		}
		// Back to enforce: the warnings stop.
		cfg2 := *cfg
		cfg2.Policy.Mode = config.ModeEnforce
		if _, err := cur.Store(&cfg2); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * reportWarnInterval)
		synctest.Wait()
		if n := count(); n != 4 {
			t.Errorf("in enforce mode: %d warnings, want still 4", n)
		}
		cancel()
		<-done
	})
}
