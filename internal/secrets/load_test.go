package secrets

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestLoadSecretsFromDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "api-key", "secret123\n")
	writeFile(t, dir, "other-key", "value456")
	writeFile(t, dir, ".hidden", "should-be-skipped")

	s, _ := mustOpen(t, Options{Dir: dir})
	want := map[string]string{"api-key": "secret123", "other-key": "value456"}
	if d := cmp.Diff(want, contents(s)); d != "" {
		t.Errorf("loaded secrets (-want +got):\n%s", d)
	}
}

func TestLoadSecretsNonexistentDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nonexistent")
	s, logs := mustOpen(t, Options{Dir: dir})
	if got := s.Snapshot().Keys(); len(got) != 0 {
		t.Errorf("Keys() = %q, want none", got)
	}
	if got := logs.Find("secrets directory does not exist, starting with empty secrets"); len(got) != 1 || got[0]["level"] != "WARN" {
		t.Errorf("missing-directory warnings = %v, want one WARN", got)
	}
}

func TestNewSecretStore(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "key1", "val1")
	writeFile(t, dir, "key2", "val2\n")
	s, _ := mustOpen(t, Options{Dir: dir})
	snap := s.Snapshot()
	for k, want := range map[string]string{"key1": "val1", "key2": "val2"} {
		if v, ok := snap.Lookup(k); !ok || string(v.Reveal()) != want {
			t.Errorf("Lookup(%q) = %q, %v, want %q, true", k, v.Reveal(), ok, want)
		}
	}
	if _, ok := snap.Lookup("key3"); ok {
		t.Errorf("Lookup(%q) found a value, want none", "key3")
	}
}

func TestLoadSecretsFollowsSymlinkWithinDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "real-secret", "the-value\n")
	writeFile(t, dir, "sub/inner", "inner-value")
	symlink(t, "real-secret", filepath.Join(dir, "link-secret"))
	symlink(t, "sub/inner", filepath.Join(dir, "nested-link"))
	symlink(t, "./sub/../real-secret", filepath.Join(dir, "dotdot-link"))
	symlink(t, "link-secret", filepath.Join(dir, "chained-link"))

	s, _ := mustOpen(t, Options{Dir: dir})
	want := map[string]string{
		"real-secret":  "the-value",
		"link-secret":  "the-value",
		"nested-link":  "inner-value",
		"dotdot-link":  "the-value",
		"chained-link": "the-value",
		// "sub" is a directory: not a secret.
	}
	if d := cmp.Diff(want, contents(s)); d != "" {
		t.Errorf("loaded secrets (-want +got):\n%s", d)
	}
}

func TestLoadSecretsRejectsSymlinkEscapingDir(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "secrets")
	outside := filepath.Join(base, "outside")
	writeFile(t, outside, "stolen", "OUTSIDE-CONTENT")
	writeFile(t, dir, "legit", "ok")
	symlink(t, "../outside/stolen", filepath.Join(dir, "relative-escape"))
	symlink(t, filepath.Join(outside, "stolen"), filepath.Join(dir, "absolute-escape"))
	symlink(t, "/etc/hostname", filepath.Join(dir, "system-file"))
	// os.Root refuses absolute links even when they point back inside: the
	// check is on the link text, which is what makes it race-free.
	symlink(t, filepath.Join(dir, "legit"), filepath.Join(dir, "absolute-inside"))

	s, logs := mustOpen(t, Options{Dir: dir})
	if d := cmp.Diff(map[string]string{"legit": "ok"}, contents(s)); d != "" {
		t.Errorf("loaded secrets (-want +got):\n%s", d)
	}
	for _, k := range []string{"relative-escape", "absolute-escape", "system-file", "absolute-inside"} {
		if got := findKey(logs, "skipping symlink that escapes secrets directory", k); len(got) != 1 {
			t.Errorf("escape warnings for %q = %v, want one", k, got)
		}
	}
	if strings.Contains(logs.String(), "OUTSIDE-CONTENT") {
		t.Errorf("logs contain the content of a file outside the directory")
	}
}

