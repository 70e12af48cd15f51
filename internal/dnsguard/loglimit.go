package dnsguard

import (
	"sync"
	"time"
)

// The decision log's rate limit: a token bucket of logBurst lines,
// refilled at logPerSecond. At most logBurst + logPerSecond × seconds
// decision lines are written, each preceded by at most one summary line
// counting the lines left out before it, whatever the query rate: at
// ~300 bytes a line, under 6 KB/s even under a sustained flood.
const (
	logBurst     = 100
	logPerSecond = 10
)

// logLimiter is the token bucket of the decision lines.
type logLimiter struct {
	mu         sync.Mutex
	now        func() time.Time
	tokens     float64
	last       time.Time
	suppressed int
}

func newLogLimiter(now func() time.Time) *logLimiter {
	return &logLimiter{now: now, tokens: logBurst, last: now()}
}

// allow takes a token. ok says whether the line may be written; suppressed
// is, when ok, how many lines were left out since the last one written
// (the caller writes a summary line for them first).
func (l *logLimiter) allow() (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if el := now.Sub(l.last); el > 0 {
		l.tokens = min(logBurst, l.tokens+el.Seconds()*logPerSecond)
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		return false, 0
	}
	l.tokens--
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}

// flush returns and resets the count of lines left out.
func (l *logLimiter) flush() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.suppressed
	l.suppressed = 0
	return n
}
