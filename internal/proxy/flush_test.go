package proxy

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestKnownLengthBodyFlushedPromptly holds the contract of FlushInterval:
// a response with a Content-Length whose body stalls still reaches the
// client (head and the bytes produced so far) within the flush interval,
// not only when the body completes. The origin sends half the body and
// waits for the client to have read it before sending the rest: a proxy
// that only flushed at the end would deadlock here.
func TestKnownLengthBodyFlushedPromptly(t *testing.T) {
	e := newEnv(t, envOpts{})
	release := make(chan struct{})
	e.originMux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(10))
		_, _ = io.WriteString(w, "first")
		_ = http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "-last")
	})
	req, _ := http.NewRequest(http.MethodGet, e.plain.URL+"/slow", nil)
	req.Host = "api.example.test"
	start := time.Now()
	resp, err := e.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	first := make([]byte, 5)
	if _, err := io.ReadFull(br, first); err != nil || string(first) != "first" {
		t.Fatalf("first half: %q, %v", first, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("first half arrived after %s", d)
	}
	close(release)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "-last" {
		t.Fatalf("second half: %q, %v", rest, err)
	}
}