func TestLoadSecretsK8sStyleSymlinkLayout(t *testing.T) {
	dir := t.TempDir()
	writeK8sVolume(t, dir, "00_00_00.000000001", map[string]string{
		"api-key": "k8s-secret\n",
		"token":   "k8s-token",
	})
	s, _ := mustOpen(t, Options{Dir: dir})
	want := map[string]string{"api-key": "k8s-secret", "token": "k8s-token"}
	if d := cmp.Diff(want, contents(s)); d != "" {
		t.Errorf("loaded secrets (-want +got):\n%s", d)
	}
	for _, k := range s.Snapshot().Keys() {
		if strings.HasPrefix(k, ".") {
			t.Errorf("key %q starts with a dot", k)
		}
	}
}

func TestLoadSecretsSkipsOversizedFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "normal", "small")
	writeFile(t, dir, "exactly-max", strings.Repeat("a", maxFileSize))
	writeFile(t, dir, "max-with-newline", strings.Repeat("b", maxFileSize-1)+"\n")
	writeFile(t, dir, "oversized", strings.Repeat("x", maxFileSize+1))
	// A sparse 64 GiB file: refused from its size, never read.
	huge, err := os.Create(filepath.Join(dir, "huge"))
	if err != nil {
		t.Fatal(err)
	}
	if err := huge.Truncate(64 << 30); err != nil {
		t.Skipf("cannot make a sparse file: %v", err)
	}
	huge.Close()

	s, logs := mustOpen(t, Options{Dir: dir})
	if d := cmp.Diff([]string{"exactly-max", "max-with-newline", "normal"}, s.Snapshot().Keys()); d != "" {
		t.Errorf("Keys() (-want +got):\n%s", d)
	}
	if v, _ := s.Snapshot().Lookup("exactly-max"); v.Len() != maxFileSize {
		t.Errorf("exactly-max: Len() = %d, want %d", v.Len(), maxFileSize)
	}
	if v, _ := s.Snapshot().Lookup("max-with-newline"); v.Len() != maxFileSize-1 {
		t.Errorf("max-with-newline: Len() = %d, want %d", v.Len(), maxFileSize-1)
	}
	for _, k := range []string{"oversized", "huge"} {
		if got := findKey(logs, "skipping oversized secret file", k); len(got) != 1 || got[0]["level"] != "WARN" {
			t.Errorf("oversized warnings for %q = %v, want one WARN", k, got)
		}
	}
}

func TestLoadSecretsTrimsOneLineEnding(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"lf":        "v\n",
		"crlf":      "v\r\n",
		"two-lf":    "v\n\n",
		"crlf-lf":   "v\r\n\n",
		"lone-cr":   "v\r",
		"spaces":    " v \t",
		"only-lf":   "\n",
		"empty":     "",
		"multiline": "line1\nline2\n",
	}
	for k, v := range files {
		writeFile(t, dir, k, v)
	}
	s, _ := mustOpen(t, Options{Dir: dir})
	want := map[string]string{
		"lf":        "v",
		"crlf":      "v",
		"two-lf":    "v\n",
		"crlf-lf":   "v\r\n",
		"lone-cr":   "v\r",
		"spaces":    " v \t",
		"only-lf":   "",
		"empty":     "",
		"multiline": "line1\nline2",
	}
	if d := cmp.Diff(want, contents(s)); d != "" {
		t.Errorf("loaded secrets (-want +got):\n%s", d)
	}
}

