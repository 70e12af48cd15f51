package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLocalRecipe runs examples/local/README.md's five commands as written,
// in one bash from the repository root, and expects what its table says:
// 200 for the allowed request, then default_deny, no_route and
// secret_tripwire. Only the ports (8000, 8080, 9090) and the placeholder
// directory are moved, in the commands and in a copy of the config, so the
// test can run beside other BotBoxes; bash waits for each background
// command's port before the next. It needs python3, curl and go, not root.
func TestLocalRecipe(t *testing.T) {
	t.Parallel()
	var missing []string
	for _, bin := range []string{"bash", "python3", "curl", "go"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("the local recipe needs %v", missing)
		}
		t.Skipf("the local recipe needs %v", missing)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "examples/local/README.md"))
	if err != nil {
		t.Fatal(err)
	}
	commands := recipeCommands(t, string(readme))
	if len(commands) != 5 {
		t.Fatalf("the recipe has %d commands, the README promises five", len(commands))
	}

	ports := freePorts(t, 3)
	origin, proxy, metrics := strconv.Itoa(ports[0]), strconv.Itoa(ports[1]), strconv.Itoa(ports[2])
	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(root, "examples/local/config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	moved := strings.NewReplacer(
		"listen_port: 8080", "listen_port: "+proxy,
		"metrics_port: 9090", "metrics_port: "+metrics,
		"allowed_ports: [8000]", "allowed_ports: ["+origin+"]",
		"/tmp/botbox-local", filepath.Join(dir, "botbox-local"),
	).Replace(string(cfg))
	if moved == string(cfg) || strings.Count(moved, origin) != 1 {
		t.Fatal("examples/local/config.yaml no longer has the keys this test moves; update the test")
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(moved), 0o644); err != nil {
		t.Fatal(err)
	}
	inCommand := strings.NewReplacer(
		"examples/local/config.yaml", cfgPath,
		"127.0.0.1:8080", "127.0.0.1:"+proxy,
		"http.server 8000", "http.server "+origin,
		"127.0.0.1:8000", "127.0.0.1:"+origin,
		"/tmp/botbox-local", filepath.Join(dir, "botbox-local"),
	)
	waitFor := func(url string) string {
		return fmt.Sprintf("for i in $(seq 600); do curl -s -o /dev/null %s && break; sleep 0.5; done\n", url)
	}
	var script strings.Builder
	script.WriteString("set -u\n")
	for i, c := range commands {
		script.WriteString(inCommand.Replace(c) + "\n")
		switch i {
		case 0:
			script.WriteString(waitFor("http://127.0.0.1:" + origin + "/"))
		case 1:
			script.WriteString(waitFor("http://127.0.0.1:" + metrics + "/healthz"))
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// Files, not pipes: the background origin and BotBox keep their
	// output open after bash exits, and Wait would wait for them.
	outFile, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	errFile, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = outFile, errFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	// The background origin and BotBox (go run's child) are in bash's
	// process group; stop them, then read what everything printed.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	time.Sleep(500 * time.Millisecond)
	outFile.Close()
	errFile.Close()
	outBytes, _ := os.ReadFile(outFile.Name())
	errBytes, _ := os.ReadFile(errFile.Name())
	out, errb := bytes.NewBuffer(outBytes), bytes.NewBuffer(errBytes)
	if err != nil {
		t.Fatalf("the recipe failed: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	var got []string
	for _, line := range strings.Split(out.String(), "\n") {
		if statusLine.MatchString(line) {
			got = append(got, strings.TrimSpace(line))
		}
	}
	want := []string{"200", "403 default_deny", "403 no_route", "403 secret_tripwire"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("curl printed %q, want %q\nstdout:\n%s\nstderr:\n%s", got, want, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), `"header_rewritten":["Authorization"]`) {
		t.Errorf("no decision line shows the injected Authorization header:\n%s", out.String())
	}
}

// statusLine is what the recipe's curl -w prints: a status and the
// X-Botbox-Reason header (empty for the allowed request).
var statusLine = regexp.MustCompile(`^\d{3} ?[a-z_]*$`)

// recipeCommands returns the lines of the sh block that follows the
// "<!-- recipe" marker.
func recipeCommands(t *testing.T, readme string) []string {
	t.Helper()
	_, after, ok := strings.Cut(readme, "<!-- recipe")
	if !ok {
		t.Fatal("examples/local/README.md has no <!-- recipe marker")
	}
	_, block, ok := strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatal("no ```sh block after the recipe marker")
	}
	block, _, _ = strings.Cut(block, "```")
	var cmds []string
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			cmds = append(cmds, l)
		}
	}
	return cmds
}
