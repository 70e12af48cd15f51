package placeholder

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math"
)

// prefixWindow is how far into a value a '-' or '_' ends the kept prefix.
const prefixWindow = 12

// MinBits is the least entropy, in bits, of a placeholder's random
// characters: below it a placeholder could appear in ordinary text by
// chance (2^-48 per position scanned).
const MinBits = 48

// maxRederive bounds the re-derivations of a placeholder that came out
// equal to the value (with at least MinBits of randomness, the first
// retry already succeeds but for a chance of 2^-48).
const maxRederive = 8

// ErrWeakShape is Derive's error for a value whose shape leaves under
// MinBits bits of random characters (too short, or mostly prefix and
// punctuation).
var ErrWeakShape = errors.New("the secret's value is too short or too uniform for a placeholder")

// Character classes of a shape position.
const (
	classUpper = 1
	classLower = 2
	classDigit = 3
)

const (
	upperChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	lowerChars = "abcdefghijklmnopqrstuvwxyz"
	digitChars = "0123456789"
)

// shape is what a placeholder keeps of a value.
type shape struct {
	prefix  int    // bytes kept as they are at the start
	classes []byte // per byte after the prefix: a class, or 0 (kept)
	kept    []byte // the kept byte where classes[i] == 0
}

// prefixLen is the length of the prefix a placeholder keeps: up to and
// including the last '-' or '_' within the first prefixWindow bytes.
func prefixLen(v []byte) int {
	n := 0
	for i := 0; i < len(v) && i < prefixWindow; i++ {
		if v[i] == '-' || v[i] == '_' {
			n = i + 1
		}
	}
	return n
}

func shapeOf(v []byte) shape {
	s := shape{prefix: prefixLen(v)}
	rest := v[s.prefix:]
	s.classes = make([]byte, len(rest))
	s.kept = make([]byte, len(rest))
	for i, b := range rest {
		switch {
		case b >= 'A' && b <= 'Z':
			s.classes[i] = classUpper
		case b >= 'a' && b <= 'z':
			s.classes[i] = classLower
		case b >= '0' && b <= '9':
			s.classes[i] = classDigit
		default:
			s.kept[i] = b
		}
	}
	return s
}

// bits is the entropy of the shape's random positions.
func (s shape) bits() float64 {
	var b float64
	for _, c := range s.classes {
		switch c {
		case classUpper, classLower:
			b += math.Log2(26)
		case classDigit:
			b += math.Log2(10)
		}
	}
	return b
}

// Derive returns the placeholder of secret ref for a value of value's
// shape, keyed by key (see the package doc). It reads value only for its
// shape: length, prefix, the class of each byte and the bytes that are not
// letters or digits. It fails with ErrWeakShape for a shape of under
// MinBits bits of random characters.
func Derive(key []byte, ref string, value []byte) (string, error) {
	s := shapeOf(value)
	if s.bits() < MinBits {
		return "", ErrWeakShape
	}
	// The HMAC message: a version label, the ref and the shape, each
	// length-prefixed so that no two (ref, shape) pairs share a message.
	msg := make([]byte, 0, 32+len(ref)+2*len(value))
	msg = append(msg, "botbox-placeholder-v1"...)
	msg = binary.BigEndian.AppendUint32(msg, uint32(len(ref)))
	msg = append(msg, ref...)
	msg = binary.BigEndian.AppendUint32(msg, uint32(s.prefix))
	msg = append(msg, value[:s.prefix]...)
	msg = binary.BigEndian.AppendUint32(msg, uint32(len(s.classes)))
	for i, c := range s.classes {
		if c == 0 {
			msg = append(msg, 0, s.kept[i])
		} else {
			msg = append(msg, c)
		}
	}
	for attempt := range maxRederive {
		p := fill(key, msg, attempt, value[:s.prefix], s)
		if p != string(value) {
			return p, nil
		}
	}
	return "", ErrWeakShape // unreachable with MinBits of randomness
}

// fill draws the random positions of shape s from the HMAC stream of
// (msg, attempt), by rejection sampling so that every character of a class
// is equally likely.
func fill(key, msg []byte, attempt int, prefix []byte, s shape) string {
	out := make([]byte, 0, len(prefix)+len(s.classes))
	out = append(out, prefix...)
	st := stream{key: key, msg: msg, attempt: uint32(attempt)}
	for i, c := range s.classes {
		var set string
		switch c {
		case 0:
			out = append(out, s.kept[i])
			continue
		case classUpper:
			set = upperChars
		case classLower:
			set = lowerChars
		default:
			set = digitChars
		}
		n := len(set)
		limit := 256 - 256%n
		for {
			b := int(st.next())
			if b < limit {
				out = append(out, set[b%n])
				break
			}
		}
	}
	return string(out)
}

// stream is the byte stream HMAC-SHA256(key, msg || attempt || block)
// for block 0, 1, 2, …
type stream struct {
	key, msg []byte
	attempt  uint32
	block    uint32
	buf      []byte
}

func (s *stream) next() byte {
	if len(s.buf) == 0 {
		m := hmac.New(sha256.New, s.key)
		m.Write(s.msg)
		var ctr [8]byte
		binary.BigEndian.PutUint32(ctr[:4], s.attempt)
		binary.BigEndian.PutUint32(ctr[4:], s.block)
		m.Write(ctr[:])
		s.buf = m.Sum(nil)
		s.block++
	}
	b := s.buf[0]
	s.buf = s.buf[1:]
	return b
}
