package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// RoundTrip sends req over an HTTP/1.1 connection of the pool and returns
// the response once its head is read, all on the calling goroutine:
//
//   - req.URL.Scheme is "https" (TLS, ALPN http/1.1 only, verified against
//     the Transport's roots, ServerName the URL's host) or "http"
//     (cleartext: only for rules with upstream_tls: false, which the dial
//     guard holds to loopback and private addresses). req.URL.Host is the
//     authority dialled (default port 443 or 80).
//   - The request is written with net/http's writer (Request.Write). Body
//     nil or http.NoBody: none; ContentLength > 0: that length; otherwise
//     chunked (never the probe net/http makes of a body of unknown length).
//     The body is sent whole before the response is read: a request whose
//     origin answers while still reading its body (full duplex) belongs on
//     the Transport. An empty User-Agent value is not written (Request.Write).
//   - The response-header timeout is the request's own
//     (WithResponseHeaderTimeout) else Options.ResponseHeaderTimeout, from
//     the request fully written to the first response byte, held with the
//     connection's read deadline; on expiry the connection is closed and
//     the error is a *ResponseHeaderTimeoutError.
//   - The end of req's context closes the connection, while dialling,
//     writing, waiting for the head or reading the body, and the error
//     wraps the context's error.
//   - httptrace: GotConn, Got1xxResponse, Got100Continue,
//     GotFirstResponseByte, and (from Request.Write) WroteHeaderField,
//     WroteHeaders and WroteRequest.
//   - 1xx responses before the final one are reported to Got1xxResponse (at
//     most 5); a 101 is an error.
//   - The response body reads from the connection's buffer; read to EOF it
//     returns the connection to the pool unless the response or the
//     request asked for close; closed early, the connection is kept only
//     when the rest (at most 64 KiB) is already buffered.
//   - An origin that answers before reading the whole request body and
//     closes (a 401 or 413 to an upload) has that answer returned (with
//     Close set) rather than the write error.
//   - A request of an idempotent method (or with Idempotency-Key) without a
//     body whose reused connection fails before any response byte is sent
//     again, once, on a new connection.
func (t *SyncTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	k, err := t.keyFor(req)
	if err != nil {
		closeRequestBody(req)
		return nil, err
	}
	ctx := req.Context()
	trace := httptrace.ContextClientTrace(ctx)
	wreq := req
	var tracked *trackedRequest
	if req.Body != nil && req.Body != http.NoBody {
		tracked = newTrackedRequest(req)
		wreq = &tracked.req
	}
	d := t.headerTimeout
	if v, ok := ctx.Value(responseHeaderTimeoutKey{}).(time.Duration); ok && v > 0 {
		d = v
	}
	retry := tracked == nil && replayable(req)
	var fresh *hostPool // set for the retry: dial in the failed connection's slot
	for {
		var c *syncConn
		var wasIdle bool
		var idle time.Duration
		if fresh != nil {
			c, err = t.dialConn(ctx, fresh)
			if err != nil {
				t.releaseSlot(fresh)
			}
		} else {
			c, wasIdle, idle, err = t.getConn(ctx, k)
		}
		if err != nil {
			closeRequestBody(req)
			return nil, err
		}
		if trace != nil && trace.GotConn != nil {
			trace.GotConn(httptrace.GotConnInfo{Conn: c.conn, Reused: c.requests > 0, WasIdle: wasIdle, IdleTime: idle})
		}
		reused := c.requests > 0
		c.requests++
		resp, again, err := c.exchange(ctx, req, wreq, tracked, trace, d)
		if err == nil {
			return resp, nil
		}
		if again && retry && reused && fresh == nil {
			// The connection is closed but its slot kept for the retry.
			fresh = c.hp
			continue
		}
		if again {
			c.t.releaseSlot(c.hp)
		}
		return nil, err
	}
}

// keyFor checks what RoundTrip needs of req and returns its pool's key.
func (t *SyncTransport) keyFor(req *http.Request) (hostKey, error) {
	if req.URL == nil {
		return hostKey{}, errors.New("upstream request without a URL")
	}
	var k hostKey
	switch req.URL.Scheme {
	case "https":
		k.tls, k.port = true, "443"
	case "http":
		k.port = "80"
	default:
		return hostKey{}, fmt.Errorf("upstream request scheme %q: the synchronous transport speaks https and http only", req.URL.Scheme)
	}
	if k.host = req.URL.Hostname(); k.host == "" {
		return hostKey{}, errors.New("upstream request URL without a host")
	}
	if p := req.URL.Port(); p != "" {
		k.port = p
	}
	if req.Method != "" && !httpguts.ValidHeaderFieldName(req.Method) {
		return hostKey{}, fmt.Errorf("upstream request: invalid method %q", req.Method)
	}
	// As net/http's Transport: Request.Write does not check names, and a
	// name or value with a line break would be a header of its own.
	// Values are never quoted (they may be secrets).
	for name, values := range req.Header {
		if !httpguts.ValidHeaderFieldName(name) {
			return hostKey{}, fmt.Errorf("upstream request: invalid header field name %q", name)
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return hostKey{}, fmt.Errorf("upstream request: invalid header field value for %q", name)
			}
		}
	}
	for name := range req.Trailer {
		if !httpguts.ValidHeaderFieldName(name) {
			return hostKey{}, fmt.Errorf("upstream request: invalid trailer field name %q", name)
		}
	}
	p, _ := DialPolicyFrom(req.Context())
	k.policy = keyOf(p)
	return k, nil
}

