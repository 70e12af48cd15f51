package scrub

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// ErrFrame is returned by a FrameReader for a server frame it cannot
// inspect: compressed (RSV1, permessage-deflate was refused in the offer),
// masked (servers never mask, RFC 6455 §5.1) or with a length beyond 2^63.
// The proxy then closes the tunnel.
var ErrFrame = errors.New("scrub: websocket frame cannot be inspected")

// FrameReader masks the occurrences in the payloads of the WebSocket
// frames a server sends (RFC 6455 §5.2), read from an underlying reader,
// and passes the frame headers unchanged. The payloads of a message's data
// and continuation frames are scanned as one stream, so an occurrence split
// across the fragments of a message is caught; a control frame (close
// reason, ping, pong: at most 125 bytes) is held whole and scanned on its
// own, so one sent between two fragments does not hide the occurrence they
// carry (TestFrameReaderSplitAcrossFragments). Masking keeps every length,
// so every frame header stays true.
//
// A message that ends (FIN) is released at its end, with everything before
// it: nothing of a finished message waits for later bytes
// (TestFrameReaderReleasesAtFIN, FuzzFrameReader), and an occurrence does
// not span two messages. Of an unfinished message, the last Hold() payload
// bytes are held back whatever they are, with the frame headers that
// follow them, until the next bytes arrive or HoldTimeout passes (then
// they go out; a partial occurrence of StallDepth bytes or more there is
// reported to stalled). Not safe for concurrent use; the underlying Read
// may run on a goroutine of its own while bytes wait for HoldTimeout.
type FrameReader struct {
	m       *Matcher
	r       io.Reader
	found   func(ref string)
	stalled func()
	timeout time.Duration // 0: no timer (tests of liveness at FIN)
	state   uint32

	in   []byte // bytes read, not yet parsed (an incomplete frame header)
	pend []byte // parsed bytes not yet released; pend[:ready] may go out
	// segs maps the payload bytes in pend to payload-stream offsets, so
	// that an occurrence is masked across the frame headers between its
	// pieces.
	segs   []seg
	ready  int
	remain uint64 // payload bytes left in the current frame
	plen   int64  // payload bytes scanned so far
	base   int64  // payload offset of the piece being scanned (hit)
	msgAt  int64  // payload offset where the current message began
	fin    bool   // the current data frame is its message's last
	// ctrl is set while a control frame is parsed: its header starts at
	// pend[ctrlHdr] and its payload at pend[ctrlAt].
	ctrl            bool
	ctrlHdr, ctrlAt int
	err             error
	buf             []byte
	async           asyncRead
}

type seg struct {
	at  int   // index in pend
	off int64 // payload-stream offset of pend[at]
	n   int
}

// NewFrameReader returns a FrameReader over r (the server's side of an
// upgraded connection, read after the 101 head). found, if not nil, is
// called with the secret_ref of each occurrence; stalled, if not nil, at
// each stall (see FrameReader).
func (m *Matcher) NewFrameReader(r io.Reader, found func(ref string), stalled func()) *FrameReader {
	return &FrameReader{m: m, r: r, found: found, stalled: stalled, timeout: HoldTimeout}
}

// Read implements io.Reader.
func (f *FrameReader) Read(p []byte) (int, error) {
	for {
		if f.ready > 0 {
			n := copy(p, f.pend[:f.ready])
			f.pend = f.pend[:copy(f.pend, f.pend[n:])]
			f.ready -= n
			for i := range f.segs {
				f.segs[i].at -= n
			}
			f.ctrlHdr -= n
			f.ctrlAt -= n
			return n, nil
		}
		if f.err != nil {
			return 0, f.err
		}
		if f.buf == nil {
			f.buf = make([]byte, 32<<10)
		}
		n, err, ok := f.next()
		if !ok {
			continue // the timer released what was held
		}
		if n > 0 {
			if perr := f.parse(f.buf[:n]); perr != nil {
				f.err = perr
				f.pend, f.ready = f.pend[:0], 0 // nothing more goes out
				return 0, perr
			}
		}
		if err != nil {
			// End of the connection: nothing can follow a held byte, and
			// the bytes of a cut header go out as they came.
			f.err = err
			f.pend = append(f.pend, f.in...)
			f.in = f.in[:0]
			f.ready = len(f.pend)
			f.segs = f.segs[:0]
		}
	}
}

// next reads into f.buf. With bytes held back it reads on a goroutine and
// waits at most the timeout: ok false means the timer fired and released
// them (the Read stays in flight for the next call).
func (f *FrameReader) next() (int, error, bool) {
	if !f.async.pending && len(f.pend) == 0 {
		n, err := f.r.Read(f.buf)
		return n, err, true
	}
	timeout := f.timeout
	if len(f.pend) == 0 {
		timeout = 0 // nothing to release: wait for the bytes
	}
	rr, ok := f.async.wait(f.r, f.buf, timeout)
	if !ok {
		if f.stalled != nil && f.m.stalledIn(f.state) {
			f.stalled()
		}
		f.release()
		if f.ready > 0 {
			return 0, nil, false
		}
		// Only a control frame in progress is held: it is scanned whole,
		// so wait for it.
		rr, _ = f.async.wait(f.r, f.buf, 0)
	}
	return rr.n, rr.err, true
}

