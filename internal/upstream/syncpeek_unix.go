//go:build linux || darwin || freebsd || netbsd || openbsd

package upstream

import (
	"errors"
	"syscall"
)

// peekAlive looks at an idle connection's socket without reading from it
// and without blocking (recv with MSG_PEEK|MSG_DONTWAIT, in a RawConn.Read
// callback that always reports done, so the runtime never parks on it):
// alive only when there is nothing to read yet (EAGAIN). EOF (the origin
// closed it), an error, or bytes nobody asked for all mean: do not use it.
func peekAlive(rc syscall.RawConn) bool {
	var one [1]byte
	var n int
	var rerr error
	err := rc.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	})
	if err != nil {
		return false
	}
	return n <= 0 && (errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK))
}