func TestLoadSecretsNonUTF8DoesNotPoisonOthers(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "good", "fine")
	writeFile(t, dir, "binary", "\xff\xfe\x00secret")
	writeFile(t, dir, "also-good", "fine too\n")

	s, logs := mustOpen(t, Options{Dir: dir})
	if d := cmp.Diff(map[string]string{"good": "fine", "also-good": "fine too"}, contents(s)); d != "" {
		t.Errorf("loaded secrets (-want +got):\n%s", d)
	}
	got := findKey(logs, "skipping secret file that is not valid UTF-8", "binary")
	if len(got) != 1 || got[0]["level"] != "WARN" {
		t.Errorf("non-UTF-8 warnings = %v, want one WARN naming the key", got)
	}
}

func TestLoadSecretsSkipsDanglingSymlinkAndDirectories(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "good", "fine")
	writeFile(t, dir, "subdir/file", "nested files are not keys")
	symlink(t, "does-not-exist", filepath.Join(dir, "dangling"))
	symlink(t, "loop-b", filepath.Join(dir, "loop-a"))
	symlink(t, "loop-a", filepath.Join(dir, "loop-b"))
	symlink(t, "subdir", filepath.Join(dir, "dir-link"))

	s, logs := mustOpen(t, Options{Dir: dir})
	if d := cmp.Diff(map[string]string{"good": "fine"}, contents(s)); d != "" {
		t.Errorf("loaded secrets (-want +got):\n%s", d)
	}
	for _, k := range []string{"dangling", "loop-a", "loop-b"} {
		if got := findKey(logs, "skipping unresolvable path in secrets directory", k); len(got) != 1 {
			t.Errorf("unresolvable warnings for %q = %v, want one", k, got)
		}
	}
}

func TestLoadSecretsLogsKeyNames(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "b", "2")
	writeFile(t, dir, "a", "1")
	_, logs := mustOpen(t, Options{Dir: dir})
	var got []string
	for _, r := range logs.Find("loaded secret") {
		if r["level"] != "INFO" {
			t.Errorf("loaded secret logged at %v, want INFO", r["level"])
		}
		got = append(got, r["key"].(string))
	}
	if d := cmp.Diff([]string{"a", "b"}, got); d != "" {
		t.Errorf(`"loaded secret" keys (-want +got):\n%s`, d)
	}
}

// TestReloadKeepsLastKnownGood breaks a file that had a good value in each
// way that counts as "present but unusable" and checks that the old value
// stays, the others still update, and the key comes back when fixed.
func TestReloadKeepsLastKnownGood(t *testing.T) {
	tests := []struct {
		name    string
		msg     string
		corrupt func(t *testing.T, path string)
	}{
		{
			name: "not UTF-8",
			msg:  "skipping secret file that is not valid UTF-8",
			corrupt: func(t *testing.T, path string) {
				writeFile(t, filepath.Dir(path), filepath.Base(path), "\xc3\x28")
			},
		},
		{
			name: "oversized",
			msg:  "skipping oversized secret file",
			corrupt: func(t *testing.T, path string) {
				writeFile(t, filepath.Dir(path), filepath.Base(path), strings.Repeat("x", maxFileSize+1))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeFile(t, dir, "key", "good-v1")
			writeFile(t, dir, "other", "o1")
			s, logs := mustOpen(t, Options{Dir: dir})

			tt.corrupt(t, filepath.Join(dir, "key"))
			writeFile(t, dir, "other", "o2")
			writeFile(t, dir, "new-bad", "\xff")
			tt.corrupt(t, filepath.Join(dir, "new-bad"))
			s.reload("test")

			want := map[string]string{"key": "good-v1", "other": "o2"}
			if d := cmp.Diff(want, contents(s)); d != "" {
				t.Errorf("after breaking (-want +got):\n%s", d)
			}
			got := findKey(logs, tt.msg, "key")
			if len(got) != 1 || got[0]["kept_previous_value"] != true {
				t.Errorf("warnings for key = %v, want one with kept_previous_value=true", got)
			}
			if got := findKey(logs, tt.msg, "new-bad"); len(got) != 1 || got[0]["kept_previous_value"] != false {
				t.Errorf("warnings for new-bad = %v, want one with kept_previous_value=false", got)
			}

			writeFile(t, dir, "key", "good-v2\n")
			s.reload("test")
			if got, _ := get(s, "key"); got != "good-v2" {
				t.Errorf("after fixing: key = %q, want good-v2", got)
			}

			if err := os.Remove(filepath.Join(dir, "key")); err != nil {
				t.Fatal(err)
			}
			s.reload("test")
			if _, ok := get(s, "key"); ok {
				t.Errorf("after deleting: key still present")
			}
		})
	}
}

