// Package cluster is BotBox's suite against a real single-node Kubernetes:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a kubelet
// with containerd and runc, kube-proxy, the Helm chart and BotBox's own
// image. It lives in a module of its own so k8s.io/kubernetes stays out of
// every other go.sum. Run it alone with
//
//	cd test/cluster && go test -count=1 -v .
//
// as root (build.sh builds the cluster's binaries into the user cache the
// first time: about 35 CPU-minutes); docs/kubernetes.md says what it
// proves and how it keeps the host untouched.
package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// innerEnv carries the work directory to the copy of the test binary that
// runs inside the suite's namespaces.
const innerEnv = "BOTBOX_CLUSTER_WORK"

// The suite's images, imported into containerd (nothing is pulled: the
// node has no route to a registry).
const (
	pauseImage  = "localhost/pause:suite"
	probeImage  = "localhost/botbox-probe:suite"
	botboxImage = "localhost/botbox:dev"
)

// suite is the running cluster every test uses.
var suite *node

func TestMain(m *testing.M) {
	if work := os.Getenv(innerEnv); work != "" {
		os.Exit(inside(m, work))
	}
	os.Exit(outside())
}

// missing says why the suite cannot run on this machine ("" when it can).
func missing() string {
	if os.Geteuid() != 0 {
		return "needs root (network, mount and PID namespaces; containerd and runc)"
	}
	var absent []string
	for _, bin := range []string{"unshare", "ip", "nft", "mount", "podman", "runc", "catatonit", "go"} {
		if _, err := exec.LookPath(bin); err != nil {
			absent = append(absent, bin)
		}
	}
	if len(absent) > 0 {
		return "missing " + strings.Join(absent, ", ") + " (apt-get install -y iproute2 nftables util-linux podman runc catatonit)"
	}
	if helmBinary() == "" {
		return "missing helm (BOTBOX_HELM or PATH; .ci/run builds v3.22.0 into ~/.cache/botbox)"
	}
	return ""
}

func helmBinary() string {
	if h := os.Getenv("BOTBOX_HELM"); h != "" {
		return h
	}
	p, _ := exec.LookPath("helm")
	return p
}

// outside runs on the host: it builds (or finds) the binaries and the
// images, then re-executes this test binary in new network, mount and PID
// namespaces and returns its exit status. Afterwards it removes what the
// containers left in the cgroup hierarchy and the work directory.
func outside() int {
	if why := missing(); why != "" {
		if os.Getenv("CI") == "" {
			fmt.Println("SKIP: the cluster suite", why, "(CI is unset; under CI this fails)")
			return 0
		}
		fmt.Fprintln(os.Stderr, "FAIL: the cluster suite", why)
		return 1
	}
	start := time.Now()
	bin, err := buildBinaries()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	work, err := os.MkdirTemp("", "botbox-cluster-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	keep := os.Getenv("BOTBOX_CLUSTER_KEEP") != ""
	defer func() {
		if keep {
			fmt.Println("cluster suite: work directory kept:", work)
			return
		}
		if err := os.RemoveAll(work); err != nil {
			fmt.Fprintln(os.Stderr, "cluster suite: remove", work+":", err)
		}
	}()
	images, err := buildImages(work)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: images:", err)
		return 1
	}
	fmt.Printf("cluster suite: binaries and images ready in %s\n", time.Since(start).Round(time.Second))
	before := cgroupDirs()
	hostBefore := hostState()
	cmd := exec.Command("unshare", append([]string{"--net", "--mount", "--propagation", "private",
		"--pid", "--fork", "--mount-proc", "--kill-child", "--", os.Args[0]}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), innerEnv+"="+work, "BOTBOX_CLUSTER_BIN="+bin,
		"BOTBOX_CLUSTER_IMAGES="+strings.Join(images, ","), "BOTBOX_HELM="+helmBinary())
	err = cmd.Run()
	if left := removeNewCgroups(before); len(left) > 0 {
		fmt.Fprintln(os.Stderr, "cluster suite: cgroups left behind:", strings.Join(left, "; "))
	}
	if after := hostState(); after != hostBefore {
		fmt.Fprintf(os.Stderr, "FAIL: the host changed while the cluster ran (the cluster, or another program at the same time):\nbefore:\n%s\nafter:\n%s\n", hostBefore, after)
		return 1
	}
	if err != nil {
		if exit, ok := err.(*exec.ExitError); ok {
			return exit.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "FAIL: run the suite in its namespaces:", err)
		return 1
	}
	return 0
}

// buildBinaries runs build.sh (nothing to do when its cache is complete)
// and returns the directory it built into.
func buildBinaries() (string, error) {
	cmd := exec.Command("bash", "build.sh")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build.sh (the cluster's binaries): %w", err)
	}
	fields := strings.Fields(string(out))
	if len(fields) == 0 {
		return "", fmt.Errorf("build.sh printed no directory")
	}
	return fields[len(fields)-1], nil
}

