package h1parse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strings"
)

// errConnReset stands in for a connection error after the input's last byte
// (instead of io.EOF), so that error propagation is compared too.
var errConnReset = errors.New("connection reset by test")

// wire is how a differential run feeds the input to both parsers.
type wire struct {
	bufSize     int   // bufio.Reader size (at least 16)
	chunks      []int // sizes of successive underlying reads, cycled; nil: whole reads
	endErr      error // what the underlying reader returns after the input; nil: io.EOF
	errWithData bool  // return endErr with the last bytes, not after them
	drainOnly   bool  // close each body without reading it (after one read of readSize if set)
	readSize    int   // size of each body Read; 0: io.ReadAll
	maxReqs     int   // requests to read from one stream
}

// chunkReader returns the input in reads of the sizes in chunks, cycled,
// then endErr.
type chunkReader struct {
	data        []byte
	chunks      []int
	i           int
	endErr      error
	errWithData bool
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.endErr
	}
	n := len(p)
	if len(r.chunks) > 0 {
		n = min(n, r.chunks[r.i%len(r.chunks)])
		r.i++
	}
	n = copy(p, r.data[:min(n, len(r.data))])
	r.data = r.data[n:]
	if len(r.data) == 0 && r.errWithData {
		return n, r.endErr
	}
	return n, nil
}

func (w wire) reader(data []byte) *bufio.Reader {
	end := w.endErr
	if end == nil {
		end = io.EOF
	}
	return bufio.NewReaderSize(&chunkReader{data: data, chunks: w.chunks, endErr: end, errWithData: w.errWithData}, w.bufSize)
}

// outcome is what one side made of one request of a stream.
type outcome struct {
	req      *http.Request
	err      error
	body     []byte
	bodyErr  error
	closeErr error
	afterErr error // a Read after Close
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func readOutcome(req *http.Request, err error, w wire) outcome {
	o := outcome{req: req, err: err}
	if err != nil {
		return o
	}
	switch {
	case w.drainOnly && w.readSize > 0:
		// One small read, then Close drains the rest.
		buf := make([]byte, w.readSize)
		n, err := req.Body.Read(buf)
		o.body = buf[:n]
		if err != nil && err != io.EOF {
			o.bodyErr = err
		}
	case w.drainOnly:
	case w.readSize > 0:
		buf := make([]byte, w.readSize)
		for {
			n, err := req.Body.Read(buf)
			o.body = append(o.body, buf[:n]...)
			if err != nil {
				if err != io.EOF {
					o.bodyErr = err
				}
				break
			}
		}
	default:
		o.body, o.bodyErr = io.ReadAll(req.Body)
	}
	o.closeErr = req.Body.Close()
	_, o.afterErr = req.Body.Read(make([]byte, 1))
	return o
}

// differ runs the input through http.ReadRequest and through read, request
// after request, and describes the first difference ("" if none). It also
// returns how many requests the fast path read.
func differ(data []byte, w wire) (diff string, fastCount int) {
	b1, b2 := w.reader(data), w.reader(data)
	for i := 0; i < w.maxReqs; i++ {
		r1, e1 := http.ReadRequest(b1)
		r2, fast, e2 := read(b2)
		if fast {
			fastCount++
		}
		o1, o2 := readOutcome(r1, e1, w), readOutcome(r2, e2, w)
		if d := compareOutcomes(o1, o2); d != "" {
			return fmt.Sprintf("request %d (fast=%v): %s", i, fast, d), fastCount
		}
		if e1 != nil {
			break
		}
	}
	rest1, err1 := io.ReadAll(b1)
	rest2, err2 := io.ReadAll(b2)
	if !bytes.Equal(rest1, rest2) || errString(err1) != errString(err2) {
		return fmt.Sprintf("bytes left in the reader differ: net/http %q (%v), h1parse %q (%v)", rest1, err1, rest2, err2), fastCount
	}
	return "", fastCount
}

func compareOutcomes(o1, o2 outcome) string {
	if errString(o1.err) != errString(o2.err) {
		return fmt.Sprintf("error: net/http %v, h1parse %v", o1.err, o2.err)
	}
	if o1.err != nil {
		if o2.req != nil {
			return "h1parse returned a request with its error"
		}
		return ""
	}
	if d := compareRequests(o1.req, o2.req); d != "" {
		return d
	}
	if !bytes.Equal(o1.body, o2.body) {
		return fmt.Sprintf("body: net/http %q, h1parse %q", o1.body, o2.body)
	}
	for _, e := range []struct {
		what   string
		e1, e2 error
	}{{"body read error", o1.bodyErr, o2.bodyErr}, {"close error", o1.closeErr, o2.closeErr}, {"read after close", o1.afterErr, o2.afterErr}} {
		if errString(e.e1) != errString(e.e2) {
			return fmt.Sprintf("%s: net/http %v, h1parse %v", e.what, e.e1, e.e2)
		}
	}
	if !reflect.DeepEqual(o1.req.Trailer, o2.req.Trailer) {
		return fmt.Sprintf("trailer after the body: net/http %#v, h1parse %#v", o1.req.Trailer, o2.req.Trailer)
	}
	return ""
}

// compareRequests compares every field of two requests, unexported ones
// included, except Body, whose behaviour readOutcome compares; for Body it
// checks that both or neither are http.NoBody.
func compareRequests(r1, r2 *http.Request) string {
	if (r1.Body == http.NoBody) != (r2.Body == http.NoBody) {
		return fmt.Sprintf("body: net/http NoBody=%v, h1parse NoBody=%v", r1.Body == http.NoBody, r2.Body == http.NoBody)
	}
	c1, c2 := *r1, *r2
	c1.Body, c2.Body = nil, nil
	if reflect.DeepEqual(&c1, &c2) {
		return ""
	}
	return fmt.Sprintf("request:\nnet/http %s\nh1parse  %s", describeRequest(r1), describeRequest(r2))
}

// describeRequest renders a request's parsed head deterministically, one
// line a fact, for diffs and golden files.
func describeRequest(r *http.Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "method %q\nrequest-uri %q\nproto %q %d.%d\n", r.Method, r.RequestURI, r.Proto, r.ProtoMajor, r.ProtoMinor)
	if u := r.URL; u != nil {
		fmt.Fprintf(&b, "url scheme=%q opaque=%q user=%v host=%q path=%q rawpath=%q omithost=%v forcequery=%v rawquery=%q fragment=%q rawfragment=%q\n",
			u.Scheme, u.Opaque, u.User, u.Host, u.Path, u.RawPath, u.OmitHost, u.ForceQuery, u.RawQuery, u.Fragment, u.RawFragment)
	}
	fmt.Fprintf(&b, "host %q\n", r.Host)
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "header %q %q\n", k, r.Header[k])
	}
	fmt.Fprintf(&b, "content-length %d\ntransfer-encoding %q\nclose %v\ntrailer %v\nnobody %v\n",
		r.ContentLength, r.TransferEncoding, r.Close, r.Trailer, r.Body == http.NoBody)
	return b.String()
}
