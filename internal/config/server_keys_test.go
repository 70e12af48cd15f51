package config

import (
	"testing"
	"time"
)

// TestRequestBudgetKeys covers max_concurrent_requests (default derived
// from max_connections), http2_max_concurrent_streams and
// downstream_write_timeout_seconds.
func TestRequestBudgetKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		src          string
		requests     int
		streams      int
		writeTimeout time.Duration
	}{
		{"defaults", "", 1024, 100, 60 * time.Second},
		{"derived from max_connections", "max_connections: 8\n", 8, 100, 60 * time.Second},
		{"derived, capped", "max_connections: 4294967295\n", 4294967295, 100, 60 * time.Second},
		{"explicit", "max_connections: 8\nmax_concurrent_requests: 5\nhttp2_max_concurrent_streams: 1\ndownstream_write_timeout_seconds: 3600\n", 5, 1, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := mustParse(t, tt.src+minimal)
			if c.MaxConcurrentRequests != tt.requests || c.HTTP2MaxConcurrentStreams != tt.streams || c.Timeouts.DownstreamWrite != tt.writeTimeout {
				t.Errorf("got requests=%d streams=%d write=%v, want %d %d %v", c.MaxConcurrentRequests, c.HTTP2MaxConcurrentStreams, c.Timeouts.DownstreamWrite, tt.requests, tt.streams, tt.writeTimeout)
			}
		})
	}
	for _, tt := range []struct{ key, lo, hi string }{
		{"max_concurrent_requests", "1", "4294967295"},
		{"http2_max_concurrent_streams", "1", "1000"},
		{"downstream_write_timeout_seconds", "1", "3600"},
	} {
		t.Run(tt.key, func(t *testing.T) {
			t.Parallel()
			mustParse(t, tt.key+": "+tt.lo+"\n"+minimal)
			mustParse(t, tt.key+": "+tt.hi+"\n"+minimal)
			wantContains(t, parseErr(t, tt.key+": 0\n"+minimal), "line 1: "+tt.key+": 0 must be between "+tt.lo+" and "+tt.hi)
			wantContains(t, parseErr(t, tt.key+": "+tt.hi+"1\n"+minimal), tt.key+": "+tt.hi+"1 must be between")
		})
	}
}
