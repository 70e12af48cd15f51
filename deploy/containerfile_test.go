package deploy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/netfilter"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// The Containerfile is checked as text here (a small parser: continuations,
// comments, stages) against the invariants the image must keep, with or
// without a container engine; image_test.go builds it with deploy/image.sh
// and runs it.

// Expected values.
const (
	proxyUser         = "1337"
	imageConfigPath   = "/etc/botbox/config.yaml"
	imageConfigSrc    = "config.yaml" // in image.sh's build context
	binarySrc         = "botbox"      // in image.sh's build context
	binaryPath        = "/botbox"
	admissionSrc      = "botbox-admission" // in image.sh's build context
	admissionPath     = "/botbox-admission"
	containerfilePath = "Containerfile"
	imageConfigLocal  = "config.yaml" // deploy/config.yaml, seen from this package
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

// parseContainerfile splits a Containerfile into stages of instructions. It
// knows what Containerfiles use: parser directives and comments, backslash
// continuations (comment lines inside them are dropped, as Docker does),
// and FROM [--flag...] image [AS name].
func parseContainerfile(text string) ([]stage, error) {
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
// need /bin/sh, which the image (FROM scratch) does not have.
func execForm(in instruction) ([]string, error) {
	var v []string
	if err := json.Unmarshal([]byte(in.args), &v); err != nil {
		return nil, fmt.Errorf("line %d: %s %s is not exec (JSON) form", in.line, in.cmd, in.args)
	}
	return v, nil
}

// checkContainerfile returns one error per broken invariant, prefixed by its id.
func checkContainerfile(stages []stage) []error {
	var errs []error
	fail := func(id, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", id, fmt.Sprintf(format, a...)))
	}
	// One stage FROM scratch: nothing is pulled from a registry (a build
	// stage or a base image would be), and the image has no shell, libc or
	// package manager.
	if len(stages) != 1 || stages[0].image != "scratch" {
		var images []string
		for _, s := range stages {
			images = append(images, s.image)
		}
		fail("scratch", "stages FROM %q, want exactly one, FROM scratch (nothing pulled, no shell)", images)
	}
	if len(stages) == 0 {
		return errs
	}
	s := &stages[len(stages)-1]
	for _, in := range s.ins {
		switch in.cmd {
		case "RUN":
			fail("no-run", "line %d: RUN (the image has no shell; image.sh prepares everything on the host)", in.line)
		case "ADD":
			fail("no-run", "line %d: ADD (may fetch URLs or unpack archives; use COPY)", in.line)
		case "COPY":
			// Everything stays owned by root, so UID 1337 can change
			// neither its binary nor its default config.
			for _, f := range strings.Fields(in.args) {
				if strings.HasPrefix(f, "--chown") || strings.HasPrefix(f, "--from") {
					fail("root-owned", "line %d: COPY %s (files come from the context and stay owned by root)", in.line, f)
				}
			}
		}
	}
	copies := func(src, dst string) bool {
		for _, in := range s.all("COPY") {
			f := slices.DeleteFunc(strings.Fields(in.args), func(a string) bool { return strings.HasPrefix(a, "--") })
			if len(f) == 2 && f[0] == src && f[1] == dst {
				return true
			}
		}
		return false
	}
	if !copies(binarySrc, binaryPath) {
		fail("binary", "no COPY %s %s (the static binary image.sh builds)", binarySrc, binaryPath)
	}
	if !copies(admissionSrc, admissionPath) {
		fail("admission-binary", "no COPY %s %s (the chart's webhook Deployment runs it)", admissionSrc, admissionPath)
	}
	if u, ok := s.last("USER"); !ok || u.args != proxyUser+":"+proxyUser {
		fail("user", "USER %q, want %s:%s (the UID the egress rules exempt; the init role overrides it with 0)", u.args, proxyUser, proxyUser)
	}
	checkExec := func(id, cmd string, want []string) {
		in, ok := s.last(cmd)
		if !ok {
			fail(id, "no %s", cmd)
			return
		}
		got, err := execForm(in)
		if err != nil {
			fail(id, "%v", err)
			return
		}
		if diff := cmp.Diff(want, got); diff != "" {
			fail(id, "%s mismatch (-want +got):\n%s", cmd, diff)
		}
	}
	checkExec("entrypoint", "ENTRYPOINT", []string{binaryPath})
	checkExec("entrypoint", "CMD", []string{"--config", imageConfigPath})
	var exposed []string
	for _, in := range s.all("EXPOSE") {
		exposed = append(exposed, strings.Fields(in.args)...)
	}
	for _, p := range []string{"8080", "8443", "9090"} {
		if !slices.Contains(exposed, p) {
			fail("expose", "does not EXPOSE %s", p)
		}
	}
	if !copies(imageConfigSrc, imageConfigPath) {
		fail("default-config", "no COPY %s %s (the path CMD names)", imageConfigSrc, imageConfigPath)
	}
	return errs
}

func readContainerfile(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(containerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestContainerfile(t *testing.T) {
	t.Parallel()
	stages, err := parseContainerfile(readContainerfile(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range checkContainerfile(stages) {
		t.Error(err)
	}
}

func TestContainerfileInvariantsCatchViolations(t *testing.T) {
	t.Parallel()
	orig := readContainerfile(t)
	tests := []struct {
		id, name, old, new string
	}{
		{"scratch", "a base image", "\nFROM scratch\n", "\nFROM gcr.io/distroless/static-debian12:nonroot\n"},
		{"scratch", "a build stage", "\nFROM scratch\n", "\nFROM golang:1.26-bookworm AS build\nRUN go version\nFROM scratch\n"},
		{"no-run", "RUN", "USER 1337:1337", "RUN [\"/botbox\", \"version\"]\nUSER 1337:1337"},
		{"no-run", "ADD", "COPY --chmod=0555 botbox /botbox", "ADD https://example.com/botbox /botbox"},
		{"root-owned", "binary owned by 1337", "COPY --chmod=0555 botbox /botbox", "COPY --chown=1337:1337 botbox /botbox"},
		{"root-owned", "copied from another image", "COPY --chmod=0555 botbox /botbox", "COPY --from=docker.io/library/busybox /bin/busybox /botbox"},
		{"binary", "binary elsewhere", "COPY --chmod=0555 botbox /botbox", "COPY --chmod=0555 botbox /usr/bin/botbox"},
		{"admission-binary", "admission binary missing", "COPY --chmod=0555 botbox-admission /botbox-admission\n", ""},
		{"user", "root", "USER 1337:1337", "USER 1337:1337\nUSER root"},
		{"user", "distroless nonroot UID", "USER 1337:1337", "USER 65532:65532"},
		{"entrypoint", "shell form", `ENTRYPOINT ["/botbox"]`, `ENTRYPOINT /botbox`},
		{"entrypoint", "other config path", `CMD ["--config", "/etc/botbox/config.yaml"]`, `CMD ["--config", "config.yaml"]`},
		{"expose", "interception port missing", "EXPOSE 8080 8443 9090", "EXPOSE 8080 9090"},
		{"default-config", "no default config", "COPY --chmod=0444 config.yaml /etc/botbox/config.yaml", "COPY --chmod=0444 config.yaml /etc/config.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.id+"/"+tt.name, func(t *testing.T) {
			t.Parallel()
			if !strings.Contains(orig, tt.old) {
				t.Fatalf("Containerfile no longer contains %q; update the test", tt.old)
			}
			stages, err := parseContainerfile(strings.Replace(orig, tt.old, tt.new, 1))
			if err != nil {
				t.Fatal(err)
			}
			errs := checkContainerfile(stages)
			for _, err := range errs {
				if strings.HasPrefix(err.Error(), tt.id+": ") {
					return
				}
			}
			t.Errorf("no %q error; got %v", tt.id, errs)
		})
	}
}

func TestParseContainerfile(t *testing.T) {
	t.Parallel()
	text := "# syntax=docker/dockerfile:1\nARG X=1\nFROM --platform=$BUILDPLATFORM a:1 AS one\nRUN echo a \\\n  # dropped comment\n  && echo b\n\nfrom b:2\nuser 7\n"
	got, err := parseContainerfile(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []stage{
		{name: "one", image: "a:1", flags: []string{"--platform=$BUILDPLATFORM"}, ins: []instruction{{cmd: "RUN", args: "echo a    && echo b", line: 4}}},
		{image: "b:2", ins: []instruction{{cmd: "USER", args: "7", line: 9}}},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(stage{}, instruction{})); diff != "" {
		t.Errorf("parseContainerfile() mismatch (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"RUN x\n", "FROM a b\n", "FROM a\nRUN x \\\n"} {
		if _, err := parseContainerfile(bad); err == nil {
			t.Errorf("parseContainerfile(%q) = nil error", bad)
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

// checkManifestImage: the Pod runs every BotBox role from the one image the
// Containerfile builds: ca-init, iptables-init and the sidecar name the same
// image, none overrides its entrypoint (the image's /botbox; there is no
// shell to run anything else), iptables-init's arguments are exactly
// `netfilter install`, and it uses the nftables backend (the image has no
// iptables binaries for the other one, and auto could fall back to it).
func checkManifestImage(b *bundle) []error {
	s := spec(b)
	var caInit, iptablesInit, botbox *corev1.Container
	for i := range s.InitContainers {
		switch c := &s.InitContainers[i]; c.Name {
		case nameCAInit:
			caInit = c
		case nameIPTablesInit:
			iptablesInit = c
		case nameBotBox:
			botbox = c
		}
	}
	var errs []error
	if botbox == nil || caInit == nil || iptablesInit == nil {
		return []error{errors.New("the Pod lacks one of ca-init, iptables-init, botbox")}
	}
	for _, c := range []*corev1.Container{caInit, iptablesInit, botbox} {
		if c.Image != botbox.Image {
			errs = append(errs, fmt.Errorf("container %q runs image %q, BotBox %q: one image serves every role", c.Name, c.Image, botbox.Image))
		}
		if len(c.Command) > 0 {
			errs = append(errs, fmt.Errorf("container %q overrides the entrypoint with %q; the image runs %s and has no shell", c.Name, c.Command, binaryPath))
		}
	}
	if want := []string{"netfilter", "install"}; !slices.Equal(iptablesInit.Args, want) {
		errs = append(errs, fmt.Errorf("iptables-init args %q, want %q", iptablesInit.Args, want))
	}
	backend := ""
	for _, e := range iptablesInit.Env {
		if e.Name == netfilter.EnvBackend {
			backend = e.Value
		}
	}
	if b := backend; b != "nftables" {
		errs = append(errs, fmt.Errorf("iptables-init %s=%q, want \"nftables\": the image has no iptables binaries", netfilter.EnvBackend, b))
	}
	return errs
}

func TestManifestImage(t *testing.T) {
	t.Parallel()
	for _, err := range checkManifestImage(loadBundle(t)) {
		t.Error(err)
	}
	tests := []struct {
		name, want string
		mutate     func(t *testing.T, b *bundle)
	}{
		{"the old iptables-init image", "one image serves every role", func(t *testing.T, b *bundle) {
			container(t, b, nameIPTablesInit).Image = "botbox-iptables-init:test"
		}},
		{"init runs the proxy", `iptables-init args []`, func(t *testing.T, b *bundle) {
			container(t, b, nameIPTablesInit).Args = nil
		}},
		{"init prints only", `iptables-init args ["netfilter" "print"]`, func(t *testing.T, b *bundle) {
			container(t, b, nameIPTablesInit).Args = []string{"netfilter", "print"}
		}},
		{"iptables backend", "the image has no iptables binaries", func(t *testing.T, b *bundle) {
			setEnv(container(t, b, nameIPTablesInit), netfilter.EnvBackend, "iptables")
		}},
		{"backend left to auto", "the image has no iptables binaries", func(t *testing.T, b *bundle) {
			c := container(t, b, nameIPTablesInit)
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == netfilter.EnvBackend })
		}},
		{"a shell entrypoint", "has no shell", func(t *testing.T, b *bundle) {
			container(t, b, nameCAInit).Command = []string{"/bin/sh", "-c"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := loadBundle(t)
			tt.mutate(t, b)
			errs := checkManifestImage(b)
			for _, err := range errs {
				if strings.Contains(err.Error(), tt.want) {
					return
				}
			}
			t.Errorf("no error containing %q; got %v", tt.want, errs)
		})
	}
}
