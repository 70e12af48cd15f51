package deploy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/config"
	"github.com/google/go-cmp/cmp"
)

// There is no container engine here, so the Dockerfile is checked as text:
// a small parser (continuations, comments, stages) and the invariants the
// images must keep. It proves what the file says, not that it builds.

// Expected values.
const (
	buildImage       = "golang:1.26-bookworm"
	proxyUser        = "1337"
	imageConfigPath  = "/etc/botbox/config.yaml"
	imageConfigSrc   = "deploy/config.yaml"
	binaryPath       = "/botbox"
	stageBuild       = "build"
	stageIPTables    = "iptables-init"
	stageBotBox      = "botbox"
	dockerfilePath   = "Dockerfile"
	buildinfoPkg     = "github.com/botbox/botbox/internal/buildinfo"
	imageConfigLocal = "config.yaml" // deploy/config.yaml, seen from this package
)

type instruction struct {
	cmd  string // upper case
	args string
	line int
}

type stage struct {
	name, image string
	flags       []string // FROM flags, e.g. --platform=...
	ins         []instruction
}

// parseDockerfile splits a Dockerfile into stages of instructions. It knows
// what this Dockerfile uses: parser directives and comments, backslash
// continuations (comment lines inside them are dropped, as Docker does),
// and FROM [--flag...] image [AS name].
func parseDockerfile(text string) ([]stage, error) {
	var stages []stage
	var cur strings.Builder
	start := 0
	flush := func() error {
		s := strings.TrimSpace(cur.String())
		cur.Reset()
		if s == "" {
			return nil
		}
		cmd, args, _ := strings.Cut(s, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			st := stage{}
			f := strings.Fields(in.args)
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				st.flags, f = append(st.flags, f[0]), f[1:]
			}
			switch {
			case len(f) == 1:
				st.image = f[0]
			case len(f) == 3 && strings.EqualFold(f[1], "AS"):
				st.image, st.name = f[0], f[2]
			default:
				return fmt.Errorf("line %d: cannot read FROM %q", start, in.args)
			}
			stages = append(stages, st)
			return nil
		}
		if len(stages) == 0 {
			if in.cmd == "ARG" {
				return nil // global ARG before the first FROM
			}
			return fmt.Errorf("line %d: %s before FROM", start, in.cmd)
		}
		st := &stages[len(stages)-1]
		st.ins = append(st.ins, in)
		return nil
	}
	continuing := false
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && !continuing) {
			continue
		}
		if !continuing {
			start = i + 1
		}
		body, cont := strings.CutSuffix(strings.TrimRight(line, " \t"), "\\")
		cur.WriteString(body)
		cur.WriteString(" ")
		continuing = cont
		if !cont {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if continuing {
		return nil, errors.New("dangling line continuation at end of file")
	}
	return stages, nil
}

func findStage(stages []stage, name string) *stage {
	for i := range stages {
		if stages[i].name == name {
			return &stages[i]
		}
	}
	return nil
}

