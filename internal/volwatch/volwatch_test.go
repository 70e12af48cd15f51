package volwatch

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/goleak"

	"github.com/botbox/botbox/internal/testutil/eventually"
	"github.com/botbox/botbox/internal/testutil/logcapture"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newLogger(t *testing.T) (*slog.Logger, *logcapture.Buffer) {
	t.Helper()
	b := &logcapture.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", b.String())
		}
	})
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// run starts Run on dir with a short debounce and an hour of resync (so a
// reload seen proves an event), recording reloads.
func run(t *testing.T, dir string, resync time.Duration) (*reloads, *logcapture.Buffer) {
	t.Helper()
	log, logs := newLogger(t)
	r := &reloads{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Dir: dir, Debounce: 20 * time.Millisecond, Resync: resync, Logger: log, Reload: r.reload})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
	waitFor(t, "the start reload", func() bool { return r.count(TriggerStart) == 1 })
	return r, logs
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually.Eventually(t, 10*time.Second, cond, what)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// k8sSwap publishes files the way the kubelet updates a Secret or
// ConfigMap volume: a new timestamped directory, a ..data_tmp symlink to
// it renamed over ..data, and per-key symlinks through ..data.
func k8sSwap(t *testing.T, dir, version string, files map[string]string) {
	t.Helper()
	ts := "..2026_11_30_" + version
	for k, v := range files {
		write(t, filepath.Join(dir, ts, k), v)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for k := range files {
		link := filepath.Join(dir, k)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRunK8sDataSwap: a ConfigMap-style update that only swaps ..data (the
// key symlink already exists) is seen by an event.
func TestRunK8sDataSwap(t *testing.T) {
	dir := t.TempDir()
	k8sSwap(t, dir, "v1", map[string]string{"config.yaml": "a"})
	r, _ := run(t, dir, time.Hour)
	k8sSwap(t, dir, "v2", map[string]string{"config.yaml": "b"})
	waitFor(t, "a reload after the ..data swap", func() bool { return r.count(TriggerEvent) >= 1 })
	if b, err := os.ReadFile(filepath.Join(dir, "config.yaml")); err != nil || string(b) != "b" {
		t.Fatalf("config.yaml = %q, %v; the test volume is wrong", b, err)
	}
}

func TestRunDirectoryCreatedLate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	r, logs := run(t, dir, time.Hour)
	write(t, filepath.Join(dir, "k"), "v")
	waitFor(t, "a reload after the directory appeared", func() bool { return r.count(TriggerEvent) >= 1 })
	waitFor(t, "the watch on the directory", func() bool { return len(logs.Find("file watcher started")) == 1 })
	n := r.count(TriggerEvent)
	write(t, filepath.Join(dir, "k"), "w")
	waitFor(t, "a reload for a change inside", func() bool { return r.count(TriggerEvent) > n })
}

func TestRunDirectoryCreatedLateWithoutParent(t *testing.T) {
	// Neither the directory nor its parent exist: only the resync finds it.
	dir := filepath.Join(t.TempDir(), "a", "b", "vol")
	_, logs := run(t, dir, 20*time.Millisecond)
	write(t, filepath.Join(dir, "k"), "v")
	waitFor(t, "the watch to attach", func() bool { return len(logs.Find("file watcher started")) == 1 })
}

func TestRunDirectoryReplaced(t *testing.T) {
	for _, remove := range []func(string) error{
		func(dir string) error { return os.Rename(dir, dir+".old") },
		os.RemoveAll,
	} {
		dir := filepath.Join(t.TempDir(), "vol")
		write(t, filepath.Join(dir, "a"), "1")
		r, logs := run(t, dir, time.Hour)
		waitFor(t, "the watch", func() bool { return len(logs.Find("file watcher started")) == 1 })
		if err := remove(dir); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the watch to notice", func() bool {
			return len(logs.Find("file watcher lost the directory, waiting for it to reappear")) == 1
		})
		write(t, filepath.Join(dir, "b"), "2")
		waitFor(t, "the watch on the new directory", func() bool { return len(logs.Find("file watcher started")) == 2 })
		n := r.count(TriggerEvent)
		write(t, filepath.Join(dir, "b"), "3")
		waitFor(t, "a reload for a change in the new directory", func() bool { return r.count(TriggerEvent) > n })
	}
}

func TestRunOptionErrors(t *testing.T) {
	ok := Options{Dir: "x", Debounce: time.Second, Resync: time.Second, Reload: func(string) {}}
	for name, mutate := range map[string]func(*Options){
		"no dir":          func(o *Options) { o.Dir = "" },
		"zero debounce":   func(o *Options) { o.Debounce = 0 },
		"negative resync": func(o *Options) { o.Resync = -time.Second },
		"no reload":       func(o *Options) { o.Reload = nil },
	} {
		o := ok
		mutate(&o)
		if err := Run(context.Background(), o); err == nil || !strings.HasPrefix(err.Error(), "volwatch: ") {
			t.Errorf("%s: Run() = %v, want a volwatch error", name, err)
		}
	}
}

func TestEnsureReattachesReplacedDirectory(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "vol")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	dw := &dirWatch{w: w, dir: dir, parent: base, log: discard()}
	if !dw.attach() {
		t.Fatalf("attach() = false for an existing directory")
	}
	// Replace the directory behind the watch's back (no events read).
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dw.ensure()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if dw.attached == nil || !os.SameFile(fi, dw.attached) {
		t.Errorf("ensure() did not move the watch to the new directory")
	}
	if dw.parentWatched {
		t.Errorf("parent still watched with the directory attached")
	}
}
