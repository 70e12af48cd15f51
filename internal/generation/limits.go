package generation

import (
	"math"
	"sync"
	"time"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/policy"
)

// Limits are the compiled per-rule limits of an allow rule
// (max_request_body_bytes, rate_limit). A Limits is shared by every request
// of its generation; only its Bucket has mutable state.
type Limits struct {
	// MaxBodyBytes bounds the request body (0 = no bound).
	MaxBodyBytes int64
	// Rate is the rule's token bucket (nil = no rate limit).
	Rate *Bucket
	key  bucketKey
}

// Bucket is a token bucket: Burst tokens at most, refilled continuously at
// Rate per second, full when made. It is safe for concurrent use.
type Bucket struct {
	rate  float64 // tokens per second (> 0)
	burst float64 // capacity (>= 1)

	mu     sync.Mutex
	tokens float64
	last   time.Time // when tokens was last brought up to date; zero = never
}

// NewBucket returns a full bucket. rate must be > 0 and burst >= 1.
func NewBucket(rate float64, burst int) *Bucket {
	return &Bucket{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// Take takes one token at time now. When none is left it returns false and
// how long until one will be (the Retry-After); a refused request takes
// nothing. A clock going backwards refills nothing.
func (b *Bucket) Take(now time.Time) (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = math.Min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration(math.Ceil((1 - b.tokens) / b.rate * float64(time.Second)))
}

// Limits returns the limits of the rule that allowed d, nil when d is not
// an Allow by a rule with limits (or is from another generation's policy).
func (g *Generation) Limits(d policy.Decision) *Limits {
	if !g.ruleAllowed(d) {
		return nil
	}
	return g.limits[d.Rule.Index]
}

// bucketKey identifies a rate limit across generations: the same host with
// the same rate and burst keeps its bucket (and its tokens) at reload.
type bucketKey struct {
	host  string
	rate  float64
	burst int
}

// compileLimits builds the per-rule limits of cfg. A rule whose host and
// rate_limit equal a rule of prev (the generation in force, nil at
// start-up) takes over prev's bucket, so that a reload of an unchanged
// rule neither refills nor empties it; any other bucket starts full.
func compileLimits(cfg *config.Config, prev *Generation) []*Limits {
	old := map[bucketKey]*Bucket{}
	if prev != nil {
		for _, l := range prev.limits {
			if l != nil && l.Rate != nil {
				old[l.key] = l.Rate
			}
		}
	}
	out := make([]*Limits, len(cfg.Policy.Rules))
	for i, r := range cfg.Policy.Rules {
		if r.MaxRequestBodyBytes == 0 && r.RateLimit == nil {
			continue
		}
		l := &Limits{MaxBodyBytes: r.MaxRequestBodyBytes}
		if rl := r.RateLimit; rl != nil {
			l.key = bucketKey{host: r.Host, rate: rl.RequestsPerSecond, burst: rl.Burst}
			if b, ok := old[l.key]; ok {
				l.Rate = b
			} else {
				l.Rate = NewBucket(rl.RequestsPerSecond, rl.Burst)
			}
		}
		out[i] = l
	}
	return out
}