// TestReloadK8sBadFileKeepsLastKnownGood: in a Kubernetes volume every key
// is a symlink; a bad payload behind one is still "present but unusable".
func TestReloadK8sBadFileKeepsLastKnownGood(t *testing.T) {
	dir := t.TempDir()
	writeK8sVolume(t, dir, "v1", map[string]string{"a": "a1", "b": "b1", "c": "c1"})
	s, logs := mustOpen(t, Options{Dir: dir})
	writeK8sVolume(t, dir, "v2", map[string]string{"a": "\xff", "b": strings.Repeat("x", maxFileSize+1), "c": "c2"})
	s.reload("test")
	if d := cmp.Diff(map[string]string{"a": "a1", "b": "b1", "c": "c2"}, contents(s)); d != "" {
		t.Errorf("after a bad rotation (-want +got):\n%s", d)
	}
	if got := logs.Find("skipping symlink that escapes secrets directory"); len(got) != 0 {
		t.Errorf("bad payloads reported as escapes: %v", got)
	}
	for msg, key := range map[string]string{
		"skipping secret file that is not valid UTF-8": "a",
		"skipping oversized secret file":               "b",
	} {
		if got := findKey(logs, msg, key); len(got) != 1 || got[0]["kept_previous_value"] != true {
			t.Errorf("%q for %q = %v, want one with kept_previous_value=true", msg, key, got)
		}
	}
}

func TestReloadEscapingSymlinkDropsOldValue(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "secrets")
	writeFile(t, base, "outside", "outside")
	writeFile(t, dir, "key", "v1")
	s, _ := mustOpen(t, Options{Dir: dir})

	if err := os.Remove(filepath.Join(dir, "key")); err != nil {
		t.Fatal(err)
	}
	symlink(t, "../outside", filepath.Join(dir, "key"))
	s.reload("test")
	if _, ok := get(s, "key"); ok {
		t.Errorf("key still present after being replaced by an escaping symlink")
	}
}

func TestReloadDirectoryVanishedKeepsLastKnownGood(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	writeFile(t, dir, "a", "1")
	s, logs := mustOpen(t, Options{Dir: dir, Required: []string{"a"}})

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s.reload("test")
	s.reload("test")
	if d := cmp.Diff(map[string]string{"a": "1"}, contents(s)); d != "" {
		t.Errorf("with the directory gone (-want +got):\n%s", d)
	}
	if !s.Ready() {
		t.Errorf("Ready() = false with the directory gone, want the last-known-good readiness")
	}
	if got := logs.Find("secrets directory disappeared, keeping last known values"); len(got) != 1 || got[0]["level"] != "WARN" {
		t.Errorf("disappearance warnings = %v, want exactly one WARN", got)
	}

	// Back, with different contents: the snapshot is exactly the new contents.
	writeFile(t, dir, "b", "2")
	s.reload("test")
	if d := cmp.Diff(map[string]string{"b": "2"}, contents(s)); d != "" {
		t.Errorf("with the directory back (-want +got):\n%s", d)
	}
	if s.Ready() {
		t.Errorf("Ready() = true, want false: a is gone")
	}
}

