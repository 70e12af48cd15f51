package e2e

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// The scrubber's hold-back is no prefix oracle (report 2026-12-01 §3): an
// allowlisted origin echoes the app's guess and waits. Before, the first
// characters of the injected key were held back until the origin went on,
// while a wrong guess arrived at once: the app read the key character by
// character. Now both guesses — 11 correct characters and 10 correct plus
// a wrong one — reach the app whole while the origin still waits (only
// then does the test let it go on), in the same pieces' order, so what
// arrives tells nothing about the key. No wall-clock assertion: the origin
// waits for the test.
func TestScrubHoldBackIsNoPrefixOracle(t *testing.T) {
	t.Parallel()
	p, key := apiKeyPod(t, podConfig{ipv6: true})
	right, wrong := key[:11], key[:10]+"z"
	if strings.HasPrefix(key, wrong) {
		t.Fatalf("the wrong guess %q is a prefix of the key", wrong)
	}
	arrived := map[string][]string{}
	for _, guess := range []string{right, wrong} {
		id := randomHex(t, 6)
		u := "http://" + hostAPI + "/stream-echo/" + id + "?q=" + url.QueryEscape(guess)
		lines, wait := p.startApp(t, nil, p.bins.client, "stream", "-url", u)
		var got string
		for got != guess {
			line, ok := <-lines
			if !ok {
				t.Fatalf("guess %q: the body ended before the whole guess arrived (got %q): %s", guess, got, wait())
			}
			var piece string
			if err := json.Unmarshal([]byte(line), &piece); err != nil {
				t.Fatalf("guess %q: client line %q: %v", guess, line, err)
			}
			got += piece
			arrived[guess] = append(arrived[guess], piece)
			if !strings.HasPrefix(guess, got) {
				t.Fatalf("guess %q: the app got %q before the origin went on", guess, got)
			}
		}
		// Only now may the origin go on.
		resp, err := p.control.Post("http://origin/release?id="+id, "", nil)
		if err != nil {
			t.Fatalf("releasing the stream: %v", err)
		}
		_ = resp.Body.Close()
		var rest string
		for line := range lines {
			if line == "end of body" {
				break
			}
			var piece string
			_ = json.Unmarshal([]byte(line), &piece)
			rest += piece
		}
		if rest != "\n.\n" {
			t.Errorf("guess %q: after the release the app got %q, want the origin's end", guess, rest)
		}
		if err := wait(); err != "" {
			t.Errorf("guess %q: client: %s", guess, err)
		}
	}
	// Same pieces for both: what is released first does not depend on the
	// key (each its first len-Hold bytes, then the held tail on its own).
	if len(arrived[right]) != len(arrived[wrong]) || len(arrived[right][0]) != len(arrived[wrong][0]) {
		t.Errorf("the pieces differ: right %q, wrong %q", arrived[right], arrived[wrong])
	}
}
