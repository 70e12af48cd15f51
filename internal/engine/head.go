package engine

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/botbox/botbox/internal/h1parse"
	"golang.org/x/net/http/httpguts"
)

// headVerdict says who serves a head.
type headVerdict uint8

const (
	incomplete headVerdict = iota // the head's end is not in the buffer yet
	serveHere                     // the common shape: the engine serves it
	handOver                      // net/http serves it (and the connection)
)

// head is what judgeHead learnt from a head's raw bytes.
type head struct {
	verdict headVerdict
	// hostFields counts the header lines named Host (readRequest needs it:
	// http.ReadRequest removes the field it promotes to Request.Host).
	hostFields int
	// badHost: an absolute-form request whose Host field is not a valid
	// host. net/http's server refuses it, though the target's host is the
	// request's; http.ReadRequest removes the field, so judgeHead checks
	// it (only then: an origin-form request's Host is Request.Host).
	badHost bool
}

// judgeHead scans the raw bytes of the next request head (buf, the start
// of the read buffer) and says whether it is complete and whether the
// engine serves it. It is a conservative pre-filter, never the parser:
// needsNetHTTP checks the parsed request again, and what it hands over
// costs only speed. Handed over: a request line that is not
// "<method> <target> HTTP/1.1", CONNECT, PRI (the HTTP/2 preface), the
// asterisk form (net/http may answer OPTIONS * itself), a head
// that starts with an empty line, a continuation line (obs-fold), and any
// field whose name is Upgrade or Expect in any case.
func judgeHead(buf []byte) head {
	h := head{verdict: incomplete}
	pos := 0
	absolute := false
	for lineNo := 0; ; lineNo++ {
		i := bytes.IndexByte(buf[pos:], '\n')
		if i < 0 {
			return head{verdict: incomplete}
		}
		line := buf[pos : pos+i]
		pos += i + 1
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if lineNo == 0 {
			if !commonRequestLine(line) {
				return head{verdict: handOver}
			}
			absolute = line[bytes.IndexByte(line, ' ')+1] != '/'
			continue
		}
		if len(line) == 0 {
			h.verdict = serveHere
			return h
		}
		switch {
		case line[0] == ' ' || line[0] == '\t':
			return head{verdict: handOver}
		case fieldNamed(line, "upgrade"), fieldNamed(line, "expect"):
			return head{verdict: handOver}
		case fieldNamed(line, "host"):
			h.hostFields++
			if absolute {
				// The value as textproto reads it: after the colon, blanks
				// trimmed at its start, whitespace at its end.
				v := line[bytes.IndexByte(line, ':')+1:]
				v = bytes.TrimRight(bytes.TrimLeft(v, " \t"), " \t\r\n")
				h.badHost = h.badHost || !httpguts.ValidHostHeader(string(v))
			}
		}
	}
}

// commonRequestLine reports whether line is "<method> <target> HTTP/1.1"
// with a method other than CONNECT and PRI.
func commonRequestLine(line []byte) bool {
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 || !bytes.HasSuffix(line, []byte(" HTTP/1.1")) || len(line) < sp+1+len(" HTTP/1.1")+1 {
		return false
	}
	method := string(line[:sp]) // no allocation: only compared
	target := line[sp+1 : len(line)-len(" HTTP/1.1")]
	return method != http.MethodConnect && method != "PRI" && string(target) != "*"
}

// fieldNamed reports whether the header line starts with name (lower
// case) followed by a colon or by whitespace and a colon, in any case.
func fieldNamed(line []byte, name string) bool {
	if len(line) <= len(name) || !bytes.EqualFold(line[:len(name)], []byte(name)) {
		return false
	}
	rest := bytes.TrimLeft(line[len(name):], " \t")
	return len(rest) > 0 && rest[0] == ':'
}

// statusError is a refusal of a head with its status and text, answered
// as net/http answers it.
type statusError struct {
	code int
	text string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.code, http.StatusText(e.code), e.text)
}

// errNotCommon is needsNetHTTP's refusal of a parsed head that judgeHead
// should have handed over: never served, never forwarded.
var errNotCommon = &statusError{code: http.StatusBadRequest, text: "unexpected request shape"}

// readRequest reads the head judged h with package h1parse (net/http's
// parser, or a low-allocation reading proved equal to it) and applies
// the checks net/http's server adds (server.go, conn.readRequest): the
// Host field required on HTTP/1.1, a Host value that is a valid host, every
// field name and value valid. Then it checks again what judgeHead only
// scanned (needsNetHTTP): what it should have handed over is refused.
func readRequest(br *bufio.Reader, h head) (*http.Request, error) {
	req, err := h1parse.ReadRequest(br)
	if err != nil {
		return nil, err
	}
	switch {
	case needsNetHTTP(req):
		return nil, errNotCommon
	case h.hostFields == 0:
		return nil, &statusError{code: http.StatusBadRequest, text: "missing required Host header"}
	case h.badHost, req.URL.Host == "" && !httpguts.ValidHostHeader(req.Host):
		// An absolute-form target's host is the request's (RFC 9112
		// §3.2.2), yet net/http refuses a bad Host field beside it
		// (judgeHead checked that one).
		return nil, &statusError{code: http.StatusBadRequest, text: "malformed Host header"}
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, &statusError{code: http.StatusBadRequest, text: "invalid header name"}
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, &statusError{code: http.StatusBadRequest, text: "invalid header value"}
			}
		}
	}
	return req, nil
}

// needsNetHTTP reports whether a parsed request is one the engine leaves
// to net/http (see the package doc).
func needsNetHTTP(req *http.Request) bool {
	if req.ProtoMajor != 1 || req.ProtoMinor != 1 || req.Method == http.MethodConnect || req.Method == "PRI" {
		return true
	}
	_, up := req.Header["Upgrade"]
	_, ex := req.Header["Expect"]
	return up || ex
}

// errorHeaders is what net/http writes between the status line and the
// body of the responses it sends before any handler runs; package
// listener's early-error observer recognises this shape
// (listener.earlyErrorHeaders), so those answers are counted the same on
// both servers.
const errorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// writeEarlyError answers a head readRequest refused, as net/http's server
// does (conn.serve): nothing for a connection that failed or timed out,
// 501 for an unsupported Transfer-Encoding (its value not echoed), the
// status and text of a statusError, else 400.
func (c *conn) writeEarlyError(err error) {
	var ne net.Error
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) {
		return
	}
	var msg string
	var se *statusError
	switch {
	case strings.HasPrefix(err.Error(), "unsupported transfer encoding"), strings.HasPrefix(err.Error(), "too many transfer encodings"):
		code := http.StatusNotImplemented
		msg = fmt.Sprintf("HTTP/1.1 %d %s%sUnsupported transfer encoding", code, http.StatusText(code), errorHeaders)
	case errors.As(err, &se):
		msg = fmt.Sprintf("HTTP/1.1 %d %s: %s%s%d %s: %s", se.code, http.StatusText(se.code), se.text, errorHeaders, se.code, http.StatusText(se.code), se.text)
	default:
		msg = "HTTP/1.1 400 Bad Request" + errorHeaders + "400 Bad Request"
	}
	_, _ = io.WriteString(c.rwc, msg)
}
