package admin

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Probe authentication. A process that binds the admin port before BotBox
// (a squatter) can answer 200 to any probe; it cannot read the per-start key
// BotBox writes to a file in its own container. `botbox probe` sends a
// random nonce in ProbeNonceHeader and accepts the answer only when
// ProbeAuthHeader carries ProbeMAC(key, nonce, path, status) for the status
// it received (TestProbeAuth). Requests without a nonce are answered as
// before, without the header, so plain HTTP readiness checks keep working.
const (
	ProbeNonceHeader = "X-Botbox-Probe-Nonce"
	ProbeAuthHeader  = "X-Botbox-Probe-Auth"

	probeKeyBytes = 32
	// maxNonceLen bounds the work a request can ask for.
	maxNonceLen   = 128
	probeMACLabel = "botbox-probe-v1"
)

// NewProbeKey returns a random per-start key.
func NewProbeKey() ([]byte, error) {
	k := make([]byte, probeKeyBytes)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("generating the probe key: %w", err)
	}
	return k, nil
}

// ProbeMAC is hex(HMAC-SHA256(key, label|nonce|path|status)): binding the
// path and status means an answer cannot be replayed for another path or
// turned from 503 into 200.
func ProbeMAC(key []byte, nonce, path string, status int) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s\x00%s\x00%s\x00%d", probeMACLabel, nonce, path, status)
	return hex.EncodeToString(m.Sum(nil))
}

// VerifyProbe reports whether auth is the MAC of a response with status to
// a probe of path with nonce.
func VerifyProbe(key []byte, nonce, path string, status int, auth string) bool {
	want := ProbeMAC(key, nonce, path, status)
	return hmac.Equal([]byte(want), []byte(auth))
}

// DefaultProbeKeyFile is where `botbox run` writes its probe key, and
// `botbox probe` reads it, when no flag or BOTBOX_PROBE_KEY_FILE names a
// file: one file per instance, named by the metrics port (two BotBoxes in
// one network namespace cannot both bind it on loopback, and `botbox probe`
// knows it from its URL), in a directory only uid may use:
//
//	$XDG_RUNTIME_DIR/botbox/probe-PORT.key   when runtimeDir is absolute
//	TMPDIR/botbox-UID/probe-PORT.key         otherwise (tmpDir, e.g. /tmp)
//
// PrepareProbeKeyDir creates and checks that directory.
func DefaultProbeKeyFile(runtimeDir, tmpDir string, uid int, metricsPort uint16) string {
	name := fmt.Sprintf("probe-%d.key", metricsPort)
	if filepath.IsAbs(runtimeDir) {
		return filepath.Join(runtimeDir, "botbox", name)
	}
	return filepath.Join(tmpDir, fmt.Sprintf("botbox-%d", uid), name)
}

// PrepareProbeKeyDir makes dir (mode 0700) unless it exists, and refuses a
// dir that another user could write to or swap: it must be a real
// directory (not a symlink), owned by uid, with no group or other
// permissions. In a world-writable parent such as /tmp another user can
// create the name first; BotBox then fails closed rather than writing its
// key where that user can replace it (TestPrepareProbeKeyDir).
func PrepareProbeKeyDir(dir string, uid int) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("making the probe key directory %s (set BOTBOX_PROBE_KEY_FILE to a writable path): %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("probe key directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("probe key directory %s is not a directory (%v); remove it, or set BOTBOX_PROBE_KEY_FILE", dir, fi.Mode().Type())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != uid {
		owner := -1
		if ok {
			owner = int(st.Uid)
		}
		return fmt.Errorf("probe key directory %s is owned by UID %d, not %d (another user made it?); remove it, or set BOTBOX_PROBE_KEY_FILE", dir, owner, uid)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("probe key directory %s has mode %04o; want 0700 (chmod 0700 %s)", dir, fi.Mode().Perm(), dir)
	}
	return nil
}

// WrittenProbeKey is the file WriteProbeKey wrote: its path, the key it
// holds and its identity (device and inode), so that Remove deletes that
// file and never one another process put at the same path.
type WrittenProbeKey struct {
	path     string
	contents []byte
	dev, ino uint64
}

// WriteProbeKey writes key (hex) to path with mode 0400, atomically: a
// reader sees the old file or the new one, never a partial key. The
// directory must exist.
func WriteProbeKey(path string, key []byte) (*WrittenProbeKey, error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".botbox-probe-key-*")
	if err != nil {
		return nil, fmt.Errorf("writing the probe key in %s (set --probe-key-file to a writable path): %w", dir, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	w := &WrittenProbeKey{path: path, contents: []byte(hex.EncodeToString(key) + "\n")}
	if err := f.Chmod(0o400); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing the probe key: %w", err)
	}
	if _, err := f.Write(w.contents); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing the probe key: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("writing the probe key: %w", err)
	}
	w.dev, w.ino = fileID(fi)
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("writing the probe key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("writing the probe key to %s: %w", path, err)
	}
	return w, nil
}

// Remove deletes the key file if the path still names the file
// WriteProbeKey wrote (same device and inode) holding the same contents;
// removed is false, with no error, when the file is gone or another
// process replaced it (which is then left in place). A replacement in the
// instant between the check and the unlink is the one window left.
func (w *WrittenProbeKey) Remove() (removed bool, err error) {
	fi, err := os.Lstat(w.path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("removing the probe key: %w", err)
	}
	if dev, ino := fileID(fi); !fi.Mode().IsRegular() || dev != w.dev || ino != w.ino {
		return false, nil
	}
	b, err := os.ReadFile(w.path)
	if err != nil || !bytes.Equal(b, w.contents) {
		return false, nil
	}
	if err := os.Remove(w.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("removing the probe key: %w", err)
	}
	return true, nil
}

// Path is the file's path.
func (w *WrittenProbeKey) Path() string { return w.path }

// fileID is fi's device and inode (zero where the platform has none).
func fileID(fi fs.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), st.Ino
	}
	return 0, 0
}

// ReadProbeKey reads a key written by WriteProbeKey.
func ReadProbeKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the probe key (is BotBox running in this container?): %w", err)
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != probeKeyBytes {
		return nil, errors.New("reading the probe key: " + path + " does not hold a BotBox probe key")
	}
	return k, nil
}

// validNonce accepts 1 to maxNonceLen printable ASCII characters.
func validNonce(n string) bool {
	if n == "" || len(n) > maxNonceLen {
		return false
	}
	for i := 0; i < len(n); i++ {
		if n[i] <= ' ' || n[i] > '~' {
			return false
		}
	}
	return true
}

// probeAuthWriter adds ProbeAuthHeader for the status actually written.
type probeAuthWriter struct {
	http.ResponseWriter
	key         []byte
	nonce, path string
	wrote       bool
}

func (w *probeAuthWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		w.Header().Set(ProbeAuthHeader, ProbeMAC(w.key, w.nonce, w.path, code))
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *probeAuthWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *probeAuthWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
