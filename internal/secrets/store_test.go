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
			recs := logs.find(t, tt.wantMsg)
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
	if got := logs.find(t, "all required secrets now available, system ready"); len(got) != 1 {
		t.Errorf("ready transitions logged %d times, want 1", len(got))
	}
	if got := logs.find(t, "required secrets became unavailable, /healthz will return 503"); len(got) != 1 || got[0]["level"] != "WARN" {
		t.Errorf("unready transitions = %v, want one WARN", got)
	}
}