// replayable reports whether req may be sent twice, as net/http decides
// (for a request without a body).
func replayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, ok := req.Header["Idempotency-Key"]
	if !ok {
		_, ok = req.Header["X-Idempotency-Key"]
	}
	return ok
}

func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// wantsClose reports whether req asked for the connection to close after
// it.
func wantsClose(req *http.Request) bool {
	return req.Close || httpguts.HeaderValuesContainsToken(req.Header["Connection"], "close")
}

// trackedRequest is the copy of a request with a body that RoundTrip
// writes: the body's own read errors are told apart from the
// connection's (Request.Write hides them in an unexported type), and a
// body of unknown length is sent chunked without net/http's probe.
type trackedRequest struct {
	req  http.Request
	body trackedBody
}

var chunked = []string{"chunked"}

func newTrackedRequest(req *http.Request) *trackedRequest {
	tr := &trackedRequest{req: *req}
	tr.body.rc = req.Body
	tr.req.Body = &tr.body
	if tr.req.ContentLength == 0 {
		tr.req.ContentLength = -1
	}
	if tr.req.ContentLength < 0 && len(tr.req.TransferEncoding) == 0 {
		tr.req.TransferEncoding = chunked
	}
	return tr
}

// trackedBody records the first read error of a request body.
type trackedBody struct {
	rc  io.ReadCloser
	err error
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

func (b *trackedBody) Close() error { return b.rc.Close() }

// exchange writes wreq (req, or its tracked copy) on c and reads the
// response head. On an error c is closed; again reports that it failed
// before any response byte in a way a retry may cure (then c's slot is
// still held: the caller retries in it or releases it).
func (c *syncConn) exchange(ctx context.Context, req, wreq *http.Request, tracked *trackedRequest, trace *httptrace.ClientTrace, d time.Duration) (resp *http.Response, again bool, err error) {
	stop := func() bool { return true }
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, c.abort)
	}
	fail := func(retryable bool, err error) (*http.Response, bool, error) {
		stop()
		c.closeSocket()
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			// The context ended the exchange, whichever step saw it.
			retryable = false
			err = fmt.Errorf("upstream request: %w (%w)", ctx.Err(), err)
		}
		if !retryable {
			c.t.releaseSlot(c.hp)
		}
		return nil, retryable, err
	}

	bw := c.t.writers.Get().(*bufio.Writer)
	bw.Reset(c.conn)
	err = wreq.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	c.t.writers.Put(bw)
	var writeErr error
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return fail(false, fmt.Errorf("writing the upstream request: %w (%w)", ctx.Err(), err))
		case tracked != nil && tracked.body.err != nil:
			return fail(false, fmt.Errorf("reading the request body: %w", tracked.body.err))
		case tracked == nil:
			return fail(true, fmt.Errorf("writing the upstream request: %w", err))
		}
		// An origin may answer an upload before reading all of it (401,
		// 413) and close: that answer, when it is there, is the result.
		writeErr = fmt.Errorf("writing the upstream request: %w", err)
		d = earlyResponseWait
	}

	// The response-header clock: from the request written to its first
	// byte.
	if err := c.conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		return fail(false, err)
	}
	if _, err := c.br.Peek(1); err != nil {
		switch {
		case writeErr != nil:
			return fail(false, writeErr)
		case ctx.Err() != nil:
			return fail(false, fmt.Errorf("awaiting the upstream response: %w (%w)", ctx.Err(), err))
		case isDeadline(err):
			return fail(false, &ResponseHeaderTimeoutError{After: d})
		}
		return fail(true, fmt.Errorf("upstream connection closed before a response: %w", err))
	}
	if err := c.conn.SetReadDeadline(time.Time{}); err != nil {
		return fail(false, err)
	}
	if trace != nil && trace.GotFirstResponseByte != nil {
		trace.GotFirstResponseByte()
	}

	for n1xx := 0; ; {
		c.headLeft = c.t.maxHeadBytes
		resp, err = http.ReadResponse(c.br, req)
		headLeft := c.headLeft
		c.headLeft = -1
		if err != nil {
			switch {
			case ctx.Err() != nil:
				err = fmt.Errorf("reading the upstream response head: %w (%w)", ctx.Err(), err)
			case headLeft == 0:
				err = errHeadTooLarge
			default:
				err = fmt.Errorf("reading the upstream response head: %w", err)
			}
			return fail(false, err)
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 {
			break
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return fail(false, errors.New("upstream answered 101 Switching Protocols to a request that asked for no upgrade"))
		}
		if n1xx++; n1xx > maxSync1xx {
			return fail(false, fmt.Errorf("upstream sent more than %d informational (1xx) responses", maxSync1xx))
		}
		if trace != nil {
			if resp.StatusCode == http.StatusContinue && trace.Got100Continue != nil {
				trace.Got100Continue()
			}
			if trace.Got1xxResponse != nil {
				if err := trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
					return fail(false, err)
				}
			}
		}
	}
	resp.TLS = c.tlsState
	keep := writeErr == nil && !resp.Close && !wantsClose(req)
	if writeErr != nil {
		resp.Close = true
	}
	if resp.Body == http.NoBody {
		stopped := stop()
		c.release(keep && stopped)
		return resp, false, nil
	}
	b := &syncBody{c: c, rc: resp.Body, ctx: ctx, stop: stop, keep: keep}
	c.body.Store(b)
	resp.Body = b
	return resp, false, nil
}

