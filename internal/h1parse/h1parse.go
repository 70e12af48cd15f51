// Package h1parse reads HTTP/1.x request heads exactly as net/http's
// http.ReadRequest does, with few allocations for the common shape of a head.
//
// The contract is equality, not leniency: for every input, ReadRequest returns
// the same request (method, URL, protocol, every header field, Host, framing,
// Close, body bytes and body errors) or the same error that http.ReadRequest
// returns, and leaves the same bytes in the reader. A divergence would be a
// request-smuggling hole, so the fast path accepts only the shapes it can
// prove equal and hands every other head, unconsumed, to http.ReadRequest.
// FuzzReadRequestMatchesNetHTTP holds the two parsers against each other.
package h1parse

import (
	"bufio"
	"bytes"
	"net/http"
	"net/url"
	"strings"
)

// maxFields bounds the header fields the fast path handles; a head with more
// goes to net/http. It sizes an array on the stack, nothing else.
const maxFields = 64

// inlineValues is how many single-valued fields share the request's own
// []string backing array before one more is allocated.
const inlineValues = 16

// ReadRequest reads one request head from br exactly as http.ReadRequest(br)
// would, and returns the same *http.Request or the same error. The common
// shape is parsed on a fast path: a request line with a known method (GET,
// POST, PUT, DELETE, PATCH, HEAD, OPTIONS), an origin-form, absolute-form or
// asterisk-form target and HTTP/1.1 or HTTP/1.0, then up to 64 well-formed
// CRLF-terminated fields without obs-fold; framed by nothing, by one
// Content-Length of at most 18 plain digits, or (HTTP/1.1 only) by one
// "Transfer-Encoding: chunked" without Content-Length; no Trailer or Pragma
// field; at most one Host and one Connection field; the whole head already
// buffered in br. Every other head is left unconsumed and handed to
// http.ReadRequest.
//
// A fast-path request's Body reads from br with the semantics of net/http's
// body (see the body type): io.ErrUnexpectedEOF on a short body, the trailer
// read into Trailer after the last chunk, http.ErrBodyReadAfterClose after
// Close, Close draining the rest unless the connection is to close.
//
// Like http.ReadRequest, ReadRequest does not bound the head: the caller
// limits what br can read (http.Server's MaxHeaderBytes does it with an
// io.LimitReader under the bufio.Reader). The errors are net/http's, and some
// quote the offending line, which can hold a credential (a malformed
// Authorization field): callers map them to a status and must not log or echo
// their text.
func ReadRequest(br *bufio.Reader) (*http.Request, error) {
	req, _, err := read(br)
	return req, err
}

// read is ReadRequest, also reporting whether the fast path read the head.
func read(br *bufio.Reader) (req *http.Request, fast bool, err error) {
	req, fast, err = readRequest(br)
	if fast || err != nil {
		return req, fast, err
	}
	req, err = http.ReadRequest(br)
	return req, false, err
}

// readRequest is ReadRequest's fast path. It reports fast=false, having
// consumed nothing, when the head is not one it can prove it reads as
// net/http does. A read error on an empty buffer is returned as is, exactly
// as http.ReadRequest returns the error of its first read.
func readRequest(br *bufio.Reader) (req *http.Request, fast bool, err error) {
	if br.Buffered() == 0 {
		// One read, the same one net/http's first ReadLine would make. If it
		// fails with nothing read, net/http returns that error unchanged.
		if _, err := br.Peek(1); err != nil && br.Buffered() == 0 {
			return nil, false, err
		}
	}
	buf, _ := br.Peek(br.Buffered()) // never reads: everything asked for is buffered
	var p parsed
	if !p.scan(buf) {
		return nil, false, nil
	}
	req = p.build(buf, br)
	if req == nil {
		return nil, false, nil
	}
	// Consume the head so that bufio's state matches net/http's after its
	// last ReadLine: the final '\n' was the last byte read.
	if _, err := br.Discard(p.end - 1); err != nil {
		return nil, false, err // cannot happen: the bytes are buffered
	}
	if _, err := br.ReadByte(); err != nil {
		return nil, false, err
	}
	return req, true, nil
}

// field holds the offsets, in the head, of one header field's name and
// trimmed value.
type field struct {
	keyStart, keyEnd, valStart, valEnd int
}

// parsed is the result of scanning a head: offsets only, nothing copied.
type parsed struct {
	method      string // one of knownMethods, a constant
	proto       string // "HTTP/1.1" or "HTTP/1.0", a constant
	minor       int
	targetStart int
	targetEnd   int
	end         int // offset just past the blank line that ends the head
	fields      [maxFields]field
	n           int
	canonical   bool // every field name is already in canonical form
}

