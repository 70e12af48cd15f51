// Package volwatch watches one directory the way a Kubernetes volume
// (Secret or ConfigMap) changes, and tells its owner when to reload it.
//
// Kubernetes updates such a volume by writing a new timestamped directory
// and renaming a "..data_tmp" symlink over "..data"; the visible files are
// symlinks through ..data. Watching the files themselves misses that swap,
// so Run watches the directory: any event inside it schedules one reload
// after Options.Debounce (events during the wait fold into that reload,
// later ones do not push it back), and every Options.Resync the owner
// reloads regardless, which catches whatever the events missed.
//
// The watch survives the directory being created late (Run watches the
// parent until it appears, and retries on every resync when the parent is
// missing too) and being removed, renamed away or replaced (Run re-attaches
// to the new directory). If fsnotify cannot be started at all, Run logs an
// error and relies on the resync alone.
//
// The package reads no file: what a reload means is the owner's business
// (package secrets reloads its secret directory; a config reload can watch
// the ConfigMap directory holding the config file). Logs name directories,
// never file contents.
//
// Typical use:
//
//	err := volwatch.Run(ctx, volwatch.Options{
//		Dir: dir, Debounce: 2 * time.Second, Resync: 30 * time.Second,
//		Logger: logger, Reload: func(trigger string) { store.reload(trigger) },
//	})
package volwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Triggers passed to Options.Reload.
const (
	// TriggerStart: the watch is in place; reload to pick up whatever
	// changed before it was.
	TriggerStart = "start"
	// TriggerEvent: a file event (or a watcher error, which means events
	// were lost) was followed by the debounce delay.
	TriggerEvent = "event"
	// TriggerResync: the periodic resync.
	TriggerResync = "resync"
)

// Options configures Run. Every field but Logger is required.
type Options struct {
	// Dir is the watched directory. A relative path is made absolute. It
	// need not exist yet.
	Dir string
	// Debounce is the delay between the first event of a burst and the
	// reload (> 0).
	Debounce time.Duration
	// Resync is the interval of the unconditional reload, which also
	// re-attaches the watch when the directory appeared or was replaced
	// unseen (> 0).
	Resync time.Duration
	// Logger receives the watch's logs (nil discards them).
	Logger *slog.Logger
	// Reload is called on Run's goroutine, never concurrently with itself:
	// once at start (TriggerStart), then per debounced burst (TriggerEvent)
	// and per resync (TriggerResync). Run waits for it to return.
	Reload func(trigger string)
}

// Run watches o.Dir and calls o.Reload until ctx is done, then returns nil.
// It returns an error only for invalid options.
func Run(ctx context.Context, o Options) error {
	switch {
	case o.Dir == "":
		return errors.New("volwatch: Dir is required")
	case o.Debounce <= 0 || o.Resync <= 0:
		return fmt.Errorf("volwatch: Debounce (%v) and Resync (%v) must be positive", o.Debounce, o.Resync)
	case o.Reload == nil:
		return errors.New("volwatch: Reload is required")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return fmt.Errorf("volwatch: resolving %q: %w", o.Dir, err)
	}
	o.Dir = dir
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	dw := &dirWatch{dir: dir, parent: filepath.Dir(dir), log: o.Logger}
	var (
		events <-chan fsnotify.Event
		errs   <-chan error
	)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		o.Logger.Error("failed to start file watcher, relying on periodic resync",
			"dir", dir, "error", err, "resync", o.Resync.String())
	} else {
		defer w.Close() // also ends fsnotify's reader goroutine
		dw.w = w
		events, errs = w.Events, w.Errors
	}
	loop(ctx, o, dw, events, errs)
	return nil
}

// loop is Run's event loop. events and errs may be nil (no watcher); tests
// feed them by hand.
func loop(ctx context.Context, o Options, dw *dirWatch, events <-chan fsnotify.Event, errs <-chan error) {
	dw.attach()
	o.Reload(TriggerStart)

	debounce := time.NewTimer(o.Debounce)
	debounce.Stop()
	defer debounce.Stop()
	var pending <-chan time.Time // debounce.C while a reload is scheduled
	schedule := func() {
		if pending == nil {
			debounce.Reset(o.Debounce)
			pending = debounce.C
		}
	}
	resync := time.NewTicker(o.Resync)
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
			o.Logger.Warn("file watcher error, scheduling a reload", "dir", dw.dir, "error", err)
			schedule()
		case <-pending:
			pending = nil
			o.Reload(TriggerEvent)
		case <-resync.C:
			dw.ensure()
			o.Reload(TriggerResync)
		}
	}
}

// dirWatch keeps an fsnotify watch on the directory across the directory
// appearing, disappearing and being replaced. While the directory is
// missing it watches the parent, so that the directory's creation is an
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
		d.log.Debug("cannot watch parent of watched directory, relying on periodic resync",
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
		d.log.Warn("cannot watch directory, relying on periodic resync", "dir", d.dir, "error", err)
		return false
	}
	d.attached = fi
	if d.parentWatched {
		_ = d.w.Remove(d.parent) // best effort; its events are filtered anyway
		d.parentWatched = false
	}
	d.log.Info("file watcher started", "dir", d.dir)
	return true
}

func (d *dirWatch) detach() {
	if d.attached == nil {
		return
	}
	d.attached = nil
	if d.w != nil {
		// The kernel usually dropped the watch with the directory already.
		_ = d.w.Remove(d.dir)
	}
	d.log.Info("file watcher lost the directory, waiting for it to reappear", "dir", d.dir)
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
