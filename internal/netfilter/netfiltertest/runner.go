// Package netfiltertest provides a fake netfilter.Runner (and NoNFTables, an
// nf_tables dialer that always fails) for tests of code
// that drives netfilter.Install and netfilter.Remove (the botbox CLI).
//
// Runner models no kernel state: every iptables-save returns an empty dump,
// every restore succeeds unless told to fail. It is for exercising the
// paths around the rules (checks, error messages, exit statuses); the
// install and remove logic itself is tested against a modelled kernel in
// package netfilter and against the real kernel in the privileged and e2e
// suites. It deliberately does not read the environment or touch the
// system.
package netfiltertest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/botbox/botbox/internal/netfilter"
	"github.com/google/nftables"
)

// Runner is a fake netfilter.Runner. The zero value finds every program and
// succeeds at everything. It is not safe for concurrent use.
type Runner struct {
	// Missing names programs LookPath does not find.
	Missing map[string]bool
	// Fail maps a command-line prefix ("ip6tables -w 5 -t nat") to the
	// standard error of its failure (exit status 1).
	Fail map[string]string
	// SysctlErr, when set, is what WriteSysctl returns.
	SysctlErr error
	// Calls records every call: "cmd args", "sysctl key=value".
	Calls []string
}

var _ netfilter.Runner = (*Runner)(nil)

// LookPath implements netfilter.Runner.
func (r *Runner) LookPath(name string) (string, error) {
	if r.Missing[name] {
		return "", fmt.Errorf("looking up %s: %w", name, errors.New("executable file not found in $PATH"))
	}
	return "/usr/sbin/" + name, nil
}

// Run implements netfilter.Runner: a failure from Fail, else an empty
// output.
func (r *Runner) Run(_ context.Context, _ []byte, name string, args ...string) ([]byte, error) {
	argv := append([]string{name}, args...)
	line := strings.Join(argv, " ")
	r.Calls = append(r.Calls, line)
	for prefix, stderr := range r.Fail {
		if strings.HasPrefix(line, prefix) {
			return nil, &netfilter.CommandError{Args: argv, Stderr: stderr, Err: errors.New("exit status 1")}
		}
	}
	return nil, nil
}

// WriteSysctl implements netfilter.Runner.
func (r *Runner) WriteSysctl(_ context.Context, key, value string) error {
	r.Calls = append(r.Calls, "sysctl "+key+"="+value)
	return r.SysctlErr
}

// NoNFTables is a netfilter.NFTDialer for a system without nf_tables: every
// dial fails, so BOTBOX_NETFILTER_BACKEND=auto falls back to iptables (and
// the fake Runner) and =nftables fails with the "not available" message.
// It never opens a socket.
type NoNFTables struct{}

var _ netfilter.NFTDialer = NoNFTables{}

// DialNFT implements netfilter.NFTDialer.
func (NoNFTables) DialNFT() (*nftables.Conn, error) {
	return nil, errors.New("nf_tables is not modelled by netfiltertest")
}
