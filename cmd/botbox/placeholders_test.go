package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlaceholdersPrint: the command lists each secret_ref with its env
// name, file, the placeholder as written and the hosts of the allow rules
// that reference it; a secret's real value is never read (it is in a
// secrets_dir the command does not open).
func TestPlaceholdersPrint(t *testing.T) {
	dir := t.TempDir()
	phDir := filepath.Join(dir, "ph")
	secretsDir := filepath.Join(dir, "secrets")
	for _, d := range []string{phDir, secretsDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const real = "sk-proj-REALVALUEneverPrinted0123456789"
	writeFile(t, secretsDir, "openai-api-key", real)
	writeFile(t, phDir, "openai-api-key", "sk-proj-PLACEHOLDERabcdefgh0123456789")
	cfg := writeFile(t, dir, "config.yaml", fmt.Sprintf(`
secrets_dir: %s
placeholders:
  enabled: true
  dir: %s
egress_policy:
  rules:
    - host: api.openai.com
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: openai-api-key
    - host: openai.example.test
      action: allow
      allowed_ports: [443, 8443]
      header_rewrites:
        - name: X-Key
          value: "{value}"
          secret_ref: openai-api-key
    - host: github.example.test
      action: deny
      header_rewrites:
        - name: X-Key
          value: "{value}"
          secret_ref: github-token
`, secretsDir, phDir))
	code, out, errOut := runArgs(t, nil, "placeholders", "print", "-c", cfg)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{
		"openai-api-key\n  env:         OPENAI_API_KEY\n  file:        " + filepath.Join(phDir, "openai-api-key") +
			"\n  placeholder: sk-proj-PLACEHOLDERabcdefgh0123456789\n  may go to:   api.openai.com in header Authorization, openai.example.test (ports 443,8443) in header X-Key\n",
		"github-token\n  env:         GITHUB_TOKEN\n",
		"placeholder: (not written",
		"may go to:   (nowhere: only deny rules reference it)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out+errOut, real) {
		t.Error("the real value was printed")
	}

	// Disabled placeholders, and usage errors.
	off := writeFile(t, dir, "off.yaml", "egress_policy:\n  rules:\n    - host: a.example\n      action: allow\n")
	if code, _, errOut := runArgs(t, nil, "placeholders", "print", "-c", off); code != exitError || !strings.Contains(errOut, "not enabled") {
		t.Errorf("disabled: exit %d stderr %q", code, errOut)
	}
	if code, _, _ := runArgs(t, nil, "placeholders", "list"); code != exitUsage {
		t.Errorf("unknown subcommand: exit %d", code)
	}
	if code, _, _ := runArgs(t, nil, "placeholders", "print", "-c", cfg, "extra"); code != exitUsage {
		t.Errorf("extra argument: exit %d", code)
	}
}
