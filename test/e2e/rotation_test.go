package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// Rotating the Secret while the app keeps sending requests: no request
// fails, every request carries exactly one credential, the old one until the
// swap and the new one from shortly after it (within the reload debounce
// plus a margin), never the old one again, and no restart. Both for a
// Kubernetes Secret volume (..data swap) and for a plain file replaced by
// rename.
func TestSecretRotationWhileRequestsFlow(t *testing.T) {
	for _, tt := range []struct {
		name  string
		plain bool
	}{
		{"kubernetes ..data swap", false},
		{"rename over a plain file", true},
	} {
		t.Run(tt.name, func(t *testing.T) { testRotation(t, tt.plain) })
	}
}

func testRotation(t *testing.T, plain bool) {
	oldKey, newKey := "sk-old-"+randomHex(t, 8), "sk-new-"+randomHex(t, 8)
	// The request loop learns which credential the origin received from
	// the origin's echo, so this pod turns response scrubbing off (it would
	// mask both keys alike; AT-004 covers scrubbing).
	rules := strings.Replace(rulesDefault, "          secret_ref: api-key\n", "          secret_ref: api-key\n      scrub_responses: false\n", 1)
	p := newPod(t, podConfig{ipv6: true, plainSecrets: plain, rules: rules, secrets: map[string]string{"api-key": oldKey}})
	pid := p.botbox.cmd.Process.Pid

	const warmup, after = 20, 20
	mark := p.mark(t)
	loop := startProc(t, "loop", p.dir, nil, "ip", "netns", "exec", p.podNS,
		"setpriv", "--reuid", strconv.Itoa(uidApp), "--regid", strconv.Itoa(uidApp), "--clear-groups",
		p.bins.client, "loop", "-url", "http://api.example.test/rotation", "-header-of", "Authorization",
		"-stop-value", "Bearer "+newKey, "-after", strconv.Itoa(after), "-duration", "30s", "-interval", "10ms")
	p.waitEvents(t, mark, strconv.Itoa(warmup)+" requests before the rotation", func(evs []wire.Event) bool {
		n := 0
		for _, e := range evs {
			if e.Kind == wire.KindHTTP && e.Path == "/rotation" {
				n++
			}
		}
		return n >= warmup || loop.exited()
	})

	rotated := time.Now()
	p.secrets.write(t, map[string]string{"api-key": newKey})

	select {
	case <-loop.done:
	case <-time.After(40 * time.Second):
		t.Fatal("request loop did not finish within 40s")
	}
	out, err := os.ReadFile(loop.stdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	var res wire.LoopResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("request loop output: %v\n%s", err, loop.logs())
	}
	if res.UID != uidApp {
		t.Errorf("request loop ran as UID %d, want %d", res.UID, uidApp)
	}
	if len(res.Failures) > 0 {
		t.Errorf("%d of %d requests failed during the rotation, first: %s", len(res.Failures), res.Requests, res.Failures[0])
	}
	if !res.Stopped {
		t.Errorf("the new credential was not seen %d times before the loop's deadline", after)
	}
	var values []string
	for _, run := range res.Runs {
		values = append(values, run.Value)
	}
	want := []string{"Bearer " + oldKey, "Bearer " + newKey}
	if strings.Join(values, "|") != strings.Join(want, "|") {
		t.Fatalf("Authorization seen by the origin, in order: %q, want exactly the old then the new credential", values)
	}
	latency := res.Runs[1].First.Sub(rotated)
	t.Logf("%d requests; old credential %d times, new %d times; new credential first seen %v after the Secret swap (debounce %v)",
		res.Requests, res.Runs[0].Count, res.Runs[1].Count, latency.Round(time.Millisecond), debounce)
	if latency > debounce+reloadMargin {
		t.Errorf("new credential used %v after the swap, want within %v", latency, debounce+reloadMargin)
	}
	if p.botbox.exited() || p.botbox.cmd.Process.Pid != pid {
		t.Errorf("botbox restarted or exited (%v)", p.botbox.waitErr)
	}
	assertStatus(t, "GET /healthz after the rotation", p.healthz(t), http.StatusOK, "ok")
	log, _ := os.ReadFile(p.botbox.stdoutPath)
	for _, k := range []string{oldKey, newKey} {
		if strings.Contains(string(log), k) {
			t.Errorf("botbox log contains a secret value")
		}
	}
}
