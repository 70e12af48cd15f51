package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/botbox/botbox/test/e2e/internal/wire"
)

// wsBytes sums the bytes the origin read from WebSocket tunnels in evs.
func wsBytes(evs []wire.Event) int {
	n := 0
	for _, ev := range evs {
		if ev.Kind == wire.KindWS {
			b, _ := strconv.Atoi(ev.Payload)
			n += b
		}
	}
	return n
}

// decisionLines returns BotBox's decision lines so far.
func (p *pod) decisionLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, path := range []string{p.botbox.stdoutPath, p.botbox.stderrPath} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for line := range bytes.Lines(b) {
			var m map[string]any
			if json.Unmarshal(line, &m) == nil && m["decision"] != nil {
				out = append(out, m)
			}
		}
	}
	return out
}

// waitDecision waits for a decision line for path that match accepts.
func (p *pod) waitDecision(t *testing.T, path string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(eventTimeout)
	for {
		for _, l := range p.decisionLines(t) {
			if l["path"] == path && match(l) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision line for %s as wanted within %v:\n%s", path, eventTimeout, tail(p.botbox.logs(), 30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWebSocketBodyLimitE2E (redteam §8): the app, transparently
// redirected, sends 10 frames of 508 bytes through a WebSocket to a host
// whose rule has max_request_body_bytes: 1000. BotBox closes the tunnel at
// the crossing read: the origin's socket receives at most 1000 bytes, and
// the line says denied_body_too_large. On ee87e5f all 5080 bytes arrived.
func TestWebSocketBodyLimitE2E(t *testing.T) {
	const next = "    - host: blocked.example.test"
	if !strings.Contains(rulesDefault, next) {
		t.Fatal("rulesDefault changed: the api rule is no longer followed by the blocked rule")
	}
	p := newPod(t, podConfig{
		secrets: map[string]string{"api-key": "sk-e2e-ws"},
		rules:   strings.Replace(rulesDefault, next, "      max_request_body_bytes: 1000\n"+next, 1),
	})
	since := p.mark(t)
	r := p.app(t, "ws", "-url", "http://api.example.test/ws/limit", "-frames", "10", "-size", "500", "-interval", "30ms", "-timeout", "5s")
	if r.Status != 101 {
		t.Fatalf("upgrade: %+v", r)
	}
	if !strings.Contains(r.Body, "closed=true") {
		t.Errorf("the tunnel was not closed: %+v", r)
	}
	p.waitDecision(t, "/ws/limit", func(l map[string]any) bool {
		return l["decision"] == "denied_body_too_large" && l["reason"] == "body_too_large"
	})
	// Everything the origin got, once the tunnel is gone.
	evs := p.waitEvents(t, since, "the upgrade request", func(evs []wire.Event) bool {
		for _, ev := range evs {
			if ev.Kind == wire.KindHTTP && ev.Path == "/ws/limit" {
				return true
			}
		}
		return false
	})
	if got := wsBytes(evs); got > 1000 {
		t.Errorf("the origin received %d bytes through a tunnel limited to 1000", got)
	}
}

// rewriteConfig writes the pod's config again (p.cfg changed) by rename,
// and signals BotBox to reload it; it waits for "configuration reloaded".
func (p *pod) rewriteConfig(t *testing.T) {
	t.Helper()
	before := strings.Count(p.botbox.logs(), "configuration reloaded")
	path := p.configPath
	p.writeConfigTo(t, path+".next")
	if err := os.Rename(path+".next", path); err != nil {
		t.Fatal(err)
	}
	if err := p.botbox.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(reloadMargin)
	for strings.Count(p.botbox.logs(), "configuration reloaded") <= before {
		if time.Now().After(deadline) {
			t.Fatalf("no reload within %v:\n%s", reloadMargin, tail(p.botbox.logs(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clientAsync starts the app's client and returns a channel with its
// result (decoded, or the failure as the Error of a zero Result).
func (p *pod) clientAsync(mode string, args ...string) <-chan wire.Result {
	ch := make(chan wire.Result, 1)
	full := append([]string{"ip", "netns", "exec", p.podNS, "setpriv", "--reuid", strconv.Itoa(uidApp), "--regid", strconv.Itoa(uidApp), "--clear-groups", p.bins.client, mode}, args...)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, full[0], full[1:]...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		out, err := cmd.Output()
		var r wire.Result
		if err != nil || json.Unmarshal(out, &r) != nil {
			r = wire.Result{UID: -1, Error: "e2e-client " + mode + ": " + strings.TrimSpace(string(out))}
			if err != nil {
				r.Error += ": " + err.Error()
			}
		}
		ch <- r
	}()
	return ch
}

// TestReloadClosesWebSocketE2E (redteam §8): a WebSocket is open and
// carrying frames; a reload denies its host. BotBox closes the tunnel and
// writes its line with reason policy_reloaded, and nothing the app sends
// afterwards reaches the origin's socket. On ee87e5f the open tunnel kept
// carrying the app's data after the reload.
func TestReloadClosesWebSocketE2E(t *testing.T) {
	p := newPod(t, podConfig{secrets: map[string]string{"api-key": "sk-e2e-ws"}})
	since := p.mark(t)
	done := p.clientAsync("ws", "-url", "http://api.example.test/ws/reload", "-frames", "200", "-size", "100", "-interval", "50ms", "-timeout", "25s")
	p.waitEvents(t, since, "frames through the tunnel", func(evs []wire.Event) bool { return wsBytes(evs) > 0 })

	p.cfg.rules = strings.Replace(rulesDefault, "    - host: api.example.test\n      action: allow\n", "    - host: api.example.test\n      action: deny\n", 1)
	p.rewriteConfig(t)
	p.waitDecision(t, "/ws/reload", func(l map[string]any) bool { return l["reason"] == "policy_reloaded" })
	var r wire.Result
	select {
	case r = <-done:
	case <-time.After(commandTimeout):
		t.Fatal("the client did not end")
	}
	if r.Status != 101 || (r.ErrorKind != wire.ErrReset && !strings.Contains(r.Body, "closed=true")) {
		t.Errorf("client: %+v, want the upgrade and then the tunnel closed", r)
	}
	if strings.Contains(r.Body, "sent=20400 ") {
		t.Errorf("every frame was written: the tunnel was not closed (%s)", r.Body)
	}
	// After the close: nothing more reaches the origin.
	after := p.mark(t)
	time.Sleep(300 * time.Millisecond)
	if evs := p.events(t, after); wsBytes(evs) > 0 {
		t.Errorf("the origin still received %d bytes after the tunnel was closed", wsBytes(evs))
	}
	// A new request to the host is refused by the new policy.
	if nr := p.app(t, "http", "-url", "http://api.example.test/after"); nr.Status != 403 {
		t.Errorf("new request after the reload: %+v, want 403", nr)
	}
}
