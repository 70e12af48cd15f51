package scrub

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// frame builds an unmasked server frame.
func frame(fin bool, op byte, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	var h []byte
	switch n := len(payload); {
	case n < 126:
		h = []byte{b0, byte(n)}
	case n < 1<<16:
		h = []byte{b0, 126, 0, 0}
		binary.BigEndian.PutUint16(h[2:], uint16(n))
	default:
		h = make([]byte, 10)
		h[0], h[1] = b0, 127
		binary.BigEndian.PutUint64(h[2:], uint64(n))
	}
	return append(h, payload...)
}

// TestFrameReaderSplitAcrossFragments: a message whose payload carries the
// secret, fragmented at every position (with a ping between the
// fragments) and read in several chunkings, comes out with the same frame
// headers and the payload masked as a whole.
func TestFrameReaderSplitAcrossFragments(t *testing.T) {
	m := mustCompile(t, testSecrets)
	msg := []byte(`{"echo":"` + testSecrets[0].Header + `"} ` + strings.Repeat("x", 200))
	want := m.Mask(string(msg), nil)
	for i := 0; i <= len(msg); i++ {
		f1, f2, f3 := frame(false, 1, msg[:i]), frame(true, 9, []byte("ping")), frame(true, 0, msg[i:])
		stream := append(append(append([]byte(nil), f1...), f2...), f3...)
		h1, h3 := len(f1)-i, len(f3)-(len(msg)-i)
		at3 := len(f1) + len(f2)
		for name, r := range map[string]io.Reader{
			"whole":    bytes.NewReader(stream),
			"one-byte": iotest.OneByteReader(bytes.NewReader(stream)),
			"halves":   &chunks{parts: [][]byte{stream[:len(stream)/2], stream[len(stream)/2:]}},
		} {
			var refs int
			got, err := io.ReadAll(m.NewFrameReader(r, func(string) { refs++ }, nil))
			if err != nil || len(got) != len(stream) {
				t.Fatalf("split %d %s: %d bytes, %v; want %d", i, name, len(got), err, len(stream))
			}
			// Same headers where they were; payload masked.
			if !bytes.Equal(got[:h1], f1[:h1]) || !bytes.Equal(got[len(f1):at3], f2) || !bytes.Equal(got[at3:at3+h3], f3[:h3]) {
				t.Fatalf("split %d %s: frame headers changed", i, name)
			}
			payload := string(got[h1:len(f1)]) + string(got[at3+h3:])
			if payload != want {
				t.Fatalf("split %d %s: payload %q, want %q", i, name, payload, want)
			}
			if refs == 0 {
				t.Fatalf("split %d %s: found not called", i, name)
			}
		}
	}
}

// TestFrameReaderLengths: 16- and 64-bit lengths pass unchanged, masked
// inside.
func TestFrameReaderLengths(t *testing.T) {
	m := mustCompile(t, testSecrets)
	for _, n := range []int{125, 126, 65535, 70000} {
		p := []byte(strings.Repeat("y", n-len(testSecrets[1].Value)) + string(testSecrets[1].Value))
		in := frame(true, 2, p)
		got, err := io.ReadAll(m.NewFrameReader(bytes.NewReader(in), nil, nil))
		want := frame(true, 2, []byte(m.Mask(string(p), nil)))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("n=%d: err %v, equal %v", n, err, bytes.Equal(got, want))
		}
	}
}

// TestFrameReaderRefuses: compressed or masked server frames are not
// passed on.
func TestFrameReaderRefuses(t *testing.T) {
	m := mustCompile(t, testSecrets)
	comp := frame(true, 1, []byte("abc"))
	comp[0] |= 0x40 // RSV1: permessage-deflate
	masked := []byte{0x81, 0x83, 1, 2, 3, 4, 'a', 'b', 'c'}
	for name, in := range map[string][]byte{"rsv1": comp, "masked": masked} {
		got, err := io.ReadAll(m.NewFrameReader(bytes.NewReader(in), nil, nil))
		if !errors.Is(err, ErrFrame) || len(got) != 0 {
			t.Errorf("%s: %q, %v; want nothing and ErrFrame", name, got, err)
		}
	}
}

// TestFrameReaderControl: a close frame quoting the secret is masked.
func TestFrameReaderControl(t *testing.T) {
	m := mustCompile(t, testSecrets)
	reason := append([]byte{0x03, 0xe8}, testSecrets[1].Value...)
	in := append(frame(true, 8, reason), frame(true, 1, []byte("after"))...)
	got, err := io.ReadAll(m.NewFrameReader(iotest.OneByteReader(bytes.NewReader(in)), nil, nil))
	if err != nil || len(got) != len(in) || bytes.Contains(got, testSecrets[1].Value) || !bytes.HasSuffix(got, []byte("after")) {
		t.Fatalf("got %q, %v", got, err)
	}
}