func (s *stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// last returns the last instruction cmd of the stage (the one in effect).
func (s *stage) last(cmd string) (instruction, bool) {
	all := s.all(cmd)
	if len(all) == 0 {
		return instruction{}, false
	}
	return all[len(all)-1], true
}

// execForm decodes an ENTRYPOINT/CMD in exec (JSON) form. Shell form would
// need /bin/sh, which the distroless image does not have.
func execForm(in instruction) ([]string, error) {
	var v []string
	if err := json.Unmarshal([]byte(in.args), &v); err != nil {
		return nil, fmt.Errorf("line %d: %s %s is not exec (JSON) form", in.line, in.cmd, in.args)
	}
	return v, nil
}

var (
	buildOutput = regexp.MustCompile(`-o\s+(\S+)`)
	ldflags     = regexp.MustCompile(`-ldflags=?["']?([^"']*)`)
	// installCmd captures the arguments of a package installation, up to
	// the next shell operator.
	installCmd = regexp.MustCompile(`(?:apt-get install|apk add)([^&;|]*)`)
)

// dockerfileInvariants returns one error per broken invariant, prefixed by its id.
func checkDockerfile(stages []stage) []error {
	var errs []error
	fail := func(id, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", id, fmt.Sprintf(format, a...)))
	}
	var names []string
	for _, s := range stages {
		names = append(names, s.name)
	}
	if !slices.Equal(names, []string{stageBuild, stageIPTables, stageBotBox}) {
		fail("stages", "stages %q, want [build iptables-init botbox] (botbox last: the default target)", names)
	}
	build, ipt, bb := findStage(stages, stageBuild), findStage(stages, stageIPTables), findStage(stages, stageBotBox)
	if build == nil || ipt == nil || bb == nil {
		return errs
	}

	// Build: static, trimmed, stripped.
	if build.image != buildImage {
		fail("build-image", "build stage FROM %s, want %s", build.image, buildImage)
	}
	binary := ""
	for _, in := range build.all("RUN") {
		if !strings.Contains(in.args, "go build") {
			continue
		}
		for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/botbox"} {
			if !strings.Contains(in.args, want) {
				fail("static-build", "line %d: go build without %s", in.line, want)
			}
		}
		ld := ldflags.FindStringSubmatch(in.args)
		if ld == nil || !slices.Contains(strings.Fields(ld[1]), "-s") || !slices.Contains(strings.Fields(ld[1]), "-w") {
			fail("static-build", "line %d: go build without -ldflags \"-s -w\"", in.line)
		}
		if ld != nil {
			for _, v := range []string{"version=${VERSION}", "commit=${COMMIT}"} {
				if !slices.Contains(strings.Fields(ld[1]), buildinfoPkg+"."+v) {
					fail("version-stamp", "line %d: go build without -X %s.%s", in.line, buildinfoPkg, v)
				}
			}
		}
		if m := buildOutput.FindStringSubmatch(in.args); m != nil {
			binary = m[1]
		}
	}
	if binary == "" {
		fail("static-build", "no RUN go build -o PATH in the build stage")
	}

	// Both images carry the same binary at /botbox.
	for _, s := range []*stage{ipt, bb} {
		found := false
		for _, in := range s.all("COPY") {
			f := strings.Fields(in.args)
			if len(f) == 3 && f[0] == "--from="+stageBuild && f[1] == binary && f[2] == binaryPath {
				found = true
			}
		}
		if !found {
			fail("same-binary", "stage %s: no COPY --from=%s %s %s", s.name, stageBuild, binary, binaryPath)
		}
	}

	// botbox: static base, no shell, UID 1337, exec-form entrypoint.
	if !strings.HasPrefix(bb.image, "gcr.io/distroless/static") && bb.image != "scratch" {
		fail("botbox-base", "botbox FROM %s, want gcr.io/distroless/static* or scratch", bb.image)
	}
	for _, in := range bb.all("RUN") {
		fail("botbox-base", "line %d: RUN in the botbox stage (the image has no shell)", in.line)
	}
	if u, ok := bb.last("USER"); !ok || (u.args != proxyUser && u.args != proxyUser+":"+proxyUser) {
		fail("botbox-user", "botbox stage USER %q, want %s (the UID the egress rules exempt)", u.args, proxyUser)
	}
	checkExec := func(id string, s *stage, cmd string, want []string) {
		in, ok := s.last(cmd)
		if !ok {
			fail(id, "stage %s has no %s", s.name, cmd)
			return
		}
		got, err := execForm(in)
		if err != nil {
			fail(id, "%v", err)
			return
		}
		if diff := cmp.Diff(want, got); diff != "" {
			fail(id, "stage %s %s mismatch (-want +got):\n%s", s.name, cmd, diff)
		}
	}
	checkExec("botbox-entrypoint", bb, "ENTRYPOINT", []string{binaryPath})
	checkExec("botbox-entrypoint", bb, "CMD", []string{"--config", imageConfigPath})
	var exposed []string
	for _, in := range bb.all("EXPOSE") {
		exposed = append(exposed, strings.Fields(in.args)...)
	}
	for _, p := range []string{"8080", "8443", "9090"} {
		if !slices.Contains(exposed, p) {
			fail("expose", "botbox stage does not EXPOSE %s", p)
		}
	}
	configCopied := false
	for _, in := range bb.all("COPY") {
		if f := strings.Fields(in.args); len(f) == 2 && f[0] == imageConfigSrc && f[1] == imageConfigPath {
			configCopied = true
		}
	}
	if !configCopied {
		fail("default-config", "botbox stage does not COPY %s %s (the path CMD names)", imageConfigSrc, imageConfigPath)
	}

	// iptables-init: the same binary next to iptables, entrypoint netfilter install.
	if strings.Contains(ipt.image, "distroless") || ipt.image == "scratch" {
		fail("init-iptables", "iptables-init FROM %s cannot carry iptables", ipt.image)
	}
	installs := false
	for _, in := range ipt.all("RUN") {
		for _, m := range installCmd.FindAllStringSubmatch(in.args, -1) {
			if slices.Contains(strings.Fields(m[1]), "iptables") {
				installs = true
			}
		}
	}
	if !installs {
		fail("init-iptables", "iptables-init does not install the iptables package (iptables, ip6tables, *-restore)")
	}
	checkExec("init-entrypoint", ipt, "ENTRYPOINT", []string{binaryPath, "netfilter", "install"})
	return errs
}

