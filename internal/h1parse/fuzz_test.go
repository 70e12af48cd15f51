package h1parse

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

// seedHeads are the shapes the fuzz target starts from: the common ones the
// fast path reads, and every request-smuggling and edge shape found in
// net/http's readRequest, readTransfer and textproto.ReadMIMEHeader, which
// must all behave exactly as net/http (most by falling back to it).
var seedHeads = []string{
	// Common shapes.
	"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
	"GET /v1/models?limit=10&after=x HTTP/1.1\r\nHost: api.example.com\r\nUser-Agent: agent/1.0\r\nAccept: */*\r\n\r\n",
	"POST /v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: Bearer sk-test\r\nContent-Type: application/json\r\nContent-Length: 16\r\nUser-Agent: OpenAI/Python 1.0\r\nAccept: application/json\r\nAccept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\nX-Stainless-Lang: python\r\n\r\n{\"model\":\"gpt\"}\n",
	"POST /x HTTP/1.1\r\nhost: a\r\ncontent-type: application/json\r\ncontent-length: 2\r\nx-api-key: k\r\n\r\n{}",
	"GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: b\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\nHost: b\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nshort",
	"HEAD / HTTP/1.0\r\n\r\n",
	"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
	"GET / HTTP/1.0\r\nConnection: Keep-Alive, close\r\n\r\n",
	"GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
	"GET / HTTP/1.1\r\nConnection: upgrade, CLOSE \r\n\r\n",
	"GET / HTTP/1.1\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
	"DELETE /x?y HTTP/1.1\r\nX-Empty:\r\nX-Spaces:   \t \r\nX-Tab:\tv\t\r\n\r\n",
	"GET /x? HTTP/1.1\r\n\r\n",
	"GET /x?? HTTP/1.1\r\n\r\n",
	"GET /%41%2f?q=%zz HTTP/1.1\r\n\r\n",
	"GET /a!b(c)*'d HTTP/1.1\r\n\r\n",
	"GET //evil.example/x HTTP/1.1\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET http://user:pass@example.com:8080/p?q#f HTTP/1.1\r\nHost: other\r\n\r\n",
	"GET HTTP://EXAMPLE.com HTTP/1.1\r\n\r\n",
	"GET https://example.com/%zz HTTP/1.1\r\n\r\n",
	"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
	"CONNECT /rpc HTTP/1.1\r\n\r\n",
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	"PROPFIND /dav HTTP/1.1\r\n\r\n",
	// Content-Length and Transfer-Encoding, alone and together.
	"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n3\r\nabc\r\n0\r\nX-T: v\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\nContent-Length: 1\r\n\r\nx",
	"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\nx",
	"POST / HTTP/1.1\r\nTransfer-Encoding:\tCHUNKED\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
	"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
	"POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\nx",
	"POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\nx",
	"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\nx",
	"POST / HTTP/1.1\r\nContent-Length: 0001\r\n\r\nx",
	"POST / HTTP/1.1\r\nContent-Length:  1 \r\n\r\nx",
	"POST / HTTP/1.1\r\nContent-Length: 1 1\r\n\r\nx",
	"POST / HTTP/1.1\r\nContent-Length:\r\n\r\n",
	"POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n",
	"POST / HTTP/1.1\r\nContent-Length: 9223372036854775807\r\n\r\nx",
	"POST / HTTP/1.1\r\nContent-Length: 9223372036854775808\r\n\r\nx",
	"POST / HTTP/1.1\r\nContent-Length: 999999999999999999\r\n\r\nx",
	"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\nx",
	"POST / HTTP/1.1\r\ncontent-length: 2\r\nCONTENT-LENGTH: 2\r\n\r\nxy",
	"GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
	// Field syntax.
	"GET / HTTP/1.1\r\nX-Folded: a\r\n b\r\n\r\n",
	"GET / HTTP/1.1\r\n X-Leading: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\n\tX: b\r\n\r\n",
	"GET / HTTP/1.1\nHost: a\n\n",
	"GET / HTTP/1.1\r\nHost: a\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\n\n",
	"GET / HTTP/1.1\r\nHost: a\r\r\n\r\n",
	"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
	"GET / HTTP/1.1\r\nContent-Length : 5\r\n\r\nabcde",
	"GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n",
	"GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n",
	"GET / HTTP/1.1\r\nX: a\x7fb\r\n\r\n",
	"GET / HTTP/1.1\r\nX: caf\xc3\xa9\r\n\r\n",
	"GET / HTTP/1.1\r\nX\x00Y: a\r\n\r\n",
	"GET / HTTP/1.1\r\nNoColon\r\n\r\n",
	"GET / HTTP/1.1\r\n: empty-name\r\n\r\n",
	"GET / HTTP/1.1\r\nx-1a-b: v\r\nX-Foo: 1\r\nx-foo: 2\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost:\r\n\r\n",
	"GET / HTTP/1.1\r\nPragma: no-cache\r\n\r\n",
	"GET / HTTP/1.1\r\nPragma: no-cache\r\nCache-Control: max-age=0\r\n\r\n",
	"GET / HTTP/1.1\r\nTrailer: X\r\n\r\n",
	"GET / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx",
	// Request line.
	"GET / HTTP/1.1 \r\n\r\n",
	"GET  / HTTP/1.1\r\n\r\n",
	"GET / HTTP/1.2\r\n\r\n",
	"GET / HTTP/0.9\r\n\r\n",
	"GET / http/1.1\r\n\r\n",
	"GET /\r\n\r\n",
	"GET\r\n\r\n",
	"\r\nGET / HTTP/1.1\r\n\r\n",
	"G\x00T / HTTP/1.1\r\n\r\n",
	"GET /a\x01b HTTP/1.1\r\n\r\n",
	"GET a HTTP/1.1\r\n\r\n",
	"GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\n",
	"GET / HTTP/1.1\r\nHost: a",
	"GET / HTTP/1.1\r\nHost: a\r\n\r",
	"",
}

