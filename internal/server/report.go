package server

import (
	"context"
	"time"
)

// reportWarnInterval is how often a WARN line repeats that report mode is
// on (issue 11: loud while it is).
const reportWarnInterval = time.Minute

// msgReportMode is the WARN line of report mode.
const msgReportMode = "egress policy is in REPORT mode: requests the policy denies are FORWARDED without header rewrites and only logged as report_deny; set egress_policy.mode: enforce"

// warnReportMode logs msgReportMode when the generation in force is in
// report mode.
func (s *Server) warnReportMode() {
	if s.gen.Load().Report {
		s.logger.Warn(msgReportMode)
	}
}

// reportLoop logs msgReportMode at once and then every reportWarnInterval
// while the generation in force is in report mode, until ctx is done
// (TestReportModeWarnsEveryMinute).
func (s *Server) reportLoop(ctx context.Context) {
	s.warnReportMode()
	t := time.NewTicker(reportWarnInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.warnReportMode()
		}
	}
}