func readDockerfile(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	stages, err := parseDockerfile(readDockerfile(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range checkDockerfile(stages) {
		t.Error(err)
	}
}

func TestDockerfileInvariantsCatchViolations(t *testing.T) {
	t.Parallel()
	orig := readDockerfile(t)
	tests := []struct {
		id, name, old, new string
	}{
		{"stages", "botbox not the default target", "FROM debian:bookworm-slim AS iptables-init", "FROM debian:bookworm-slim AS iptables"},
		{"build-image", "other Go image", "golang:1.26-bookworm", "golang:1.25-bookworm"},
		{"static-build", "cgo enabled", "CGO_ENABLED=0", "CGO_ENABLED=1"},
		{"static-build", "no -trimpath", "-trimpath ", ""},
		{"static-build", "symbols kept", `-ldflags="-s -w -X`, `-ldflags="-X main.x=y -X`},
		{"version-stamp", "no commit stamp", " -X github.com/botbox/botbox/internal/buildinfo.commit=${COMMIT}", ""},
		{"version-stamp", "misspelled variable", "buildinfo.version=${VERSION}", "buildinfo.Version=${VERSION}"},
		{"same-binary", "init image without the binary", "COPY --from=build /out/botbox /botbox\n# Root", "COPY --from=build /out/other /botbox\n# Root"},
		{"botbox-base", "image with a shell", "gcr.io/distroless/static-debian12:nonroot", "debian:bookworm-slim"},
		{"botbox-base", "RUN in the final stage", "COPY deploy/config.yaml /etc/botbox/config.yaml\n", "COPY deploy/config.yaml /etc/botbox/config.yaml\nRUN chmod 0600 /etc/botbox/config.yaml\n"},
		{"botbox-user", "distroless nonroot UID", "USER 1337:1337", "USER 65532:65532"},
		{"botbox-user", "root", "USER 1337:1337", "USER 1337:1337\nUSER root"},
		{"botbox-entrypoint", "shell form", `ENTRYPOINT ["/botbox"]`, `ENTRYPOINT /botbox`},
		{"botbox-entrypoint", "other config path", `CMD ["--config", "/etc/botbox/config.yaml"]`, `CMD ["--config", "config.yaml"]`},
		{"expose", "interception port missing", "EXPOSE 8080 8443 9090", "EXPOSE 8080 9090"},
		{"default-config", "no default config", "COPY deploy/config.yaml /etc/botbox/config.yaml", "COPY deploy/config.yaml /etc/config.yaml"},
		{"init-iptables", "no iptables package", "--no-install-recommends iptables", "--no-install-recommends nftables"},
		{"init-entrypoint", "entrypoint without install", `ENTRYPOINT ["/botbox", "netfilter", "install"]`, `ENTRYPOINT ["/botbox", "netfilter", "print"]`},
	}
	for _, tt := range tests {
		t.Run(tt.id+"/"+tt.name, func(t *testing.T) {
			t.Parallel()
			if !strings.Contains(orig, tt.old) {
				t.Fatalf("Dockerfile no longer contains %q; update the test", tt.old)
			}
			stages, err := parseDockerfile(strings.Replace(orig, tt.old, tt.new, 1))
			if err != nil {
				t.Fatal(err)
			}
			errs := checkDockerfile(stages)
			for _, err := range errs {
				if strings.HasPrefix(err.Error(), tt.id+": ") {
					return
				}
			}
			t.Errorf("no %q error; got %v", tt.id, errs)
		})
	}
}

func TestParseDockerfile(t *testing.T) {
	t.Parallel()
	text := "# syntax=docker/dockerfile:1\nARG X=1\nFROM --platform=$BUILDPLATFORM a:1 AS one\nRUN echo a \\\n  # dropped comment\n  && echo b\n\nfrom b:2\nuser 7\n"
	got, err := parseDockerfile(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []stage{
		{name: "one", image: "a:1", flags: []string{"--platform=$BUILDPLATFORM"}, ins: []instruction{{cmd: "RUN", args: "echo a    && echo b", line: 4}}},
		{image: "b:2", ins: []instruction{{cmd: "USER", args: "7", line: 9}}},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(stage{}, instruction{})); diff != "" {
		t.Errorf("parseDockerfile() mismatch (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"RUN x\n", "FROM a b\n", "FROM a\nRUN x \\\n"} {
		if _, err := parseDockerfile(bad); err == nil {
			t.Errorf("parseDockerfile(%q) = nil error", bad)
		}
	}
}

// TestImageDefaultConfig: the config baked into the image parses with the
// proxy's own parser, without warnings, so `docker run botbox` starts.
func TestImageDefaultConfig(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(imageConfigLocal)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range cfg.Warnings {
		t.Errorf("warning %s: %s", w.Path, w.Message)
	}
	if cfg.ListenAddrExplicit {
		t.Error("listen_addr is set; leave it at the default so BotBox also listens on ::1")
	}
}

// TestDockerfileVersionStamp builds cmd/botbox with the -ldflags of the
// Dockerfile's go build line (its ${VERSION} and ${COMMIT} filled in, as
// `docker build --build-arg` would) and checks that `botbox version` reports
// them: the -X names must be the variables internal/buildinfo reads (a
// misspelled -X is silently ignored by the linker).
func TestDockerfileVersionStamp(t *testing.T) {
	stages, err := parseDockerfile(readDockerfile(t))
	if err != nil {
		t.Fatal(err)
	}
	build := findStage(stages, stageBuild)
	if build == nil {
		t.Fatal("no build stage")
	}
	flags := ""
	for _, in := range build.all("RUN") {
		if m := ldflags.FindStringSubmatch(in.args); m != nil && strings.Contains(in.args, "go build") {
			flags = m[1]
		}
	}
	if flags == "" {
		t.Fatal("no go build -ldflags in the build stage")
	}
	const version, commit = "v9.8.7-test", "0123456789abcdef0123456789abcdef01234567"
	flags = strings.NewReplacer("${VERSION}", version, "${COMMIT}", commit).Replace(flags)
	out := filepath.Join(t.TempDir(), "botbox")
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags="+flags, "-o", out, "./cmd/botbox")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -ldflags=%q: %v\n%s", flags, err, b)
	}
	got, err := exec.Command(out, "version").Output()
	if err != nil {
		t.Fatalf("botbox version: %v", err)
	}
	if want := "botbox " + version + " (commit " + commit[:12] + ","; !strings.HasPrefix(string(got), want) {
		t.Errorf("botbox version = %q, want prefix %q", got, want)
	}
}
