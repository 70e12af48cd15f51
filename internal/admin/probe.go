package admin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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

// WriteProbeKey writes key (hex) to path with mode 0400, atomically: a
// reader sees the old file or the new one, never a partial key. The
// directory must exist.
func WriteProbeKey(path string, key []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".botbox-probe-key-*")
	if err != nil {
		return fmt.Errorf("writing the probe key in %s (set --probe-key-file to a writable path): %w", dir, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if err := f.Chmod(0o400); err != nil {
		f.Close()
		return fmt.Errorf("writing the probe key: %w", err)
	}
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("writing the probe key: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the probe key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing the probe key to %s: %w", path, err)
	}
	return nil
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
