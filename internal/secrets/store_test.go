package secrets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	writeFile(t, dir, "file", "x")
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"no dir", Options{}, "secrets directory is not set"},
		{"negative debounce", Options{Dir: dir, Debounce: -time.Second}, "debounce"},
		{"negative resync", Options{Dir: dir, Resync: -time.Second}, "resync"},
		{"empty required key", Options{Dir: dir, Required: []string{"a", ""}}, `required secret key ""`},
		{"dot required key", Options{Dir: dir, Required: []string{"..data"}}, `"..data"`},
		{"slash required key", Options{Dir: dir, Required: []string{"a/b"}}, `"a/b"`},
		{"dir is a file", Options{Dir: file}, "opening secrets directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Open(%+v) = %v, %v, want error containing %q", tt.opts, s, err, tt.wantErr)
			}
		})
	}
}

func TestOpenDefaults(t *testing.T) {
	t.Chdir(t.TempDir())
	writeFile(t, ".", "rel/key", "v")
	s, err := Open(Options{Dir: "rel"})
	if err != nil {
		t.Fatal(err)
	}
	if s.debounce != 2*time.Second || s.resync != 30*time.Second {
		t.Errorf("debounce, resync = %v, %v, want 2s, 30s", s.debounce, s.resync)
	}
	if !filepath.IsAbs(s.dir) {
		t.Errorf("dir = %q, want an absolute path", s.dir)
	}
	if got, _ := get(s, "key"); got != "v" {
		t.Errorf("key = %q, want v", got)
	}
	if !s.Ready() {
		t.Errorf("Ready() = false with nothing required")
	}
}

func TestReadinessAtOpen(t *testing.T) {
	tests := []struct {
		name        string
		files       []string
		required    []string
		wantReady   bool
		wantMissing []string
		wantMsg     string
	}{
		{"nothing required", nil, nil, true, nil, "all required secrets loaded, system ready"},
		{"all present", []string{"a", "b"}, []string{"b", "a", "a"}, true, nil, "all required secrets loaded, system ready"},
		{"one missing", []string{"a"}, []string{"c", "a", "b"}, false, []string{"b", "c"}, "required secrets not yet available, /healthz will return 503"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for _, f := range tt.files {
				writeFile(t, dir, f, "v")
			}
			var calls []bool
			s, logs := mustOpen(t, Options{Dir: dir, Required: tt.required, OnReady: func(r bool) { calls = append(calls, r) }})
			if got := s.Ready(); got != tt.wantReady {
				t.Errorf("Ready() = %v, want %v", got, tt.wantReady)
			}
			if d := cmp.Diff(tt.wantMissing, s.Missing()); d != "" {
				t.Errorf("Missing() (-want +got):\n%s", d)
			}
			if d := cmp.Diff([]bool{tt.wantReady}, calls); d != "" {
				t.Errorf("OnReady calls (-want +got):\n%s", d)
			}
			recs := logs.Find(tt.wantMsg)
			if len(recs) != 1 {
				t.Fatalf("%q logged %d times, want once", tt.wantMsg, len(recs))
			}
			if !tt.wantReady {
				var got []string
				for _, m := range recs[0]["missing"].([]any) {
					got = append(got, m.(string))
				}
				if d := cmp.Diff(tt.wantMissing, got); d != "" {
					t.Errorf("logged missing (-want +got):\n%s", d)
				}
			}
		})
	}
}

func TestMissingReturnsCopy(t *testing.T) {
	s, _ := mustOpen(t, Options{Dir: t.TempDir(), Required: []string{"a"}})
	s.Missing()[0] = "mutated"
	if d := cmp.Diff([]string{"a"}, s.Missing()); d != "" {
		t.Errorf("Missing() after mutating a result (-want +got):\n%s", d)
	}
}

