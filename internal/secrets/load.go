package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

// maxFileSize is the largest secret file accepted (exactly 1 MiB is fine).
const maxFileSize = 1 << 20

var (
	// errDirMissing reports that the secret directory does not exist.
	errDirMissing = errors.New("secrets directory does not exist")
	errNotRegular = errors.New("not a regular file")
	errTooLarge   = errors.New("file exceeds the 1 MiB limit")
	errNotUTF8    = errors.New("content is not valid UTF-8")
)

// loadDir reads every secret in dir. Problems with single files are logged
// and skipped; a key whose file exists but cannot be used keeps its value
// from prev (last-known-good). The returned error is errDirMissing (wrapped)
// when dir does not exist, or a failure to open or list the directory.
func loadDir(dir string, prev *Snapshot, log *slog.Logger) (map[string]Value, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("opening %q: %w", dir, errDirMissing)
		}
		return nil, fmt.Errorf("opening secrets directory: %w", err)
	}
	defer root.Close()

	d, err := root.Open(".")
	if err != nil {
		return nil, fmt.Errorf("opening secrets directory: %w", err)
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("listing secrets directory: %w", err)
	}

	values := make(map[string]Value, len(entries))
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			// Dotfiles and the Kubernetes bookkeeping entries (..data,
			// ..2024_01_01_xx, ..data_tmp) are not keys.
			continue
		}
		if !utf8.ValidString(name) {
			log.Warn("skipping secret file with a non-UTF-8 name", "name", strconv.Quote(name))
			continue
		}
		b, err := readSecret(root, name)
		if err == nil {
			values[name] = NewValue(b)
			continue
		}
		if errors.Is(err, errNotRegular) {
			// Directories, FIFOs, sockets and devices are not secrets.
			log.Debug("skipping non-regular file in secrets directory", "key", name)
			continue
		}
		if rerr, ok := errors.AsType[*resolveError](err); ok {
			isLink := e.Type()&fs.ModeSymlink != 0
			var errno syscall.Errno
			switch {
			case errors.Is(rerr, fs.ErrNotExist) || errors.Is(rerr, syscall.ELOOP) || errors.Is(rerr, syscall.ENOTDIR):
				// A regular file that vanished since the listing was
				// deleted; a symlink that does not resolve is dangling
				// (in Kubernetes, briefly, a key being removed). Either
				// way the key is gone.
				if isLink {
					log.Warn("skipping unresolvable path in secrets directory", "key", name, "error", rerr.err)
				}
				continue
			case isLink && !errors.As(rerr, &errno):
				// os.Root refuses the link with its own, non-errno
				// error: it leads outside the directory (or is
				// absolute). Never fall back to an old value: the
				// target is not ours to read.
				log.Warn("skipping symlink that escapes secrets directory", "key", name, "error", rerr.err)
				continue
			}
		}
		// The file is there but cannot be used right now: keep the last
		// value that could. The error names the file, never its contents.
		msg := "skipping unreadable secret file"
		switch {
		case errors.Is(err, errTooLarge):
			msg = "skipping oversized secret file"
		case errors.Is(err, errNotUTF8):
			msg = "skipping secret file that is not valid UTF-8"
		}
		old, kept := prev.Lookup(name)
		if kept {
			values[name] = old
		}
		log.Warn(msg, "key", name, "error", err, "kept_previous_value", kept)
	}
	return values, nil
}

// resolveError is a failure to resolve a directory entry to a file (as
// opposed to reading or parsing the file).
type resolveError struct{ err error }

func (e *resolveError) Error() string { return e.err.Error() }
func (e *resolveError) Unwrap() error { return e.err }

// readSecret reads and parses the regular file name inside root, following
// symlinks only while they stay inside root.
func readSecret(root *os.Root, name string) ([]byte, error) {
	fi, err := root.Stat(name)
	if err != nil {
		return nil, &resolveError{err}
	}
	if !fi.Mode().IsRegular() {
		return nil, errNotRegular
	}
	if fi.Size() > maxFileSize {
		return nil, fmt.Errorf("%w (%d bytes)", errTooLarge, fi.Size())
	}
	// O_NONBLOCK: if the entry was swapped for a FIFO since Stat, opening it
	// must not hang the reload waiting for a writer. It has no effect on
	// regular files.
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errNotRegular
	}
	// The file may have grown since Stat: never read more than the limit + 1.
	raw, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	if len(raw) > maxFileSize {
		return nil, fmt.Errorf("%w (more than %d bytes)", errTooLarge, maxFileSize)
	}
	v, err := parseSecretFile(raw)
	if err != nil {
		return nil, err
	}
	// A right-sized copy, so the value does not pin ReadAll's spare capacity.
	return bytes.Clone(v), nil
}

// parseSecretFile turns file content into a secret value: the content must
// be valid UTF-8, and exactly one trailing "\r\n" or "\n" is removed (files
// written by editors and `echo` end in one; a CRLF file would otherwise make
// an invalid header value). The result aliases data.
func parseSecretFile(data []byte) ([]byte, error) {
	if !utf8.Valid(data) {
		return nil, errNotUTF8
	}
	if v, ok := bytes.CutSuffix(data, []byte("\r\n")); ok {
		return v, nil
	}
	v, _ := bytes.CutSuffix(data, []byte("\n"))
	return v, nil
}
