package secrets

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCanaryNeverLogged drives the store through loading, rotation, bad
// files, escapes, readiness changes and a vanished directory with canary
// values, and checks that no log line, error or printed snapshot contains
// one.
func TestCanaryNeverLogged(t *testing.T) {
	canary := "CANARY-" + rand.Text()
	base := t.TempDir()
	dir := filepath.Join(base, "secrets")
	writeFile(t, base, "outside", canary+"-outside")
	writeFile(t, dir, "token", canary+"-v1\n")
	writeFile(t, dir, "binary", canary+"\xff")
	writeFile(t, dir, "huge", canary+strings.Repeat("x", maxFileSize))
	symlink(t, "../outside", filepath.Join(dir, "escape"))

	opts := fast(dir)
	opts.Required = []string{"token", "later"}
	s, logs := mustOpen(t, opts)
	startRun(t, s)

	writeFile(t, dir, "token", canary+"-v2")
	writeFile(t, dir, "later", canary+"-later")
	waitFor(t, "readiness", s.Ready)
	writeFile(t, dir, "token", canary+"\xfe") // becomes bad: last-known-good
	waitFor(t, "the bad-file warning", func() bool {
		return len(findKey(logs, "skipping secret file that is not valid UTF-8", "token")) > 0
	})
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the vanished directory", func() bool {
		return len(logs.Find("secrets directory disappeared, keeping last known values")) > 0
	})
	writeFile(t, dir, "token", canary+"-v3")
	waitFor(t, "the re-created directory", func() bool { v, _ := get(s, "token"); return v == canary+"-v3" })

	snap := s.Snapshot()
	v, _ := snap.Lookup("token")
	_, err := Open(Options{Dir: filepath.Join(dir, "token")}) // a file, not a directory
	printed := []string{
		logs.String(),
		fmt.Sprintf("%v %+v %#v %s %q %x", snap, snap, snap, snap, snap, snap),
		fmt.Sprintf("%v %+v %#v %s %q %x", *snap, *snap, *snap, *snap, *snap, *snap),
		fmt.Sprintf("%v %+v %#v %s %q %x", v, v, v, v, v, v),
		fmt.Sprint(err),
		fmt.Sprint(s.Missing(), snap.Keys()),
	}
	for _, p := range printed {
		for _, form := range []string{"CANARY", hex.EncodeToString([]byte("CANARY")), base64.StdEncoding.EncodeToString([]byte(canary))} {
			if strings.Contains(p, form) {
				t.Errorf("output contains the canary (%q):\n%s", form, p)
			}
		}
	}
	if !strings.Contains(logs.String(), `"key":"token"`) {
		t.Errorf("logs never name the key; the test is not looking at the right output")
	}
}
