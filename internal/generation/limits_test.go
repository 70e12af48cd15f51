package generation

import (
	"testing"
	"time"

	"github.com/botbox/botbox/internal/config"
)

func TestBucketTake(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := NewBucket(2, 3) // 2 per second, burst 3
	for i := range 3 {
		if ok, _ := b.Take(t0); !ok {
			t.Fatalf("take %d of the burst refused", i)
		}
	}
	ok, wait := b.Take(t0)
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("4th take = %v, wait %v; want refused, 500ms", ok, wait)
	}
	// A refused take costs nothing: after 500ms exactly one token.
	if ok, _ := b.Take(t0.Add(500 * time.Millisecond)); !ok {
		t.Fatal("token after 500ms refused")
	}
	if ok, _ := b.Take(t0.Add(500 * time.Millisecond)); ok {
		t.Fatal("second token after 500ms granted")
	}
	// A long pause refills to the burst, not beyond.
	t1 := t0.Add(time.Hour)
	for i := range 3 {
		if ok, _ := b.Take(t1); !ok {
			t.Fatalf("take %d after refill refused", i)
		}
	}
	if ok, _ := b.Take(t1); ok {
		t.Fatal("bucket refilled beyond its burst")
	}
	// A clock going backwards refills nothing.
	if ok, _ := b.Take(t0); ok {
		t.Fatal("clock going backwards refilled the bucket")
	}
}

func limitsCfg(rate float64, burst int, body int64) *config.Config {
	return &config.Config{Policy: config.Policy{DefaultAction: config.ActionDeny, Rules: []config.Rule{
		{Host: "a.example", Index: 0, Action: config.ActionAllow, MaxRequestBodyBytes: body, RateLimit: &config.RateLimit{RequestsPerSecond: rate, Burst: burst}},
		{Host: "b.example", Index: 1, Action: config.ActionAllow},
		{Host: "c.example", Index: 2, Action: config.ActionDeny},
	}}}
}

func TestLimitsByDecision(t *testing.T) {
	cur, err := New(limitsCfg(1, 2, 100))
	if err != nil {
		t.Fatal(err)
	}
	g := cur.Load()
	l := g.Limits(decide(t, g, "a.example"))
	if l == nil || l.MaxBodyBytes != 100 || l.Rate == nil {
		t.Fatalf("a.example limits = %+v", l)
	}
	for _, host := range []string{"b.example", "c.example", "d.example"} {
		if l := g.Limits(decide(t, g, host)); l != nil {
			t.Errorf("%s limits = %+v, want nil", host, l)
		}
	}
}

// TestStoreKeepsUnchangedBuckets: a reload keeps the tokens of a rule
// whose host and rate_limit are unchanged (a reload does not refill a
// drained bucket), and a changed rate_limit starts a full bucket.
func TestStoreKeepsUnchangedBuckets(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cur, err := New(limitsCfg(1, 2, 0))
	if err != nil {
		t.Fatal(err)
	}
	drain := func() {
		g := cur.Load()
		b := g.Limits(decide(t, g, "a.example")).Rate
		for {
			if ok, _ := b.Take(now); !ok {
				return
			}
		}
	}
	take := func() bool {
		g := cur.Load()
		ok, _ := g.Limits(decide(t, g, "a.example")).Rate.Take(now)
		return ok
	}
	drain()
	// Same rule (the body limit may change): the drained bucket stays.
	if _, err := cur.Store(limitsCfg(1, 2, 500)); err != nil {
		t.Fatal(err)
	}
	if take() {
		t.Error("reload of an unchanged rate_limit refilled the bucket")
	}
	// Changed burst: a new, full bucket.
	if _, err := cur.Store(limitsCfg(1, 3, 500)); err != nil {
		t.Fatal(err)
	}
	if !take() {
		t.Error("a changed rate_limit did not start a full bucket")
	}
}

func TestReportFlag(t *testing.T) {
	cfg := limitsCfg(1, 1, 0)
	cfg.Policy.Mode = config.ModeReport
	g, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !g.Report {
		t.Error("mode report not in the generation")
	}
	cfg.Policy.Mode = config.ModeEnforce
	if g, _ := Compile(cfg); g.Report {
		t.Error("mode enforce compiled as report")
	}
}
