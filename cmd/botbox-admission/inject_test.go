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
