//go:build linux || darwin || freebsd || netbsd || openbsd

package upstream

import "syscall"

// peeker looks at an idle connection's socket without reading from it and
// without blocking (recv with MSG_PEEK|MSG_DONTWAIT, in a RawConn.Read
// callback that always reports done, so the runtime never parks on it).
// Its callback is made once per connection: a closure per check would cost
// allocations on every reuse.
type peeker struct {
	buf [1]byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

func (p *peeker) recv(fd uintptr) bool {
	p.n, _, p.err = syscall.Recvfrom(int(fd), p.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return true
}

// alive reports whether nothing is there to read yet (EAGAIN). EOF (the
// origin closed it), an error, or bytes nobody asked for all mean: do not
// use it.
func (p *peeker) alive(rc syscall.RawConn) bool {
	if p.fn == nil {
		p.fn = p.recv
	}
	p.n, p.err = 0, nil
	if rc.Read(p.fn) != nil {
		return false
	}
	return p.err == syscall.EAGAIN || p.err == syscall.EWOULDBLOCK
}
