package server

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/botbox/botbox/internal/telemetry"
)

// TestReloadCommitsPolicyLast is review D5: the moment the new policy is
// in force, the rest of the reload is already in place: the success is
// counted, the new secret_ref is required and has its placeholder. A
// watcher spins on the generation and checks each at the first sight of
// the new one. On ee87e5f the generation went live before the placeholders
// were written and the success counted (TestReloadFollowsConfigMapSwap
// failed about 1 run in 10 under load).
func TestReloadCommitsPolicyLast(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "placeholders")
	h := start(t, harnessOpts{
		writeSecret: true,
		configFile:  true,
		extraYAML:   fmt.Sprintf("placeholders:\n  enabled: true\n  dir: %s\n", dir),
	})
	if err := os.WriteFile(filepath.Join(h.secretDir, "new-key"), []byte("CANARY-d00dad-17-never-log\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const newRule = "    - host: other.example.test\n      action: allow\n      header_rewrites:\n        - name: X-New\n          value: \"{value}\"\n          secret_ref: new-key\n"
	for round := range 5 {
		// Alternate between the rule with the new secret_ref and without.
		y := h.withOther(newRule)
		if round%2 == 1 {
			y = h.yaml
		}
		h.writeConfig(y)
		before := h.srv.gen.Load()
		type seen struct {
			reloads  float64
			required bool
			table    bool
		}
		got := make(chan seen, 1)
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if g := h.srv.gen.Load(); g != before {
					_, inTable := h.srv.Placeholders().Table().Lookup("new-key")
					got <- seen{
						reloads:  reloads(h, telemetry.ReloadSuccess),
						required: slices.Contains(h.srv.live.RequiredSecretRefs(), "new-key"),
						table:    inTable,
					}
					return
				}
			}
		}()
		if err := h.srv.Reload(TriggerSIGHUP); err != nil {
			close(stop)
			t.Fatal(err)
		}
		s := <-got
		close(stop)
		wantNew := round%2 == 0
		if s.reloads != float64(round+1) {
			t.Errorf("round %d: the new generation was in force with reloads{success} = %v, want %d", round, s.reloads, round+1)
		}
		if s.required != wantNew {
			t.Errorf("round %d: the new generation was in force with new-key required = %v, want %v", round, s.required, wantNew)
		}
		if wantNew && !s.table {
			t.Errorf("round %d: the new generation was in force before new-key had its placeholder", round)
		}
	}
}
