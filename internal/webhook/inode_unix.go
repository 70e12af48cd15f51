//go:build unix

package webhook

import (
	"io/fs"
	"syscall"
)

// inode is the file's inode number: kubelet's atomic writer swaps a
// symlink, which may keep size and mtime equal.
func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
