package engine

import (
	"bufio"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// writeBufferSize is the response buffer: a small response (head and
// body) leaves in one write; a larger body write bypasses it.
const writeBufferSize = 4 << 10

var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufferSize) }}

// response is the http.ResponseWriter of one request. The head is written
// into the buffer when the status is set (WriteHeader or the first
// Write), from the header map as it is then: later changes count only
// for announced trailers.
type response struct {
	c       *conn
	req     *http.Request
	body    *reqBody // the request's body, nil when it has none
	bw      *bufio.Writer
	header  http.Header
	status  int  // final status, 0 until set
	noBody  bool // HEAD, 204, 304
	chunked bool
	// contentLength is the declared length, -1 when none (chunked).
	contentLength int64
	written       int64
	// closeAfter: the connection ends after this response.
	closeAfter bool
	trailers   []string // announced trailer names
	err        error    // sticky write error
}

var (
	_ http.ResponseWriter = (*response)(nil)
	_ http.Flusher        = (*response)(nil)
)

func (w *response) reset(c *conn, req *http.Request) {
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(c.rwc)
	*w = response{c: c, req: req, bw: bw, contentLength: -1, closeAfter: req.Close, trailers: w.trailers[:0]}
}

// release returns the write buffer (flushed or abandoned) to the pool.
func (w *response) release() {
	if w.bw != nil {
		w.bw.Reset(nil)
		writerPool.Put(w.bw)
		w.bw = nil
	}
	w.header = nil
	w.req = nil
}

func (w *response) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header)
	}
	return w.header
}

// AdoptHeader makes h the response's header map, in place of (and
// merged over by) what was set so far: a proxy hands the origin's
// header over without copying it. Only before the status is set.
func (w *response) AdoptHeader(h http.Header) {
	if w.status != 0 {
		return
	}
	for k, vv := range w.header {
		h[k] = append(h[k], vv...)
	}
	w.header = h
}

func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("engine: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.status != 0 {
		return // superfluous, as net/http (which logs it)
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.writeInformational(code)
		return
	}
	w.status = code
	w.writeHead()
}

// writeInformational writes a 1xx head with the current header map at
// once (Early Hints reach the client before the final response).
func (w *response) writeInformational(code int) {
	if w.err != nil {
		return
	}
	w.writeStatusLine(code)
	// No framing field in an interim head, as net/http (a client must not
	// read a body after it); the final head still gets them.
	h := w.Header()
	cl, te := h["Content-Length"], h["Transfer-Encoding"]
	delete(h, "Content-Length")
	delete(h, "Transfer-Encoding")
	w.writeFields(h, nil)
	if cl != nil {
		h["Content-Length"] = cl
	}
	if te != nil {
		h["Transfer-Encoding"] = te
	}
	_, _ = w.bw.WriteString("\r\n")
	w.err = w.bw.Flush()
}

func (w *response) writeStatusLine(code int) {
	b := w.bw.AvailableBuffer()
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	b = append(b, "\r\n"...)
	_, _ = w.bw.Write(b)
}

// writeHead decides the framing and writes the head into the buffer.
func (w *response) writeHead() {
	h := w.Header()
	code := w.status
	w.noBody = w.req.Method == http.MethodHead || code < 200 || code == http.StatusNoContent || code == http.StatusNotModified
	delete(h, "Transfer-Encoding")
	if code == http.StatusNoContent {
		delete(h, "Content-Length")
	}
	if cl, ok := h["Content-Length"]; ok {
		if n, err := strconv.ParseInt(strings.TrimSpace(firstOf(cl)), 10, 64); err == nil && n >= 0 && len(cl) == 1 {
			w.contentLength = n
		} else {
			delete(h, "Content-Length") // not a length: chunked instead
		}
	}
	if !w.noBody && w.contentLength < 0 {
		w.chunked = true
	}
	for _, v := range h["Connection"] {
		if httpguts.HeaderValuesContainsToken([]string{v}, "close") {
			w.closeAfter = true
		}
	}
	if w.c.s.closing.Load() {
		w.closeAfter = true
	}
	delete(h, "Connection")
	if w.chunked {
		for _, v := range h["Trailer"] {
			for _, name := range strings.Split(v, ",") {
				// Only fields that may be trailers, as net/http
				// (declareTrailer): no framing, routing, authentication
				// or content handling after the body.
				if name = http.CanonicalHeaderKey(strings.TrimSpace(name)); name != "" && httpguts.ValidTrailerHeader(name) {
					w.trailers = append(w.trailers, name)
				}
			}
		}
	} else {
		delete(h, "Trailer")
	}
	if w.err != nil {
		return
	}
	w.writeStatusLine(code)
	w.writeFields(h, nil)
	if _, ok := h["Date"]; !ok {
		_, _ = w.bw.WriteString("Date: ")
		_, _ = w.bw.WriteString(w.c.s.date.now())
		_, _ = w.bw.WriteString("\r\n")
	}
	if w.chunked {
		_, _ = w.bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if w.closeAfter {
		_, _ = w.bw.WriteString("Connection: close\r\n")
	}
	_, _ = w.bw.WriteString("\r\n")
}

func firstOf(vv []string) string {
	if len(vv) == 0 {
		return ""
	}
	return vv[0]
}

// writeFields writes the fields of h (only those named in only, when
// set): an invalid name is dropped, CR and LF in a value become spaces
// (net/http's Header.Write does the same), and http.TrailerPrefix keys
// are left for the trailer.
func (w *response) writeFields(h http.Header, only []string) {
	write := func(k string, vv []string) {
		if !httpguts.ValidHeaderFieldName(k) {
			return
		}
		for _, v := range vv {
			if strings.ContainsAny(v, "\r\n") {
				v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
			}
			_, _ = w.bw.WriteString(k)
			_, _ = w.bw.WriteString(": ")
			_, _ = w.bw.WriteString(strings.TrimSpace(v))
			_, _ = w.bw.WriteString("\r\n")
		}
	}
	if only != nil {
		for _, k := range only {
			write(k, h[k])
		}
		return
	}
	for k, vv := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		write(k, vv)
	}
}

