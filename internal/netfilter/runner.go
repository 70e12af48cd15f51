package netfilter

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// Runner runs the iptables programs. Install and Remove do all their system
// access through it, so tests can substitute a fake.
type Runner interface {
	// LookPath reports where the program name is, like exec.LookPath.
	LookPath(name string) (string, error)
	// Run runs name with args, feeding stdin (nil for none), and returns its
	// standard output. A failure (including a non-zero exit) is returned as
	// an error that carries the program's standard error.
	Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)
	// WriteSysctl sets the sysctl key (dotted, e.g.
	// "net.ipv6.conf.all.force_mld_version") to value in the network
	// namespace the programs act in.
	WriteSysctl(ctx context.Context, key, value string) error
}

// ExecRunner is the real Runner: it runs the programs with os/exec.
type ExecRunner struct {
	// Prefix is put in front of every command that Run runs, for example
	// {"ip", "netns", "exec", "pod1"} to act inside a network namespace.
	// LookPath is not affected (the namespace shares the file system).
	Prefix []string
}

// LookPath implements Runner with exec.LookPath.
func (ExecRunner) LookPath(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("looking up %s: %w", name, err)
	}
	return p, nil
}

// Run implements Runner.
func (r ExecRunner) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	argv := append(append(slices.Clone(r.Prefix), name), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), &CommandError{Args: append([]string{name}, args...), Stderr: stderr.String(), Err: err}
	}
	return stdout.Bytes(), nil
}

// WriteSysctl implements Runner. Without a Prefix it writes
// /proc/sys/<key with dots as slashes> of the calling process's network
// namespace (the init container's: no sysctl program is needed in the
// image); with a Prefix it runs `sysctl -w key=value` through it.
func (r ExecRunner) WriteSysctl(ctx context.Context, key, value string) error {
	if strings.ContainsAny(key, "/ ") || strings.Contains(key, "..") {
		return fmt.Errorf("invalid sysctl name %q", key)
	}
	if len(r.Prefix) > 0 {
		_, err := r.Run(ctx, nil, "sysctl", "-q", "-w", key+"="+value)
		return err
	}
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	if err := os.WriteFile(path, []byte(value+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// CommandError is a failed command: its arguments (without any prefix),
// what it wrote to standard error, and the exec error.
type CommandError struct {
	Args   []string
	Stderr string
	Err    error
}

func (e *CommandError) Error() string {
	msg := fmt.Sprintf("running %s: %v", strings.Join(e.Args, " "), e.Err)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + strings.ReplaceAll(s, "\n", "; ")
	}
	return msg
}

func (e *CommandError) Unwrap() error { return e.Err }
