package config

import (
	"path/filepath"
	"testing"
)

// TestPolicyDocsExamplesParse: every YAML example in docs/policy.md is a
// valid configuration without warnings.
func TestPolicyDocsExamplesParse(t *testing.T) {
	t.Parallel()
	file := filepath.Join("..", "..", "docs", "policy.md")
	blocks, lines := yamlBlocks(t, file)
	if len(blocks) < 5 {
		t.Fatalf("%s has %d ```yaml blocks, want the 5 worked examples", file, len(blocks))
	}
	for i, b := range blocks {
		c, err := Parse([]byte(b))
		if err != nil {
			t.Errorf("%s: block at line %d does not parse:\n%v", file, lines[i], err)
			continue
		}
		if len(c.Warnings) != 0 {
			t.Errorf("%s: block at line %d has warnings: %v", file, lines[i], c.Warnings)
		}
	}
}
