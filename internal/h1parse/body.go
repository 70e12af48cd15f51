package h1parse

import (
	"bufio"
	"io"
	"net/http"
	"sync"
)

// contentLengthBody is a request body of a declared, positive length read
// from the connection's reader. It behaves as net/http's body type does for
// such a body when read outside the server (no early close): reads stop at
// the declared length; a body cut short reports io.ErrUnexpectedEOF; the read
// that reaches the end reports io.EOF with its data; a read after Close
// reports http.ErrBodyReadAfterClose; Close drains what is left so the next
// request can be read, unless the connection is to close after this request.
type contentLengthBody struct {
	mu      sync.Mutex // guards everything below, and Read against Close
	src     io.LimitedReader
	closing bool
	sawEOF  bool
	closed  bool
}

func (b *contentLengthBody) init(br *bufio.Reader, n int64, closing bool) {
	b.src = io.LimitedReader{R: br, N: n}
	b.closing = closing
}

// Read implements io.Reader.
func (b *contentLengthBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.readLocked(p)
}

func (b *contentLengthBody) readLocked(p []byte) (int, error) {
	if b.sawEOF {
		return 0, io.EOF
	}
	n, err := b.src.Read(p)
	if err == io.EOF {
		b.sawEOF = true
		if b.src.N > 0 {
			err = io.ErrUnexpectedEOF
		}
	}
	if err == nil && n > 0 && b.src.N == 0 {
		err = io.EOF
		b.sawEOF = true
	}
	return n, err
}

// Close implements io.Closer. It drains the unread rest of the body from the
// connection unless the connection is to close anyway, and returns the error
// that draining met (io.ErrUnexpectedEOF for a body cut short).
func (b *contentLengthBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	var err error
	if !b.sawEOF && !b.closing {
		_, err = io.Copy(io.Discard, lockedBody{b})
	}
	b.closed = true
	return err
}

// lockedBody reads a contentLengthBody whose mutex is already held.
type lockedBody struct{ b *contentLengthBody }

func (l lockedBody) Read(p []byte) (int, error) {
	if l.b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return l.b.readLocked(p)
}
