package proxy

import (
	"io"
	"net/http/httputil"
	"sync"
)

// copyBufSize is the size of ReverseProxy's body copy buffers.
const copyBufSize = 32 << 10

// bufferPool recycles the 32 KiB copy buffers of ReverseProxy, so that
// copying a body allocates nothing per request (TestBufferPoolNoAllocs).
//
// Why array pointers and not the obvious *[]byte: Put turns the slice back
// into *[copyBufSize]byte without allocating, whereas &p would put a new
// slice header on the heap at every Put. Put ignores a slice shorter than
// copyBufSize, so a foreign buffer can never be handed out short.
type bufferPool struct{ p sync.Pool }

var _ httputil.BufferPool = (*bufferPool)(nil)

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { return new([copyBufSize]byte) }}}
}

func (b *bufferPool) Get() []byte { return b.p.Get().(*[copyBufSize]byte)[:] }

func (b *bufferPool) Put(p []byte) {
	if cap(p) < copyBufSize {
		return // not one of ours
	}
	b.p.Put((*[copyBufSize]byte)(p[:copyBufSize]))
}

// coalescingBody wraps a large HTTP/2 response body so that net/http sends
// one flow-control WINDOW_UPDATE per up to coalesceSize read instead of one
// per ReverseProxy-sized (32 KiB) read.
//
// Contract: it returns exactly the bytes and the final error of the wrapped
// body, in order; a Read never waits for more data than one Read of the
// wrapped body would (it takes whatever the transport has buffered); Close
// returns the buffer to the pool. Why not the obvious code (a plain body):
// every HTTP/2 body Read of 4 KiB or more costs a WINDOW_UPDATE, i.e. a TLS
// record and a write syscall on both ends; numbers in docs/performance.md.
// Only bodies of known length of at least coalesceMinBody get it, so that a
// long-lived stream (SSE, gRPC: no Content-Length) never pins a 256 KiB
// buffer. The tests in buffer_test.go hold the byte-for-byte contract.
const (
	coalesceSize    = 256 << 10
	coalesceMinBody = 1 << 20
)

var coalescePool = sync.Pool{New: func() any { return new([coalesceSize]byte) }}

type coalescingBody struct {
	rc   io.ReadCloser
	buf  *[coalesceSize]byte // nil once closed
	r, w int                 // unread data is buf[r:w]
	err  error               // error of the last underlying Read, returned once buf[r:w] is drained
}

func newCoalescingBody(rc io.ReadCloser) *coalescingBody {
	return &coalescingBody{rc: rc, buf: coalescePool.Get().(*[coalesceSize]byte)}
}

func (b *coalescingBody) Read(p []byte) (int, error) {
	if b.r == b.w {
		if b.err != nil {
			return 0, b.err
		}
		if b.buf == nil {
			return 0, io.ErrClosedPipe
		}
		n, err := b.rc.Read(b.buf[:])
		b.r, b.w, b.err = 0, n, err
		if n == 0 {
			return 0, err
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	if b.r == b.w && b.err != nil {
		return n, b.err
	}
	return n, nil
}

// Close closes the transport's body and returns the buffer. ReverseProxy
// reads and closes the body from the same goroutine.
func (b *coalescingBody) Close() error {
	err := b.rc.Close()
	if b.buf != nil {
		coalescePool.Put(b.buf)
		b.buf = nil
		b.r, b.w = 0, 0
	}
	return err
}