// release ends c's request: back to the pool when keep and nothing is
// left unread on it, else closed.
func (c *syncConn) release(keep bool) {
	if keep && c.clean() {
		c.t.put(c)
		return
	}
	c.discard()
}

// earlyResponseWait is how long a request whose body could not be written
// whole waits for the answer the origin may have sent before it stopped
// reading.
const earlyResponseWait = 100 * time.Millisecond

var errBodyClosed = errors.New("read on a closed upstream response body")

// syncBody is a response body read straight from its connection's
// buffer. Close may be called concurrently with Read.
type syncBody struct {
	c    *syncConn
	rc   io.ReadCloser // net/http's body reader over c.br
	ctx  context.Context
	stop func() bool // the request's context.AfterFunc
	keep bool        // the connection may be kept after EOF

	mu      sync.Mutex
	reading bool  // a Read is in rc.Read
	closed  bool  // Close was called
	done    bool  // the connection is released
	err     error // the error that ended the body
}

func (b *syncBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed || b.done {
		err := b.err
		b.mu.Unlock()
		if err == nil || b.closed {
			err = errBodyClosed
		}
		return 0, err
	}
	b.reading = true
	b.mu.Unlock()
	n, err := b.rc.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reading = false
	switch {
	case b.closed:
		// Close closed the connection under this Read.
		b.finishLocked(false)
		return n, errBodyClosed
	case err == io.EOF:
		b.finishLocked(b.keep)
		b.err = io.EOF
	case err != nil:
		if b.ctx.Err() != nil {
			err = fmt.Errorf("reading the upstream response body: %w (%w)", b.ctx.Err(), err)
		}
		// Otherwise the error as it is, as http.Transport returns it: the
		// decision line's error reads the same on both engines.
		b.finishLocked(false)
		b.err = err
	}
	return n, err
}

// Close ends the body. Before EOF the connection is closed, unless the
// rest of the body (at most maxSyncDrain) is already buffered.
func (b *syncBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	switch {
	case b.done:
	case b.reading:
		// Unblock the Read; it releases the connection.
		b.c.closeSocket()
	default:
		b.finishLocked(b.keep && b.drain())
	}
	return nil
}

// drain reads what remains of the body from what is already buffered, up
// to maxSyncDrain, and reports whether that reached its end.
func (b *syncBody) drain() bool {
	c := b.c
	if c.conn.SetReadDeadline(aLongTimeAgo) != nil {
		return false
	}
	_, err := io.CopyN(io.Discard, b.rc, maxSyncDrain+1)
	if err != io.EOF {
		return false
	}
	return c.conn.SetReadDeadline(time.Time{}) == nil
}

// ctxDone is the end of the request's context while the body is open:
// the connection is closed and, unless a Read is under way (it does it),
// released, so that a body nobody reads or closes does not hold its slot
// of MaxConnsPerHost past its context.
func (b *syncBody) ctxDone() {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.done:
	case b.reading:
		b.c.closeSocket()
	default:
		b.err = fmt.Errorf("reading the upstream response body: %w", b.ctx.Err())
		b.finishLocked(false)
	}
}

// finishLocked releases the connection once.
func (b *syncBody) finishLocked(keep bool) {
	if b.done {
		return
	}
	b.done = true
	b.c.body.Store(nil)
	b.c.release(b.stop() && keep)
}
