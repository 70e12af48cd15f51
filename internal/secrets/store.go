package secrets

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botbox/botbox/internal/secretref"
)

const (
	defaultDebounce = 2 * time.Second
	defaultResync   = 30 * time.Second
)

// Options configures a [Store]. Dir is required; the other fields are optional.
type Options struct {
	// Dir is the secret directory, normally a Kubernetes Secret volume. Each
	// regular file directly inside it is one secret: the file name is the key,
	// the content the value. A relative path is made absolute at Open. The
	// directory need not exist yet.
	Dir string

	// Required lists the keys that must be present for the store to be ready
	// (config.Config.RequiredSecretRefs). Order and duplicates do not matter.
	// A key that could never be loaded (empty, containing "/" or a NUL byte,
	// starting with ".") is an error.
	Required []string

	// Debounce is how long Run waits after the first file event before it
	// reloads; events during the wait are folded into that one reload.
	// Zero means 2s. Negative is an error.
	Debounce time.Duration

	// Resync is the interval of Run's periodic full reload, which catches
	// changes no event reported and re-attaches the watch if the directory
	// was missing or replaced. Zero means 30s. Negative is an error.
	Resync time.Duration

	// Logger receives the store's logs, which name keys and never values.
	// Nil discards them.
	Logger *slog.Logger

	// OnReady, if not nil, is called once at the end of Open with the initial
	// readiness, then with the new readiness on every transition, right after
	// the reload that caused it. Calls never overlap; they run on the
	// goroutine of Open or Run and must not block.
	OnReady func(ready bool)

	// OnChange, if not nil, is called after every reload by Run that
	// published a new snapshot (a secret added, changed or removed), on
	// Run's goroutine, after OnReady. Calls never overlap and must not
	// block for long (package placeholder rewrites its files there).
	OnChange func()
}

// Store is a live, read-mostly view of a secret directory, made by [Open].
// Its methods are safe for concurrent use; readers never wait for a reload.
type Store struct {
	dir      string // absolute
	required []string
	debounce time.Duration
	resync   time.Duration
	log      *slog.Logger
	onReady  func(bool)
	onChange func()

	snap    atomic.Pointer[Snapshot] // never nil after Open
	running atomic.Bool              // Run is active

	// reloadMu serialises writers (Open and Run). Readers never take it.
	reloadMu   sync.Mutex
	ready      bool // last readiness reported to onReady
	dirMissing bool // the last load found no directory
}

// Open validates opts and loads the directory once. A missing directory is
// not an error: the store starts empty (and not ready if keys are required)
// and Run picks the directory up when it appears. A directory that exists
// but cannot be opened or listed is an error.
func Open(opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, errors.New("secrets directory is not set")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving secrets directory %q: %w", opts.Dir, err)
	}
	if opts.Debounce < 0 {
		return nil, fmt.Errorf("secrets reload debounce %v is negative", opts.Debounce)
	}
	if opts.Resync < 0 {
		return nil, fmt.Errorf("secrets resync interval %v is negative", opts.Resync)
	}
	required, err := requiredSet(opts.Required)
	if err != nil {
		return nil, err
	}
	s := &Store{
		dir:      dir,
		required: required,
		debounce: cmp.Or(opts.Debounce, defaultDebounce),
		resync:   cmp.Or(opts.Resync, defaultResync),
		log:      opts.Logger,
		onReady:  opts.OnReady,
		onChange: opts.OnChange,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.onReady == nil {
		s.onReady = func(bool) {}
	}

	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	empty := newSnapshot(nil, s.required)
	values, err := loadDir(s.dir, empty, s.log)
	switch {
	case errors.Is(err, errDirMissing):
		s.dirMissing = true
		s.log.Warn("secrets directory does not exist, starting with empty secrets", "dir", s.dir)
	case err != nil:
		return nil, err
	}
	s.snap.Store(empty)
	s.publish(values)

	s.ready = s.Ready()
	if s.ready {
		s.log.Info("all required secrets loaded, system ready")
	} else {
		s.log.Warn("required secrets not yet available, /healthz will return 503", "missing", s.Missing())
	}
	s.onReady(s.ready)
	return s, nil
}

