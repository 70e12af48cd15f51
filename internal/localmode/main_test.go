package localmode

import (
	"os"
	"testing"
)

// TestMain lets the test binary be the namespace helper: Start re-executes
// os.Executable() with HelperCommand, as botbox does.
func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == HelperCommand {
		os.Exit(HelperMain())
	}
	os.Exit(m.Run())
}
