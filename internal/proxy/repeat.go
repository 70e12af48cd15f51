package proxy

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/botbox/botbox/internal/telemetry"
)

// Repeated denials are aggregated so that an agent cannot flood the audit
// trail (redteam finding 5): per agent connection, the first denial is
// logged in full; identical denials (same host, port, method, decision and
// reason) on that connection within repeatWindow of it are only counted;
// one summary line with KeyRepeated = their number is written when the
// window has ended (at the next denial on that connection, or by the one
// shared flush timer) or when a different denial comes. Every request is
// still counted in botbox_requests_total. Allowed requests are never
// aggregated. TestFloodedDenialsAreBoundedAndAggregated and
// TestRepeatSummaryAfterWindow hold it.
const (
	repeatWindow = time.Second
	// maxRepeatConns bounds the per-connection state; beyond it the oldest
	// state is flushed and dropped (a lost aggregation, never a lost count:
	// its summary is written first).
	maxRepeatConns = 4096
)

type repeatKey struct {
	host     string // bounded
	port     uint16
	method   string // bounded
	decision string
	reason   string
}

// repeatRun is the aggregation state of one connection.
type repeatRun struct {
	key      repeatKey
	start    time.Time // when the fully logged line was written
	count    int       // identical denials since, not yet reported
	listener string
	rule     string
	status   int
	level    slog.Level
}

// repeatLog holds the runs of every connection with a recent denial. One
// timer, armed only while some run has unreported denials, writes the
// summaries of runs whose window ended; there is no goroutine per
// connection.
type repeatLog struct {
	logger *slog.Logger
	now    func() time.Time

	mu    sync.Mutex
	runs  map[string]*repeatRun // by the agent's RemoteAddr
	armed bool
}

func newRepeatLog(logger *slog.Logger, now func() time.Time) *repeatLog {
	return &repeatLog{logger: logger, now: now, runs: make(map[string]*repeatRun)}
}

// suppress reports whether x's denial line is a repeat to be counted
// instead of logged. When it returns false the caller logs the line in
// full; a pending summary of the connection's previous run has then been
// written first.
func (l *repeatLog) suppress(x *exchange, method string, status int, level slog.Level) bool {
	host, _ := bound(x.host)
	method, _ = bound(method)
	k := repeatKey{host: host, port: x.port, method: method, decision: x.decision, reason: x.reason}
	now := l.now()
	var pending []repeatRun
	l.mu.Lock()
	run := l.runs[x.remote]
	if run != nil && run.key == k && now.Sub(run.start) < repeatWindow {
		run.count++
		if !l.armed {
			l.armed = true
			time.AfterFunc(repeatWindow-now.Sub(run.start), l.flushExpired)
		}
		l.mu.Unlock()
		return true
	}
	if run != nil && run.count > 0 {
		pending = append(pending, *run)
	}
	if run == nil {
		if len(l.runs) >= maxRepeatConns {
			pending = append(pending, l.evictLocked(now)...)
		}
		run = &repeatRun{}
		l.runs[x.remote] = run
	}
	*run = repeatRun{key: k, start: now, listener: x.listener, rule: x.rule, status: status, level: level}
	l.mu.Unlock()
	l.write(pending)
	return false
}

// evictLocked makes room: it drops every run whose window ended and, if
// none had, one arbitrary run. It returns the runs that still had a count
// to report.
func (l *repeatLog) evictLocked(now time.Time) []repeatRun {
	var pending []repeatRun
	for remote, run := range l.runs {
		if now.Sub(run.start) >= repeatWindow {
			if run.count > 0 {
				pending = append(pending, *run)
			}
			delete(l.runs, remote)
		}
	}
	if len(l.runs) < maxRepeatConns {
		return pending
	}
	for remote, run := range l.runs {
		if run.count > 0 {
			pending = append(pending, *run)
		}
		delete(l.runs, remote)
		break
	}
	return pending
}

// flushExpired is the timer's function: it reports the runs whose window
// ended, forgets idle runs, and re-arms itself while counts are pending.
func (l *repeatLog) flushExpired() {
	now := l.now()
	var pending []repeatRun
	l.mu.Lock()
	l.armed = false
	next := time.Duration(-1)
	for remote, run := range l.runs {
		age := now.Sub(run.start)
		switch {
		case age >= repeatWindow && run.count > 0:
			pending = append(pending, *run)
			delete(l.runs, remote)
		case age >= repeatWindow:
			delete(l.runs, remote)
		case run.count > 0 && (next < 0 || repeatWindow-age < next):
			next = repeatWindow - age
		}
	}
	if next >= 0 {
		l.armed = true
		time.AfterFunc(next, l.flushExpired)
	}
	l.mu.Unlock()
	l.write(pending)
}

// flushAll reports every pending count now and forgets all runs.
func (l *repeatLog) flushAll() {
	var pending []repeatRun
	l.mu.Lock()
	for remote, run := range l.runs {
		if run.count > 0 {
			pending = append(pending, *run)
		}
		delete(l.runs, remote)
	}
	l.mu.Unlock()
	l.write(pending)
}

// FlushLogs writes, now, the summary lines of repeated denials still being
// counted (they are otherwise written within a second by a timer), so that
// none is lost when the process exits. The server calls it once the
// listeners are drained. Safe for concurrent use.
func (h *Handler) FlushLogs() { h.repeats.flushAll() }

// write logs one summary line per run: the fields the repeats shared, and
// how many there were.
func (l *repeatLog) write(runs []repeatRun) {
	for _, r := range runs {
		l.logger.LogAttrs(context.Background(), r.level, msgDecision,
			slog.String(telemetry.KeyListener, r.listener),
			slog.String(telemetry.KeyHost, r.key.host),
			slog.Int(telemetry.KeyPort, int(r.key.port)),
			slog.String(telemetry.KeyMethod, r.key.method),
			slog.String(telemetry.KeyDecision, r.key.decision),
			slog.String(telemetry.KeyRule, r.rule),
			slog.String(telemetry.KeyReason, r.key.reason),
			slog.Int(telemetry.KeyStatus, r.status),
			slog.Int(telemetry.KeyRepeated, r.count),
		)
	}
}
