package h1parse

import (
	"net/textproto"
	"net/url"
	"testing"
)

// TestPathByteMatchesNetURL checks pathByte against net/url itself for every
// byte: a byte is in the set exactly when url.ParseRequestURI leaves a path
// holding it as it is, with no RawPath.
func TestPathByteMatchesNetURL(t *testing.T) {
	t.Parallel()
	for c := 0; c < 256; c++ {
		path := "/a" + string([]byte{byte(c)}) + "b"
		u, err := url.ParseRequestURI(path)
		identity := err == nil && u.Path == path && u.RawPath == "" && u.RawQuery == "" && !u.ForceQuery
		if c == '?' {
			identity = false // the query separator, handled apart
		}
		if got := pathByte(byte(c)); got != identity {
			t.Errorf("pathByte(%q) = %v, net/url leaves it as is: %v", byte(c), got, identity)
		}
	}
}

// TestCanonicalizeMatchesTextproto checks canonicalize and isCanonical
// against textproto.CanonicalMIMEHeaderKey.
func TestCanonicalizeMatchesTextproto(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"host", "HOST", "Host", "content-length", "CONTENT-LENGTH", "x-1a-b", "X-1A-B", "a--b", "-a", "a-",
		"x_y-z", "WWW-Authenticate", "www-authenticate", "te", "Dnt", "DNT", "x-9-z", "'a|b~c", "Accept-Encoding",
	} {
		want := textproto.CanonicalMIMEHeaderKey(name)
		if got := string(canonicalize(nil, []byte(name))); got != want {
			t.Errorf("canonicalize(%q) = %q, textproto %q", name, got, want)
		}
		if got := isCanonical([]byte(name)); got != (want == name) {
			t.Errorf("isCanonical(%q) = %v, textproto canonical form %q", name, got, want)
		}
	}
}

// TestValidBytesMatchTextproto checks the field-name and field-value byte
// rules against what textproto.ReadMIMEHeader accepts, byte by byte.
func TestValidBytesMatchTextproto(t *testing.T) {
	t.Parallel()
	for c := 0; c < 256; c++ {
		if c == '\r' || c == '\n' || c == ':' {
			continue
		}
		b := byte(c)
		_, nameErr := readOneField("A" + string([]byte{b}) + ": v")
		wantName := nameErr == nil && b != ' ' // a space before the colon is accepted but left uncanonical: not the fast path's
		if got := validHeaderFieldByte(b); got != wantName {
			t.Errorf("validHeaderFieldByte(%q) = %v, textproto accepts it in a name: %v", b, got, wantName)
		}
		_, valueErr := readOneField("A: v" + string([]byte{b}) + "v")
		if got := validHeaderValueByte(b); got != (valueErr == nil) {
			t.Errorf("validHeaderValueByte(%q) = %v, textproto accepts it in a value: %v", b, got, valueErr == nil)
		}
	}
}

func readOneField(line string) (textproto.MIMEHeader, error) {
	return textproto.NewReader(bufioString(line + "\r\n\r\n")).ReadMIMEHeader()
}

// mutationBytes are the bytes TestSingleByteEdits puts at every position of
// its heads: the ones every rule of the grammar turns on.
var mutationBytes = []byte(" \t\r\n:\x00\x01\x7f\x80\xffAa0-,;?%/#*@=\"")

// TestSingleByteEdits replaces, inserts and deletes one byte at every
// position of several fast-path heads and checks that every variant reads
// identically through ReadRequest and http.ReadRequest: a systematic sweep
// of the neighbourhood of the fast path that the fuzz target samples.
func TestSingleByteEdits(t *testing.T) {
	t.Parallel()
	heads := []string{
		"POST /v1/chat?x=1 HTTP/1.1\r\nHost: a\r\ncontent-length: 3\r\nConnection: keep-alive\r\nX-A: b\r\n\r\nabcGET / HTTP/1.0\r\n\r\n",
		"PUT http://u@h:1/p HTTP/1.1\r\nTransfer-Encoding: chunked\r\nHost: x\r\n\r\n2\r\nab\r\n0\r\n\r\n",
	}
	w := wire{bufSize: 4096, maxReqs: 4}
	variants, fast := 0, 0
	check := func(in []byte) {
		variants++
		d, n := differ(in, w)
		fast += n
		if d != "" {
			t.Errorf("%q: %s", in, d)
		}
	}
	for _, h := range heads {
		for i := 0; i <= len(h); i++ {
			if i < len(h) {
				check([]byte(h[:i] + h[i+1:]))
			}
			for _, c := range mutationBytes {
				if i < len(h) {
					check([]byte(h[:i] + string([]byte{c}) + h[i+1:]))
				}
				check([]byte(h[:i] + string([]byte{c}) + h[i:]))
			}
		}
	}
	if fast == 0 {
		t.Fatalf("none of %d variants took the fast path", variants)
	}
	t.Logf("%d variants, %d requests read on the fast path", variants, fast)
}

// TestBufferSizes reads the same pipelined heads through every reader
// buffer size from the smallest bufio allows to past the whole input, so
// that the end of a head falls at every position relative to the end of
// the buffered bytes: a head must be read on the fast path only when it is
// whole in the buffer, and identically to net/http either way.
func TestBufferSizes(t *testing.T) {
	t.Parallel()
	in := []byte("POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET /b?c HTTP/1.1\r\nhost: b\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\nGET /c HTTP/1.0\r\n\r\n")
	fast := 0
	for size := 16; size <= len(in)+1; size++ {
		for _, chunks := range [][]int{nil, {size / 2, 1}} {
			d, n := differ(in, wire{bufSize: size, chunks: chunks, maxReqs: 4})
			if d != "" {
				t.Errorf("buffer %d, reads %v: %s", size, chunks, d)
			}
			fast += n
		}
	}
	if fast == 0 {
		t.Fatal("no buffer size took the fast path")
	}
}
