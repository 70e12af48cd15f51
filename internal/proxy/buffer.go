package proxy

import "sync"

// bufferPool recycles the 32 KiB copy buffers of ReverseProxy so that a
// streamed body costs no allocation per request.
type bufferPool struct{ p sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
}

func (b *bufferPool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bufferPool) Put(p []byte) { b.p.Put(&p) }
