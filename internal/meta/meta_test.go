package meta

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/config"
)

const module = "github.com/botbox/botbox"

type pkg struct {
	ImportPath string
	Doc        string
	Name       string
	Imports    []string
	Deps       []string
	GoFiles    []string
}

func list(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestEveryPackageHasDoc(t *testing.T) {
	for _, p := range list(t, "./...") {
		if len(p.GoFiles) == 0 {
			continue
		}
		if p.Doc == "" {
			t.Errorf("%s has no package doc comment", p.ImportPath)
			continue
		}
		want := "Package " + p.Name + " "
		if p.Name == "main" {
			want = "Command "
		}
		if !strings.HasPrefix(p.Doc, want) {
			t.Errorf("%s: doc should start %q, got %q", p.ImportPath, want, p.Doc)
		}
	}
}

// allowedInternal lists, per internal package, the internal packages it may
// import (style.md §3.1). Leaves import nothing internal.
var allowedInternal = map[string][]string{
	"echo":        {},
	"secretref":   {},
	"hostport":    {"echo"},
	"h1parse":     {}, // a leaf: net/http's request head reader, faster
	"reqpath":     {"echo"},
	"telemetry":   {},
	"buildinfo":   {},
	"admin":       {},
	"addrguard":   {},
	"config":      {"addrguard", "echo", "hostport", "reqpath", "secretref"}, // addrguard: the metadata-range warning
	"secrets":     {"secretref", "volwatch"},                                 // secretref.Valid: the one secret_ref name rule
	"volwatch":    {},
	"generation":  {"addrguard", "config", "policy", "rewrite"},
	"policy":      {"addrguard", "config", "hostport", "reqpath"},
	"rewrite":     {"config", "echo", "secrets"},         // secrets only for the Value type
	"placeholder": {"secretref", "secrets", "telemetry"}, // secrets only for the Value type; telemetry for log keys
	"upstream":    {"addrguard"},
	"scrub":       {}, // a leaf: patterns and masking, no HTTP, no logging
	"mitm":        {"echo", "hostport"},
	"netfilter":   {},
	"listener":    {"telemetry"},
	"engine":      {"h1parse"},                                                                                                                                              // an HTTP/1.1 server, nothing of BotBox's policy
	"credential":  {"config", "secrets", "telemetry", "upstream"},                                                                                                           // secrets only for the Value type; upstream: the token client's dial policy
	"proxy":       {"config", "credential", "engine", "generation", "hostport", "placeholder", "policy", "reqpath", "rewrite", "scrub", "secrets", "telemetry", "upstream"}, // reqpath: Override for the policy's Target
	"cli":         {},
	"localmode":   {"config", "mitm", "placeholder", "secretref", "server", "telemetry"}, // server: the sidecar's pipeline, fed the listeners made in the command's namespace
	"inject":      {"netfilter"},
	"webhook":     {"inject", "telemetry"},
	"dnsguard":    {"generation", "hostport", "policy", "telemetry"},                                                                                                                                                    // hostport: the same canonical name the policy judged
	"server":      {"addrguard", "admin", "config", "credential", "dnsguard", "engine", "generation", "hostport", "listener", "mitm", "placeholder", "policy", "proxy", "secrets", "telemetry", "upstream", "volwatch"}, // volwatch: the config file watch
}

func TestInternalImportRules(t *testing.T) {
	for _, p := range list(t, "./internal/...") {
		rel := strings.TrimPrefix(p.ImportPath, module+"/internal/")
		top, _, _ := strings.Cut(rel, "/")
		if top == "testutil" || top == "meta" {
			continue
		}
		allowed, ok := allowedInternal[top]
		if !ok {
			t.Errorf("%s: no import rule; add it to allowedInternal", p.ImportPath)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				if isKubernetes(imp) && top != "inject" && top != "webhook" {
					t.Errorf("%s imports %s; k8s.io and sigs.k8s.io are allowed only in inject and webhook", p.ImportPath, imp)
				}
				continue
			}
			irel := strings.TrimPrefix(imp, module+"/internal/")
			itop, _, _ := strings.Cut(irel, "/")
			if itop == top {
				continue
			}
			if !slices.Contains(allowed, itop) {
				t.Errorf("%s imports %s, which the layering rules forbid", p.ImportPath, imp)
			}
		}
	}
}