func (w *response) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		if w.req.Method == http.MethodHead {
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	var over bool
	if w.contentLength >= 0 && w.written+int64(len(p)) > w.contentLength {
		p, over = p[:w.contentLength-w.written], true
	}
	if len(p) == 0 {
		if over {
			return 0, http.ErrContentLength
		}
		return 0, nil
	}
	if w.chunked {
		b := w.bw.AvailableBuffer()
		b = strconv.AppendInt(b, int64(len(p)), 16)
		b = append(b, "\r\n"...)
		_, _ = w.bw.Write(b)
	}
	n, err := w.bw.Write(p)
	if err == nil && w.chunked {
		_, err = w.bw.WriteString("\r\n")
	}
	w.written += int64(n)
	if err != nil {
		w.err = err
		return n, err
	}
	if over {
		return n, http.ErrContentLength
	}
	return n, nil
}

// Flush sends what is buffered (http.Flusher).
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush with its error (http.ResponseController).
func (w *response) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return w.err
	}
	w.err = w.bw.Flush()
	return w.err
}

// SetWriteDeadline sets the connection's write deadline
// (http.ResponseController).
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.rwc.SetWriteDeadline(t) }

// SetReadDeadline sets the connection's read deadline, which bounds the
// reads of the request body (http.ResponseController).
func (w *response) SetReadDeadline(t time.Time) error { return w.c.rwc.SetReadDeadline(t) }

// WatchClient starts watching the client's connection while a long
// response streams (the engine has no background read otherwise): when
// the client closes or resets it, the request's context is cancelled, so
// that an origin's silent stream does not outlive its reader. Bytes the
// client sends meanwhile (a pipelined request) end the watch and stay
// buffered for the next request. stop ends the watch and waits for it;
// call it before the handler returns. Asked for before the request body
// was read to its end (chunked or of known length), it watches nothing:
// the watch reads the connection, where the rest of the body is.
func (w *response) WatchClient() (stop func()) {
	if w.body != nil && !w.body.readToEnd() {
		return func() {}
	}
	c := w.c
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := c.br.Peek(1); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			c.mu.Lock()
			if c.cancel != nil {
				c.cancel()
			}
			c.mu.Unlock()
		}
	}()
	return func() {
		_ = c.rwc.SetReadDeadline(time.Unix(1, 0)) // ends a blocked Peek
		<-done
		_ = c.rwc.SetReadDeadline(time.Time{})
	}
}

// errTruncated: the handler wrote less than the Content-Length it set.
var errTruncated = errors.New("engine: response shorter than its Content-Length")

// finish completes the response after the handler returned: the status
// if none was set (200 with an empty body), the chunked body's end and
// its trailers, and the flush. An error means the connection must close.
func (w *response) finish() error {
	if w.status == 0 {
		if w.header == nil || w.header.Get("Content-Length") == "" {
			w.Header().Set("Content-Length", "0")
		}
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return w.err
	}
	switch {
	case w.chunked:
		_, _ = w.bw.WriteString("0\r\n")
		if len(w.trailers) > 0 {
			w.writeFields(w.header, w.trailers)
		}
		for k, vv := range w.header {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				w.writeFields(http.Header{http.CanonicalHeaderKey(name): vv}, nil)
			}
		}
		_, _ = w.bw.WriteString("\r\n")
	case !w.noBody && w.written < w.contentLength:
		_ = w.bw.Flush()
		return errTruncated
	}
	w.err = w.bw.Flush()
	return w.err
}

// dateCache formats the Date field at most once per second.
type dateCache struct{ p atomic.Pointer[dateText] }

type dateText struct {
	sec  int64
	text string
}

func (c *dateCache) now() string {
	now := time.Now()
	sec := now.Unix()
	if d := c.p.Load(); d != nil && d.sec == sec {
		return d.text
	}
	d := &dateText{sec: sec, text: now.UTC().Format(http.TimeFormat)}
	c.p.Store(d)
	return d.text
}
