package proxy

import (
	"io"
	"sync"
)

// copyBufSize is the size of ReverseProxy's body copy buffers.
const copyBufSize = 32 << 10

// bufferPool recycles the 32 KiB copy buffers of ReverseProxy so that a
// streamed body costs no allocation per request.
//
// It pools array pointers rather than *[]byte: Put converts the slice back
// to *[copyBufSize]byte, which does not allocate, whereas storing &p (a new
// slice header escaping to the heap) cost one allocation per request.
type bufferPool struct{ p sync.Pool }

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

// Large HTTP/2 bodies are read from the transport in big chunks.
//
// Every Read of an HTTP/2 response body that consumes 4 KiB or more makes
// net/http send a WINDOW_UPDATE (a TLS record and a write syscall, which
// the origin must read too). ReverseProxy reads with its 32 KiB buffer, so
// a download cost one WINDOW_UPDATE per 32 KiB: about a fifth of BotBox's
// CPU on a 256 MiB download. coalescingBody reads up to coalesceSize at a
// time (whatever the transport has buffered, so it never waits for more
// than one Read would) and hands it out in ReverseProxy's 32 KiB pieces:
// one WINDOW_UPDATE per up to 256 KiB, for one extra memory copy. Only
// bodies of known length of at least coalesceMinBody get it, so that a
// long-lived stream (SSE, gRPC: no Content-Length) never pins a buffer.
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
