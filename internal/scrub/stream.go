package scrub

import (
	"io"
	"sync"
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
	found func(end, length, ref int) // nil: nobody listens
	atEOF func()
	state uint32
	held  []byte
	out   []byte // released bytes not yet returned (small-read path)
	buf   []byte // small-read path buffer
	err   error
}

// NewReader returns a Reader over r. found, if not nil, is called with the
// secret_ref of each occurrence. atEOF, if not nil, is called when r
// returns io.EOF (before the Read that returns it) and again at Close,
// after r's Close: the proxy masks the response trailers there, which the
// transport fills at the end of the body or, at the latest, at Close.
func (m *Matcher) NewReader(r io.Reader, found func(ref string), atEOF func()) *Reader {
	z := &Reader{m: m, r: r, atEOF: atEOF}
	if found != nil {
		z.found = func(_, _, ref int) { found(m.refs[ref]) }
	}
	return z
}

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
	z.state = z.m.scan(z.state, b[:total], h, true, z.found)
	keep := z.m.holdFor(z.state)
	if err != nil {
		// End of the stream (or a broken one): nothing can follow, so a
		// held prefix is not an occurrence.
		keep = 0
		z.err = err
		if err == io.EOF && z.atEOF != nil {
			z.atEOF()
		}
	}
	keep = min(keep, total)
	z.held = append(z.held[:0], b[total-keep:total]...)
	return total - keep, err
}

// Close closes the underlying reader if it is an io.Closer, then calls
// atEOF.
func (z *Reader) Close() error {
	var err error
	if c, ok := z.r.(io.Closer); ok {
		err = c.Close()
	}
	if z.atEOF != nil {
		z.atEOF()
	}
	return err
}

// Cache keeps compiled matchers by a caller's key (the proxy's: the
// request's rewrite set and secret snapshot), so that a request pays a map
// lookup, not an automaton build. It holds at most its limit of entries and
// starts over when full. Safe for concurrent use.
type Cache[K comparable] struct {
	mu    sync.Mutex
	m     map[K]cached
	limit int
}

type cached struct {
	m   *Matcher
	err error
}

// NewCache returns a cache of at most limit entries (minimum 1).
func NewCache[K comparable](limit int) *Cache[K] {
	return &Cache[K]{m: map[K]cached{}, limit: max(limit, 1)}
}

// Get returns the matcher for key, compiling secrets() on a miss. The
// error (ErrTooLarge) is cached like a matcher.
func (c *Cache[K]) Get(key K, secrets func() []Secret) (*Matcher, error) {
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return e.m, e.err
	}
	m, err := Compile(secrets())
	c.mu.Lock()
	if len(c.m) >= c.limit {
		clear(c.m)
	}
	c.m[key] = cached{m, err}
	c.mu.Unlock()
	return m, err
}
