package main

// Process orchestration: each benchmarked program runs in its own process group, pinned to a CPU
// with taskset, and is stopped with SIGTERM (then SIGKILL).

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"
)

type proc struct {
	name string
	cmd  *exec.Cmd
	out  *os.File
	once sync.Once // stop runs once (the signal handler may race the normal path)
}

func (r *runner) start(name, cpu string, env []string, port int, prog string, args ...string) (*proc, error) {
	out, err := os.Create(r.path(name + ".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("taskset", append([]string{"-c", cpu, prog}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	// BotBox logs one line per request: into /dev/null, so that disk speed
	// does not enter the measurement (stderr is kept).
	if name == "origin" || name == "floor" || name == "nginx" {
		cmd.Stdout = out
	}
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, out: out}
	r.stopMu.Lock()
	r.procs = append(r.procs, p)
	r.stopMu.Unlock()
	if err := waitPort(port, 15*time.Second); err != nil {
		log, _ := os.ReadFile(out.Name())
		return nil, fmt.Errorf("%s did not listen on %d: %w\n%s", name, port, err, log)
	}
	return p, nil
}

func (r *runner) stop(p *proc) {
	if p == nil {
		return
	}
	p.once.Do(func() { r.stopNow(p) })
}

func (r *runner) stopNow(p *proc) {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	_ = p.out.Close()
}

func (r *runner) stopAll() {
	r.stopMu.Lock()
	procs := slices.Clone(r.procs)
	r.stopMu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		r.stop(procs[i])
	}
}

func waitPort(port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
