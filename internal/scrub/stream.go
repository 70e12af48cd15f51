package scrub

import (
	"io"
	"maps"
	"sync"
	"sync/atomic"
)

// Reader masks the occurrences in the bytes read from an underlying reader
// (a response body). It holds back only the trailing bytes that may begin
// an occurrence (at most MaxLen-1) and releases them once the next bytes
// show they do not, or at the end of the stream, so that whatever the
// reads' boundaries every occurrence is masked and every other byte passes
// unchanged, in order. Not safe for concurrent use (one reader, as
// ReverseProxy's copy loop).
type Reader struct {
	m     *Matcher
	r     io.Reader
	hooks Hooks // nil: nobody listens
	state uint32
	held  []byte
	out   []byte // released bytes not yet returned (small-read path)
	buf   []byte // small-read path buffer, allocated on first need
	err   error
}

// Hooks is what a Reader reports to.
type Hooks interface {
	// Found is called with the secret_ref of each occurrence.
	Found(ref string)
	// Done is called when the underlying reader returns io.EOF (before
	// the Read that returns it) and again at Close, after its Close: the
	// proxy masks the response trailers there, which the transport fills
	// at the end of the body or, at the latest, at Close.
	Done()
}

// NewReader returns a Reader over r reporting to hooks (nil: none).
func (m *Matcher) NewReader(r io.Reader, hooks Hooks) *Reader {
	z := &Reader{}
	z.Reset(m, r, hooks)
	return z
}

// Reset makes z a new Reader over r for m, keeping its buffers: a caller
// may embed a Reader in its per-request state and spare the allocation.
func (z *Reader) Reset(m *Matcher, r io.Reader, hooks Hooks) {
	*z = Reader{m: m, r: r, hooks: hooks, held: z.held[:0], buf: z.buf}
}

func (z *Reader) hit(_, _, ref int) { z.hooks.Found(z.m.refs[ref]) }

// Read implements io.Reader. It returns 0 bytes only with an error.
func (z *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(z.out) > 0 {
			n := copy(p, z.out)
			z.out = z.out[n:]
			return n, nil
		}
		if z.err != nil {
			return 0, z.err
		}
		if len(p) >= 2*len(z.held)+64 {
			// Scan in the caller's buffer: no copy but the held bytes.
			n, err := z.fill(p)
			if n > 0 || err != nil {
				return n, err
			}
			continue
		}
		if z.buf == nil {
			z.buf = make([]byte, 2*z.m.maxLen+4096)
		}
		n, err := z.fill(z.buf)
		z.out = z.buf[:n]
		if n == 0 && err != nil {
			return 0, err
		}
	}
}

// fill puts the held bytes at the start of b, reads after them, scans, and
// returns how many bytes of b are released. The bytes it holds back are
// copied out of b.
func (z *Reader) fill(b []byte) (int, error) {
	h := copy(b, z.held)
	n, err := z.r.Read(b[h:])
	total := h + n
	var sink hitSink
	if z.hooks != nil {
		sink = z
	}
	z.state = z.m.scan(z.state, b[:total], h, true, sink)
	keep := z.m.holdFor(z.state)
	if err != nil {
		// End of the stream (or a broken one): nothing can follow, so a
		// held prefix is not an occurrence.
		keep = 0
		z.err = err
		if err == io.EOF && z.hooks != nil {
			z.hooks.Done()
		}
	}
	keep = min(keep, total)
	z.held = append(z.held[:0], b[total-keep:total]...)
	return total - keep, err
}

// Close closes the underlying reader if it is an io.Closer, then calls
// Hooks.Done.
func (z *Reader) Close() error {
	var err error
	if c, ok := z.r.(io.Closer); ok {
		err = c.Close()
	}
	if z.hooks != nil {
		z.hooks.Done()
	}
	return err
}

// Cache keeps compiled matchers by a caller's key (the proxy's: the
// request's rewrite set and secret snapshot), so that a request pays a map
// lookup, not an automaton build. The map is immutable behind an atomic
// pointer and copied on a miss (rare: once per rule and secret
// generation), so a hit takes no lock and writes no shared memory. It
// holds at most its limit of entries and starts over when full. Safe for
// concurrent use.
type Cache[K comparable] struct {
	m     atomic.Pointer[map[K]cached]
	mu    sync.Mutex // serialises misses
	limit int
}

type cached struct {
	m   *Matcher
	err error
}

// NewCache returns a cache of at most limit entries (minimum 1).
func NewCache[K comparable](limit int) *Cache[K] {
	c := &Cache[K]{limit: max(limit, 1)}
	c.m.Store(&map[K]cached{})
	return c
}

// Get returns the matcher for key, compiling secrets(key) on a miss (the
// func is only called then). The error (ErrTooLarge) is cached like a
// matcher.
func (c *Cache[K]) Get(key K, secrets func(K) []Secret) (*Matcher, error) {
	if e, ok := (*c.m.Load())[key]; ok {
		return e.m, e.err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.m.Load()
	if e, ok := old[key]; ok {
		return e.m, e.err
	}
	m, err := Compile(secrets(key))
	next := make(map[K]cached, len(old)+1)
	if len(old) < c.limit {
		maps.Copy(next, old)
	}
	next[key] = cached{m, err}
	c.m.Store(&next)
	return m, err
}
