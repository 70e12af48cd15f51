package h1parse

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"testing"
)

// benchHeads are the heads the benchmark reads: a typical agent call and a
// small GET.
var benchHeads = []struct{ name, head string }{
	{"agent-post", "POST /v1/chat/completions HTTP/1.1\r\n" +
		"Host: api.openai.com\r\n" +
		"Authorization: Bearer sk-proj-0123456789abcdefghijklmnopqrstuvwxyz\r\n" +
		"Content-Type: application/json\r\n" +
		"Content-Length: 58\r\n" +
		"User-Agent: OpenAI/Python 1.54.0\r\n" +
		"Accept: application/json\r\n" +
		"Accept-Encoding: gzip, deflate\r\n" +
		"Connection: keep-alive\r\n" +
		"X-Stainless-Lang: python\r\n" +
		"X-Stainless-Retry-Count: 0\r\n" +
		"\r\n" +
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`[:58]},
	{"small-get", "GET /v1/models HTTP/1.1\r\nHost: api.example.com\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n"},
}

// BenchmarkReadRequest reads each head, drains its body and closes it, with
// net/http's http.ReadRequest as the same-run baseline and ReadRequest.
func BenchmarkReadRequest(b *testing.B) {
	for _, h := range benchHeads {
		for _, p := range []struct {
			name string
			read func(*bufio.Reader) (*http.Request, error)
		}{{"nethttp", http.ReadRequest}, {"fast", ReadRequest}} {
			b.Run(p.name+"/"+h.name, func(b *testing.B) {
				data := []byte(h.head)
				src := bytes.NewReader(data)
				br := bufio.NewReader(src)
				if _, fast, err := read(bufio.NewReader(bytes.NewReader(data))); err != nil || !fast {
					b.Fatalf("the benchmark head is not on the fast path (fast=%v, err=%v)", fast, err)
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					src.Reset(data)
					br.Reset(src)
					req, err := p.read(br)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := io.Copy(io.Discard, req.Body); err != nil {
						b.Fatal(err)
					}
					req.Body.Close()
				}
			})
		}
	}
}

// TestFastPathAllocatesLess holds the reason the package exists: on the
// benchmark heads, ReadRequest allocates at most half as often as
// http.ReadRequest, both measured in the same run (and the same build, so
// the ratio also holds under -race, which adds allocations to both).
func TestFastPathAllocatesLess(t *testing.T) {
	for _, h := range benchHeads {
		data := []byte(h.head)
		allocs := func(read func(*bufio.Reader) (*http.Request, error)) float64 {
			src := bytes.NewReader(data)
			br := bufio.NewReader(src)
			return testing.AllocsPerRun(200, func() {
				src.Reset(data)
				br.Reset(src)
				req, err := read(br)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, req.Body)
				req.Body.Close()
			})
		}
		nethttp, fast := allocs(http.ReadRequest), allocs(ReadRequest)
		t.Logf("%s: net/http %.0f allocations, fast path %.0f", h.name, nethttp, fast)
		if fast > nethttp/2 {
			t.Errorf("%s: the fast path allocates %.0f times a request, net/http %.0f: more than half", h.name, fast, nethttp)
		}
	}
}
