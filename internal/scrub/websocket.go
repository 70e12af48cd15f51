package scrub

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrFrame is returned by a FrameReader for a server frame it cannot
// inspect: compressed (RSV1, permessage-deflate was refused in the offer),
// masked (servers never mask, RFC 6455 §5.1) or with a length beyond 2^63.
// The proxy then closes the tunnel.
var ErrFrame = errors.New("scrub: websocket frame cannot be inspected")

// FrameReader masks the occurrences in the payloads of the WebSocket
// frames a server sends (RFC 6455 §5.2), read from an underlying reader,
// and passes the frame headers unchanged. The payloads of the data and
// continuation frames are scanned as one stream, so an occurrence split
// across the fragments of a message is caught; a control frame (close
// reason, ping, pong: at most 125 bytes) is held whole and scanned on its
// own, so one sent between two fragments does not hide the occurrence they
// carry (TestFrameReaderSplitAcrossFragments). Masking
// keeps every length, so every frame header stays true. A payload byte that
// may begin an occurrence is held back, with the frame headers that follow
// it, until the next payload bytes decide (at most MaxLen-1 payload bytes).
// Not safe for concurrent use.
type FrameReader struct {
	m     *Matcher
	r     io.Reader
	found func(ref string)
	state uint32

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
	// ctrl is set while a control frame is parsed: its header starts at
	// pend[ctrlHdr] and its payload at pend[ctrlAt].
	ctrl            bool
	ctrlHdr, ctrlAt int
	err             error
	buf             []byte
}

type seg struct {
	at  int   // index in pend
	off int64 // payload-stream offset of pend[at]
	n   int
}

// NewFrameReader returns a FrameReader over r (the server's side of an
// upgraded connection, read after the 101 head). found, if not nil, is
// called with the secret_ref of each occurrence.
func (m *Matcher) NewFrameReader(r io.Reader, found func(ref string)) *FrameReader {
	return &FrameReader{m: m, r: r, found: found}
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
		n, err := f.r.Read(f.buf)
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
	}
	// Release up to the first held payload byte.
	keep := int64(f.m.holdFor(f.state))
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
func (f *FrameReader) hit(end, length, ref int) {
	f.mask(f.base+int64(end)+1-int64(length), f.base+int64(end)+1)
	if f.found != nil {
		f.found(f.m.refs[ref])
	}
}

// mask masks payload-stream offsets [from, to) in pend.
func (f *FrameReader) mask(from, to int64) {
	for _, s := range f.segs {
		a, b := max(from, s.off), min(to, s.off+int64(s.n))
		for o := a; o < b; o++ {
			f.pend[s.at+int(o-s.off)] = '*'
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
