package listener

import (
	"sync"
	"time"
)

// Sampler bounds a repeated log line to one per interval. Each event calls
// Allow; when it returns true the caller logs one line carrying n, the
// number of events the line stands for (this one plus those suppressed
// since the previous line). Events after the last line of a burst are
// reported by the next line, whenever it comes; exact totals belong in a
// metric, not in the log.
//
// The zero value is not usable; use NewSampler.
type Sampler struct {
	interval time.Duration
	now      func() time.Time

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// NewSampler returns a sampler allowing one line per interval.
func NewSampler(interval time.Duration) *Sampler {
	return &Sampler{interval: interval, now: time.Now}
}

// Allow records one event and reports whether to log it, with the number
// of events the line stands for.
func (s *Sampler) Allow() (ok bool, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if !s.last.IsZero() && now.Sub(s.last) < s.interval {
		s.suppressed++
		return false, 0
	}
	n = s.suppressed + 1
	s.last, s.suppressed = now, 0
	return true, n
}
