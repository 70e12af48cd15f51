package h1parse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"sync"
)

// body is a request body read from the connection's reader, a copy of
// net/http's body type for the two request framings the fast path reads (a
// positive Content-Length; Transfer-Encoding: chunked), as it behaves outside
// the server (no early close):
//   - reads stop at the declared length or the last chunk; a Content-Length
//     body cut short reports io.ErrUnexpectedEOF; the read that reaches the
//     end of a Content-Length body reports io.EOF with its data;
//   - after a chunked body's last chunk the trailer is read into the
//     request's Trailer; a bad trailer is the read's error and closes the body;
//   - a read after Close reports http.ErrBodyReadAfterClose;
//   - Close drains what is left so that the next request can be read, unless
//     the body has no trailer to read and the connection is to close.
//
// Each branch mirrors net/http's transfer.go line for line; the differential
// fuzz target holds the two to the same bytes and errors.
type body struct {
	src     io.Reader // &lr or a chunked reader
	lr      io.LimitedReader
	hdr     *http.Request // non-nil: read the trailer into hdr.Trailer at EOF
	r       *bufio.Reader // the connection's reader, for the trailer
	closing bool          // the connection closes after this request

	mu     sync.Mutex // guards the fields below, and Read against Close
	sawEOF bool
	closed bool
}

// initContentLength sets b up for a body of n > 0 bytes.
func (b *body) initContentLength(br *bufio.Reader, n int64, closing bool) {
	b.lr = io.LimitedReader{R: br, N: n}
	b.src = &b.lr
	b.closing = closing
}

// initChunked sets b up for a chunked body of req.
func (b *body) initChunked(br *bufio.Reader, req *http.Request, closing bool) {
	b.src = httputil.NewChunkedReader(br) // net/http's own internal.NewChunkedReader
	b.hdr = req
	b.r = br
	b.closing = closing
}

// Read implements io.Reader.
func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.readLocked(p)
}

func (b *body) readLocked(p []byte) (n int, err error) {
	if b.sawEOF {
		return 0, io.EOF
	}
	n, err = b.src.Read(p)
	if err == io.EOF {
		b.sawEOF = true
		if b.hdr != nil {
			if e := b.readTrailer(); e != nil {
				// A bad trailer: no further read of any kind may succeed,
				// nor may the connection carry another request.
				err = e
				b.sawEOF = false
				b.closed = true
			}
			b.hdr = nil
		} else if b.src == &b.lr && b.lr.N > 0 {
			err = io.ErrUnexpectedEOF
		}
	}
	if err == nil && n > 0 && b.src == &b.lr && b.lr.N == 0 {
		err = io.EOF
		b.sawEOF = true
	}
	return n, err
}

var errTrailerEOF = errors.New("http: unexpected EOF reading trailer")

// readTrailer reads the trailer after the last chunk, as net/http's
// body.readTrailer: a bare CRLF, or fields up to a blank line that must be
// in sight within the reader's buffer.
func (b *body) readTrailer() error {
	buf, err := b.r.Peek(2)
	if bytes.Equal(buf, []byte("\r\n")) {
		b.r.Discard(2)
		return nil
	}
	if len(buf) < 2 {
		return errTrailerEOF
	}
	if err != nil {
		return err
	}
	if !seeUpcomingDoubleCRLF(b.r) {
		return errors.New("http: suspiciously long trailer after chunked body")
	}
	hdr, err := textproto.NewReader(b.r).ReadMIMEHeader()
	if err != nil {
		if err == io.EOF {
			return errTrailerEOF
		}
		return err
	}
	if b.hdr.Trailer == nil {
		b.hdr.Trailer = http.Header(hdr)
	} else {
		maps.Copy(b.hdr.Trailer, http.Header(hdr))
	}
	return nil
}

// seeUpcomingDoubleCRLF reports whether a blank line is in sight within r's
// buffer, peeking one byte further at a time as net/http does.
func seeUpcomingDoubleCRLF(r *bufio.Reader) bool {
	for peekSize := 4; ; peekSize++ {
		buf, err := r.Peek(peekSize)
		if bytes.HasSuffix(buf, []byte("\r\n\r\n")) {
			return true
		}
		if err != nil {
			break
		}
	}
	return false
}

// Close implements io.Closer. It drains the unread rest of the body (and
// reads the trailer) unless there is no trailer to read and the connection
// is to close anyway, and returns the error that draining met.
func (b *body) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	var err error
	switch {
	case b.sawEOF:
	case b.hdr == nil && b.closing:
	default:
		_, err = io.Copy(io.Discard, lockedBody{b})
	}
	b.closed = true
	return err
}

// lockedBody reads a body whose mutex is already held.
type lockedBody struct{ b *body }

func (l lockedBody) Read(p []byte) (int, error) {
	if l.b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return l.b.readLocked(p)
}
