package secrets

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSecretHotReload(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "api-key", "old-value\n")
	s, _ := mustOpen(t, fast(dir))
	startRun(t, s)

	writeFile(t, dir, "api-key", "new-value\n")
	waitFor(t, "the new value", func() bool { v, _ := get(s, "api-key"); return v == "new-value" })

	writeFile(t, dir, "added", "x")
	waitFor(t, "the added key", func() bool { _, ok := get(s, "added"); return ok })

	if err := os.Remove(filepath.Join(dir, "api-key")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted key to disappear", func() bool { _, ok := get(s, "api-key"); return !ok })
}

// TestRunDebounceFoldsEvents checks with real events that a burst is folded
// into fewer reloads than writes. The exact timing (one reload, Debounce after
// the first event) is pinned down by TestWatchLoopDebounce on a fake clock;
// here a loaded machine may legitimately split the burst.
func TestRunDebounceFoldsEvents(t *testing.T) {
	dir := t.TempDir()
	opts := fast(dir)
	opts.Debounce = 500 * time.Millisecond
	s, logs := mustOpen(t, opts)
	startRun(t, s)
	waitFor(t, "the watch", func() bool { return len(logs.Find("file watcher started")) == 1 })

	const writes = 20
	for i := range writes {
		writeFile(t, dir, "k", string(rune('a'+i)))
	}
	waitFor(t, "the last write", func() bool { v, _ := get(s, "k"); return v == string(rune('a'+writes-1)) })
	if n := len(logs.Find("reloading secrets due to file change")); n >= writes {
		t.Errorf("%d event reloads for %d writes, want them folded", n, writes)
	}
}

func TestRunK8sAtomicDataSwapRotation(t *testing.T) {
	dir := t.TempDir()
	writeK8sVolume(t, dir, "v1", map[string]string{"api-key": "key-v1", "old-only": "o"})
	s, _ := mustOpen(t, fast(dir))
	startRun(t, s)

	writeK8sVolume(t, dir, "v2", map[string]string{"api-key": "key-v2", "new-only": "n"})
	want := map[string]string{"api-key": "key-v2", "new-only": "n"}
	waitFor(t, "the rotated volume", func() bool { return cmp.Equal(want, contents(s)) })

	// A rotation that changes only the payload behind ..data: the key
	// symlinks are untouched, only the ..data rename produces events.
	writeK8sVolume(t, dir, "v3", map[string]string{"api-key": "key-v3", "new-only": "n"})
	waitFor(t, "the second rotation", func() bool { v, _ := get(s, "api-key"); return v == "key-v3" })
}

func TestRunDirectoryCreatedLate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	var ready = make(chan bool, 10)
	opts := fast(dir)
	opts.Required = []string{"k"}
	opts.OnReady = func(r bool) { ready <- r }
	s, logs := mustOpen(t, opts)
	if got := <-ready; got {
		t.Fatalf("initial readiness = true with no directory")
	}
	startRun(t, s)
	// Run watches the parent before its start-up reload. Resync is an
	// hour away, so the directory's creation must be seen by an event.
	waitFor(t, "Run to start", func() bool { return len(logs.Find("reloading secrets")) > 0 })

	writeFile(t, dir, "k", "late")
	waitFor(t, "the late directory", func() bool { v, _ := get(s, "k"); return v == "late" })
	if got := <-ready; !got {
		t.Errorf("OnReady(false) after the directory appeared, want true")
	}
	// The directory itself is watched now.
	writeFile(t, dir, "k", "later")
	waitFor(t, "an update in the late directory", func() bool { v, _ := get(s, "k"); return v == "later" })
}

func TestRunDirectoryCreatedLateWithoutParent(t *testing.T) {
	// Neither the directory nor its parent exist: only the resync retries
	// can find it.
	dir := filepath.Join(t.TempDir(), "a", "b", "secrets")
	s, logs := mustOpen(t, Options{Dir: dir, Debounce: 20 * time.Millisecond, Resync: 20 * time.Millisecond})
	startRun(t, s)

	writeFile(t, dir, "k", "v")
	waitFor(t, "the late directory", func() bool { v, _ := get(s, "k"); return v == "v" })
	waitFor(t, "the watch to attach", func() bool { return len(logs.Find("file watcher started")) == 1 })
}

