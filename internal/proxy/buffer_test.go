package proxy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"testing/iotest"
)

// chunkReader returns its chunks one Read at a time (a Read never spans two
// chunks), then err.
type chunkReader struct {
	chunks [][]byte
	err    error
	closed bool
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		return 0, c.err
	}
	n := copy(p, c.chunks[0])
	if c.chunks[0] = c.chunks[0][n:]; len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

func (c *chunkReader) Close() error { c.closed = true; return nil }

func TestCoalescingBody(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), coalesceSize/8) // 2 × coalesceSize
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		chunks  [][]byte
		err     error
		readBuf int
		wantErr error
	}{
		{"empty", nil, io.EOF, 32 << 10, nil},
		{"small reads of a big chunk", [][]byte{big}, io.EOF, 1000, nil},
		{"many chunks", [][]byte{big[:10], big[10:70000], big[70000:]}, io.EOF, 32 << 10, nil},
		{"error after data", [][]byte{big[:5000]}, errBoom, 32 << 10, errBoom},
		{"unexpected EOF", [][]byte{big[:100]}, io.ErrUnexpectedEOF, 7, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want []byte
			for _, c := range tt.chunks {
				want = append(want, c...)
			}
			src := &chunkReader{chunks: append([][]byte(nil), tt.chunks...), err: tt.err}
			b := newCoalescingBody(src)
			var got []byte
			buf := make([]byte, tt.readBuf)
			var err error
			for {
				var n int
				n, err = b.Read(buf)
				got = append(got, buf[:n]...)
				if err != nil {
					break
				}
			}
			if !errors.Is(err, tt.wantErr) && !(tt.wantErr == nil && err == io.EOF) {
				t.Errorf("final error %v, want %v", err, tt.wantErr)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("read %d bytes, want %d (contents differ: %v)", len(got), len(want), len(got) == len(want))
			}
			if err := b.Close(); err != nil || !src.closed {
				t.Errorf("Close: %v, underlying closed %v", err, src.closed)
			}
			if n, err := b.Read(buf); n != 0 || err == nil {
				t.Errorf("Read after Close = %d, %v; want 0 and an error", n, err)
			}
			_ = b.Close() // a second Close must not return the buffer twice
		})
	}
}

func TestCoalescingBodyIOTest(t *testing.T) {
	data := bytes.Repeat([]byte("botbox"), 100_000)
	b := newCoalescingBody(io.NopCloser(iotest.HalfReader(bytes.NewReader(data))))
	defer b.Close()
	if err := iotest.TestReader(b, data); err != nil {
		t.Fatal(err)
	}
}

// TestLargeHTTP2BodyIntact streams a body large enough to be coalesced from
// an HTTP/2 origin and checks every byte.
func TestLargeHTTP2BodyIntact(t *testing.T) {
	const size = 8<<20 + 12345
	e := newEnv(t, envOpts{http2Origin: true})
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i*7 + i>>11)
	}
	sum := sha256.Sum256(payload)
	e.originMux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		for off := 0; off < size; off += 10_000 {
			if _, err := w.Write(payload[off:min(off+10_000, size)]); err != nil {
				return
			}
		}
	})
	req, _ := http.NewRequest(http.MethodGet, e.plain.URL+"/big", nil)
	req.Host = "api.example.test"
	// HTTP/2 from the agent too: on either engine net/http serves it and
	// its HTTP/2 upstream path (the coalescing one) runs.
	resp, err := e.h2cClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil || n != size {
		t.Fatalf("read %d bytes, %v; want %d", n, err, size)
	}
	if got := h.Sum(nil); !bytes.Equal(got, sum[:]) {
		t.Fatal("body differs from what the origin sent")
	}
	if e.lastSeen().Proto != "HTTP/2.0" {
		t.Fatalf("origin saw %s, want HTTP/2.0 (the coalescing path)", e.lastSeen().Proto)
	}
}

// TestBufferPoolNoAllocs holds bufferPool's contract: a Get/Put cycle does
// not allocate, and a short foreign slice is never pooled.
func TestBufferPoolNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under -race")
	}
	p := newBufferPool()
	p.Put(p.Get())
	if n := testing.AllocsPerRun(100, func() { p.Put(p.Get()) }); n != 0 {
		t.Errorf("Get/Put: %v allocations, want 0", n)
	}
	p.Put(make([]byte, 10))
	if b := p.Get(); len(b) != copyBufSize {
		t.Errorf("Get returned %d bytes, want %d", len(b), copyBufSize)
	}
}