func TestReloadUnchangedKeepsSnapshot(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a", "1")
	s, logs := mustOpen(t, Options{Dir: dir})
	before := s.Snapshot()
	s.reload("test")
	if s.Snapshot() != before {
		t.Errorf("a reload without changes published a new snapshot")
	}
	if got := logs.Find("loaded secret"); len(got) != 1 {
		t.Errorf(`"loaded secret" logged %d times, want once (no change on reload)`, len(got))
	}

	writeFile(t, dir, "a", "2")
	writeFile(t, dir, "b", "3")
	s.reload("test")
	after := s.Snapshot()
	if after == before {
		t.Fatalf("a reload with changes kept the old snapshot")
	}
	// The old snapshot is immutable: readers holding it see the old values.
	if v, _ := before.Lookup("a"); string(v.Reveal()) != "1" {
		t.Errorf("old snapshot a = %q, want 1", v.Reveal())
	}
	if _, ok := before.Lookup("b"); ok {
		t.Errorf("old snapshot gained key b")
	}
}

func TestParseSecretFile(t *testing.T) {
	for _, tt := range parseTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSecretFile([]byte(tt.in))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("parseSecretFile(%q) error = %v, want %v", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Errorf("parseSecretFile(%q) = %q, %v, want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

var parseTests = []struct {
	name    string
	in      string
	want    string
	wantErr error
}{
	{name: "plain", in: "abc", want: "abc"},
	{name: "lf", in: "abc\n", want: "abc"},
	{name: "crlf", in: "abc\r\n", want: "abc"},
	{name: "only one lf", in: "abc\n\n", want: "abc\n"},
	{name: "only one crlf", in: "abc\r\n\r\n", want: "abc\r\n"},
	{name: "lf after crlf", in: "abc\r\n\n", want: "abc\r\n"},
	{name: "lone cr kept", in: "abc\r", want: "abc\r"},
	{name: "lf cr", in: "abc\n\r", want: "abc\n\r"},
	{name: "whitespace kept", in: "  abc \t", want: "  abc \t"},
	{name: "empty", in: "", want: ""},
	{name: "just lf", in: "\n", want: ""},
	{name: "just crlf", in: "\r\n", want: ""},
	{name: "utf8", in: "pässwörd✓\n", want: "pässwörd✓"},
	{name: "nul is valid utf8", in: "a\x00b", want: "a\x00b"},
	{name: "invalid utf8", in: "abc\xff\n", wantErr: errNotUTF8},
	{name: "truncated utf8", in: "\xe2\x9c", wantErr: errNotUTF8},
	{name: "surrogate", in: "\xed\xa0\x80", wantErr: errNotUTF8},
}

func FuzzParseSecretFile(f *testing.F) {
	for _, tt := range parseTests {
		f.Add([]byte(tt.in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		orig := string(in)
		out, err := parseSecretFile(in)
		if string(in) != orig {
			t.Fatalf("parseSecretFile modified its input")
		}
		if err != nil {
			if utf8.Valid(in) {
				t.Fatalf("parseSecretFile(%q) = %v for valid UTF-8", in, err)
			}
			if out != nil {
				t.Fatalf("parseSecretFile(%q) returned a value with an error", in)
			}
			if strings.Contains(err.Error(), orig) && orig != "" {
				t.Fatalf("error %q echoes the input", err)
			}
			return
		}
		if !utf8.Valid(in) {
			t.Fatalf("parseSecretFile(%q) accepted invalid UTF-8", in)
		}
		if !strings.HasPrefix(orig, string(out)) {
			t.Fatalf("parseSecretFile(%q) = %q, not a prefix of the input", in, out)
		}
		switch removed := orig[len(out):]; removed {
		case "":
			if strings.HasSuffix(orig, "\n") {
				t.Fatalf("parseSecretFile(%q) kept the trailing newline", in)
			}
		case "\n":
			if strings.HasSuffix(orig, "\r\n") {
				t.Fatalf("parseSecretFile(%q) removed only the LF of a CRLF", in)
			}
		case "\r\n":
		default:
			t.Fatalf("parseSecretFile(%q) removed %q, want at most one line ending", in, removed)
		}
	})
}