// isKubernetes reports whether the package path imp belongs to a Kubernetes
// module (k8s.io/..., sigs.k8s.io/...), sigs.k8s.io/yaml included.
func isKubernetes(imp string) bool {
	return strings.HasPrefix(imp, "k8s.io/") || strings.HasPrefix(imp, "sigs.k8s.io/")
}

// testOnlyDep reports whether a binary linking d links test code.
func testOnlyDep(d string) bool {
	return d == "testing" || d == "net/http/pprof" ||
		strings.HasPrefix(d, module+"/internal/testutil") ||
		strings.HasPrefix(d, "github.com/evanphx/") || // JSON patch: tests only
		strings.HasPrefix(d, "github.com/stretchr/")
}

// binaryDeps returns the transitive dependencies of the main package cmd.
func binaryDeps(t *testing.T, cmd string) []string {
	t.Helper()
	ps := list(t, module+"/"+cmd)
	if len(ps) != 1 {
		t.Fatalf("%s not found", cmd)
	}
	return ps[0].Deps
}

// TestBinaryDependencies: neither binary links test code; the sidecar
// embeds the fallback roots for scratch images.
func TestBinaryDependencies(t *testing.T) {
	for _, cmd := range []string{"cmd/botbox", "cmd/botbox-admission"} {
		deps := binaryDeps(t, cmd)
		for _, d := range deps {
			if testOnlyDep(d) {
				t.Errorf("the %s binary links %s", cmd, d)
			}
		}
		if cmd == "cmd/botbox" && !slices.Contains(deps, "golang.org/x/crypto/x509roots/fallback") {
			t.Error("the botbox binary must embed the fallback roots for scratch images")
		}
	}
}

// TestSidecarLinksNoKubernetes: the binary every Pod runs (cmd/botbox)
// depends on no Kubernetes module and not on internal/inject or
// internal/webhook; botbox-admission has those (and must, or the split
// is moot and this test would pass vacuously).
func TestSidecarLinksNoKubernetes(t *testing.T) {
	for _, d := range binaryDeps(t, "cmd/botbox") {
		if isKubernetes(d) || d == module+"/internal/inject" || d == module+"/internal/webhook" {
			t.Errorf("the botbox sidecar binary links %s; Kubernetes code belongs in cmd/botbox-admission", d)
		}
	}
	admission := binaryDeps(t, "cmd/botbox-admission")
	for _, want := range []string{"k8s.io/api/core/v1", module + "/internal/inject", module + "/internal/webhook"} {
		if !slices.Contains(admission, want) {
			t.Errorf("botbox-admission does not link %s", want)
		}
	}
}

// TestReadmeConfigSnippetsParse keeps the README's examples honest: every
// ```yaml block is a complete configuration that config.Parse accepts.
func TestReadmeConfigSnippetsParse(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, part := range strings.Split(string(data), "```yaml\n")[1:] {
		snippet, _, _ := strings.Cut(part, "```")
		blocks++
		if _, err := config.Parse([]byte(dedent(snippet))); err != nil {
			t.Errorf("README yaml block %d does not parse: %v\n%s", blocks, err, snippet)
		}
	}
	if blocks == 0 {
		t.Fatal("no yaml block found in README.md")
	}
}

// dedent removes the common leading indentation (blocks inside list items).
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}

// TestNoConflictMarkers: no text file of the repository keeps a line of a
// merge conflict (a marker in a document compiles and parses everywhere
// else, so nothing else would catch it).
func TestNoConflictMarkers(t *testing.T) {
	root := "../.."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == "testdata" || name == "results" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".yaml", ".yml", ".sh", ".json", ".tpl", ".txt", ".mod":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "<<<<<<< ") || strings.HasPrefix(line, ">>>>>>> ") {
				t.Errorf("%s:%d: merge conflict marker %q", path, i+1, line)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