// buildImages builds the three images with podman (its storage in the work
// directory, the host's left alone) and saves them as OCI archives:
// BotBox's own through deploy/image.sh, exactly as users build it; a pause
// image from Debian's static catatonit; the probe (./probe) FROM scratch.
func buildImages(work string) ([]string, error) {
	dir := filepath.Join(work, "images")
	root, err := filepath.Abs("../..")
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"pause", "probe", "podman/tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	engine := filepath.Join(dir, "podman.sh")
	if err := os.WriteFile(engine, fmt.Appendf(nil, "#!/bin/sh\nexport TMPDIR=%[1]s/podman/tmp\nexec podman --root %[1]s/podman/root --runroot %[1]s/podman/run --storage-driver vfs \"$@\"\n", dir), 0o755); err != nil {
		return nil, err
	}
	catatonit, err := exec.LookPath("catatonit")
	if err != nil {
		return nil, err
	}
	if err := run("cp", catatonit, filepath.Join(dir, "pause", "catatonit")); err != nil {
		return nil, err
	}
	files := map[string]string{
		"pause/Containerfile": "FROM scratch\nCOPY catatonit /catatonit\nUSER 65535:65535\nENTRYPOINT [\"/catatonit\", \"-P\"]\n",
		"probe/Containerfile": "FROM scratch\nCOPY probe /probe\nUSER 2000:2000\nENTRYPOINT [\"/probe\"]\nCMD [\"sleep\"]\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "probe", "probe"), "./probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the probe: %w: %s", err, out)
	}
	steps := [][]string{
		{engine, "build", "--pull=never", "-t", pauseImage, filepath.Join(dir, "pause")},
		{engine, "build", "--pull=never", "-t", probeImage, filepath.Join(dir, "probe")},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return nil, err
		}
	}
	image := exec.Command("bash", filepath.Join(root, "deploy", "image.sh"), botboxImage)
	image.Env = append(os.Environ(), "CONTAINER_ENGINE="+engine)
	if out, err := image.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("deploy/image.sh: %w: %s", err, out)
	}
	var archives []string
	for _, img := range []string{pauseImage, probeImage, botboxImage} {
		archive := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(img)+".tar")
		if err := run(engine, "save", "--format", "oci-archive", "-o", archive, img); err != nil {
			return nil, err
		}
		archives = append(archives, archive)
	}
	return archives, nil
}

// inside runs in the suite's namespaces (PID 1 of its PID namespace):
// isolate them, start the cluster, install the chart, run the tests, stop
// everything.
func inside(m *testing.M, work string) int {
	n := &node{work: work, bin: os.Getenv("BOTBOX_CLUSTER_BIN"), helm: os.Getenv("BOTBOX_HELM")}
	ctx := context.Background()
	start := time.Now()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "FAIL: the cluster did not come up:", err)
		fmt.Fprintln(os.Stderr, "component logs:", filepath.Join(work, "logs"), "(BOTBOX_CLUSTER_KEEP=1 keeps them)")
		n.stop()
		return 1
	}
	if err := n.isolate(); err != nil {
		return fail(err)
	}
	if err := n.pki(); err != nil {
		return fail(err)
	}
	if err := n.up(ctx, strings.Split(os.Getenv("BOTBOX_CLUSTER_IMAGES"), ",")); err != nil {
		return fail(err)
	}
	fmt.Printf("cluster suite: node Ready %s after start\n", time.Since(start).Round(100*time.Millisecond))
	if err := n.installChart(ctx); err != nil {
		return fail(err)
	}
	fmt.Printf("cluster suite: chart installed and its webhook Pods Ready %s after start\n", time.Since(start).Round(100*time.Millisecond))
	suite = n
	code := m.Run()
	stopping := time.Now()
	n.teardown(ctx)
	fmt.Printf("cluster suite: every Pod deleted and every component stopped in %s\n", time.Since(stopping).Round(100*time.Millisecond))
	return code
}

// hostState is what the cluster must leave as it found it on the host:
// the kernel settings the kubelet and kube-proxy want changed, and the
// host network namespace's netfilter rules (the kubelet and kube-proxy
// write theirs into the suite's own namespace only).
func hostState() string {
	var b strings.Builder
	for _, f := range []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward", "net/ipv4/conf/all/route_localnet"} {
		v, err := os.ReadFile("/proc/sys/" + f)
		fmt.Fprintf(&b, "%s=%s (%v)\n", f, strings.TrimSpace(string(v)), err)
	}
	for _, c := range [][]string{{"nft", "list", "ruleset"}, {"ip", "-o", "addr"}, {"ip", "route"}} {
		out, err := exec.Command(c[0], c[1:]...).CombinedOutput()
		fmt.Fprintf(&b, "$ %s (%v)\n%s", strings.Join(c, " "), err, out)
	}
	return b.String()
}
