package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rulesPlaceholders: api.example.test gets the key; other.example.test is
// a second allowed host that may not receive it. scrub_responses is off on
// api.example.test because the test reads the origin's echo to see the
// key it received (scrubbing would mask it: TestAT004EchoShowsInjectedSecret).
const rulesPlaceholders = `
    - host: api.example.test
      action: allow
      scrub_responses: false
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
    - host: other.example.test
      action: allow
`

// TestPlaceholderTripwire: the app reads its placeholder from the
// directory BotBox writes (as UID 1000), sends it to a second allowed host
// and is refused (403), BotBox raises the alarm (ERROR line with event
// secret_tripwire, the metric) and the origin receives nothing; sent to its
// own host the placeholder arrives as the real key.
func TestPlaceholderTripwire(t *testing.T) {
	key := "sk-e2e-" + randomHex(t, 20)
	p := newPod(t, podConfig{rules: rulesPlaceholders, placeholders: true, secrets: map[string]string{"api-key": key}})

	ph, errOut, code := p.run(t, p.podNS, uidApp, nil, "cat", filepath.Join(p.dir, "placeholders", "api-key"))
	if code != 0 || len(ph) != len(key) || !strings.HasPrefix(ph, "sk-e2e-") || ph == key {
		t.Fatalf("the app cannot read a placeholder of the key's shape (exit %d, %q, %d bytes)", code, errOut, len(ph))
	}
	env, _, _ := p.run(t, p.podNS, uidApp, nil, "cat", filepath.Join(p.dir, "placeholders", "env"))
	if env != "API_KEY="+ph+"\n" {
		t.Errorf("env file = %q", env)
	}

	mark := p.mark(t)
	r := p.app(t, "http", "-url", "http://other.example.test/headers", "-H", "Authorization: Bearer "+ph)
	assertStatus(t, "placeholder to other.example.test", r, http.StatusForbidden, "credential not allowed for this host")
	p.assertNoTCP(t, mark, p.addr4(443))

	metrics := p.app(t, "http", "-url", "http://127.0.0.1:9090/metrics").Body
	if !strings.Contains(metrics, `botbox_secret_tripwire_total{secret_ref="api-key"} 1`) {
		t.Errorf("metrics lack the tripwire count:\n%s", tail(metrics, 30))
	}

	mark = p.mark(t)
	r = p.app(t, "http", "-url", "http://api.example.test/headers", "-H", "X-Api-Key: "+ph)
	if r.Status != http.StatusOK || r.Echo == nil {
		t.Fatalf("placeholder to api.example.test: status %d body %q", r.Status, r.Body)
	}
	if got := r.Echo.Headers["X-Api-Key"]; len(got) != 1 || got[0] != key {
		t.Errorf("api.example.test received X-Api-Key %q, want the real key", got)
	}
	if ev := p.httpEvent(t, mark, "/headers"); ev.Host != hostAPI {
		t.Errorf("origin saw host %q, want %s", ev.Host, hostAPI)
	}

	if !p.botbox.stop(10 * time.Second) {
		t.Errorf("botbox did not stop within 10s of SIGTERM")
	}
	log, err := os.ReadFile(p.botbox.stdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	alarms := 0
	for _, line := range strings.Split(string(log), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["event"] != "secret_tripwire" {
			continue
		}
		alarms++
		if rec["level"] != "ERROR" || rec["host"] != hostOther || rec["listener"] != "http" {
			t.Errorf("tripwire line = %v", rec)
		}
		if refs, _ := rec["secret_ref"].([]any); len(refs) != 1 || refs[0] != "api-key" {
			t.Errorf("tripwire line secret_ref = %v", rec["secret_ref"])
		}
	}
	if alarms != 1 {
		t.Errorf("%d tripwire lines, want 1", alarms)
	}
	if strings.Contains(string(log), key) {
		t.Error("the log contains the real key")
	}
}
