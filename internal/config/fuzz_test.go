package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

// FuzzParse: Parse never panics; every error is a list of *FieldError and
// never yaml's fallback text (the node walk finds every type mismatch); a
// valid config survives Effective -> Parse unchanged (see checkRoundTrip).
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "cases", "*.txtar"))
	for _, file := range files {
		ar, err := txtar.ParseFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(section(ar, "config.yaml"))
	}
	if b, err := os.ReadFile(filepath.Join("testdata", "reference-example.yaml")); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		minimal,
		minimal + interceptionOK,
		"egress_policy:\n  rules:\n    - {host: \"[::1]:443\", action: allow, allowed_ports: [1, 65535]}\n",
		"egress_policy: &a\n  rules: []\nx: *a\n",
		"egress_policy: {rules: [{host: a, action: deny, header_rewrites: [{name: X, value: '{value}', secret_ref: k}]}]}\n",
		"base: &b {action: allow}\negress_policy:\n  rules:\n    - <<: *b\n      host: a\n",
		"egress_policy:\n\trules: []\n",
		"listen_port: [1]\nmetrics_port: {a: 1}\negress_policy: 3\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			ps := Problems(err)
			if len(ps) == 0 {
				t.Fatalf("Parse error without problems: %v", err)
			}
			if got := strings.Count(err.Error(), "\n") + 1; got < len(ps) {
				t.Fatalf("error text has %d lines for %d problems", got, len(ps))
			}
			// nodeChecker must catch every type mismatch before yaml does.
			for _, p := range ps {
				if strings.HasPrefix(p.Msg, "cannot decode the config") {
					t.Fatalf("a type error escaped nodeChecker: %v", p)
				}
			}
			return
		}
		eff, err := c.Effective()
		if err != nil {
			t.Fatalf("Effective() error = %v", err)
		}
		checkRoundTrip(t, c, eff)
	})
}

// FuzzParseResolver: ParseResolver never panics; what it accepts is a
// usable resolver (no zone, not IPv4-mapped, not unspecified, port not 0)
// and its canonical text parses back to the same address and port.
func FuzzParseResolver(f *testing.F) {
	for _, s := range []string{"10.96.0.10", "10.96.0.10:53", "[fd00::a]:5353", "fd00::a", "fe80::1%eth0", "::ffff:1.2.3.4", "0.0.0.0", "x:53", "[::1]", " 1.1.1.1 ", "1.1.1.1:0", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		ap, err := ParseResolver(raw)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error with a line break: %q", err)
			}
			return
		}
		a := ap.Addr()
		if !a.IsValid() || a.Zone() != "" || a.Is4In6() || a.IsUnspecified() || ap.Port() == 0 {
			t.Fatalf("ParseResolver(%q) = %v", raw, ap)
		}
		back, err := ParseResolver(ap.String())
		if err != nil || back != ap {
			t.Fatalf("ParseResolver(%q) = %v, reparsed %v, %v", raw, ap, back, err)
		}
	})
}

// FuzzParseTemplate holds that ParseTemplate never panics, that a template
// it accepts renders back to its input (nothing is dropped or invented),
// that a Basic template's user has no ':' and that {basic:...} is never
// accepted where it is not allowed.
func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{"Bearer {value}", "{basic:x-access-token}", "{basic:}", "{basic:x", "a{basic:b}", "{value}{value}", "", "{valu}"} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, in string, basicOK bool) {
		tpl, err := ParseTemplate(in, basicOK)
		if err != nil {
			return
		}
		if tpl.String() != in {
			t.Fatalf("ParseTemplate(%q) renders as %q", in, tpl.String())
		}
		if tpl.Basic {
			if !basicOK {
				t.Fatal("Basic accepted where not allowed")
			}
			if strings.ContainsAny(tpl.BasicUser, ":{}") {
				t.Fatalf("user %q", tpl.BasicUser)
			}
		} else if len(tpl.Parts) < 2 || strings.Contains(in, "{basic:") {
			t.Fatalf("accepted %q without {value} or with {basic:", in)
		}
	})
}
