package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/test/e2e/internal/wire"
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
// own host in the header the rule rewrites, the origin gets the real key
// there (the rewrite replaced the app's value).
func TestPlaceholderTripwire(t *testing.T) {
	t.Parallel()
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
	r = p.app(t, "http", "-url", "http://api.example.test/headers", "-H", "Authorization: Bearer "+ph)
	if r.Status != http.StatusOK || r.Echo == nil {
		t.Fatalf("placeholder to api.example.test: status %d body %q", r.Status, r.Body)
	}
	if got := r.Echo.Headers["Authorization"]; len(got) != 1 || got[0] != "Bearer "+key {
		t.Errorf("api.example.test received Authorization %q, want the real key", got)
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

// rulesReadBack is the red team's setup (redteam-2026-12-01 §2):
// api.example.test injects the key, other.example.test is allowed without
// injection, and the one origin plays both (its /kv/ store is shared).
// maps.example.test takes the key in the query (query_rewrites).
const rulesReadBack = `
    - host: api.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
    - host: other.example.test
      action: allow
    - host: maps.example.test
      action: allow
      scrub_responses: false
      query_rewrites:
        - name: key
          value: "{value}"
          secret_ref: api-key
`

// TestPlaceholderReadBack is the red team's reproduction: the app, holding
// only the placeholder, stores it through the credentialed host (in the
// query, in an extra header) and reads it back through another host, or
// makes the credentialed host quote it truncated. On ee87e5f BotBox
// swapped the placeholder for the real key in both places and the app read
// the key back; now the first step is refused (403 tripwire), the origin
// receives nothing, and what is read back is not the key. The store works
// (a plain value comes back), so the test can fail. Over the plain
// listener and HTTPS interception alike. The query_rewrites host gets the
// key in its named parameter, and only there.
func TestPlaceholderReadBack(t *testing.T) {
	t.Parallel()
	key := "sk-proj-" + randomHex(t, 20)
	p := newPod(t, podConfig{
		rules: rulesReadBack, placeholders: true, interception: true,
		secrets:     map[string]string{"api-key": key},
		originNames: []string{"maps.example.test"},
		extraHosts:  func(p *pod) string { return p.netIP4.String() + " maps.example.test\n" },
	})
	ph, _, code := p.run(t, p.podNS, uidApp, nil, "cat", filepath.Join(p.dir, "placeholders", "api-key"))
	if code != 0 || len(ph) != len(key) {
		t.Fatalf("no placeholder (exit %d)", code)
	}
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			get := func(host, target string, hdr ...string) wire.Result {
				args := []string{"-url", scheme + "://" + host + target}
				if scheme == "https" {
					args = append(args, "-cacert", p.botboxCA)
				}
				for _, h := range hdr {
					args = append(args, "-H", h)
				}
				return p.app(t, "http", args...)
			}
			// The store works: a plain value written through one host is
			// read through the other.
			id := scheme + randomHex(t, 4)
			if r := get(hostAPI, "/kv/store?k="+id+"&v=plain-"+id); r.Status != http.StatusOK {
				t.Fatalf("store: %d %q", r.Status, r.Body)
			}
			if r := get(hostOther, "/kv/load?k="+id); !strings.Contains(r.Body, "plain-"+id) {
				t.Fatalf("load: %d %q", r.Status, r.Body)
			}
			for _, tc := range []struct {
				name, target string
				hdr          []string
			}{
				{"query", "/kv/store?k=q" + id + "&v=" + ph, nil},
				{"header", "/kv/store-hdr?k=h" + id, []string{"X-Note: " + ph}},
				{"percent-encoded query", "/kv/store?k=p" + id + "&v=" + strings.ReplaceAll(ph, "s", "%73"), nil},
				{"cookie", "/kv/store-hdr?k=c" + id, []string{"Cookie: n=" + ph}},
				{"truncated echo", "/kv/trunc?n=30&q=" + ph, nil},
			} {
				mark := p.mark(t)
				r := get(hostAPI, tc.target, tc.hdr...)
				assertStatus(t, tc.name, r, http.StatusForbidden, "credential not allowed for this host")
				if strings.Contains(r.Body, key[:12]) {
					t.Errorf("%s: the answer holds part of the key", tc.name)
				}
				for _, ev := range p.events(t, mark) {
					if ev.Kind == wire.KindHTTP {
						t.Errorf("%s: the origin received %s?%s", tc.name, ev.Path, ev.Query)
					}
				}
			}
			for _, k := range []string{"q", "h", "p", "c"} {
				if r := get(hostOther, "/kv/load?k="+k+id); strings.Contains(r.Body, key[:12]) {
					t.Errorf("read back through %s: %q holds the key", hostOther, r.Body)
				}
			}
			// query_rewrites: the named parameter carries the key, the
			// app's placeholder there is replaced, nothing else changes.
			mark := p.mark(t)
			if r := get("maps.example.test", "/geo?key="+ph+"&q=x"); r.Status != http.StatusOK {
				t.Fatalf("maps: %d %q", r.Status, r.Body)
			}
			if ev := p.httpEvent(t, mark, "/geo"); ev.Query != "q=x&key="+key {
				t.Errorf("maps.example.test received query %q, want q=x&key=<the key>", ev.Query)
			}
			r := get("maps.example.test", "/geo?key=x&q="+ph)
			assertStatus(t, "placeholder in a parameter not named", r, http.StatusForbidden, "credential not allowed for this host")
		})
	}
	if !p.botbox.stop(10 * time.Second) {
		t.Errorf("botbox did not stop within 10s of SIGTERM")
	}
	log, err := os.ReadFile(p.botbox.stdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), key) || strings.Contains(string(log), ph) {
		t.Error("the log contains the key or the placeholder")
	}
	if n := strings.Count(string(log), `"event":"secret_tripwire"`); n != 12 {
		t.Errorf("%d tripwire lines, want 12 (6 per listener)", n)
	}
}
