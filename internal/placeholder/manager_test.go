package placeholder

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func stat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestManagerWritesFiles(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "ph")
	m, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if fi := stat(t, filepath.Join(dir, KeyFile)); fi.Mode().Perm() != 0o600 || fi.Size() != keyLen {
		t.Errorf("key file mode %v size %d", fi.Mode().Perm(), fi.Size())
	}
	openai, ghp := formats[0].value, formats[3].value
	snap := snapshot("openai-api-key", openai, "github.token", ghp, "weak", "short")
	if err := m.Update([]string{"openai-api-key", "github.token", "weak", "absent"}, snap); err != nil {
		t.Fatal(err)
	}
	p1, ok := m.Table().Lookup("openai-api-key")
	if !ok {
		t.Fatal("no placeholder for openai-api-key")
	}
	checkShape(t, openai, p1, "sk-proj-")
	p2, _ := m.Table().Lookup("github.token")
	if got := read(t, filepath.Join(dir, "openai-api-key")); got != p1 {
		t.Errorf("file = %q, want the placeholder", got)
	}
	if fi := stat(t, filepath.Join(dir, "openai-api-key")); fi.Mode().Perm() != 0o444 {
		t.Errorf("placeholder file mode %v, want 0444", fi.Mode().Perm())
	}
	wantEnv := "GITHUB_TOKEN=" + p2 + "\nOPENAI_API_KEY=" + p1 + "\n"
	if got := read(t, filepath.Join(dir, EnvFile)); got != wantEnv {
		t.Errorf("env = %q, want %q", got, wantEnv)
	}
	for _, name := range []string{"weak", "absent"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s: a file was written (err %v)", name, err)
		}
	}
	// No real value anywhere in the directory.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b := read(t, filepath.Join(dir, e.Name()))
		if strings.Contains(b, openai) || strings.Contains(b, ghp) {
			t.Errorf("%s holds a real value", e.Name())
		}
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}

	// A restart (same directory, same key): same placeholders.
	m2, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Update([]string{"openai-api-key"}, snap); err != nil {
		t.Fatal(err)
	}
	if p, _ := m2.Table().Lookup("openai-api-key"); p != p1 {
		t.Error("placeholder changed across a restart")
	}
}

func TestManagerRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	refs := []string{"openai-api-key"}
	v1 := "sk-proj-" + fake(20, rep("x", 48))
	if err := m.Update(refs, snapshot("openai-api-key", v1)); err != nil {
		t.Fatal(err)
	}
	p1, _ := m.Table().Lookup("openai-api-key")
	file := filepath.Join(dir, "openai-api-key")
	before := stat(t, file)

	// Same shape: nothing rewritten.
	v2 := "sk-proj-" + string(sameShape(v1[8:]))
	if v2 == v1 || shapeString(v1) != shapeString(v2) {
		t.Fatal("sameShape broken")
	}
	if err := m.Update(refs, snapshot("openai-api-key", v2)); err != nil {
		t.Fatal(err)
	}
	if p, _ := m.Table().Lookup("openai-api-key"); p != p1 {
		t.Error("same-shape rotation changed the placeholder")
	}
	if !os.SameFile(before, stat(t, file)) {
		t.Error("same-shape rotation rewrote the file")
	}

	// New shape: rewritten; the old placeholder is still known (retired).
	v3 := "sk-svcacct-" + fake(22, rep("x", 60))
	if err := m.Update(refs, snapshot("openai-api-key", v3)); err != nil {
		t.Fatal(err)
	}
	p3, _ := m.Table().Lookup("openai-api-key")
	if p3 == p1 || read(t, file) != p3 || !strings.HasPrefix(p3, "sk-svcacct-") {
		t.Error("shape change did not rewrite the placeholder")
	}
	if ref, _, found := m.Table().FindString("Bearer "+p1, nil); !found || ref != "openai-api-key" {
		t.Error("the retired placeholder no longer trips")
	}
	// A secret gone missing keeps its placeholder.
	if err := m.Update(refs, snapshot()); err != nil {
		t.Fatal(err)
	}
	if p, _ := m.Table().Lookup("openai-api-key"); p != p3 {
		t.Error("a missing secret lost its placeholder")
	}
	// A ref dropped from the policy: file removed, placeholder still trips.
	if err := m.Update(nil, snapshot("openai-api-key", v3)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("dropped ref's file still there: %v", err)
	}
	if _, _, found := m.Table().FindString(p3, nil); !found {
		t.Error("a dropped ref's placeholder no longer trips")
	}
	if got := read(t, filepath.Join(dir, EnvFile)); got != "" {
		t.Errorf("env = %q, want empty", got)
	}
}

// shapeString and sameShape make a value of v's shape with other letters
// and digits.
func shapeString(v string) string {
	b := []byte(v)
	for i := range b {
		b[i] = class(b[i])
	}
	return string(b)
}

func sameShape(v string) []byte {
	b := []byte(v)
	for i, c := range b {
		switch class(c) {
		case 'A':
			b[i] = 'A' + (c-'A'+3)%26
		case 'a':
			b[i] = 'a' + (c-'a'+3)%26
		case '9':
			b[i] = '0' + (c-'0'+3)%10
		}
	}
	return b
}

func TestOpenRefusesAForeignKey(t *testing.T) {
	t.Parallel()
	for name, setup := range map[string]func(path string) error{
		"group readable": func(p string) error { return os.WriteFile(p, make([]byte, keyLen), 0o640) },
		"wrong size":     func(p string) error { return os.WriteFile(p, make([]byte, 5), 0o600) },
		"a directory":    func(p string) error { return os.Mkdir(p, 0o700) },
	} {
		dir := t.TempDir()
		if err := setup(filepath.Join(dir, KeyFile)); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "remove it") {
			t.Errorf("%s: Open error = %v", name, err)
		}
	}
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"sk-proj-Abc_9": "sk-proj-Abc_9",
		"a.b+c/d=e":     "a.b+c/d=e",
		"a$b":           "'a$b'",
		"it's":          `'it'\''s'`,
		"a b":           "'a b'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
}
