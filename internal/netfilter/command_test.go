package netfilter

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRunCommand(t *testing.T) {
	ipv6NotSet := "ERROR: BOTBOX_ENABLE_IPV6 is not set.\n" +
		"  Set BOTBOX_ENABLE_IPV6=1 to mirror rules via ip6tables (recommended for dual-stack).\n" +
		"  Set BOTBOX_ENABLE_IPV6=0 for IPv4-only (ensure IPv6 is disabled or blocked separately).\n"
	warn := strings.Join(ipv6Warn, "\n") + "\n"
	printed := func(env map[string]string) string {
		var b strings.Builder
		if err := Print(mustParseEnv(t, env), &b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}

	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		setup      func(*fakeKernel)
		wantCode   int
		wantStdout string // exact unless empty and wantOutHas is set
		wantOutHas string
		wantStderr string
		wantErrHas string
	}{
		{name: "no args", args: nil, wantCode: 2, wantErrHas: "Usage: botbox netfilter install|print|remove"},
		{name: "unknown", args: []string{"apply"}, wantCode: 2, wantErrHas: `unknown command "apply"`},
		{name: "help", args: []string{"help"}, wantCode: 0, wantOutHas: "Usage: botbox netfilter"},
		{name: "install -h", args: []string{"install", "-h"}, wantCode: 0, wantErrHas: "Usage: botbox netfilter"},
		{name: "install extra arg", args: []string{"install", "now"}, env: map[string]string{EnvIPv6: "0"},
			wantCode: 2, wantErrHas: `unexpected argument "now"`},
		{name: "install bad flag", args: []string{"install", "-family", "ipv4"}, wantCode: 2,
			wantErrHas: "flag provided but not defined: -family"},
		{name: "install without ipv6", args: []string{"install"}, wantCode: 1, wantStderr: ipv6NotSet},
		{name: "print without ipv6", args: []string{"print"}, wantCode: 1, wantStderr: ipv6NotSet},
		{
			name: "install conflict warns then fails", args: []string{"install"},
			env:      map[string]string{EnvIPv6: "0", EnvHTTPSInterception: "1", EnvRedirectFromPort: "443"},
			wantCode: 1,
			wantStderr: warn +
				"ERROR: BOTBOX_ENABLE_HTTPS_INTERCEPTION=1 and BOTBOX_REDIRECT_FROM_PORT=443 conflict.\n" +
				"  Port 443 traffic would be redirected to the HTTP proxy (port 8080)\n" +
				"  instead of the HTTPS interception listener (port 8443).\n" +
				"  Use BOTBOX_REDIRECT_FROM_PORT=80 (default) with BOTBOX_ENABLE_HTTPS_INTERCEPTION=1.\n",
		},
		{
			name: "install ipv6=0", args: []string{"install"}, env: map[string]string{EnvIPv6: "0"},
			wantCode: 0, wantStderr: warn, wantOutHas: "Installing BotBox iptables rules...\n",
		},
		{
			name: "install ip6tables missing", args: []string{"install"}, env: map[string]string{EnvIPv6: "1"},
			setup:    func(k *fakeKernel) { k.missing["ip6tables"] = true },
			wantCode: 1,
			wantStderr: "ERROR: BOTBOX_ENABLE_IPV6=1 but ip6tables is not available.\n" +
				"  Install ip6tables or set BOTBOX_ENABLE_IPV6=0.\n",
		},
		{
			name: "install restore fails", args: []string{"install"}, env: map[string]string{EnvIPv6: "1"},
			setup:      func(k *fakeKernel) { k.fail["ip6tables-restore"] = errors.New("line 2 failed") },
			wantCode:   1,
			wantOutHas: "Installing BotBox iptables rules...\n",
			wantStderr: "ERROR: applying IPv6 rules: running ip6tables-restore -w 5 --noflush: exit status 1: line 2 failed\n",
		},
		{
			name: "print", args: []string{"print"}, env: map[string]string{EnvIPv6: "1"},
			wantCode: 0, wantStdout: printed(map[string]string{EnvIPv6: "1"}),
		},
		{
			name: "print ipv6 only", args: []string{"print", "-family", "ipv6"}, env: map[string]string{EnvIPv6: "1"},
			wantCode: 0, wantStdout: "# IPv6: ip6tables-restore -w 5 --noflush\n" + Render(Plan(mustParseEnv(t, map[string]string{EnvIPv6: "1"})), IPv6, nil),
		},
		{
			name: "print ipv4 only", args: []string{"print", "--family=ipv4"}, env: map[string]string{EnvIPv6: "1"},
			wantCode: 0, wantStdout: "# IPv4: iptables-restore -w 5 --noflush\n" + Render(Plan(mustParseEnv(t, map[string]string{EnvIPv6: "1"})), IPv4, nil),
		},
		{
			name: "print ipv6 when disabled", args: []string{"print", "-family=ipv6"}, env: map[string]string{EnvIPv6: "0"},
			wantCode: 1, wantStderr: warn + "ERROR: -family ipv6 needs BOTBOX_ENABLE_IPV6=1.\n",
		},
		{
			name: "print bad family", args: []string{"print", "-family=ipv5"}, env: map[string]string{EnvIPv6: "1"},
			wantCode: 2, wantErrHas: `-family must be ipv4 or ipv6 (got "ipv5")`,
		},
		{
			name: "remove without ipv6", args: []string{"remove"}, wantCode: 0,
			wantStdout: "Removing BotBox iptables rules...\n  iptables: nothing to remove\n  ip6tables: nothing to remove\nBotBox iptables rules removed.\n",
		},
		{
			name: "remove bad chain", args: []string{"remove"}, env: map[string]string{EnvFilterChain: "A B"},
			wantCode:   1,
			wantStderr: "ERROR: BOTBOX_FILTER_CHAIN is not a valid chain name (got 'A B'): only letters, digits, '_' and '-' are allowed.\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newFakeKernel()
			if tt.setup != nil {
				tt.setup(k)
			}
			var stdout, stderr strings.Builder
			code := runCommand(context.Background(), tt.args, lookupOf(getenvFrom(tt.env)), k, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			if tt.wantStdout != "" {
				if d := cmp.Diff(tt.wantStdout, stdout.String()); d != "" {
					t.Errorf("stdout (-want +got):\n%s", d)
				}
			}
			if tt.wantOutHas != "" && !strings.Contains(stdout.String(), tt.wantOutHas) {
				t.Errorf("stdout lacks %q:\n%s", tt.wantOutHas, stdout.String())
			}
			if tt.wantErrHas != "" {
				if !strings.Contains(stderr.String(), tt.wantErrHas) {
					t.Errorf("stderr lacks %q:\n%s", tt.wantErrHas, stderr.String())
				}
			} else if d := cmp.Diff(tt.wantStderr, stderr.String()); d != "" {
				t.Errorf("stderr (-want +got):\n%s", d)
			}
		})
	}
}
