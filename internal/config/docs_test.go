package config

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// yamlBlocks returns the ```yaml blocks of a Markdown file with their line
// numbers; blocks whose info string is "yaml fragment" are skipped.
func yamlBlocks(t *testing.T, file string) (blocks []string, lines []int) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	var cur *strings.Builder
	start := 0
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```yaml":
			cur, start = &strings.Builder{}, n+1
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks, lines = append(blocks, cur.String()), append(lines, start)
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	if cur != nil {
		t.Fatalf("%s: unterminated ```yaml block at line %d", file, start)
	}
	return blocks, lines
}

// TestDocsExamplesParse: every complete YAML example in docs/config.md is
// a valid configuration.
func TestDocsExamplesParse(t *testing.T) {
	t.Parallel()
	file := filepath.Join("..", "..", "docs", "config.md")
	blocks, lines := yamlBlocks(t, file)
	if len(blocks) == 0 {
		t.Fatalf("%s has no ```yaml block", file)
	}
	for i, b := range blocks {
		if _, err := Parse([]byte(b)); err != nil {
			t.Errorf("%s: block at line %d does not parse:\n%v", file, lines[i], err)
		}
	}
}

// TestExampleConfigParses: examples/config.yaml (used by the README's run
// command) is valid and needs the two example secrets.
func TestExampleConfigParses(t *testing.T) {
	t.Parallel()
	c, err := Load(filepath.Join("..", "..", "examples", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.SecretsDir != "./examples/secrets" {
		t.Errorf("SecretsDir = %q, want ./examples/secrets", c.SecretsDir)
	}
	if got := strings.Join(c.RequiredSecretRefs(), ","); got != "anthropic-api-key,openai-api-key" {
		t.Errorf("RequiredSecretRefs() = %s", got)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("Warnings = %v, want none", c.Warnings)
	}
}

// TestDocsListEveryKey: docs/config.md documents every key of the file
// format (as `key`).
func TestDocsListEveryKey(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[wireConfig](), reflect.TypeFor[wirePolicy](), reflect.TypeFor[wireRule](),
		reflect.TypeFor[wireRewrite](), reflect.TypeFor[wireInterception](), reflect.TypeFor[wireRoute](),
		reflect.TypeFor[wireAddressGuard](),
		reflect.TypeFor[wirePlaceholders](), reflect.TypeFor[wireDNSGuard](), reflect.TypeFor[wireCredential](),
	} {
		for f := range typ.Fields() {
			key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !bytes.Contains(data, []byte("`"+key+"`")) {
				t.Errorf("docs/config.md does not document `%s` (%s.%s)", key, typ.Name(), f.Name)
			}
		}
	}
}
