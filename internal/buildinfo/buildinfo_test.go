package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFromBuildInfo(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name       string
		bi         *debug.BuildInfo
		ok         bool
		want       Info
		wantString string
	}{
		{
			name:       "no build info",
			want:       Info{Version: "devel", GoVersion: runtime.Version()},
			wantString: "botbox devel (commit unknown, " + runtime.Version() + ")",
		},
		{
			name:       "ok but nil",
			ok:         true,
			want:       Info{Version: "devel", GoVersion: runtime.Version()},
			wantString: "botbox devel (commit unknown, " + runtime.Version() + ")",
		},
		{
			name: "devel without vcs",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8",
				Main: debug.Module{Path: "github.com/botbox/botbox", Version: "(devel)"}},
			ok:         true,
			want:       Info{Version: "devel", GoVersion: "go1.26.8"},
			wantString: "botbox devel (commit unknown, go1.26.8)",
		},
		{
			name:       "empty version",
			bi:         &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/botbox/botbox"}},
			ok:         true,
			want:       Info{Version: "devel", GoVersion: "go1.26.8"},
			wantString: "botbox devel (commit unknown, go1.26.8)",
		},
		{
			name: "clean vcs build",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8",
				Main: debug.Module{Path: "github.com/botbox/botbox", Version: "v1.2.3"},
				Settings: []debug.BuildSetting{
					{Key: "-buildmode", Value: "exe"},
					{Key: "vcs", Value: "git"},
					{Key: "vcs.revision", Value: rev},
					{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
					{Key: "vcs.modified", Value: "false"},
				}},
			ok:         true,
			want:       Info{Version: "v1.2.3", Commit: rev, GoVersion: "go1.26.8"},
			wantString: "botbox v1.2.3 (commit 0123456789ab, go1.26.8)",
		},
		{
			name: "dirty pseudo-version",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8",
				Main: debug.Module{Path: "github.com/botbox/botbox", Version: "v0.0.0-20260102030405-0123456789ab+dirty"},
				Settings: []debug.BuildSetting{
					{Key: "vcs.revision", Value: rev},
					{Key: "vcs.modified", Value: "true"},
				}},
			ok:         true,
			want:       Info{Version: "v0.0.0-20260102030405-0123456789ab+dirty", Commit: rev, Modified: true, GoVersion: "go1.26.8"},
			wantString: "botbox v0.0.0-20260102030405-0123456789ab+dirty (commit 0123456789ab-dirty, go1.26.8)",
		},
		{
			name: "short revision kept whole",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8",
				Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}},
			ok:         true,
			want:       Info{Version: "devel", Commit: "abc123", GoVersion: "go1.26.8"},
			wantString: "botbox devel (commit abc123, go1.26.8)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := fromBuildInfo(tt.bi, tt.ok)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("fromBuildInfo (-want +got):\n%s", d)
			}
			if s := got.String(); s != tt.wantString {
				t.Errorf("String() = %q, want %q", s, tt.wantString)
			}
		})
	}
}

// TestRead checks the real build information of the test binary, which
// carries no VCS stamp.
func TestRead(t *testing.T) {
	info := Read()
	if info.Version == "" || info.GoVersion == "" {
		t.Errorf("Read() = %+v, want a version and a Go version", info)
	}
	if s := String(); !strings.HasPrefix(s, "botbox ") || !strings.Contains(s, info.GoVersion) {
		t.Errorf("String() = %q", s)
	}
}

func TestStamped(t *testing.T) {
	vcs := Info{Version: "v1.2.3", Commit: "0123456789abcdef", Modified: true, GoVersion: "go1.26.8"}
	tests := []struct {
		name            string
		in              Info
		version, commit string
		want            Info
	}{
		{"nothing stamped", vcs, "", "", vcs},
		{"devel build stamped", Info{Version: Devel, GoVersion: "go1.26.8"}, "v1.3.0-rc1", "fedcba9876543210",
			Info{Version: "v1.3.0-rc1", Commit: "fedcba9876543210", GoVersion: "go1.26.8"}},
		{"version only", Info{Version: Devel, GoVersion: "go1.26.8"}, "v1.3.0", "",
			Info{Version: "v1.3.0", GoVersion: "go1.26.8"}},
		{"same commit keeps modified", vcs, "", "0123456789abcdef", vcs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stamped(tt.in, tt.version, tt.commit); got != tt.want {
				t.Errorf("stamped(%+v, %q, %q) = %+v, want %+v", tt.in, tt.version, tt.commit, got, tt.want)
			}
		})
	}
}
