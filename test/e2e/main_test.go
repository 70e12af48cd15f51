package e2e

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// binaries are the programs the suite runs, built once per test binary.
type binaries struct {
	dir    string // world-readable directory holding the three binaries
	botbox string
	origin string
	client string
}

// builder builds the binaries on first use, so `go test -run '^$' -bench .`
// (and runs that skip every test) do not pay for the build.
type builder struct {
	once sync.Once
	bins binaries
	err  error
}

// build is the single builder of this test binary. It is package state
// because TestMain is the only place that can remove the build directory
// after every test has run; nothing else mutates it.
var build builder

// e2eParallel is how many tests of this package run at once unless
// -parallel is given. The tests mostly wait (connect timeouts proving a
// DROP, process start-up, origin polling), not compute, so they overlap
// well beyond GOMAXPROCS, which is go test's default and 2 on small CI
// machines. Every test is parallel (each builds its own namespaces with
// newPod) except the ones whose assertion is a wall-clock budget
// (debounce+reloadMargin): TestAT003SecretAppearsHealthzReadyWithoutRestart,
// TestAT010LogNeverContainsSecret, TestSecretRotationWhileRequestsFlow,
// TestWebSocketBodyLimitE2E and TestReloadClosesWebSocketE2E run first,
// alone in this package, so the parallel ones do not eat their margin.
const e2eParallel = 4

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", strconv.Itoa(max(e2eParallel, runtime.GOMAXPROCS(0)))); err != nil {
			fmt.Fprintf(os.Stderr, "setting -test.parallel: %v\n", err)
			os.Exit(2)
		}
	}
	code := m.Run()
	removeLocalUser()
	if build.bins.dir != "" {
		_ = os.RemoveAll(build.bins.dir)
	}
	os.Exit(code)
}

// prerequisites returns why the suite cannot run here ("" when it can).
func prerequisites() string {
	if os.Geteuid() != 0 {
		return "needs root (network namespaces, iptables, setpriv)"
	}
	var missing []string
	for _, bin := range []string{"ip", "iptables", "ip6tables", "iptables-save", "ip6tables-save", "iptables-restore", "ip6tables-restore", "nft", "setpriv", "go"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("missing %s (apt-get install -y iptables nftables iproute2 util-linux)", strings.Join(missing, ", "))
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return "no network namespace support: " + err.Error()
	}
	return ""
}

// requireRoot skips the test when the privileged prerequisites are missing,
// or fails it when the CI environment variable is set (CI must never skip
// the containment proof silently). It then returns the built binaries.
func requireRoot(t *testing.T) binaries {
	t.Helper()
	if reason := prerequisites(); reason != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("e2e prerequisites missing in CI: %s", reason)
		}
		t.Skipf("skipping end-to-end test: %s", reason)
	}
	build.once.Do(func() { build.bins, build.err = buildBinaries() })
	if build.err != nil {
		t.Fatalf("building binaries: %v", build.err)
	}
	return build.bins
}

// buildBinaries builds botbox and the two helpers into a fresh directory
// that UIDs 1000 and 1337 can read and execute.
func buildBinaries() (binaries, error) {
	root, err := moduleRoot()
	if err != nil {
		return binaries{}, err
	}
	dir, err := os.MkdirTemp("", "botbox-e2e-bin-")
	if err != nil {
		return binaries{}, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return binaries{}, err
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", dir+string(filepath.Separator),
		"./cmd/botbox", "./test/e2e/cmd/e2e-origin", "./test/e2e/cmd/e2e-client")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		_ = os.RemoveAll(dir)
		return binaries{}, fmt.Errorf("go build: %w\n%s", err, out.String())
	}
	return binaries{
		dir:    dir,
		botbox: filepath.Join(dir, "botbox"),
		origin: filepath.Join(dir, "e2e-origin"),
		client: filepath.Join(dir, "e2e-client"),
	}, nil
}

// moduleRoot is the directory of go.mod (the tests run in test/e2e).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside a module")
	}
	return filepath.Dir(gomod), nil
}
