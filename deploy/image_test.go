package deploy_test

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The image smoke tests build the real image with deploy/image.sh and run it
// with rootful podman: the files it holds, `version`, `check`, `netfilter
// print`, and the proxy answering /healthz as UID 1337 (this file), and a
// Pod of init, sidecar and app containers (image_pod_test.go). They need
// root, podman and runc (.ci/run installs them); under CI they fail when
// those are missing, elsewhere they skip.

// containersConf is the podman configuration the tests use unless
// CONTAINERS_CONF names another: on these machines crun fails on cgroups and
// rlimits, and runc cannot apply podman's default nofile/nproc ulimits
// ("error setting rlimit type 7: operation not permitted"). Handing podman
// this file through CONTAINERS_CONF changes nothing outside the tests' own
// podman commands.
const containersConf = `[containers]
default_ulimits = []

[engine]
runtime = "runc"
`

// podman runs podman commands with the tests' configuration.
type podman struct {
	env []string // os.Environ plus CONTAINERS_CONF
}

// imageBuild is the image the tests share, built once per test binary.
type imageBuild struct {
	once    sync.Once
	pm      *podman
	tag     string
	version string // what `git describe` said at build time
	commit  string
	confDir string
	err     error
}

// smoke is the single imageBuild of this test binary; TestMain removes the
// image and the configuration directory after every test has run.
var smoke imageBuild

func TestMain(m *testing.M) {
	code := m.Run()
	if smoke.tag != "" && smoke.pm != nil {
		if out, err := smoke.pm.command("rmi", "-f", smoke.tag).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "podman rmi %s: %v: %s\n", smoke.tag, err, out)
		}
	}
	if smoke.confDir != "" {
		_ = os.RemoveAll(smoke.confDir)
	}
	os.Exit(code)
}

// podmanMissing returns why the image tests cannot run here ("" when they can).
func podmanMissing(extra ...string) string {
	if os.Geteuid() != 0 {
		return "needs root (rootful podman)"
	}
	var missing []string
	for _, bin := range append([]string{"podman", "runc", "git", "go"}, extra...) {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("missing %s (apt-get install -y --no-install-recommends podman runc catatonit)", strings.Join(missing, ", "))
	}
	return ""
}

// requireImage skips the test when podman cannot run here, or fails it
// under CI (CI must never skip the image silently), then returns the image
// built by deploy/image.sh.
func requireImage(t *testing.T, extra ...string) (*podman, *imageBuild) {
	t.Helper()
	if reason := podmanMissing(extra...); reason != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("image test prerequisites missing in CI: %s", reason)
		}
		t.Skipf("skipping image test: %s", reason)
	}
	smoke.once.Do(func() { smoke.err = smoke.build() })
	if smoke.err != nil {
		t.Fatalf("building the image: %v", smoke.err)
	}
	return smoke.pm, &smoke
}

