package scrub

import (
	"encoding/binary"
	"io"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HoldTimeout is how long a Reader waits for the next chunk before it
// releases the tail it holds back (FramingNone; for gRPC and SSE the tail
// of a chunk that ends inside a message or event): the same bounded delay
// whatever the bytes are.
const HoldTimeout = 50 * time.Millisecond

// StallDepth is the length of a partial occurrence above which a tail
// released by HoldTimeout counts as a stall (Hooks.Stalled): no
// legitimate origin pauses inside that much of a secret.
const StallDepth = 8

// Framing is how a body is cut into messages, each released whole at its
// end (nothing of a finished message waits for later bytes).
type Framing uint8

const (
	// FramingNone: a byte stream; only HoldTimeout releases a chunk's tail.
	FramingNone Framing = iota
	// FramingGRPC: gRPC's length-prefixed messages (a flag byte and a
	// 4-byte big-endian length, then the message); each is released at
	// its last byte, and an occurrence does not span two messages.
	FramingGRPC
	// FramingSSE: server-sent events, each ending in a blank line ("\n\n"
	// or "\n\r\n"), released there; an occurrence does not span two.
	FramingSSE
)

// FramingOf returns the framing of a response body with the given
// Content-Type (the media type, case-insensitive; parameters ignored).
func FramingOf(contentType string) Framing {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	switch {
	case mt == "application/grpc" || strings.HasPrefix(mt, "application/grpc+"):
		return FramingGRPC
	case mt == "text/event-stream":
		return FramingSSE
	}
	return FramingNone
}

// Reader masks the occurrences in the bytes read from an underlying reader
// (a response body), so that whatever the reads' boundaries every
// occurrence is masked and every other byte passes unchanged, in order.
//
// What it holds back does not depend on the bytes: the last Hold() bytes
// of every chunk (fewer when the chunk is shorter, none after the end of
// the stream or of a gRPC message or SSE event), released with the next
// chunk or, if none arrives within HoldTimeout, on their own. A stream
// that sends a secret's first bytes and pauses therefore sees them after
// HoldTimeout exactly like any other bytes (TestStreamHoldIndependentOfSecret);
// a pause inside StallDepth or more bytes of an occurrence is reported
// (Hooks.Stalled). An occurrence whose bytes were released by the timer
// before its end arrived is masked from there on only: at most
// FragmentLen-1 bytes of it went out (none of a shorter secret's whole
// pattern can be completed in released bytes). Not safe for concurrent use
// (one reader, as ReverseProxy's copy loop); the underlying Read may run
// on a goroutine of its own while a tail waits for HoldTimeout.
type Reader struct {
	m       *Matcher
	r       io.Reader
	hooks   Hooks // nil: nobody listens
	framing Framing
	timeout time.Duration // 0: no timer (tests of the framing's liveness)
	state   uint32
	held    []byte
	out     []byte // released bytes not yet returned
	buf     []byte // read buffer when bytes are held, allocated on first need
	err     error
	// async is the underlying Read while a held tail waits for the timer
	// (into buf[Hold():]).
	async asyncRead
	// left is how many bytes the body has still to give (SetLength; -1:
	// unknown): at 0 the next Read returns the end at once, so it is
	// made here rather than on a goroutine with a timer.
	left int64
	// gRPC framing: prefix bytes seen of the current message, its prefix,
	// and payload bytes left. SSE: the last byte other than CR was LF.
	gseen   int
	gprefix [5]byte
	gleft   uint32
	lastLF  bool
}

type readResult struct {
	n   int
	err error
}

// asyncRead is an underlying Read that may outlive a wait: it runs on a
// goroutine of its own, into a buffer its caller leaves alone until the
// result is taken, and it ends when the underlying reader returns (a
// response body returns at its Close).
type asyncRead struct {
	res     chan readResult
	pending bool
}

// wait starts r.Read(dst) unless one is in flight, and returns its result;
// with timeout > 0 it gives up after timeout (ok false), the Read staying
// in flight for the next wait (with the same dst).
func (a *asyncRead) wait(r io.Reader, dst []byte, timeout time.Duration) (rr readResult, ok bool) {
	if !a.pending {
		if a.res == nil {
			a.res = make(chan readResult, 1)
		}
		a.pending = true
		res := a.res
		go func() {
			n, err := r.Read(dst)
			res <- readResult{n, err}
		}()
	}
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case rr = <-a.res:
		case <-t.C:
			return readResult{}, false
		}
	} else {
		rr = <-a.res
	}
	a.pending = false
	return rr, true
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
	// Stalled is called when HoldTimeout released a tail inside a partial
	// occurrence of StallDepth bytes or more.
	Stalled()
}

// NewReader returns a Reader over r reporting to hooks (nil: none), for a
// body without framing.
func (m *Matcher) NewReader(r io.Reader, hooks Hooks) *Reader {
	z := &Reader{}
	z.Reset(m, r, hooks, FramingNone)
	return z
}

