package proxy

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (a
// forgotten tunnel, flush timer or upstream connection).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