func (b *imageBuild) build() error {
	b.pm = &podman{env: os.Environ()}
	if os.Getenv("CONTAINERS_CONF") == "" {
		dir, err := os.MkdirTemp("", "botbox-podman-conf-")
		if err != nil {
			return err
		}
		b.confDir = dir
		conf := filepath.Join(dir, "containers.conf")
		if err := os.WriteFile(conf, []byte(containersConf), 0o644); err != nil {
			return err
		}
		b.pm.env = append(b.pm.env, "CONTAINERS_CONF="+conf)
	}
	for _, v := range []struct {
		dst  *string
		args []string
	}{
		{&b.version, []string{"describe", "--tags", "--always", "--dirty"}},
		{&b.commit, []string{"rev-parse", "HEAD"}},
	} {
		out, err := exec.Command("git", v.args...).Output()
		if err != nil {
			return fmt.Errorf("git %s: %w", strings.Join(v.args, " "), err)
		}
		*v.dst = strings.TrimSpace(string(out))
	}
	b.tag = "localhost/botbox:smoke-" + randomHex(4)
	cmd := exec.Command("bash", "image.sh", b.tag)
	cmd.Env = append(slices.Clone(b.pm.env), "CONTAINER_ENGINE=podman")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("deploy/image.sh %s: %w\n%s", b.tag, err, out)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

func (p *podman) command(args ...string) *exec.Cmd {
	cmd := exec.Command("podman", args...)
	cmd.Env = p.env
	return cmd
}

// run runs podman and returns its stdout; on failure it returns an error
// with stderr.
func (p *podman) run(args ...string) (string, error) {
	cmd := p.command(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("podman %s: %w\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func (p *podman) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := p.run(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mountImage mounts the image's root file system read-only on the host
// until the test ends.
func (p *podman) mountImage(t *testing.T, tag string) string {
	t.Helper()
	dir := strings.TrimSpace(p.mustRun(t, "image", "mount", tag))
	t.Cleanup(func() {
		if _, err := p.run("image", "unmount", tag); err != nil {
			t.Log(err)
		}
	})
	return dir
}

// TestImageFiles: the image holds exactly the binary, the default config and
// /tmp, owned by root (so UID 1337 can change neither), and the binary is
// the static, trimmed, stripped, version-stamped build image.sh promises.
func TestImageFiles(t *testing.T) {
	pm, img := requireImage(t)
	root := pm.mountImage(t, img.tag)

	type entry struct {
		mode     fs.FileMode
		uid, gid uint32
	}
	got := map[string]entry{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		st := info.Sys().(*syscall.Stat_t)
		got[rel] = entry{info.Mode(), st.Uid, st.Gid}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]entry{
		"botbox":                 {0o555, 0, 0},
		"botbox-admission":       {0o555, 0, 0},
		"etc":                    {fs.ModeDir | 0o755, 0, 0},
		"etc/botbox":             {fs.ModeDir | 0o755, 0, 0},
		"etc/botbox/config.yaml": {0o444, 0, 0},
		"tmp":                    {fs.ModeDir | fs.ModeSticky | 0o777, 0, 0},
	}
	for path, w := range want {
		if g, ok := got[path]; !ok {
			t.Errorf("/%s missing from the image", path)
		} else if g != w {
			t.Errorf("/%s: mode %v owner %d:%d, want mode %v owner %d:%d", path, g.mode, g.uid, g.gid, w.mode, w.uid, w.gid)
		}
	}
	for path := range got {
		if _, ok := want[path]; !ok {
			t.Errorf("/%s is in the image; it should hold only %v (no shell, no libc)", path, slices.Sorted(func(yield func(string) bool) {
				for p := range want {
					if !yield(p) {
						return
					}
				}
			}))
		}
	}

	cfg, err := os.ReadFile(filepath.Join(root, "etc/botbox/config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if local, err := os.ReadFile(imageConfigLocal); err != nil {
		t.Fatal(err)
	} else if !bytes.Equal(cfg, local) {
		t.Error("/etc/botbox/config.yaml differs from deploy/config.yaml")
	}

	bi, err := buildinfo.ReadFile(filepath.Join(root, "botbox"))
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" {
		t.Errorf("binary built with CGO_ENABLED=%q, want 0 (static)", settings["CGO_ENABLED"])
	}
	if settings["-trimpath"] != "true" {
		t.Error("binary built without -trimpath")
	}
	// -s -w and static linking, read from the ELF file itself (the
	// toolchain does not record -ldflags in a -trimpath build).
	f, err := elf.Open(filepath.Join(root, "botbox"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, s := range f.Sections {
		if s.Name == ".symtab" || strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_") {
			t.Errorf("binary has section %s (built without -ldflags=\"-s -w\")", s.Name)
		}
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("binary has program header %v: dynamically linked, cannot run FROM scratch", p.Type)
		}
	}
	if bi.Path != "github.com/botbox/botbox/cmd/botbox" {
		t.Errorf("binary is %s, want github.com/botbox/botbox/cmd/botbox", bi.Path)
	}
	if abi, err := buildinfo.ReadFile(filepath.Join(root, "botbox-admission")); err != nil {
		t.Error(err)
	} else if abi.Path != "github.com/botbox/botbox/cmd/botbox-admission" {
		t.Errorf("/botbox-admission is %s, want github.com/botbox/botbox/cmd/botbox-admission", abi.Path)
	}
}

// TestImageConfig: what the engine made of the Containerfile (the user, the
// entrypoint and the default command) matches what the Pod relies on.
func TestImageConfig(t *testing.T) {
	pm, img := requireImage(t)
	out := pm.mustRun(t, "image", "inspect", img.tag)
	var inspect []struct {
		Config struct {
			User       string
			Entrypoint []string
			Cmd        []string
		}
	}
	if err := json.Unmarshal([]byte(out), &inspect); err != nil || len(inspect) != 1 {
		t.Fatalf("podman image inspect: %v (%d images)", err, len(inspect))
	}
	c := inspect[0].Config
	if c.User != "1337:1337" {
		t.Errorf("image user %q, want 1337:1337", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/botbox"}) || !slices.Equal(c.Cmd, []string{"--config", imageConfigPath}) {
		t.Errorf("entrypoint %q cmd %q, want [/botbox] [--config %s]", c.Entrypoint, c.Cmd, imageConfigPath)
	}
}

// TestImageVersion: `botbox version` in the image reports the git version
// and commit image.sh stamped (a misspelled -X is silently ignored by the
// linker, and the build context has no .git to stamp from).
func TestImageVersion(t *testing.T) {
	pm, img := requireImage(t)
	got := pm.mustRun(t, "run", "--rm", "--network", "none", img.tag, "version")
	if want := "botbox " + img.version + " (commit " + img.commit[:12] + ","; !strings.HasPrefix(got, want) {
		t.Errorf("botbox version = %q, want prefix %q", got, want)
	}
}

// TestImageCheck: `botbox check` on the example config succeeds in the
// image (no file of the host is needed besides the mounted config).
func TestImageCheck(t *testing.T) {
	pm, img := requireImage(t)
	examples, err := filepath.Abs("../examples")
	if err != nil {
		t.Fatal(err)
	}
	out := pm.mustRun(t, "run", "--rm", "--network", "none", "-v", examples+":/examples:ro", img.tag,
		"check", "--config", "/examples/config.yaml")
	if !strings.Contains(out, "api.openai.com") {
		t.Errorf("check printed no effective config with the example's rules:\n%s", out)
	}
	// And it fails, naming the problem, on a config that is wrong.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("listen_port: 8080\nno_such_key: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = pm.run("run", "--rm", "--network", "none", "-v", bad+":/bad.yaml:ro", img.tag, "check", "--config", "/bad.yaml")
	if err == nil || !strings.Contains(err.Error(), "no_such_key") {
		t.Errorf("check on an unknown key: err %v, stdout %q; want a failure naming no_such_key", err, out)
	}
}

// TestImageNetfilterPrint: `botbox netfilter print` works in the image (no
// file, binary or library of a distribution needed) with either backend and
// prints exactly what the same binary prints on the host.
func TestImageNetfilterPrint(t *testing.T) {
	pm, img := requireImage(t)
	root := pm.mountImage(t, img.tag)
	for _, backend := range []string{"nftables", "iptables"} {
		t.Run(backend, func(t *testing.T) {
			env := []string{"BOTBOX_NETFILTER_BACKEND=" + backend, "BOTBOX_ENABLE_IPV6=1", "BOTBOX_ENABLE_HTTPS_INTERCEPTION=1"}
			args := []string{"run", "--rm", "--network", "none"}
			for _, e := range env {
				args = append(args, "-e", e)
			}
			got := pm.mustRun(t, append(args, img.tag, "netfilter", "print")...)
			host := exec.Command(filepath.Join(root, "botbox"), "netfilter", "print")
			host.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
			want, err := host.Output()
			if err != nil {
				t.Fatalf("botbox netfilter print on the host: %v", err)
			}
			if got != string(want) {
				t.Errorf("netfilter print in the image differs from the host's:\n--- image\n%s\n--- host\n%s", got, want)
			}
			for _, s := range []string{"1337", "8080", "8443"} {
				if !strings.Contains(got, s) {
					t.Errorf("netfilter print does not mention %s:\n%s", s, got)
				}
			}
		})
	}
}

// TestImageServesAsUID1337: the image's default command runs the proxy as
// UID/GID 1337 with the baked config, writes its probe key into the image's
// /tmp, and answers /healthz (`botbox probe` verifies the answer came from
// this BotBox); the secrets it loads never appear in its log.
func TestImageServesAsUID1337(t *testing.T) {
	pm, img := requireImage(t)
	secrets := t.TempDir()
	if err := os.Chmod(secrets, 0o755); err != nil {
		t.Fatal(err)
	}
	canary := "sk-canary-" + randomHex(12)
	for _, name := range []string{"openai-api-key", "anthropic-api-key"} {
		if err := os.WriteFile(filepath.Join(secrets, name), []byte(canary+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	name := "botbox-smoke-" + randomHex(4)
	pm.mustRun(t, "run", "-d", "--name", name, "--network", "none", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges", "-v", secrets+":/var/run/secrets/botbox:ro", img.tag)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := pm.command("logs", name).CombinedOutput()
			t.Logf("botbox logs:\n%s", logs)
		}
		if _, err := pm.run("rm", "-f", "-t", "0", name); err != nil {
			t.Log(err)
		}
	})
	waitHealthy(t, pm, name)

	pid := strings.TrimSpace(pm.mustRun(t, "inspect", "--format", "{{.State.Pid}}", name))
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		key, val, _ := strings.Cut(line, ":")
		if key == "Uid" || key == "Gid" {
			if f := strings.Fields(val); !slices.Equal(f, []string{"1337", "1337", "1337", "1337"}) {
				t.Errorf("proxy process %s: %s %v, want 1337 (real, effective, saved, fs)", pid, key, f)
			}
		}
	}
	if exe, err := os.Readlink("/proc/" + pid + "/exe"); err != nil || filepath.Base(exe) != "botbox" {
		t.Errorf("container process %s is %q (%v), want /botbox", pid, exe, err)
	}
	logs, err := pm.command("logs", name).CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(logs, []byte(canary)) {
		t.Error("a secret value appears in BotBox's log")
	}
}

// waitHealthy polls `botbox probe` in the container until BotBox answers
// /healthz, and fails as soon as the container is no longer running. It
// has no deadline of its own: the go test timeout bounds it.
func waitHealthy(t *testing.T, pm *podman, name string) {
	t.Helper()
	for {
		_, err := pm.run("exec", name, "/botbox", "probe", "http://127.0.0.1:9090/healthz")
		if err == nil {
			return
		}
		state, ierr := pm.run("inspect", "--format", "{{.State.Running}}", name)
		if ierr != nil || strings.TrimSpace(state) != "true" {
			t.Fatalf("container %s stopped before /healthz answered: %v", name, errors.Join(err, ierr))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestImageCANew: the ca-init role. `botbox ca new` as the image's UID 1337
// on a read-only root writes a CA certificate (0444) and its key (0400)
// owned by 1337 into the mounted volumes, as deploy/kubernetes's ca-init does.
func TestImageCANew(t *testing.T) {
	pm, img := requireImage(t)
	certDir, keyDir := t.TempDir(), t.TempDir()
	for _, d := range []string{certDir, keyDir} {
		if err := os.Chown(d, 1337, 1337); err != nil {
			t.Fatal(err)
		}
	}
	pm.mustRun(t, "run", "--rm", "--network", "none", "--read-only", "--cap-drop", "ALL",
		"-v", certDir+":/ca-cert", "-v", keyDir+":/ca-key", img.tag,
		"ca", "new", "--cert-out", "/ca-cert/ca.crt", "--key-out", "/ca-key/ca.key", "--days", "1", "--if-missing")
	for _, f := range []struct {
		path string
		mode fs.FileMode
	}{{filepath.Join(certDir, "ca.crt"), 0o444}, {filepath.Join(keyDir, "ca.key"), 0o400}} {
		info, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		st := info.Sys().(*syscall.Stat_t)
		if info.Mode() != f.mode || st.Uid != 1337 {
			t.Errorf("%s: mode %v owner %d, want %v owned by 1337", filepath.Base(f.path), info.Mode(), st.Uid, f.mode)
		}
	}
	data, err := os.ReadFile(filepath.Join(certDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("ca.crt holds no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.IsCA {
		t.Error("ca.crt is not a CA certificate")
	}
}