func TestReadinessTransitionsOnReload(t *testing.T) {
	dir := t.TempDir()
	var calls []bool
	s, logs := mustOpen(t, Options{Dir: dir, Required: []string{"a"}, OnReady: func(r bool) { calls = append(calls, r) }})

	s.reload("test") // no change: no call
	writeFile(t, dir, "a", "1")
	s.reload("test")
	writeFile(t, dir, "a", "2") // still ready: no call
	s.reload("test")
	if err := os.Remove(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	s.reload("test")

	if d := cmp.Diff([]bool{false, true, false}, calls); d != "" {
		t.Errorf("OnReady calls (-want +got):\n%s", d)
	}
	if got := logs.Find("all required secrets now available, system ready"); len(got) != 1 {
		t.Errorf("ready transitions logged %d times, want 1", len(got))
	}
	if got := logs.Find("required secrets became unavailable, /healthz will return 503"); len(got) != 1 || got[0]["level"] != "WARN" {
		t.Errorf("unready transitions = %v, want one WARN", got)
	}
}

// TestSetRequiredMovesReadiness: a configuration reload that adds a
// secret_ref whose file is absent makes the store unready at once (OnReady
// called), the file's arrival makes it ready again, and dropping a
// required key that is missing makes it ready without any file change.
func TestSetRequiredMovesReadiness(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a", "1")
	var calls []bool
	s, logs := mustOpen(t, Options{Dir: dir, Required: []string{"a"}, OnReady: func(r bool) { calls = append(calls, r) }})

	if err := s.SetRequired([]string{"b", "a", "b"}); err != nil {
		t.Fatal(err)
	}
	if s.Ready() {
		t.Error("Ready() = true after requiring a missing key")
	}
	if d := cmp.Diff([]string{"b"}, s.Missing()); d != "" {
		t.Errorf("Missing() (-want +got):\n%s", d)
	}
	if err := s.SetRequired([]string{"a", "b"}); err != nil { // same set: no call
		t.Fatal(err)
	}
	writeFile(t, dir, "b", "2")
	s.reload("test")
	if err := s.SetRequired([]string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRequired([]string{"a"}); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]bool{true, false, true, false, true}, calls); d != "" {
		t.Errorf("OnReady calls (-want +got):\n%s", d)
	}
	if got := logs.Find("required secrets became unavailable, /healthz will return 503"); len(got) != 2 {
		t.Errorf("unready transitions logged %d times, want 2", len(got))
	}
	// The values were not re-read or lost.
	if v, _ := get(s, "b"); v != "2" {
		t.Errorf("b = %q after SetRequired, want 2", v)
	}
}

func TestSetRequiredRefusesBadKeys(t *testing.T) {
	var calls []bool
	s, _ := mustOpen(t, Options{Dir: t.TempDir(), OnReady: func(r bool) { calls = append(calls, r) }})
	for _, bad := range [][]string{{""}, {"ok", "..data"}, {"a/b"}} {
		if err := s.SetRequired(bad); err == nil {
			t.Errorf("SetRequired(%q) = nil, want an error", bad)
		}
	}
	if !s.Ready() || len(calls) != 1 {
		t.Errorf("a refused SetRequired changed readiness: Ready() = %v, calls %v", s.Ready(), calls)
	}
}

// TestSetRequiredWhileRunning races SetRequired against Run's reloads
// (run with -race): readiness ends consistent with the last required set.
func TestSetRequiredWhileRunning(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a", "1")
	ready := make(chan bool, 100)
	opts := fast(dir)
	opts.OnReady = func(r bool) { ready <- r }
	s, _ := mustOpen(t, opts)
	startRun(t, s)
	for i := range 20 {
		writeFile(t, dir, "a", string(rune('a'+i)))
		req := []string{"a"}
		if i%2 == 1 { // the last one, i = 19, too
			req = append(req, "missing")
		}
		if err := s.SetRequired(req); err != nil {
			t.Fatal(err)
		}
	}
	if s.Ready() {
		t.Error("Ready() = true with the last required set naming a missing key")
	}
}

// TestOnChangeAfterEveryPublishedReload: OnChange runs after a reload that
// changed the snapshot (added, changed, removed), never after one that did
// not, and sees the new snapshot.
func TestOnChangeAfterEveryPublishedReload(t *testing.T) {
	dir := t.TempDir()
	var s *Store
	var seen []string
	s, _ = mustOpen(t, Options{Dir: dir, OnChange: func() {
		v, _ := get(s, "a")
		seen = append(seen, v)
	}})
	s.reload("test") // nothing changed
	writeFile(t, dir, "a", "1")
	s.reload("test")
	s.reload("test") // nothing changed
	writeFile(t, dir, "a", "2")
	s.reload("test")
	if err := os.Remove(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	s.reload("test")
	if d := cmp.Diff([]string{"1", "2", ""}, seen); d != "" {
		t.Errorf("OnChange saw (-want +got):\n%s", d)
	}
}
