package secrets

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/testutil/eventually"
	"github.com/botbox/botbox/internal/testutil/logcapture"
)

// findKey returns the records with message msg and field key == key.
func findKey(b *logcapture.Buffer, msg, key string) []map[string]any {
	var out []map[string]any
	for _, r := range b.Find(msg) {
		if r["key"] == key {
			out = append(out, r)
		}
	}
	return out
}

// newTestLogger returns a debug-level JSON logger into a buffer that is
// printed if the test fails.
func newTestLogger(t *testing.T) (*slog.Logger, *logcapture.Buffer) {
	t.Helper()
	b := &logcapture.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("store logs:\n%s", b.String())
		}
	})
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// writeFile writes a file under dir, creating parent directories.
func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// get returns a secret of the current snapshot as a string.
func get(s *Store, key string) (string, bool) {
	v, ok := s.Snapshot().Lookup(key)
	return string(v.Reveal()), ok
}

// contents returns the whole current snapshot as plain strings.
func contents(s *Store) map[string]string {
	snap := s.Snapshot()
	m := map[string]string{}
	for _, k := range snap.Keys() {
		v, _ := snap.Lookup(k)
		m[k] = string(v.Reveal())
	}
	return m
}

// mustOpen opens a store on dir with a test logger.
func mustOpen(t *testing.T, opts Options) (*Store, *logcapture.Buffer) {
	t.Helper()
	log, buf := newTestLogger(t)
	if opts.Logger == nil {
		opts.Logger = log
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open(%+v) = %v", opts, err)
	}
	return s, buf
}

// startRun runs s.Run until the test ends.
func startRun(t *testing.T, s *Store) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline. It is a wait, not an assertion on timing.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually.Eventually(t, 10*time.Second, cond, what)
}

// fast are Run timings for tests: short debounce, resync effectively off,
// so that a change seen proves the watch works.
func fast(dir string) Options {
	return Options{Dir: dir, Debounce: 20 * time.Millisecond, Resync: time.Hour}
}