// requiredSet sorts and deduplicates keys, refusing a key that could never
// be loaded from a directory.
func requiredSet(keys []string) ([]string, error) {
	required := slices.Compact(slices.Sorted(slices.Values(keys)))
	for _, k := range required {
		if !secretref.Valid(k) {
			return nil, fmt.Errorf("required secret key %q is not %s", k, secretref.Rule)
		}
	}
	return required, nil
}

// SetRequired replaces the required keys, as a configuration reload that
// adds or drops a secret_ref does. Readiness is recomputed at once against
// the current snapshot (no directory read) and, if it changed, reported
// through Options.OnReady before SetRequired returns, as a reload would.
// Keys are checked as Options.Required is at Open; on error nothing
// changes. It is safe to call while Run is active.
func (s *Store) SetRequired(keys []string) error {
	required, err := requiredSet(keys)
	if err != nil {
		return err
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if slices.Equal(required, s.required) {
		return nil
	}
	s.required = required
	s.snap.Store(newSnapshot(s.snap.Load().values, required))
	s.log.Info("required secrets changed", "required", required)
	s.reportReadiness()
	return nil
}

// reportReadiness logs and reports a readiness transition. reloadMu must be
// held.
func (s *Store) reportReadiness() {
	ready := s.Ready()
	if ready == s.ready {
		return
	}
	s.ready = ready
	if ready {
		s.log.Info("all required secrets now available, system ready")
	} else {
		s.log.Warn("required secrets became unavailable, /healthz will return 503", "missing", s.Missing())
	}
	s.onReady(ready)
}

// Snapshot returns the current secrets. It never returns nil. Take one per
// request and use it throughout, so the request sees one consistent set.
func (s *Store) Snapshot() *Snapshot { return s.snap.Load() }

// Ready reports whether every required key is present in the current snapshot.
func (s *Store) Ready() bool { return len(s.snap.Load().missing) == 0 }

// Missing returns the required keys absent from the current snapshot, sorted.
func (s *Store) Missing() []string { return slices.Clone(s.snap.Load().missing) }

// reload re-reads the directory and publishes the result. trigger says why,
// for the logs. It is called from Run's goroutine (and tests).
func (s *Store) reload(trigger string) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	s.log.Debug("reloading secrets", "trigger", trigger)
	values, err := loadDir(s.dir, s.snap.Load(), s.log)
	switch {
	case errors.Is(err, errDirMissing):
		// Fail safe for availability: a directory that vanishes as a unit
		// (unmounted, renamed away, about to be replaced) must not drop
		// every credential at once. Keep serving the last-known-good
		// snapshot until the directory is back.
		if !s.dirMissing {
			s.dirMissing = true
			s.log.Warn("secrets directory disappeared, keeping last known values", "dir", s.dir)
		}
		return
	case err != nil:
		s.log.Warn("failed to reload secrets, keeping previous values", "dir", s.dir, "error", err)
		return
	}
	if s.dirMissing {
		s.dirMissing = false
		s.log.Info("secrets directory is present", "dir", s.dir)
	}
	if !s.publish(values) {
		return
	}
	s.log.Info("secrets reloaded successfully", "trigger", trigger, "keys", s.Snapshot().keys)
	s.reportReadiness()
	if s.onChange != nil {
		s.onChange()
	}
}

// publish swaps in a snapshot of values if it differs from the current one,
// logging added, changed and removed keys. Unchanged values are shared with
// the previous snapshot. It reports whether anything changed.
func (s *Store) publish(values map[string]Value) bool {
	prev := s.snap.Load()
	changed := false
	for _, k := range prev.keys {
		if _, ok := values[k]; !ok {
			s.log.Info("removed secret", "key", k)
			changed = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(values)) {
		v := values[k]
		old, ok := prev.values[k]
		if ok && bytes.Equal(old.Reveal(), v.Reveal()) {
			values[k] = old
			continue
		}
		s.log.Info("loaded secret", "key", k)
		changed = true
	}
	if changed {
		s.snap.Store(newSnapshot(values, s.required))
	}
	return changed
}
