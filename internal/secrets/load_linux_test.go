package secrets

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLoadSecretsSkipsFIFOWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "good", "fine")
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	symlink(t, "fifo", filepath.Join(dir, "fifo-link"))

	// Opening a FIFO for reading blocks until a writer appears; the loader
	// must not even try. If it did, this test would hang.
	s, _ := mustOpen(t, Options{Dir: dir})
	if d := cmp.Diff(map[string]string{"good": "fine"}, contents(s)); d != "" {
		t.Errorf("loaded secrets (-want +got):\n%s", d)
	}
}

func TestLoadSecretsSkipsNonUTF8Name(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "good", "fine")
	if err := os.WriteFile(filepath.Join(dir, "bad\xffname"), []byte("x"), 0o600); err != nil {
		t.Skipf("file system refuses non-UTF-8 names: %v", err)
	}
	s, logs := mustOpen(t, Options{Dir: dir})
	if d := cmp.Diff(map[string]string{"good": "fine"}, contents(s)); d != "" {
		t.Errorf("loaded secrets (-want +got):\n%s", d)
	}
	if got := logs.Find("skipping secret file with a non-UTF-8 name"); len(got) != 1 {
		t.Errorf("non-UTF-8 name warnings = %v, want one", got)
	}
}

func TestReloadUnreadableFileKeepsLastKnownGood(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads files regardless of permissions")
	}
	dir := t.TempDir()
	writeFile(t, dir, "key", "v1")
	writeFile(t, dir, "other", "o1")
	s, logs := mustOpen(t, Options{Dir: dir})

	if err := os.Chmod(filepath.Join(dir, "key"), 0); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "other", "o2")
	s.reload("test")
	if d := cmp.Diff(map[string]string{"key": "v1", "other": "o2"}, contents(s)); d != "" {
		t.Errorf("loaded secrets (-want +got):\n%s", d)
	}
	if got := findKey(logs, "skipping unreadable secret file", "key"); len(got) != 1 || got[0]["kept_previous_value"] != true {
		t.Errorf("unreadable warnings = %v, want one with kept_previous_value=true", got)
	}
}
