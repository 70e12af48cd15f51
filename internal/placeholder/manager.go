package placeholder

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/botbox/botbox/internal/secretref"
	"github.com/botbox/botbox/internal/telemetry"
)

// File names in the directory besides the per-secret_ref files.
const (
	// EnvFile holds one NAME=placeholder line per secret_ref.
	EnvFile = "env"
	// KeyFile holds the per-Pod derivation key (a dotfile: never a
	// secret_ref, which cannot start with '.').
	KeyFile = ".key"
	keyLen  = 32
)

// maxRetired bounds the placeholders kept per secret_ref from shapes the
// secret no longer has.
const maxRetired = 4

// Options configures Open.
type Options struct {
	// Dir is placeholders.dir. It is created (0755: the app reads it) if
	// missing.
	Dir string
	// Logger receives WARN lines naming secret_refs that get no
	// placeholder (nil discards them).
	Logger *slog.Logger
}

// Manager owns the placeholder directory and publishes the current Table.
// Its methods are safe for concurrent use.
type Manager struct {
	dir   string
	key   []byte
	log   *slog.Logger
	table atomic.Pointer[Table]

	mu      sync.Mutex          // serialises Update
	refs    []string            // the refs of the last Update
	written map[string]string   // file name → content this process wrote
	retired map[string][]string // ref → earlier placeholders, newest first
	current map[string]string   // ref → current placeholder
	warned  map[string]string   // ref → reason last warned
	aliases map[string]string   // extra env name → ref (SetAliases)
}

// Open creates dir if needed and loads its key, or makes one. A key file
// that is not a regular file of 32 bytes, is not owned by this process's
// user or is readable or writable by anyone else is an error: the
// derivation key is BotBox's alone.
func Open(opts Options) (*Manager, error) {
	if opts.Dir == "" {
		return nil, errors.New("placeholders directory is not set")
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating placeholders directory: %w", err)
	}
	key, err := loadKey(opts.Dir)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		dir: opts.Dir, key: key, log: opts.Logger,
		written: map[string]string{}, retired: map[string][]string{},
		current: map[string]string{}, warned: map[string]string{},
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.table.Store(NewTable(nil))
	return m, nil
}

func loadKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, KeyFile)
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		key := make([]byte, keyLen)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("making the placeholder key: %w", err)
		}
		if err := writeAtomic(dir, KeyFile, key, 0o600); err != nil {
			return nil, fmt.Errorf("writing the placeholder key: %w", err)
		}
		return key, nil
	case err != nil:
		return nil, fmt.Errorf("reading the placeholder key: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() != keyLen {
		return nil, fmt.Errorf("placeholder key %s is not a regular file of %d bytes; remove it to make a new one", path, keyLen)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("placeholder key %s has mode %v, want 0600; remove it to make a new one", path, fi.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("placeholder key %s is owned by uid %d, not BotBox's %d; remove it to make a new one", path, st.Uid, os.Geteuid())
	}
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the placeholder key: %w", err)
	}
	if len(key) != keyLen {
		return nil, fmt.Errorf("placeholder key %s changed while read", path)
	}
	return key, nil
}

// writeAtomic writes name in dir through a temporary file and a rename,
// so that a reader sees the old content or the new one, never a mix.
func writeAtomic(dir, name string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// Dir is the directory the Manager writes.
func (m *Manager) Dir() string { return m.dir }

// Table returns the placeholders in force. It never returns nil.
func (m *Manager) Table() *Table { return m.table.Load() }

// InspectName is Table().InspectName: the hook for a DNS guard.
func (m *Manager) InspectName(name string) (secretRef string, found bool) {
	return m.Table().InspectName(name)
}

// Update derives the placeholder of every ref from the value's shape in
// lookup, rewrites the files whose content changed and publishes the new
// Table. A ref whose secret is missing keeps the placeholder it had (the
// app may already use it); a ref whose value's shape is too weak gets none
// (WARN, once per cause). A placeholder replaced by a shape change, and the
// placeholder of a ref no longer in refs, stay in the table as not current
// (they still swap and trip) and their files are updated or removed. The
// table is published even when a write fails; the error names the file.
func (m *Manager) Update(refs []string, lookup Lookup) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.update(refs, lookup)
}

// SetAliases sets extra env-file names for the placeholders of some refs
// (env name → ref): the AWS SDKs read AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY whatever the refs are called
// (config.PlaceholderAliases). A name that is a ref's own env name, or
// whose ref has no placeholder, is not written. It takes effect at the
// next Update or Refresh.
func (m *Manager) SetAliases(aliases map[string]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.aliases = maps.Clone(aliases)
}

