package config

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDocsEffectiveSampleIsCheckOutput: the sample under "Effective
// configuration" in docs/config.md is exactly what `botbox check` prints
// for it (Effective of its own parse): every key check prints is in it, in
// check's order and spelling, so the sample cannot fall behind a new key.
func TestDocsEffectiveSampleIsCheckOutput(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Effective configuration")
	if !ok {
		t.Fatal(`docs/config.md has no "## Effective configuration" section`)
	}
	_, block, ok := strings.Cut(section, "```yaml\n")
	if !ok {
		t.Fatal("no yaml block in the section")
	}
	sample, _, _ := strings.Cut(block, "```")
	cfg, err := Parse([]byte(sample))
	if err != nil {
		t.Fatalf("the sample does not parse: %v", err)
	}
	got, err := cfg.Effective()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sample, string(got)); diff != "" {
		t.Errorf("docs/config.md's sample differs from check's output for it (-doc +check):\n%s", diff)
	}
}