// FuzzReadRequestMatchesNetHTTP holds ReadRequest to http.ReadRequest: for
// every input, fed in every way the other parameters pick (reader buffer
// size; the sizes of the underlying reads; EOF or a connection error at the
// end, after the last bytes or with them; LF kept or turned into CRLF;
// bodies read whole, in small reads or only closed), both parse the same
// requests, back to back, with identical fields, errors, body bytes and body
// errors, and leave identical bytes in the reader.
func FuzzReadRequestMatchesNetHTTP(f *testing.F) {
	for _, s := range seedHeads {
		f.Add([]byte(s), uint16(4096), uint8(0), uint8(0))
		f.Add([]byte(s), uint16(20), uint8(1|4), uint8(5))
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "requests", "*.txtar"))
	for _, file := range files {
		ar, err := txtar.ParseFile(file)
		if err != nil {
			f.Fatal(err)
		}
		in, err := goldenInput(ar)
		if err != nil {
			f.Fatalf("%s: %v", file, err)
		}
		f.Add(in, uint16(4096), uint8(2), uint8(0))
		f.Add(in, uint16(64), uint8(1|8), uint8(2))
	}
	for _, s := range seedHeads {
		f.Add([]byte(strings.ReplaceAll(s, "\r\n", "\n")), uint16(4096), uint8(32), uint8(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, bufSize uint16, mode, chunk uint8) {
		if mode&32 != 0 {
			// Line mode: every LF becomes CRLF, so that mutations keep the
			// lines of a head well formed and reach the fast path's own
			// decisions rather than net/http's first error.
			data = bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n"))
		}
		if d, _ := differ(data, wireFor(bufSize, mode, chunk)); d != "" {
			t.Fatalf("input %q (buf %d mode %d chunk %d): %s", data, bufSize, mode, chunk, d)
		}
	})
}

// wireFor maps the fuzz parameters to a way of feeding the input.
func wireFor(bufSize uint16, mode, chunk uint8) wire {
	w := wire{bufSize: 16 + int(bufSize)%8192, maxReqs: 8}
	if mode&1 != 0 {
		w.chunks = []int{int(chunk)%32 + 1, 3, int(chunk) + 1}
	}
	if mode&2 != 0 {
		w.endErr = errConnReset
	}
	if mode&4 != 0 {
		w.drainOnly = true
	}
	if mode&8 != 0 {
		w.readSize = 1 + int(chunk)%13
	}
	if mode&16 != 0 {
		w.errWithData = true
	}
	return w
}
