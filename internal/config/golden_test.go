package config

import (
	"bytes"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestGolden runs every testdata/cases/*.txtar: the "config.yaml" section is
// parsed; a valid config must render as the "effective.yaml" section (and
// warn as "warnings"), an invalid one must fail with the "errors" section,
// one problem per line. Run with -update to rewrite the expectations.
func TestGolden(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "cases", "*.txtar"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			t.Parallel()
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			input := section(ar, "config.yaml")
			if input == nil {
				t.Fatalf("%s has no config.yaml section", file)
			}
			got := &txtar.Archive{Comment: ar.Comment, Files: []txtar.File{{Name: "config.yaml", Data: input}}}
			c, err := Parse(input)
			if err != nil {
				got.Files = append(got.Files, txtar.File{Name: "errors", Data: []byte(err.Error() + "\n")})
			} else {
				if len(c.Warnings) > 0 {
					var w bytes.Buffer
					for _, x := range c.Warnings {
						w.WriteString(x.Path + ": " + x.Message + "\n")
					}
					got.Files = append(got.Files, txtar.File{Name: "warnings", Data: w.Bytes()})
				}
				eff, err := c.Effective()
				if err != nil {
					t.Fatalf("Effective() error = %v", err)
				}
				got.Files = append(got.Files, txtar.File{Name: "effective.yaml", Data: eff})
				checkRoundTrip(t, c, eff)
			}
			if *update {
				if err := os.WriteFile(file, txtar.Format(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if d := cmp.Diff(string(txtar.Format(ar)), string(txtar.Format(got))); d != "" {
				t.Errorf("%s mismatch (-want +got); run go test -update:\n%s", file, d)
			}
		})
	}
}

func section(ar *txtar.Archive, name string) []byte {
	i := slices.IndexFunc(ar.Files, func(f txtar.File) bool { return f.Name == name })
	if i < 0 {
		return nil
	}
	return ar.Files[i].Data
}

// TestReferenceExample: the reference's shipped config (reference §2.7)
// parses unchanged, and its effective form is golden.
func TestReferenceExample(t *testing.T) {
	t.Parallel()
	c, err := Load(filepath.Join("testdata", "reference-example.yaml"))
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	want := Policy{DefaultAction: ActionDeny, Mode: ModeEnforce, Rules: []Rule{
		{Host: "api.openai.com", RawHost: "api.openai.com", Index: 0, Line: 12, Action: ActionAllow, ScrubResponses: true,
			HeaderRewrites: []HeaderRewrite{{Name: "Authorization", Value: "Bearer {value}", SecretRef: "openai-api-key"}}},
		{Host: "api.anthropic.com", RawHost: "api.anthropic.com", Index: 1, Line: 18, Action: ActionAllow, ScrubResponses: true,
			HeaderRewrites: []HeaderRewrite{
				{Name: "x-api-key", Value: "{value}", SecretRef: "anthropic-api-key"},
				{Name: "anthropic-version", Value: "2023-06-01"},
			}},
	}}
	if d := cmp.Diff(want, c.Policy); d != "" {
		t.Errorf("Policy (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"anthropic-api-key", "openai-api-key"}, c.RequiredSecretRefs()); d != "" {
		t.Errorf("RequiredSecretRefs() (-want +got):\n%s", d)
	}
	eff, err := c.Effective()
	if err != nil {
		t.Fatal(err)
	}
	checkRoundTrip(t, c, eff)
	golden(t, filepath.Join("testdata", "reference-example.effective.yaml"), eff)
}

func golden(t *testing.T, file string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s mismatch (-want +got); run go test -update:\n%s", file, d)
	}
}

// checkRoundTrip: the effective YAML parses back to an equivalent Config
// and renders identically (Effective is a fixed point).
func checkRoundTrip(t *testing.T, c *Config, eff []byte) {
	t.Helper()
	c2, err := Parse(eff)
	if err != nil {
		t.Fatalf("Parse(Effective()) error = %v\n%s", err, eff)
	}
	if d := cmp.Diff(comparable(c), comparable(c2), cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{}, netip.Prefix{})); d != "" {
		t.Errorf("Parse(Effective()) differs (-orig +reparsed):\n%s", d)
	}
	eff2, err := c2.Effective()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(eff), string(eff2)); d != "" {
		t.Errorf("Effective() is not a fixed point (-first +second):\n%s", d)
	}
}

// comparable strips what Effective deliberately does not keep: where rules
// were written (RawHost, Line), the warnings about the original text, and
// the nil/[443] distinction of allowed_ports.
func comparable(c *Config) Config {
	cc := *c
	cc.Warnings = nil
	cc.Policy.Rules = slices.Clone(c.Policy.Rules)
	cc.Credentials = slices.Clone(c.Credentials)
	for i := range cc.Credentials {
		cc.Credentials[i].Line = 0
	}
	for i := range cc.Policy.Rules {
		r := &cc.Policy.Rules[i]
		r.RawHost, r.Line = "", 0
		if r.AllowedPorts == nil {
			r.AllowedPorts = []uint16{443}
		}
	}
	return cc
}
