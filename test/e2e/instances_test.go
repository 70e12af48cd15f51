package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// instance is one `botbox run` started as a UID of its own on the host's
// loopback (no namespace: the point is several BotBoxes sharing one /tmp).
type instance struct {
	uid         int
	metricsPort int
	cmd         *exec.Cmd
	out         *bytes.Buffer
	done        chan error
}

// TestInstancesPerUIDProbeKeys is issue 20 §2: BotBoxes as two UIDs (and a
// second one under the first UID) on one host, every one with the default
// probe key path, all start and all pass `botbox probe`; stopping one
// leaves the others' keys and probes intact. On ee87e5f the second UID
// could not start (rename over /tmp/botbox-probe.key: operation not
// permitted) and the same-UID instance replaced the first one's key.
func TestInstancesPerUIDProbeKeys(t *testing.T) {
	t.Parallel()
	bins := requireRoot(t)
	// A /tmp of the test's own (1777), in a directory every UID may
	// traverse (t.TempDir's parent is 0700).
	base, err := os.MkdirTemp("", "botbox-instances-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	tmp := filepath.Join(base, "tmp")
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "TMPDIR=" + tmp, "HOME=/"}
	credential := func(uid int) *syscall.SysProcAttr {
		return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}, Setpgid: true}
	}
	probe := func(in *instance) error {
		cmd := exec.Command(bins.botbox, "probe", fmt.Sprintf("http://127.0.0.1:%d/healthz", in.metricsPort))
		cmd.Env, cmd.SysProcAttr = env, credential(in.uid)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("probe of UID %d's BotBox: %v: %s", in.uid, err, out)
		}
		return nil
	}
	startInstance := func(uid int) *instance {
		ports := freePorts(t, 2)
		cfg := filepath.Join(base, fmt.Sprintf("config-%d-%d.yaml", uid, ports[1]))
		yaml := fmt.Sprintf("listen_port: %d\nmetrics_port: %d\negress_policy:\n  default_action: deny\n  rules: []\n", ports[0], ports[1])
		if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		in := &instance{uid: uid, metricsPort: ports[1], out: &bytes.Buffer{}, done: make(chan error, 1)}
		in.cmd = exec.Command(bins.botbox, "--config", cfg)
		in.cmd.Env, in.cmd.SysProcAttr = env, credential(uid)
		in.cmd.Stdout, in.cmd.Stderr = in.out, in.out
		if err := in.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { in.done <- in.cmd.Wait() }()
		t.Cleanup(func() { in.stop(t) })
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := probe(in)
			if err == nil {
				return in
			}
			select {
			case werr := <-in.done:
				in.done <- werr
				t.Fatalf("UID %d's BotBox exited: %v\n%s", uid, werr, in.out)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v\n%s", err, in.out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	keyFile := func(in *instance) string {
		return filepath.Join(tmp, fmt.Sprintf("botbox-%d", in.uid), fmt.Sprintf("probe-%d.key", in.metricsPort))
	}

	a := startInstance(uidApp)
	b := startInstance(uidBotBox)
	c := startInstance(uidApp) // the same UID as a, another metrics port
	for _, in := range []*instance{a, b, c} {
		if err := probe(in); err != nil {
			t.Error(err)
		}
		fi, err := os.Stat(keyFile(in))
		if err != nil || fi.Mode().Perm() != 0o400 {
			t.Errorf("UID %d's key %s: %v", in.uid, keyFile(in), err)
			continue
		}
		dir, err := os.Stat(filepath.Dir(keyFile(in)))
		if err != nil || dir.Mode().Perm() != 0o700 || int(dir.Sys().(*syscall.Stat_t).Uid) != in.uid {
			t.Errorf("UID %d's key directory: %v %v", in.uid, dir.Mode(), err)
		}
	}
	b.stop(t)
	c.stop(t)
	for _, in := range []*instance{b, c} {
		if _, err := os.Stat(keyFile(in)); !os.IsNotExist(err) {
			t.Errorf("UID %d's stopped BotBox left its key (%v)", in.uid, err)
		}
	}
	if err := probe(a); err != nil {
		t.Errorf("after the others stopped: %v", err)
	}
	if _, err := os.Stat(keyFile(a)); err != nil {
		t.Errorf("UID %d's key is gone after another instance stopped: %v", a.uid, err)
	}
}

// stop sends SIGTERM and waits for the exit (idempotent).
func (in *instance) stop(t *testing.T) {
	t.Helper()
	if in.cmd.ProcessState != nil {
		return
	}
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-in.done:
		if err != nil {
			t.Errorf("UID %d's BotBox: %v\n%s", in.uid, err, in.out)
		}
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-in.cmd.Process.Pid, syscall.SIGKILL)
		t.Errorf("UID %d's BotBox did not stop", in.uid)
	}
}

// freePorts returns n loopback TCP ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}
