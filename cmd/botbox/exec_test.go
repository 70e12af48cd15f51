package main

import (
	"strings"
	"testing"
)

// TestExecUsage: botbox exec's command-line errors are usage errors (exit
// 2) that run nothing; flags end at the command, whose own flags are its
// arguments (the bad config below is never reached: -c is botbox's, --bogus
// the command's).
func TestExecUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"exec"}, 2, "no command given"},
		{[]string{"exec", "--"}, 2, "no command given"},
		{[]string{"exec", "--tcp-ports", "80", "--", "true"}, 2, "port 80 is redirected"},
		{[]string{"exec", "--tcp-ports", "x", "true"}, 2, "not a port"},
		{[]string{"exec", "--no-such-flag", "true"}, 2, "no-such-flag"},
		{[]string{"exec", "-h"}, 0, "usage: botbox exec [-c PATH]"},
		{[]string{"exec", "-c", "/nonexistent/botbox.yaml", "true", "--bogus"}, 1, "config file not found: /nonexistent/botbox.yaml"},
	} {
		code, _, errOut := runArgs(t, nil, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("botbox %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, errOut, tc.code, tc.want)
		}
	}
}
