// Package logcapture collects a logger's JSON lines in memory for tests.
package logcapture

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
)

// Buffer is a concurrency-safe io.Writer that keeps everything written.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Records decodes every JSON line; a line that is not JSON becomes
// {"_raw": line} so that a test searching it still sees it.
func (b *Buffer) Records() []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		m := map[string]any{}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			m = map[string]any{"_raw": line}
		}
		out = append(out, m)
	}
	return out
}

// Find returns the records whose "message" equals msg.
func (b *Buffer) Find(msg string) []map[string]any {
	var out []map[string]any
	for _, r := range b.Records() {
		if r["message"] == msg || r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}
