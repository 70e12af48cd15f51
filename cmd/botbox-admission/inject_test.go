package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInjectCommand: `botbox inject -f FILE` writes what the golden file of
// internal/inject holds for the same options; a refusal exits 1 naming the
// container, with nothing on stdout.
func TestInjectCommand(t *testing.T) {
	code, out, errb := runArgs(t, nil, "inject", "-f", "../../internal/inject/testdata/workloads.yaml",
		"--interception", "--ipv6", "--dns-guard", "--placeholders",
		"--image", "registry.example/botbox:1.2.3", "--config-map", "agent-policy", "--secret", "agent-keys")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errb)
	}
	want, err := os.ReadFile("../../internal/inject/testdata/workloads.interception-ipv6-dnsguard-placeholders.golden")
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Error("output differs from the golden file of internal/inject")
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: app\n    image: x\n    securityContext: {runAsUser: 1337}\n"), 0o644)
	if code, out, errb = runArgs(t, nil, "inject", "-f", bad); code != exitError {
		t.Errorf("exit %d for a 1337 app, want %d", code, exitError)
	}
	if out != "" || !strings.Contains(errb, `container "app" runs as UID 1337`) {
		t.Errorf("stdout %q, stderr %q", out, errb)
	}
}

// TestInjectFlags: the defaults turn the DNS guard and the IPv6 rules on;
// --dns-guard=false --ipv6=false turn them off with a warning each; an
// unknown Pod template is refused unless --pass-unknown, which warns; the
// allowlist flags reach the injector.
func TestInjectFlags(t *testing.T) {
	dir := t.TempDir()
	pod := filepath.Join(dir, "pod.yaml")
	os.WriteFile(pod, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  securityContext: {runAsUser: 1000}\n  containers: [{name: app, image: ghcr.io/a/b}]\n"), 0o644)
	rollout := filepath.Join(dir, "rollout.yaml")
	os.WriteFile(rollout, []byte("apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: {name: r}\nspec:\n  template:\n    spec:\n      containers: [{name: app, image: x}]\n"), 0o644)
	for _, tc := range []struct {
		name            string
		args            []string
		code            int
		stdout, stderr  []string
		notOut, notErrs []string
	}{
		{"defaults", []string{"-f", pod}, exitOK, []string{"name: BOTBOX_ENABLE_IPV6\n      value: \"1\"", "BOTBOX_DNS_GUARD_PORT"}, []string{"no --allowed-image-registries"}, nil, []string{"port 53"}},
		{"weakened", []string{"-f", pod, "--dns-guard=false", "--ipv6=false"}, exitOK, []string{"value: \"0\""}, []string{"port 53 of any host", "IPv6"}, []string{"BOTBOX_DNS_GUARD_PORT"}, nil},
		{"dns servers", []string{"-f", pod, "--dns-guard=false", "--dns-servers", "10.96.0.10"}, exitOK, []string{"BOTBOX_DNS_SERVERS", "10.96.0.10"}, nil, nil, []string{"port 53"}},
		{"dns servers with the guard", []string{"-f", pod, "--dns-servers", "10.96.0.10"}, exitError, nil, []string{"--dns-servers needs --dns-guard=false"}, nil, nil},
		{"registry allowlist", []string{"-f", pod, "--allowed-image-registries", "docker.io, registry.example"}, exitError, nil, []string{"registry ghcr.io", "not in --allowed-image-registries"}, nil, nil},
		{"registry listed", []string{"-f", pod, "--allowed-image-registries", "ghcr.io"}, exitOK, []string{"ghcr.io/a/b"}, nil, nil, []string{"allowed-image-registries"}},
		{"unknown Pod template", []string{"-f", rollout}, exitError, nil, []string{"Rollout carries a Pod template", "--pass-unknown"}, nil, nil},
		{"pass unknown", []string{"-f", rollout, "--pass-unknown"}, exitOK, []string{"kind: Rollout"}, []string{"warning: argoproj.io/v1alpha1 Rollout carries a Pod template"}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errb := runArgs(t, nil, append([]string{"inject"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, errb)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.notOut {
				if strings.Contains(out, w) {
					t.Errorf("stdout has %q", w)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(errb, w) {
					t.Errorf("stderr lacks %q: %s", w, errb)
				}
			}
			for _, w := range tc.notErrs {
				if strings.Contains(errb, w) {
					t.Errorf("stderr has %q: %s", w, errb)
				}
			}
		})
	}
}

func TestInjectAndWebhookUsage(t *testing.T) {
	for _, args := range [][]string{
		{"inject"},
		{"inject", "-f", "x.yaml", "extra"},
		{"inject", "-f", "x.yaml", "--image", ""},
		{"webhook"},
		{"webhook", "--tls-cert", "c.pem"},
	} {
		if code, _, _ := runArgs(t, nil, args...); code == exitOK {
			t.Errorf("%q: exit 0", args)
		}
	}
}
