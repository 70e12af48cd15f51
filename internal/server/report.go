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

// noteReportMode is the note /healthz and /readyz add to their 200 body
// while the generation in force is in report mode (issue 11: readiness says
// it loudly); the status code is unchanged.
const noteReportMode = "egress policy in REPORT mode: denials are forwarded without credentials"

// readyNote is the admin handler's ready note: noteReportMode while the
// generation in force is in report mode, else empty. It reads the
// generation on every probe, so a reload changes the answer at once
// (TestHealthzSaysReportMode).
func (s *Server) readyNote() string {
	if s.gen.Load().Report {
		return noteReportMode
	}
	return ""
}

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
