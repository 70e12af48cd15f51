// Package buildinfo reports which BotBox build is running: module version,
// VCS commit and Go version, all read from the information the Go toolchain
// embeds in the binary (runtime/debug.ReadBuildInfo).
//
// It needs no -ldflags: `go build` in a git checkout records vcs.revision
// and vcs.modified. A build without VCS stamping (-buildvcs=false, a source
// tree without .git, or `go test`) reports version "devel" and an empty
// commit, unless the build stamps them at link time: deploy/image.sh (whose
// build context has no .git) passes
// -X github.com/botbox/botbox/internal/buildinfo.version=... and
// ...buildinfo.commit=... from `git describe` and `git rev-parse HEAD`
// (docs/deploy.md). The package imports nothing internal; its only state
// is those two link-time strings, never written at run time.
//
// Typical use:
//
//	fmt.Fprintln(stdout, buildinfo.String()) // botbox devel (commit 0123456789ab, go1.26.8)
//	log.Info("starting", "version", buildinfo.Read().Version)
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Devel is the version of a build that carries no module version.
const Devel = "devel"

// shortCommitLen is how much of the commit hash String shows.
const shortCommitLen = 12

// Info describes a build.
type Info struct {
	// Version is the main module's version ("v1.2.3", or a pseudo-version
	// stamped from VCS), or Devel when the toolchain recorded none.
	Version string
	// Commit is the full VCS revision (vcs.revision), "" when unknown.
	Commit string
	// Modified reports uncommitted changes at build time (vcs.modified).
	Modified bool
	// GoVersion is the toolchain that built the binary, e.g. "go1.26.8".
	GoVersion string
}

// version and commit are set by the linker (-X) in builds without VCS
// information; empty otherwise.
var version, commit string

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	return stamped(fromBuildInfo(bi, ok), version, commit)
}

// stamped returns info with the link-time version and commit, where given,
// taking precedence over what the toolchain recorded. A stamped commit with
// no VCS information carries no "modified" flag.
// TestStamped and deploy's TestImageVersion hold this.
func stamped(info Info, version, commit string) Info {
	if version != "" {
		info.Version = version
	}
	if commit != "" && commit != info.Commit {
		info.Commit, info.Modified = commit, false
	}
	return info
}

// fromBuildInfo extracts Info from what debug.ReadBuildInfo returned.
func fromBuildInfo(bi *debug.BuildInfo, ok bool) Info {
	info := Info{Version: Devel, GoVersion: runtime.Version()}
	if !ok || bi == nil {
		return info
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		info.Version = v
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String formats i as "botbox <version> (commit <first 12 hex digits>[-dirty],
// <go version>)", with "unknown" for a missing commit.
func (i Info) String() string {
	commit := i.Commit
	if commit == "" {
		commit = "unknown"
	} else if len(commit) > shortCommitLen {
		commit = commit[:shortCommitLen]
	}
	if i.Modified {
		commit += "-dirty"
	}
	return "botbox " + i.Version + " (commit " + commit + ", " + i.GoVersion + ")"
}

// String is Read().String(), the line `botbox version` prints.
func String() string { return Read().String() }
