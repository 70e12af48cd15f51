package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// runArgs runs the command line args with an empty environment and stdin.
func runArgs(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string { return env[k] }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = run(ctx, args, getenv, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// TestDispatch: the binary's own commands, its usage on no or an unknown
// command (exit 2), and its name in version and help output.
func TestDispatch(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{nil, exitUsage, "", "botbox-admission inject -f FILE"},
		{[]string{"nope"}, exitUsage, "", `botbox-admission: unknown command "nope"`},
		{[]string{"help"}, exitOK, "botbox-admission webhook --tls-cert F", ""},
		{[]string{"version"}, exitOK, "botbox-admission ", ""},
		{[]string{"inject", "-h"}, exitOK, "", "`botbox-admission help` lists every command."},
		{[]string{"inject", "-f", "/nonexistent.yaml"}, exitError, "", "botbox-admission inject: open /nonexistent.yaml"},
	} {
		code, out, errb := runArgs(t, nil, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.inStdout) || !strings.Contains(errb, tc.inStderr) {
			t.Errorf("%q: exit %d (want %d)\nstdout %q (want %q)\nstderr %q (want %q)", tc.args, code, tc.code, out, tc.inStdout, errb, tc.inStderr)
		}
	}
}