func TestRunDirectoryRemovedAndRecreated(t *testing.T) {
	tests := []struct {
		name string
		// atomic: the directory vanishes with its files in one step, so
		// the store must still hold the last-known-good values. A
		// recursive remove deletes the files first, and a reload may run
		// half way through; the test then only checks the re-attachment.
		atomic bool
		remove func(dir string) error
	}{
		{"renamed away", true, func(dir string) error { return os.Rename(dir, dir+".old") }},
		{"removed", false, os.RemoveAll},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "secrets")
			writeFile(t, dir, "a", "1")
			s, logs := mustOpen(t, fast(dir))
			startRun(t, s)
			waitFor(t, "the watch", func() bool { return len(logs.Find("file watcher started")) == 1 })

			if err := tt.remove(dir); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the reload to notice", func() bool {
				return len(logs.Find("secrets directory disappeared, keeping last known values")) == 1
			})
			if tt.atomic {
				if d := cmp.Diff(map[string]string{"a": "1"}, contents(s)); d != "" {
					t.Errorf("with the directory gone (-want +got):\n%s", d)
				}
			}

			// Back with other contents: exactly those. Resync is an hour
			// away, so this and the next update prove the watch moved to
			// the new directory.
			writeFile(t, dir, "b", "2")
			waitFor(t, "the re-created directory", func() bool { return cmp.Equal(map[string]string{"b": "2"}, contents(s)) })
			writeFile(t, dir, "a", "3")
			waitFor(t, "an update in the re-created directory", func() bool { v, _ := get(s, "a"); return v == "3" })
		})
	}
}

func TestRunReadinessTransitionsByEvent(t *testing.T) {
	dir := t.TempDir()
	ready := make(chan bool, 10)
	opts := fast(dir)
	opts.Required = []string{"token"}
	opts.OnReady = func(r bool) { ready <- r }
	s, logs := mustOpen(t, opts)
	if <-ready {
		t.Fatalf("initial readiness = true, want false")
	}
	startRun(t, s)

	next := func(want bool) {
		t.Helper()
		select {
		case got := <-ready:
			if got != want {
				t.Fatalf("OnReady(%v), want %v", got, want)
			}
			if s.Ready() != want {
				t.Errorf("Ready() = %v inside the transition to %v", s.Ready(), want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no OnReady(%v) call", want)
		}
	}
	writeFile(t, dir, "token", "t")
	next(true)
	if got := logs.Find("all required secrets now available, system ready"); len(got) != 1 {
		t.Errorf("ready log = %v, want one", got)
	}
	if err := os.Remove(filepath.Join(dir, "token")); err != nil {
		t.Fatal(err)
	}
	next(false)
	if d := cmp.Diff([]string{"token"}, s.Missing()); d != "" {
		t.Errorf("Missing() (-want +got):\n%s", d)
	}
}

func TestRunResyncWithoutEvent(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "k", "v1")
	// An hour of debounce: an event-triggered reload never happens in this
	// test, so the change can only come from the periodic resync.
	s, logs := mustOpen(t, Options{Dir: dir, Debounce: time.Hour, Resync: 20 * time.Millisecond})
	startRun(t, s)

	writeFile(t, dir, "k", "v2")
	waitFor(t, "the resync", func() bool { v, _ := get(s, "k"); return v == "v2" })
	if got := logs.Find("reloading secrets due to file change"); len(got) != 0 {
		t.Errorf("an event reload happened; the test no longer isolates the resync")
	}
}

func TestRunTwice(t *testing.T) {
	s, _ := mustOpen(t, fast(t.TempDir()))
	startRun(t, s)
	waitFor(t, "Run to start", s.running.Load)
	if err := s.Run(context.Background()); err == nil {
		t.Errorf("a second concurrent Run() = nil, want an error")
	}
}

func TestRunReturnsOnCancel(t *testing.T) {
	s, _ := mustOpen(t, fast(t.TempDir()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Errorf("Run(cancelled) = %v, want nil", err)
	}
	// And it can run again afterwards.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Errorf("second Run(cancelled) = %v, want nil", err)
	}
}
