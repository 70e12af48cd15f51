package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/botbox/botbox/internal/testutil/wsecho"
)

// otherSecret is a secret of the directory no rule of testConfig injects.
const otherSecret = "ghp_otherSecretValue1234567890abcdefXYZ"

// withOtherSecret writes otherSecret and waits until the store has it.
func (e *testEnv) withOtherSecret() {
	e.t.Helper()
	e.writeSecret("other-key", otherSecret+"\n")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := e.store.Snapshot().Lookup("other-key"); ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatal("the store never loaded other-key")
		}
	}
}

// TestScrubEverySecret (report §2, defence in depth): a scrubbed response
// masks every secret BotBox holds, not only the one its rule injected,
// and a truncated quote of 12 or more characters of one; a rule that
// injects nothing is scrubbed only with scrub_responses: true written out.
func TestScrubEverySecret(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.withOtherSecret()
	e.originMux.HandleFunc("/reflect", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "stored note: %s\nerror: invalid key '%s...'\n", otherSecret, otherSecret[:30])
	})
	for _, tc := range []struct {
		host, ruleKeys string
		masked         bool
	}{
		{"api.example.test", "", true},                               // injects api-key; other-key masked too
		{"bare.example.test", "", false},                             // injects nothing: not scrubbed (the default)
		{"bare.example.test", "      scrub_responses: true\n", true}, // asked for
	} {
		if tc.ruleKeys != "" {
			e.withBareRule(tc.ruleKeys)
		}
		resp, body := e.get(tc.host, "/reflect", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %q: %d %s", tc.host, tc.ruleKeys, resp.StatusCode, body)
		}
		leaked := strings.Contains(body, otherSecret[:12]) || strings.Contains(body, otherSecret[18:30])
		if leaked == tc.masked {
			t.Errorf("%s %q: masked %v, want %v:\n%s", tc.host, tc.ruleKeys, !leaked, tc.masked, body)
		}
		if tc.masked && !strings.Contains(body, "stored note: ") {
			t.Errorf("%s: more than the secret was masked:\n%s", tc.host, body)
		}
	}
	if n := testutil.ToFloat64(e.metrics.SecretReflections.WithLabelValues("other-key")); n < 4 {
		t.Errorf("reflections{other-key} = %v, want 2 per scrubbed response", n)
	}
	if strings.Contains(e.logs.String(), otherSecret[:12]) {
		t.Error("a log line holds the secret")
	}
}

// TestScrubDropsRange (report §6): Range and If-Range never reach the
// origin of a scrubbed request, so two 206 pieces of a reflecting
// response cannot be reassembled; the agent gets the whole body, masked.
// An unscrubbed rule forwards them.
func TestScrubDropsRange(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.originMux.HandleFunc("/doc", func(w http.ResponseWriter, r *http.Request) {
		doc := fmt.Sprintf(`{"you sent":%q}`, r.Header.Get("Authorization"))
		http.ServeContent(w, r, "doc.json", time.Unix(1e9, 0), strings.NewReader(doc))
	})
	hdr := http.Header{"Range": {"bytes=15-24"}, "If-Range": {`"x"`}}
	for _, host := range []string{"api.example.test", "noscrub.example.test"} {
		resp, body := e.get(host, "/doc", hdr)
		seen := e.lastSeen().Header
		scrubbed := host == "api.example.test"
		if got := seen.Get("Range") != "" || seen.Get("If-Range") != ""; got == scrubbed {
			t.Errorf("%s: origin saw Range %q If-Range %q", host, seen.Get("Range"), seen.Get("If-Range"))
		}
		if scrubbed && (resp.StatusCode != http.StatusOK || strings.Contains(body, scrubSecret[:12]) || !strings.HasPrefix(body, `{"you sent":"Bearer *`)) {
			t.Errorf("%s: %d %q, want 200 with the whole body masked", host, resp.StatusCode, body)
		}
	}
}

// TestScrubStallCounted (report §3): a stream that pauses after the first
// 11 characters of a secret gets them after the hold timer like any other
// bytes, and the pause is counted and logged without the bytes; a pause
// after other text is not.
func TestScrubStallCounted(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.originMux.HandleFunc("/tail", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "log: "+r.URL.Query().Get("q"))
		_ = http.NewResponseController(w).Flush()
		time.Sleep(300 * time.Millisecond)
		fmt.Fprint(w, " end")
	})
	stalls := func() float64 { return testutil.ToFloat64(e.metrics.SecretScrubStalls.WithLabelValues("body")) }
	for _, tc := range []struct {
		q     string
		stall float64
	}{{"plain-words", 0}, {scrubSecret[:11], 1}} {
		before := stalls()
		_, body := e.get("api.example.test", "/tail?q="+tc.q, nil)
		if body != "log: "+tc.q+" end" {
			t.Errorf("q=%q: body %q", tc.q, body)
		}
		if got := stalls() - before; got != tc.stall {
			t.Errorf("q=%q: %v stalls, want %v", tc.q, got, tc.stall)
		}
	}
	logs := e.logs.String()
	if !strings.Contains(logs, msgScrubStall) || strings.Contains(logs, scrubSecret[:11]) {
		t.Errorf("want one stall line without the bytes; logs:\n%s", logs)
	}
}

// TestScrubWebSocketReleasesCompleteMessage (review D3): a scrubbed
// WebSocket message ending in a byte that could start the secret ("s"
// of "sk-") reaches the agent whole while the origin waits for the agent.
func TestScrubWebSocketReleasesCompleteMessage(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.originMux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_, _ = brw.Write(wsecho.Frame("thanks"))
		_ = brw.Flush()
		_, _ = brw.ReadString('\n') // waits for the agent's next message
	})
	c, err := net.Dial("tcp", e.plain.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: api.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if msg, err := wsecho.ReadFrame(br); err != nil || msg != "thanks" {
		t.Fatalf("complete message not delivered: %q, %v", msg, err)
	}
}
