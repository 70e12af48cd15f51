package mitm

import (
	"testing"
	"time"
)

func TestLRU(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	far := t0.Add(24 * time.Hour)
	type op struct {
		add     bool
		key     string
		val     int
		at      time.Duration // offset from t0
		staleAt time.Duration // for add; 0 means far
		want    int           // for get; 0 means miss
	}
	tests := []struct {
		name     string
		capacity int
		ttl      time.Duration
		ops      []op
		wantLen  int
	}{
		{
			name: "hit within ttl", capacity: 2, ttl: time.Second,
			ops:     []op{{add: true, key: "a", val: 1}, {key: "a", at: 999 * time.Millisecond, want: 1}},
			wantLen: 1,
		},
		{
			name: "expired at ttl and removed", capacity: 2, ttl: time.Second,
			ops:     []op{{add: true, key: "a", val: 1}, {key: "a", at: time.Second}},
			wantLen: 0,
		},
		{
			name: "hit does not extend ttl", capacity: 2, ttl: time.Second,
			ops: []op{
				{add: true, key: "a", val: 1},
				{key: "a", at: 900 * time.Millisecond, want: 1},
				{key: "a", at: 1100 * time.Millisecond},
			},
		},
		{
			name: "re-add restarts ttl", capacity: 2, ttl: time.Second,
			ops: []op{
				{add: true, key: "a", val: 1},
				{add: true, key: "a", val: 2, at: 900 * time.Millisecond},
				{key: "a", at: 1800 * time.Millisecond, want: 2},
			},
			wantLen: 1,
		},
		{
			name: "stale deadline beats ttl", capacity: 2, ttl: time.Hour,
			ops: []op{
				{add: true, key: "a", val: 1, staleAt: time.Minute},
				{key: "a", at: 59 * time.Second, want: 1},
				{key: "a", at: time.Minute},
			},
		},
		{
			name: "already stale is not stored", capacity: 2, ttl: time.Hour,
			ops:     []op{{add: true, key: "a", val: 1, at: time.Minute, staleAt: time.Minute}, {key: "a", at: time.Minute}},
			wantLen: 0,
		},
		{
			name: "capacity 1 evicts", capacity: 1, ttl: time.Hour,
			ops: []op{
				{add: true, key: "a", val: 1}, {add: true, key: "b", val: 2},
				{key: "a"}, {key: "b", want: 2},
			},
			wantLen: 1,
		},
		{
			name: "get refreshes recency", capacity: 2, ttl: time.Hour,
			ops: []op{
				{add: true, key: "a", val: 1}, {add: true, key: "b", val: 2},
				{key: "a", want: 1},
				{add: true, key: "c", val: 3}, // evicts b, the least recently used
				{key: "b"}, {key: "a", want: 1}, {key: "c", want: 3},
			},
			wantLen: 2,
		},
		{
			name: "zero ttl stores nothing", capacity: 2, ttl: 0,
			ops:     []op{{add: true, key: "a", val: 1}, {key: "a"}},
			wantLen: 0,
		},
		{
			name: "zero capacity stores nothing", capacity: 0, ttl: time.Hour,
			ops:     []op{{add: true, key: "a", val: 1}, {key: "a"}},
			wantLen: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newLRU[int](tt.capacity, tt.ttl)
			for i, o := range tt.ops {
				now := t0.Add(o.at)
				if o.add {
					stale := far
					if o.staleAt != 0 {
						stale = t0.Add(o.staleAt)
					}
					c.add(o.key, o.val, now, stale)
					continue
				}
				got, ok := c.get(o.key, now)
				if (o.want != 0) != ok || got != o.want {
					t.Fatalf("op %d: get(%q) at +%v = %d, %v; want %d", i, o.key, o.at, got, ok, o.want)
				}
			}
			if got := c.len(); got != tt.wantLen {
				t.Errorf("len = %d, want %d", got, tt.wantLen)
			}
		})
	}
}

func TestSafetyMargin(t *testing.T) {
	t.Parallel()
	tests := []struct{ ttl, want time.Duration }{
		{86400 * time.Second, time.Hour},      // 10% = 2.4h, capped at 1h
		{3600 * time.Second, 6 * time.Minute}, // 10%
		{5 * time.Minute, time.Minute},        // 10% = 30s, raised to 1m
		{60 * time.Second, 30 * time.Second},  // 1m would be the whole life: half
		{604800 * time.Second, time.Hour},
	}
	for _, tt := range tests {
		if got := safetyMargin(tt.ttl); got != tt.want {
			t.Errorf("safetyMargin(%v) = %v, want %v", tt.ttl, got, tt.want)
		}
	}
}
