package server

import (
	"os"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/admin"
)

// TestRunRemovesOnlyItsProbeKey: shutdown removes the probe key Run wrote,
// and leaves a key another instance wrote at the same path since (on
// ee87e5f shutdown removed whatever file was there).
func TestRunRemovesOnlyItsProbeKey(t *testing.T) {
	for _, replaced := range []bool{false, true} {
		h := start(t, harnessOpts{})
		var other []byte
		if replaced {
			other, _ = admin.NewProbeKey()
			if _, err := admin.WriteProbeKey(h.probeKeyFile, other); err != nil {
				t.Fatal(err)
			}
		}
		h.cancel()
		select {
		case err := <-h.done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("server did not stop")
		}
		h.done <- nil // for the harness's cleanup
		got, err := admin.ReadProbeKey(h.probeKeyFile)
		_, statErr := os.Stat(h.probeKeyFile)
		switch {
		case !replaced && !os.IsNotExist(statErr):
			t.Errorf("own key not removed at shutdown (stat: %v)", statErr)
		case replaced && (err != nil || string(got) != string(other)):
			t.Errorf("another instance's key was removed or changed: %x, %v", got, err)
		}
	}
}
