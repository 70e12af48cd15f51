// Package eventually waits for a condition in tests that observe another
// goroutine or process, instead of each test writing its own poll loop.
package eventually

import (
	"testing"
	"time"
)

// pollInterval is how often cond is re-evaluated.
const pollInterval = 5 * time.Millisecond

// Eventually calls cond until it returns true, and fails the test with msg
// when timeout passes first. The timeout is a safety net against a hang,
// never the property under test: cond must state what the test waits for.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %s", timeout, msg)
		}
		time.Sleep(pollInterval)
	}
}