// Reset makes z a new Reader over r for m with the given framing, keeping
// its buffers when no Read of the previous stream is in flight: a caller
// may embed a Reader in its per-request state and spare the allocation.
func (z *Reader) Reset(m *Matcher, r io.Reader, hooks Hooks, framing Framing) {
	buf := z.buf
	if z.async.pending {
		buf = nil // the old stream's Read still writes into it
	}
	*z = Reader{m: m, r: r, hooks: hooks, framing: framing, timeout: HoldTimeout, held: z.held[:0], buf: buf, left: -1}
}

// SetLength declares the body's length (a Content-Length; -1: unknown),
// so that the Read that only returns the end is not timed: the underlying
// reader must end there (net/http's response bodies do).
func (z *Reader) SetLength(n int64) { z.left = n }

// consumed counts n bytes read from the underlying reader.
func (z *Reader) consumed(n int) {
	if z.left > 0 {
		z.left = max(z.left-int64(n), 0)
	}
}

func (z *Reader) hit(_, _, ref int, first bool) {
	if first {
		z.hooks.Found(z.m.refs[ref])
	}
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
		if !z.async.pending && (len(z.held) == 0 || z.left == 0) && len(p) >= 2*z.m.Hold()+64 {
			// Nothing held, or only the end to come: nothing waits on a
			// timer. Read and scan in the caller's buffer, after the held
			// bytes.
			h := copy(p, z.held)
			n, err := z.r.Read(p[h:])
			z.consumed(n)
			released := z.process(p[:h+n], h, err)
			if released > 0 || err != nil {
				return released, z.err
			}
			continue
		}
		z.readHeld()
	}
}

// readHeld reads the next chunk behind the held bytes, or releases them
// if it takes longer than the timeout; either way z.out or z.err is set,
// or the held bytes are gone.
func (z *Reader) readHeld() {
	off := z.m.Hold()
	if z.buf == nil {
		z.buf = make([]byte, off+32<<10)
	}
	if !z.async.pending && (len(z.held) == 0 || z.left == 0) {
		// Nothing held, or only the end to come: nothing to time, read
		// here.
		h := len(z.held)
		n, err := z.r.Read(z.buf[off:])
		z.consumed(n)
		b := z.buf[off-h : off+n]
		copy(b, z.held)
		z.out = b[:z.process(b, h, err)]
		return
	}
	timeout := z.timeout
	if len(z.held) == 0 {
		timeout = 0 // nothing to release: wait for the bytes
	}
	rr, ok := z.async.wait(z.r, z.buf[off:], timeout)
	if !ok {
		// Released as they are: the same delay whatever they are.
		if z.hooks != nil && z.m.stalledIn(z.state) {
			z.hooks.Stalled()
		}
		// The state goes on: bytes completing the occurrence are still
		// masked.
		z.out, z.held = z.held, nil
		return
	}
	z.consumed(rr.n)
	h := len(z.held)
	b := z.buf[off-h : off+rr.n]
	copy(b, z.held)
	n := z.process(b, h, rr.err)
	z.out = b[:n]
}

// process scans b (the held bytes b[:h], then new ones), sets the bytes it
// holds back from b's end, and returns how many bytes of b are released.
// err is the underlying Read's.
func (z *Reader) process(b []byte, h int, err error) int {
	var sink hitSink
	if z.hooks != nil {
		sink = z
	}
	// end is where the last finished message in b ends (-1: none).
	end := -1
	switch z.framing {
	case FramingGRPC:
		for i := h; i < len(b); {
			if z.gseen < len(z.gprefix) {
				z.gprefix[z.gseen] = b[i]
				z.gseen++
				i++
				if z.gseen == len(z.gprefix) {
					z.gleft = binary.BigEndian.Uint32(z.gprefix[1:])
					z.state = 0
				}
			} else {
				k := int(min(uint32(len(b)-i), z.gleft))
				z.state = z.m.scan(z.state, b[:i+k], i, true, sink)
				i += k
				z.gleft -= uint32(k)
			}
			if z.gseen == len(z.gprefix) && z.gleft == 0 {
				end, z.gseen, z.state = i, 0, 0
			}
		}
	case FramingSSE:
		from := h
		for i := h; i < len(b); i++ {
			switch c := b[i]; {
			case c == '\n' && z.lastLF:
				z.state = z.m.scan(z.state, b[:i+1], from, true, sink)
				end, from, z.state, z.lastLF = i+1, i+1, 0, false
			case c == '\n':
				z.lastLF = true
			case c != '\r':
				z.lastLF = false
			}
		}
		z.state = z.m.scan(z.state, b, from, true, sink)
	default:
		z.state = z.m.scan(z.state, b, h, true, sink)
	}
	keep := min(z.m.Hold(), len(b))
	if end >= 0 {
		keep = min(keep, len(b)-end)
	}
	if err != nil {
		// End of the stream (or a broken one): nothing can follow, so a
		// held prefix is not an occurrence.
		keep = 0
		z.err = err
		if err == io.EOF && z.hooks != nil {
			z.hooks.Done()
		}
	}
	z.held = append(z.held[:0], b[len(b)-keep:]...)
	return len(b) - keep
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
