package eventually

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestEventuallyReturnsOnceTrue(t *testing.T) {
	var n atomic.Int32
	Eventually(t, 10*time.Second, func() bool { return n.Add(1) >= 3 }, "counter reaches 3")
	if got := n.Load(); got != 3 {
		t.Errorf("cond called %d times, want 3", got)
	}
}

// fakeTB records Fatalf instead of stopping the goroutine's test.
type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f)
}

func TestEventuallyFailsAfterTimeout(t *testing.T) {
	f := &fakeTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != f {
				panic(r)
			}
		}()
		Eventually(f, 0, func() bool { return false }, "never")
	}()
	if f.failed == "" {
		t.Fatal("Eventually did not fail for a condition that never holds")
	}
}
