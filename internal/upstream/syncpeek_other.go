//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package upstream

import "syscall"

// peekAlive cannot look at the socket on this system: an idle connection
// is assumed alive, and a request it fails before any response byte is
// retried as SyncTransport documents.
func peekAlive(syscall.RawConn) bool { return true }
