package secrets

import (
	"context"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fsnotify/fsnotify"
)

// loopHarness runs watchLoop in a synctest bubble with hand-fed events and
// no fsnotify watcher (fsnotify's blocking reads cannot run in a bubble).
// The directory is real; only time is fake.
type loopHarness struct {
	s      *Store
	logs   *logBuffer
	dir    string
	events chan fsnotify.Event
	errs   chan error
}

func startLoop(t *testing.T, opts Options) *loopHarness {
	t.Helper()
	s, logs := mustOpen(t, opts)
	h := &loopHarness{s: s, logs: logs, dir: s.dir, events: make(chan fsnotify.Event), errs: make(chan error)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.watchLoop(ctx, &dirWatch{dir: s.dir, parent: filepath.Dir(s.dir), log: s.log}, h.events, h.errs)
	}()
	t.Cleanup(func() { cancel(); <-done })
	synctest.Wait()
	return h
}

func (h *loopHarness) eventReloads(t *testing.T) int {
	return len(h.logs.find(t, "reloading secrets due to file change"))
}

func TestWatchLoopDebounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "k", "v1")
		h := startLoop(t, Options{Dir: dir, Debounce: 2 * time.Second, Resync: time.Hour})

		writeFile(t, dir, "k", "v2")
		h.events <- fsnotify.Event{Name: filepath.Join(h.dir, "k"), Op: fsnotify.Write}
		time.Sleep(time.Second)
		// A later event does not push the reload back.
		h.events <- fsnotify.Event{Name: filepath.Join(h.dir, "k"), Op: fsnotify.Chmod}
		time.Sleep(time.Second - time.Nanosecond)
		synctest.Wait()
		if v, _ := get(h.s, "k"); v != "v1" {
			t.Fatalf("k = %q before the debounce elapsed, want v1", v)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if v, _ := get(h.s, "k"); v != "v2" {
			t.Fatalf("k = %q when the debounce elapsed, want v2", v)
		}
		if n := h.eventReloads(t); n != 1 {
			t.Errorf("%d event reloads, want 1", n)
		}

		// Events outside the directory (siblings seen through the parent
		// watch) do not schedule anything.
		h.events <- fsnotify.Event{Name: filepath.Join(filepath.Dir(h.dir), "sibling"), Op: fsnotify.Create}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := h.eventReloads(t); n != 1 {
			t.Errorf("%d event reloads after a sibling event, want 1", n)
		}

		// The next event starts a new debounce.
		writeFile(t, dir, "k", "v3")
		h.events <- fsnotify.Event{Name: filepath.Join(h.dir, "k"), Op: fsnotify.Write}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if v, _ := get(h.s, "k"); v != "v3" || h.eventReloads(t) != 2 {
			t.Errorf("k = %q after %d event reloads, want v3 after 2", v, h.eventReloads(t))
		}
	})
}

func TestWatchLoopWatcherErrorSchedulesReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		h := startLoop(t, Options{Dir: dir, Debounce: 2 * time.Second, Resync: time.Hour})
		writeFile(t, dir, "k", "v")
		h.errs <- fsnotify.ErrEventOverflow
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if v, _ := get(h.s, "k"); v != "v" {
			t.Errorf("k = %q after a watcher overflow, want v", v)
		}
		if got := h.logs.find(t, "secret watcher error, scheduling a reload"); len(got) != 1 {
			t.Errorf("watcher error logs = %v, want one", got)
		}
	})
}

func TestWatchLoopResync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "k", "v1")
		h := startLoop(t, Options{Dir: dir}) // defaults: 2s debounce, 30s resync

		writeFile(t, dir, "k", "v2") // no event
		time.Sleep(30*time.Second - time.Nanosecond)
		synctest.Wait()
		if v, _ := get(h.s, "k"); v != "v1" {
			t.Fatalf("k = %q before the resync, want v1", v)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if v, _ := get(h.s, "k"); v != "v2" {
			t.Fatalf("k = %q after the resync, want v2", v)
		}
	})
}

func TestWatchLoopReloadsAtStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		s, _ := mustOpen(t, Options{Dir: dir})
		// Written after Open, before the loop: picked up at start, not
		// 30s later.
		writeFile(t, dir, "k", "v")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.watchLoop(ctx, &dirWatch{dir: s.dir, parent: filepath.Dir(s.dir), log: s.log}, nil, nil)
		}()
		synctest.Wait()
		if v, _ := get(s, "k"); v != "v" {
			t.Errorf("k = %q right after the loop started, want v", v)
		}
		cancel()
		<-done
	})
}