// FuzzFrameReader: on arbitrary bytes the frame scrubber never panics,
// never lengthens the stream, changes bytes only to '*', and passes the
// whole stream when it ends cleanly; on a message of any text split into
// two fragments anywhere (a ping between them) and read in any chunking,
// the payloads come out exactly as the text masked at once.
func FuzzFrameReader(f *testing.F) {
	f.Add([]byte{0x81, 0x05, 'h', 'e', 'l', 'l', 'o'}, []byte("x Bearer sk-fuzz-0001 y"), 3, 5)
	f.Add(append([]byte{0x01, 0x7e, 0x00, 0x03}, "abc"...), []byte("sk-fuzz-0001"), 0, 1)
	m := mustCompile(f, []Secret{{Ref: "r", Value: []byte("sk-fuzz-0001"), Header: "Bearer sk-fuzz-0001"}})
	f.Fuzz(func(t *testing.T, raw, text []byte, split, chunk int) {
		chunk = abs(chunk)%17 + 1
		read := func(in []byte) ([]byte, error) {
			var parts [][]byte
			for len(in) > 0 {
				n := min(chunk, len(in))
				parts = append(parts, in[:n])
				in = in[n:]
			}
			return io.ReadAll(m.NewFrameReader(&chunks{parts: parts}, nil, nil))
		}
		out, err := read(raw)
		if len(out) > len(raw) || err == nil && len(out) != len(raw) {
			t.Fatalf("%d bytes in, %d out, %v", len(raw), len(out), err)
		}
		for i := range out {
			if out[i] != raw[i] && out[i] != '*' {
				t.Fatalf("byte %d changed to %q", i, out[i])
			}
		}
		if len(text) > 60000 {
			return
		}
		split = abs(split) % (len(text) + 1)
		f1, f2, f3 := frame(false, 1, text[:split]), frame(true, 9, []byte("p")), frame(true, 0, text[split:])
		stream := append(append(append([]byte(nil), f1...), f2...), f3...)
		got, err := read(stream)
		if err != nil || len(got) != len(stream) {
			t.Fatalf("message: %d of %d bytes, %v", len(got), len(stream), err)
		}
		h1, h3, at3 := len(f1)-split, len(f3)-(len(text)-split), len(f1)+len(f2)
		payload := string(got[h1:len(f1)]) + string(got[at3+h3:])
		if want := m.Mask(string(text), nil); payload != want {
			t.Fatalf("payload %q, want %q", payload, want)
		}
		// Liveness: with the source blocked after the stream and no timer,
		// every byte of the finished messages is released.
		live := func(r io.Reader) io.Reader {
			fr := m.NewFrameReader(r, nil, nil)
			fr.timeout = 0
			return fr
		}
		p := startPipe(t, live)
		for in := stream; len(in) > 0; {
			n := min(chunk, len(in))
			p.send(t, in[:n])
			in = in[n:]
		}
		if out := p.released(len(stream), time.Second); len(out) != len(stream) {
			t.Fatalf("liveness: %d of %d bytes of finished messages released", len(out), len(stream))
		}
	})
}

// TestFrameReaderReleasesAtFIN (review D3): a complete text message ending
// in a byte that could start a secret ("thanks": "s" of "sk-"), then a
// ping, are released whole with the source blocked and no timer; an
// unfinished message holds exactly its last Hold() payload bytes.
func TestFrameReaderReleasesAtFIN(t *testing.T) {
	m := mustCompile(t, testSecrets)
	newReader := func(r io.Reader) io.Reader {
		f := m.NewFrameReader(r, nil, nil)
		f.timeout = 0
		return f
	}
	msg, ping := frame(true, 1, []byte("thanks")), frame(true, 9, []byte("hb"))
	p := startPipe(t, newReader)
	p.send(t, append(append([]byte(nil), msg...), ping...))
	if got := p.released(len(msg)+len(ping), 10*HoldTimeout); len(got) != len(msg)+len(ping) {
		t.Errorf("released %d of the %d bytes of a complete message and a ping: %q", len(got), len(msg)+len(ping), got)
	}
	p = startPipe(t, newReader)
	part := frame(false, 1, []byte("partial message text"))
	p.send(t, part)
	if got := p.released(len(part), 10*HoldTimeout); len(got) != len(part)-m.Hold() {
		t.Errorf("unfinished message: %d bytes released, want %d", len(got), len(part)-m.Hold())
	}
}

// TestFrameReaderTimerReleases: an unfinished message's held tail goes out
// after HoldTimeout, and a pause inside a secret counts as a stall.
func TestFrameReaderTimerReleases(t *testing.T) {
	m := mustCompile(t, testSecrets)
	stalls := 0
	p := startPipe(t, func(r io.Reader) io.Reader { return m.NewFrameReader(r, nil, func() { stalls++ }) })
	part := frame(false, 1, append([]byte("echo: "), testSecrets[0].Value[:11]...))
	p.send(t, part)
	if got := p.released(len(part), 40*HoldTimeout); !bytes.Equal(got, part) {
		t.Errorf("released %q, want %q", got, part)
	}
	if stalls != 1 {
		t.Errorf("%d stalls, want 1", stalls)
	}
}
