package proxy

import (
	"bytes"
	"testing"
)

// referenceFrames counts the frames that start in a whole stream, by the
// RFC 6455 §5.2 header rules written out directly.
func referenceFrames(b []byte) int {
	n := 0
	for i := 0; i < len(b); {
		n++
		if i+2 > len(b) {
			return n
		}
		l := uint64(b[i+1] & 0x7f)
		h := 2
		switch l {
		case 126:
			h += 2
		case 127:
			h += 8
		}
		if b[i+1]&0x80 != 0 {
			h += 4
		}
		if i+h > len(b) {
			return n
		}
		switch l {
		case 126:
			l = uint64(b[i+2])<<8 | uint64(b[i+3])
		case 127:
			l = 0
			for _, c := range b[i+2 : i+10] {
				l = l<<8 | uint64(c)
			}
		}
		if l > uint64(len(b)-i-h) {
			return n
		}
		i += h + int(l)
	}
	return n
}

func TestWSFrameCounter(t *testing.T) {
	long := clientFrame(bytes.Repeat([]byte("y"), 300)) // 16-bit length
	huge := []byte{0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0}   // 65536 bytes, unmasked
	huge = append(huge, make([]byte, 65536)...)
	tests := []struct {
		name   string
		stream []byte
		want   int
	}{
		{"empty", nil, 0},
		{"one masked", clientFrame([]byte("hi")), 1},
		{"three", bytes.Join([][]byte{clientFrame([]byte("a")), clientFrame(nil), clientFrame([]byte("ccc"))}, nil), 3},
		{"16-bit length", append(long, clientFrame([]byte("z"))...), 2},
		{"64-bit length", append(huge, 0x89, 0x00), 2}, // then a ping
		{"lone first byte", []byte{0x81}, 1},
		{"control frames count", []byte{0x89, 0x00, 0x8a, 0x00, 0x88, 0x00}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var whole wsFrameCounter
			if got := whole.feed(tt.stream); got != tt.want {
				t.Errorf("whole: %d frames, want %d", got, tt.want)
			}
			var bytewise wsFrameCounter
			got := 0
			for i := range tt.stream {
				got += bytewise.feed(tt.stream[i : i+1])
			}
			if got != tt.want {
				t.Errorf("byte by byte: %d frames, want %d", got, tt.want)
			}
		})
	}
}

// FuzzWSFrameCounter: however the agent's bytes are cut into reads, the
// counter counts the frames a whole-stream parse finds (no read split
// hides a frame from the rate limit).
func FuzzWSFrameCounter(f *testing.F) {
	f.Add(clientFrame([]byte("hello")), uint16(3))
	f.Add(append(clientFrame(bytes.Repeat([]byte("x"), 200)), 0x89, 0x80, 1, 2, 3, 4), uint16(7))
	f.Add([]byte{0x82, 127, 0, 0, 0, 0, 0, 0, 0, 2, 'a', 'b', 0x81, 0}, uint16(1))
	f.Fuzz(func(t *testing.T, stream []byte, cut uint16) {
		want := referenceFrames(stream)
		var whole wsFrameCounter
		if got := whole.feed(stream); got != want {
			t.Fatalf("whole: %d, reference %d", got, want)
		}
		var split wsFrameCounter
		c := int(cut) % (len(stream) + 1)
		if got := split.feed(stream[:c]) + split.feed(stream[c:]); got != want {
			t.Fatalf("split at %d: %d, reference %d", c, got, want)
		}
	})
}