// lookupMethod returns the method b spells if it is one the fast path
// accepts, as a constant string, and "" otherwise. CONNECT (authority form,
// tunnels) and PRI (the HTTP/2 preface) are deliberately absent, and so is
// every extension method and every other spelling: they go to net/http.
func lookupMethod(b []byte) string {
	switch string(b) {
	case "GET":
		return "GET"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "PATCH":
		return "PATCH"
	case "HEAD":
		return "HEAD"
	case "OPTIONS":
		return "OPTIONS"
	}
	return ""
}

// scan checks that buf begins with a complete head of the fast path's shape
// and records where everything is. It reports false for anything else.
func (p *parsed) scan(buf []byte) bool {
	nl := bytes.IndexByte(buf, '\n')
	if nl < 1 || buf[nl-1] != '\r' {
		return false
	}
	line := buf[:nl-1]
	sp := bytes.IndexByte(line, ' ')
	if sp < 0 {
		return false
	}
	if p.method = lookupMethod(line[:sp]); p.method == "" {
		return false
	}
	p.targetStart = sp + 1
	sp2 := bytes.IndexByte(line[p.targetStart:], ' ')
	if sp2 <= 0 {
		return false
	}
	p.targetEnd = p.targetStart + sp2
	switch string(line[p.targetEnd+1:]) {
	case "HTTP/1.1":
		p.proto, p.minor = "HTTP/1.1", 1
	case "HTTP/1.0":
		p.proto, p.minor = "HTTP/1.0", 0
	default:
		return false
	}
	p.canonical = true
	pos := nl + 1
	for {
		nl := bytes.IndexByte(buf[pos:], '\n')
		if nl < 1 || buf[pos+nl-1] != '\r' {
			return false // incomplete head, bare LF, or a line that is only LF
		}
		line := buf[pos : pos+nl-1]
		if len(line) == 0 {
			p.end = pos + nl + 1
			return true
		}
		if p.n == maxFields {
			return false
		}
		f, canonical, ok := scanField(line)
		if !ok {
			return false
		}
		if !canonical {
			p.canonical = false
		}
		f.keyStart += pos
		f.keyEnd += pos
		f.valStart += pos
		f.valEnd += pos
		p.fields[p.n] = f
		p.n++
		pos += nl + 1
	}
}

// scanField parses one "Name: value" line (without its CRLF) the way
// textproto.ReadMIMEHeader does, reporting false for every line it would
// reject or treat specially (leading white space, a space before the colon,
// a byte outside the token set in the name, a control byte in the value).
func scanField(line []byte) (f field, canonical, ok bool) {
	canonical = true
	upper := true
	i := 0
	for ; i < len(line); i++ {
		c := line[i]
		if c == ':' {
			break
		}
		if !validHeaderFieldByte(c) {
			return f, false, false
		}
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			canonical = false
		}
		upper = c == '-'
	}
	if i == 0 || i == len(line) {
		return f, false, false
	}
	f.keyEnd = i
	for _, c := range line[i+1:] {
		if !validHeaderValueByte(c) {
			return f, false, false
		}
	}
	start, end := i+1, len(line)
	for start < end && (line[start] == ' ' || line[start] == '\t') {
		start++
	}
	for end > start && (line[end-1] == ' ' || line[end-1] == '\t') {
		end--
	}
	f.valStart, f.valEnd = start, end
	return f, canonical, true
}

// fastRequest is the one allocation that holds a fast-path request and
// everything it points to.
type fastRequest struct {
	req  http.Request
	url  url.URL
	body body
	te   [1]string
	strs [inlineValues]string
}

