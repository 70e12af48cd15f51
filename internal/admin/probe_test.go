package admin

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestProbeAuth: a probe with a nonce gets a MAC bound to the nonce, the
// path and the status; a request without a nonce gets none (plain HTTP
// readiness checks are unchanged).
func TestProbeAuth(t *testing.T) {
	key, err := NewProbeKey()
	if err != nil {
		t.Fatal(err)
	}
	var ready atomic.Bool
	srv := httptest.NewServer(NewHandler(prometheus.NewRegistry(), ready.Load, key))
	defer srv.Close()
	get := func(path, nonce string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if nonce != "" {
			req.Header.Set(ProbeNonceHeader, nonce)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	tests := []struct {
		path, nonce string
		ready       bool
		status      int
	}{
		{"/healthz", "n1", false, 503},
		{"/healthz", "n2", true, 200},
		{"/readyz", "n3", true, 200},
		{"/metrics", "n4", true, 200},
		{"/nope", "n5", true, 404},
	}
	for _, tt := range tests {
		ready.Store(tt.ready)
		resp := get(tt.path, tt.nonce)
		auth := resp.Header.Get(ProbeAuthHeader)
		if resp.StatusCode != tt.status || !VerifyProbe(key, tt.nonce, tt.path, tt.status, auth) {
			t.Errorf("%s: %d auth %q does not verify", tt.path, resp.StatusCode, auth)
		}
		if VerifyProbe(key, tt.nonce, tt.path, 200+tt.status%2+1, auth) || VerifyProbe(key, tt.nonce+"x", tt.path, tt.status, auth) {
			t.Errorf("%s: MAC verifies for another status or nonce", tt.path)
		}
	}
	if got := get("/healthz", "").Header.Get(ProbeAuthHeader); got != "" {
		t.Errorf("no nonce, yet auth header %q", got)
	}
	long := make([]byte, maxNonceLen+1)
	for i := range long {
		long[i] = 'a'
	}
	if got := get("/healthz", string(long)).Header.Get(ProbeAuthHeader); got != "" {
		t.Error("oversized nonce answered")
	}
	other, _ := NewProbeKey()
	if VerifyProbe(other, "n2", "/healthz", 200, ProbeMAC(key, "n2", "/healthz", 200)) {
		t.Error("MAC verifies under another key")
	}
}

func TestProbeKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "probe.key")
	key, _ := NewProbeKey()
	if err := WriteProbeKey(path, key); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o400 {
		t.Errorf("mode %v, want 0400", fi.Mode().Perm())
	}
	// A restart replaces the read-only file.
	key2, _ := NewProbeKey()
	if err := WriteProbeKey(path, key2); err != nil {
		t.Fatal(err)
	}
	got, err := ReadProbeKey(path)
	if err != nil || string(got) != string(key2) {
		t.Fatalf("ReadProbeKey = %x, %v", got, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("%d files left in the directory, want 1", len(entries))
	}
	if err := os.WriteFile(filepath.Join(dir, "bad"), []byte("not hex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadProbeKey(filepath.Join(dir, "bad")); err == nil {
		t.Error("garbage accepted as a key")
	}
	if _, err := ReadProbeKey(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}

func FuzzValidNonce(f *testing.F) {
	f.Add("abc")
	f.Add("")
	f.Add("a\r\nb")
	f.Fuzz(func(t *testing.T, n string) {
		if validNonce(n) && (len(n) == 0 || len(n) > maxNonceLen) {
			t.Fatalf("validNonce(%q) = true", n)
		}
	})
}
