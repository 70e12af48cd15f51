package secrets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeK8sVolume updates dir the way the kubelet's AtomicWriter updates a
// Secret volume: the payload goes into a new timestamped directory, a
// ..data_tmp symlink to it is renamed over ..data (the atomic step), then
// the per-key symlinks key -> ..data/key are added or removed and the old
// payload directory is deleted.
func writeK8sVolume(t *testing.T, dir, version string, data map[string]string) {
	t.Helper()
	ts := "..2024_01_01_" + version
	for k, v := range data {
		writeFile(t, filepath.Join(dir, ts), k, v)
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmp := filepath.Join(dir, "..data_tmp")
	symlink(t, ts, tmp)
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for k := range data {
		link := filepath.Join(dir, k)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			symlink(t, filepath.Join("..data", k), link)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := data[e.Name()]; !ok && !strings.HasPrefix(e.Name(), ".") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" && old != ts {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}