// build makes the request from a scanned head. It returns nil, consuming
// nothing, when the fields need handling the fast path does not do.
func (p *parsed) build(buf []byte, br *bufio.Reader) *http.Request {
	// Framing and the other fields readRequest interprets, checked on the
	// raw bytes before anything is allocated.
	var (
		hostIdx, clIdx, connIdx, teIdx = -1, -1, -1, -1
	)
	for i := 0; i < p.n; i++ {
		f := p.fields[i]
		switch name := buf[f.keyStart:f.keyEnd]; {
		case asciiEqualFold(name, "host"):
			if hostIdx >= 0 {
				return nil // "too many Host headers"
			}
			hostIdx = i
		case asciiEqualFold(name, "content-length"):
			if clIdx >= 0 {
				return nil // duplicates: net/http dedupes or refuses
			}
			clIdx = i
		case asciiEqualFold(name, "connection"):
			if connIdx >= 0 {
				return nil
			}
			connIdx = i
		case asciiEqualFold(name, "transfer-encoding"):
			if teIdx >= 0 {
				return nil // "too many transfer encodings"
			}
			teIdx = i
		case asciiEqualFold(name, "trailer"), asciiEqualFold(name, "pragma"):
			return nil
		}
	}
	chunked := false
	if teIdx >= 0 {
		// Only the one shape net/http reads without rewriting or refusing
		// anything: HTTP/1.1, a single "chunked", no Content-Length beside
		// it (which net/http would validate and then drop).
		f := p.fields[teIdx]
		if p.minor != 1 || clIdx >= 0 || !asciiEqualFold(buf[f.valStart:f.valEnd], "chunked") {
			return nil
		}
		chunked = true
	}
	var contentLength int64
	if clIdx >= 0 {
		f := p.fields[clIdx]
		n, ok := parsePlainDigits(buf[f.valStart:f.valEnd])
		if !ok {
			return nil
		}
		contentLength = n
	}

	head := p.copyHead(buf)
	fr := new(fastRequest)
	target := head[p.targetStart:p.targetEnd]
	if !setOriginForm(&fr.url, target) {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return nil // net/http reports the error
		}
		fr.url = *u
	}

	// Host and Transfer-Encoding are never stored: net/http deletes them
	// from the map after reading them.
	entries := p.n
	if hostIdx >= 0 {
		entries--
	}
	if teIdx >= 0 {
		entries--
	}
	header := make(http.Header, entries)
	strs := fr.strs[:]
	if entries > inlineValues {
		strs = make([]string, entries)
	}
	for i := 0; i < p.n; i++ {
		if i == hostIdx || i == teIdx {
			continue
		}
		f := p.fields[i]
		key := head[f.keyStart:f.keyEnd]
		value := head[f.valStart:f.valEnd]
		if vv := header[key]; vv != nil {
			header[key] = append(vv, value)
			continue
		}
		vv := strs[:1:1]
		strs = strs[1:]
		vv[0] = value
		header[key] = vv
	}

	req := &fr.req
	req.Method = p.method
	req.URL = &fr.url
	req.Proto = p.proto
	req.ProtoMajor, req.ProtoMinor = 1, p.minor
	req.Header = header
	req.RequestURI = target
	req.Host = fr.url.Host
	if hostIdx >= 0 && req.Host == "" {
		f := p.fields[hostIdx]
		req.Host = head[f.valStart:f.valEnd]
	}
	var conn string
	if connIdx >= 0 {
		f := p.fields[connIdx]
		conn = head[f.valStart:f.valEnd]
	}
	req.Close = shouldClose(p.minor, connIdx >= 0, conn)
	switch {
	case chunked:
		fr.te[0] = "chunked"
		req.TransferEncoding = fr.te[:]
		req.ContentLength = -1
		fr.body.initChunked(br, req, req.Close)
		req.Body = &fr.body
	case contentLength == 0:
		req.Body = http.NoBody
	default:
		req.ContentLength = contentLength
		fr.body.initContentLength(br, contentLength, req.Close)
		req.Body = &fr.body
	}
	return req
}

// copyHead copies the head into one string, with every field name in the
// canonical form textproto gives it, so that names and values are substrings
// of it at the offsets scan recorded.
func (p *parsed) copyHead(buf []byte) string {
	last := p.targetEnd
	if p.n > 0 {
		last = p.fields[p.n-1].valEnd
	}
	if p.canonical {
		return string(buf[:last])
	}
	var sb strings.Builder
	sb.Grow(last)
	prev := 0
	var key [128]byte
	for i := 0; i < p.n; i++ {
		f := p.fields[i]
		name := buf[f.keyStart:f.keyEnd]
		if isCanonical(name) {
			continue
		}
		sb.Write(buf[prev:f.keyStart])
		if len(name) <= len(key) {
			sb.Write(canonicalize(key[:0], name))
		} else {
			sb.Write(canonicalize(nil, name))
		}
		prev = f.keyEnd
	}
	sb.Write(buf[prev:last])
	return sb.String()
}

// isCanonical reports whether a valid field name is already in the form
// textproto's canonicalMIMEHeaderKey gives it.
func isCanonical(name []byte) bool {
	upper := true
	for _, c := range name {
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return false
		}
		upper = c == '-'
	}
	return true
}

// canonicalize appends the canonical form of a valid field name to dst: the
// first letter and every letter after a hyphen upper case, the rest lower
// case, exactly as textproto's canonicalMIMEHeaderKey.
func canonicalize(dst, name []byte) []byte {
	upper := true
	for _, c := range name {
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
		upper = c == '-'
	}
	return dst
}

// setOriginForm fills u for a target that url.ParseRequestURI provably
// parses into just Path (no escapes, so no RawPath) and RawQuery or
// ForceQuery: a '/', then path bytes that need no escaping, then optionally
// '?' and printable ASCII. It reports false, leaving u alone, for every other
// target; the caller then asks url.ParseRequestURI itself.
func setOriginForm(u *url.URL, target string) bool {
	if len(target) == 0 || target[0] != '/' {
		return false
	}
	q := len(target)
	for i := 1; i < len(target); i++ {
		c := target[i]
		if c == '?' {
			q = i
			break
		}
		if !pathByte(c) {
			return false
		}
	}
	for i := q + 1; i < len(target); i++ {
		if c := target[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	u.Path = target[:q]
	switch {
	case q == len(target):
	case q == len(target)-1:
		u.ForceQuery = true
	default:
		u.RawQuery = target[q+1:]
	}
	return true
}