// Refresh is Update with the refs of the last Update: what a secret
// rotation calls.
func (m *Manager) Refresh(lookup Lookup) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.update(m.refs, lookup)
}

func (m *Manager) update(refs []string, lookup Lookup) error {
	refs = slices.Compact(slices.Sorted(slices.Values(refs)))
	m.refs = refs
	next := map[string]string{}
	for _, ref := range refs {
		if !secretref.Valid(ref) || ref == EnvFile {
			continue // config validation refuses these
		}
		v, ok := lookupValue(lookup, ref)
		if !ok {
			if p, had := m.current[ref]; had {
				next[ref] = p
			}
			continue
		}
		p, err := Derive(m.key, ref, v)
		if err != nil {
			if m.warned[ref] != err.Error() {
				m.warned[ref] = err.Error()
				m.log.Warn("secret gets no placeholder", slog.String(telemetry.KeySecretRef, ref), slog.String(telemetry.KeyError, err.Error()))
			}
			continue
		}
		delete(m.warned, ref)
		next[ref] = p
	}
	for ref, p := range m.current {
		if next[ref] != p {
			m.retire(ref, p)
		}
	}
	m.current = next

	var errs []error
	var env bytes.Buffer
	for _, ref := range refs {
		p, ok := next[ref]
		if !ok {
			continue
		}
		env.WriteString(secretref.EnvName(ref) + "=" + shellQuote(p) + "\n")
		if err := m.write(ref, p); err != nil {
			errs = append(errs, err)
		}
	}
	own := map[string]bool{}
	for _, ref := range refs {
		own[secretref.EnvName(ref)] = true
	}
	for _, name := range slices.Sorted(maps.Keys(m.aliases)) {
		if p, ok := next[m.aliases[name]]; ok && !own[name] {
			env.WriteString(name + "=" + shellQuote(p) + "\n")
		}
	}
	if err := m.write(EnvFile, env.String()); err != nil {
		errs = append(errs, err)
	}
	for name := range m.written {
		if _, ok := next[name]; ok || name == EnvFile {
			continue
		}
		if err := os.Remove(filepath.Join(m.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing placeholder file %s: %w", name, err))
			continue
		}
		delete(m.written, name)
	}
	m.table.Store(NewTable(m.entries()))
	return errors.Join(errs...)
}

func lookupValue(lookup Lookup, ref string) ([]byte, bool) {
	if lookup == nil {
		return nil, false
	}
	v, ok := lookup.Lookup(ref)
	if !ok {
		return nil, false
	}
	return v.Reveal(), true
}

func (m *Manager) retire(ref, p string) {
	r := slices.DeleteFunc(m.retired[ref], func(s string) bool { return s == p })
	r = slices.Insert(r, 0, p)
	if len(r) > maxRetired {
		r = r[:maxRetired]
	}
	m.retired[ref] = r
}

// entries lists current and retired placeholders, sorted by ref, current
// first.
func (m *Manager) entries() []Entry {
	var out []Entry
	refs := map[string]bool{}
	for ref := range m.current {
		refs[ref] = true
	}
	for ref := range m.retired {
		refs[ref] = true
	}
	for _, ref := range slices.Sorted(func(yield func(string) bool) {
		for r := range refs {
			if !yield(r) {
				return
			}
		}
	}) {
		cur, ok := m.current[ref]
		if ok {
			out = append(out, Entry{Ref: ref, Placeholder: cur, Current: true})
		}
		for _, p := range m.retired[ref] {
			if p != cur {
				out = append(out, Entry{Ref: ref, Placeholder: p})
			}
		}
	}
	return out
}

// write writes one file (0444) when its content differs from what is on
// disk.
func (m *Manager) write(name, content string) error {
	if m.written[name] == content {
		return nil
	}
	path := filepath.Join(m.dir, name)
	if old, err := os.ReadFile(path); err == nil && string(old) == content {
		if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm() == 0o444 {
			m.written[name] = content
			return nil
		}
	}
	if err := writeAtomic(m.dir, name, []byte(content), 0o444); err != nil {
		return fmt.Errorf("writing placeholder file %s: %w", name, err)
	}
	m.written[name] = content
	return nil
}

// shellQuote returns s as is when a POSIX shell reads it literally,
// else single-quoted.
func shellQuote(s string) string {
	safe := s != ""
	for i := 0; i < len(s) && safe; i++ {
		c := s[i]
		safe = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("-_.,:/+=@%", c) >= 0
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