// release lets every parsed byte go out but a control frame in progress.
func (f *FrameReader) release() {
	f.ready = len(f.pend)
	if f.ctrl {
		f.ready = f.ctrlHdr
	}
	f.segs = f.segs[:0]
}

// parse consumes b: frame headers go to pend as they are, payload bytes
// are scanned; then everything before the first held payload byte is
// released.
func (f *FrameReader) parse(b []byte) error {
	for len(b) > 0 {
		if f.remain == 0 {
			// A frame header, possibly split across reads.
			f.in = append(f.in, b...)
			b = nil
			hlen, plen, err := frameHeader(f.in)
			if err != nil {
				return err
			}
			if hlen == 0 {
				break // incomplete
			}
			f.ctrl = f.in[0]&0x08 != 0
			if !f.ctrl {
				f.fin = f.in[0]&0x80 != 0
			}
			if f.ctrl && plen > 125 {
				return fmt.Errorf("%w: control frame of %d bytes", ErrFrame, plen)
			}
			f.ctrlHdr = len(f.pend)
			f.pend = append(f.pend, f.in[:hlen]...)
			f.ctrlAt = len(f.pend)
			f.remain = plen
			rest := f.in[hlen:]
			b = append([]byte(nil), rest...)
			f.in = f.in[:0]
			f.endControl()
			f.endMessage()
			continue
		}
		n := int(min(uint64(len(b)), f.remain))
		if f.ctrl {
			f.pend = append(f.pend, b[:n]...)
			f.remain -= uint64(n)
			b = b[n:]
			f.endControl()
			continue
		}
		at := len(f.pend)
		f.pend = append(f.pend, b[:n]...)
		f.segs = append(f.segs, seg{at: at, off: f.plen, n: n})
		f.base = f.plen
		f.state = f.m.scan(f.state, f.pend[at:at+n], 0, false, f)
		f.plen += int64(n)
		f.remain -= uint64(n)
		b = b[n:]
		f.endMessage()
	}
	// Release up to the last Hold() payload bytes of an unfinished message.
	keep := min(int64(f.m.Hold()), f.plen-f.msgAt)
	from := f.plen - keep
	f.ready = len(f.pend)
	kept := f.segs[:0]
	for _, s := range f.segs {
		if s.off+int64(s.n) <= from {
			continue
		}
		if s.off < from {
			d := int(from - s.off)
			s.at, s.off, s.n = s.at+d, s.off+int64(d), s.n-d
		}
		if len(kept) == 0 {
			f.ready = s.at
		}
		kept = append(kept, s)
	}
	f.segs = kept
	if f.ctrl {
		f.ready = min(f.ready, f.ctrlHdr)
	}
	return nil
}

// endMessage ends the message when its final data frame is complete:
// its bytes need no later ones, and the next message starts afresh.
func (f *FrameReader) endMessage() {
	if !f.ctrl && f.fin && f.remain == 0 {
		f.state, f.msgAt, f.fin = 0, f.plen, false
	}
}

// endControl scans a control frame's payload once it is complete.
func (f *FrameReader) endControl() {
	if !f.ctrl || f.remain != 0 {
		return
	}
	f.ctrl = false
	var sink hitSink
	if f.found != nil {
		sink = funcSink{f.m, f.found}
	}
	f.m.scan(0, f.pend[f.ctrlAt:], 0, true, sink)
}

// hit masks an occurrence in the data payloads, which may span frames.
func (f *FrameReader) hit(end, length, ref int, first bool) {
	f.maskBack(f.base+int64(end), length)
	if f.found != nil && first {
		f.found(f.m.refs[ref])
	}
}

// maskBack masks the length payload bytes other than CR and LF that end at
// payload-stream offset end, in the segments still in pend.
func (f *FrameReader) maskBack(end int64, length int) {
	for i := len(f.segs) - 1; i >= 0 && length > 0; i-- {
		s := f.segs[i]
		for o := min(end, s.off+int64(s.n)-1); o >= s.off && length > 0; o-- {
			if c := &f.pend[s.at+int(o-s.off)]; !isLineBreak(*c) {
				*c = '*'
				length--
			}
		}
	}
}

// frameHeader parses the header at the start of b: its length and the
// payload length, or 0, 0 if b holds only part of it.
func frameHeader(b []byte) (int, uint64, error) {
	if len(b) < 2 {
		return 0, 0, nil
	}
	if b[0]&0x70 != 0 {
		return 0, 0, fmt.Errorf("%w: reserved bits set (compressed)", ErrFrame)
	}
	if b[1]&0x80 != 0 {
		return 0, 0, fmt.Errorf("%w: masked server frame", ErrFrame)
	}
	switch l := b[1] & 0x7f; l {
	case 126:
		if len(b) < 4 {
			return 0, 0, nil
		}
		return 4, uint64(binary.BigEndian.Uint16(b[2:])), nil
	case 127:
		if len(b) < 10 {
			return 0, 0, nil
		}
		n := binary.BigEndian.Uint64(b[2:])
		if n>>63 != 0 {
			return 0, 0, fmt.Errorf("%w: payload length out of range", ErrFrame)
		}
		return 10, n, nil
	default:
		return 2, uint64(l), nil
	}
}
