package secrets

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Run keeps the store in sync with its directory until ctx is done, then
// returns nil. It returns an error only if the store is already running.
//
// Any event inside the directory schedules one reload after Options.Debounce;
// every Options.Resync the whole directory is re-read regardless. If the
// directory does not exist, Run watches its parent for it to appear (and
// retries on every resync); if it is removed or replaced, Run re-attaches to
// the new one. If fsnotify cannot be started at all, Run logs an error and
// relies on the periodic resync alone.
func (s *Store) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("secrets store is already running")
	}
	defer s.running.Store(false)

	dw := &dirWatch{dir: s.dir, parent: filepath.Dir(s.dir), log: s.log}
	var (
		events <-chan fsnotify.Event
		errs   <-chan error
	)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Error("failed to start secret watcher, relying on periodic resync",
			"error", err, "resync", s.resync.String())
	} else {
		defer w.Close() // also ends fsnotify's reader goroutine
		dw.w = w
		events, errs = w.Events, w.Errors
	}
	s.watchLoop(ctx, dw, events, errs)
	return nil
}

// watchLoop is Run's event loop. It is the only writer of the store while it
// runs. events and errs may be nil (no watcher).
func (s *Store) watchLoop(ctx context.Context, dw *dirWatch, events <-chan fsnotify.Event, errs <-chan error) {
	dw.attach()
	// Pick up whatever changed between Open and the watch being in place.
	s.reload("start")

	debounce := time.NewTimer(s.debounce)
	debounce.Stop()
	defer debounce.Stop()
	var pending <-chan time.Time // debounce.C while a reload is scheduled
	schedule := func() {
		if pending == nil {
			debounce.Reset(s.debounce)
			pending = debounce.C
		}
	}
	resync := time.NewTicker(s.resync)
	defer resync.Stop()

	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if dw.handle(ev) {
				schedule()
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			// Typically a queue overflow: events were lost, so reload.
			s.log.Warn("secret watcher error, scheduling a reload", "error", err)
			schedule()
		case <-pending:
			pending = nil
			s.log.Info("reloading secrets due to file change")
			s.reload("event")
		case <-resync.C:
			dw.ensure()
			s.reload("resync")
		}
	}
}

// dirWatch keeps an fsnotify watch on the secret directory across the
// directory appearing, disappearing and being replaced. While the directory
// is missing it watches the parent, so that the directory's creation is an
// event; the periodic resync calls ensure as a fallback for everything else
// (a missing parent, a replaced directory whose events were lost).
type dirWatch struct {
	w      *fsnotify.Watcher // nil: no watching, resync only
	dir    string            // absolute
	parent string            // filepath.Dir(dir)
	log    *slog.Logger

	attached      os.FileInfo // the directory the watch is on; nil if none
	parentWatched bool
}

// attach watches the directory if it exists, the parent otherwise. It
// reports whether the directory is watched.
func (d *dirWatch) attach() bool {
	if d.w == nil {
		return false
	}
	if d.attachDir() {
		return true
	}
	if d.parentWatched || d.parent == d.dir {
		return false
	}
	if err := d.w.Add(d.parent); err != nil {
		d.log.Debug("cannot watch parent of secrets directory, relying on periodic resync",
			"dir", d.parent, "error", err)
		return false
	}
	d.parentWatched = true
	// The directory may have appeared between the two attempts.
	return d.attachDir()
}

func (d *dirWatch) attachDir() bool {
	// Stat before Add: if the directory is swapped in between, the recorded
	// identity is the old one and ensure re-attaches on the next resync.
	fi, err := os.Stat(d.dir)
	if err != nil || !fi.IsDir() {
		return false
	}
	if err := d.w.Add(d.dir); err != nil {
		d.log.Warn("cannot watch secrets directory, relying on periodic resync", "dir", d.dir, "error", err)
		return false
	}
	d.attached = fi
	if d.parentWatched {
		_ = d.w.Remove(d.parent) // best effort; its events are filtered anyway
		d.parentWatched = false
	}
	d.log.Info("secret file watcher started", "dir", d.dir)
	return true
}

func (d *dirWatch) detach() {
	if d.attached == nil {
		return
	}
	d.attached = nil
	// The kernel usually dropped the watch with the directory already.
	_ = d.w.Remove(d.dir)
	d.log.Info("secret file watcher lost the directory, waiting for it to reappear", "dir", d.dir)
}

// handle updates the watch for ev and reports whether ev calls for a reload.
func (d *dirWatch) handle(ev fsnotify.Event) bool {
	switch {
	case ev.Name == d.dir:
		// The directory itself: removed or renamed away (from its own
		// watch or the parent's), or created (from the parent's).
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			d.detach()
		}
		if d.attached == nil {
			d.attach()
		}
		return true
	case filepath.Dir(ev.Name) == d.dir:
		// Any change inside, including Kubernetes' rename of ..data_tmp
		// over ..data.
		return true
	default:
		// A sibling in the parent directory.
		return false
	}
}

// ensure re-attaches the watch if the directory is not watched or is no
// longer the one being watched.
func (d *dirWatch) ensure() {
	if d.w == nil {
		return
	}
	if d.attached != nil {
		fi, err := os.Stat(d.dir)
		if err == nil && os.SameFile(fi, d.attached) {
			return
		}
		d.detach()
	}
	d.attach()
}
