package admin

import (
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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
	if _, err := WriteProbeKey(path, key); err != nil {
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
	if _, err := WriteProbeKey(path, key2); err != nil {
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

// TestWrittenProbeKeyRemove: Remove deletes the file WriteProbeKey wrote
// and nothing else: not a file another instance renamed over it (another
// inode), not the same inode rewritten with another key, not a symlink.
func TestWrittenProbeKeyRemove(t *testing.T) {
	key, _ := NewProbeKey()
	other, _ := NewProbeKey()
	for _, tc := range []struct {
		name        string
		replace     func(t *testing.T, path string)
		wantRemoved bool
	}{
		{"own file", func(*testing.T, string) {}, true},
		{"gone", func(t *testing.T, path string) { os.Remove(path) }, false},
		{"another instance's key renamed over it", func(t *testing.T, path string) {
			if _, err := WriteProbeKey(path, other); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"same inode, other key", func(t *testing.T, path string) {
			os.Chmod(path, 0o600)
			if err := os.WriteFile(path, []byte(hex.EncodeToString(other)+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a symlink to the key", func(t *testing.T, path string) {
			real := path + ".real"
			os.Rename(path, real)
			os.Symlink(real, path)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "probe.key")
			w, err := WriteProbeKey(path, key)
			if err != nil {
				t.Fatal(err)
			}
			tc.replace(t, path)
			before, statErr := os.Lstat(path)
			removed, err := w.Remove()
			if err != nil || removed != tc.wantRemoved {
				t.Fatalf("Remove = %v, %v; want %v", removed, err, tc.wantRemoved)
			}
			_, after := os.Lstat(path)
			switch {
			case tc.wantRemoved && after == nil:
				t.Error("the file is still there")
			case !tc.wantRemoved && statErr == nil && after != nil:
				t.Errorf("a file that was not ours (%v) was removed", before.Mode())
			}
		})
	}
}

// TestDefaultProbeKeyFile: one path per UID and metrics port; the runtime
// directory wins when absolute.
func TestDefaultProbeKeyFile(t *testing.T) {
	for _, tc := range []struct {
		runtime, tmp string
		uid          int
		port         uint16
		want         string
	}{
		{"", "/tmp", 1000, 9090, "/tmp/botbox-1000/probe-9090.key"},
		{"", "/tmp", 1001, 9090, "/tmp/botbox-1001/probe-9090.key"},
		{"", "/tmp", 1000, 9191, "/tmp/botbox-1000/probe-9191.key"},
		{"/run/user/1000", "/tmp", 1000, 9090, "/run/user/1000/botbox/probe-9090.key"},
		{"relative/dir", "/var/tmp", 0, 9090, "/var/tmp/botbox-0/probe-9090.key"},
	} {
		if got := DefaultProbeKeyFile(tc.runtime, tc.tmp, tc.uid, tc.port); got != tc.want {
			t.Errorf("DefaultProbeKeyFile(%q, %q, %d, %d) = %q, want %q", tc.runtime, tc.tmp, tc.uid, tc.port, got, tc.want)
		}
	}
}

// TestPrepareProbeKeyDir: the directory is made 0700 and reused; one that
// is a symlink, has group or other permissions, or belongs to another UID
// is refused (the last needs root to set up).
func TestPrepareProbeKeyDir(t *testing.T) {
	base := t.TempDir()
	uid := os.Getuid()
	dir := filepath.Join(base, "botbox-x")
	for range 2 {
		if err := PrepareProbeKeyDir(dir, uid); err != nil {
			t.Fatal(err)
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %v, want 0700", fi.Mode().Perm())
	}
	wide := filepath.Join(base, "wide")
	os.Mkdir(wide, 0o700)
	os.Chmod(wide, 0o770)
	link := filepath.Join(base, "link")
	os.Symlink(dir, link)
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	cases := map[string]string{wide: "want 0700", link: "is not a directory", file: "is not a directory"}
	if uid == 0 {
		theirs := filepath.Join(base, "theirs")
		os.Mkdir(theirs, 0o700)
		if err := os.Chown(theirs, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		cases[theirs] = "owned by UID 4242, not 0"
	}
	for d, want := range cases {
		if err := PrepareProbeKeyDir(d, uid); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", filepath.Base(d), err, want)
		}
	}
}
