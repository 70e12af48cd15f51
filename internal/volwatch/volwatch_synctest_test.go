package volwatch

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fsnotify/fsnotify"
)

// reloads records the triggers Reload was called with.
type reloads struct {
	mu   sync.Mutex
	seen []string
}

func (r *reloads) reload(trigger string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, trigger)
}

func (r *reloads) count(trigger string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.seen {
		if s == trigger {
			n++
		}
	}
	return n
}

func (r *reloads) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// loopHarness runs loop in a synctest bubble with hand-fed events and no
// fsnotify watcher (fsnotify's blocking reads cannot run in a bubble). The
// directory is real; only time is fake.
type loopHarness struct {
	r      *reloads
	dir    string
	events chan fsnotify.Event
	errs   chan error
}

func startLoop(t *testing.T, debounce, resync time.Duration) *loopHarness {
	t.Helper()
	dir := t.TempDir()
	h := &loopHarness{r: &reloads{}, dir: dir, events: make(chan fsnotify.Event), errs: make(chan error)}
	o := Options{Dir: dir, Debounce: debounce, Resync: resync, Logger: discard(), Reload: h.r.reload}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		loop(ctx, o, &dirWatch{dir: dir, parent: filepath.Dir(dir), log: o.Logger}, h.events, h.errs)
	}()
	t.Cleanup(func() { cancel(); <-done })
	synctest.Wait()
	return h
}

func (h *loopHarness) inside(name string) fsnotify.Event {
	return fsnotify.Event{Name: filepath.Join(h.dir, name), Op: fsnotify.Write}
}

func TestLoopReloadsAtStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startLoop(t, 2*time.Second, time.Hour)
		if got := h.r.all(); !slices.Equal(got, []string{TriggerStart}) {
			t.Errorf("reloads right after start = %v, want [start]", got)
		}
	})
}

func TestLoopDebounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startLoop(t, 2*time.Second, time.Hour)

		h.events <- h.inside("k")
		time.Sleep(time.Second)
		// A later event does not push the reload back.
		h.events <- fsnotify.Event{Name: filepath.Join(h.dir, "..data"), Op: fsnotify.Create}
		time.Sleep(time.Second - time.Nanosecond)
		synctest.Wait()
		if n := h.r.count(TriggerEvent); n != 0 {
			t.Fatalf("%d event reloads before the debounce elapsed, want 0", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n := h.r.count(TriggerEvent); n != 1 {
			t.Fatalf("%d event reloads when the debounce elapsed, want 1", n)
		}

		// Events outside the directory (siblings seen through the parent
		// watch) do not schedule anything.
		h.events <- fsnotify.Event{Name: filepath.Join(filepath.Dir(h.dir), "sibling"), Op: fsnotify.Create}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := h.r.count(TriggerEvent); n != 1 {
			t.Errorf("%d event reloads after a sibling event, want 1", n)
		}

		// The next event starts a new debounce.
		h.events <- h.inside("k")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := h.r.count(TriggerEvent); n != 2 {
			t.Errorf("%d event reloads, want 2", n)
		}
	})
}

func TestLoopWatcherErrorSchedulesReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startLoop(t, 2*time.Second, time.Hour)
		h.errs <- fsnotify.ErrEventOverflow
		time.Sleep(2*time.Second - time.Nanosecond)
		synctest.Wait()
		if n := h.r.count(TriggerEvent); n != 0 {
			t.Fatalf("%d reloads before the debounce, want 0", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n := h.r.count(TriggerEvent); n != 1 {
			t.Errorf("%d reloads after a watcher overflow, want 1", n)
		}
	})
}

func TestLoopResync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startLoop(t, 2*time.Second, 30*time.Second)
		time.Sleep(30*time.Second - time.Nanosecond)
		synctest.Wait()
		if n := h.r.count(TriggerResync); n != 0 {
			t.Fatalf("%d resyncs before the interval, want 0", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n := h.r.count(TriggerResync); n != 1 {
			t.Fatalf("%d resyncs after the interval, want 1", n)
		}
		time.Sleep(60 * time.Second)
		synctest.Wait()
		if n := h.r.count(TriggerResync); n != 3 {
			t.Errorf("%d resyncs after 90s, want 3", n)
		}
	})
}

func TestLoopDirectoryEventWithoutWatcher(t *testing.T) {
	// An event on the directory itself (removed) with no fsnotify watcher
	// (resync-only mode) schedules a reload and does not crash.
	synctest.Test(t, func(t *testing.T) {
		h := startLoop(t, time.Second, time.Hour)
		if err := os.Remove(h.dir); err != nil {
			t.Fatal(err)
		}
		h.events <- fsnotify.Event{Name: h.dir, Op: fsnotify.Remove}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := h.r.count(TriggerEvent); n != 1 {
			t.Errorf("%d reloads after the directory was removed, want 1", n)
		}
	})
}
