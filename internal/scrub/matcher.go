package scrub

import (
	"errors"
	"fmt"
)

// MaxStates bounds the automaton (the sum of the pattern lengths, plus
// one): Compile refuses a larger set rather than build a table of
// unbounded size. It allows dozens of secrets of several hundred bytes.
const MaxStates = 1 << 16

// Matcher is an immutable Aho–Corasick automaton over a pattern set, safe
// for concurrent use. Build it with Compile.
type Matcher struct {
	refs []string
	// class maps a byte to its column in delta: bytes no pattern contains
	// share column 0.
	class [256]uint8
	ncls  int
	// delta[s+class] is the next state, s being a state's id times ncls,
	// with matchFlag set when that state ends an occurrence: the DFA (goto
	// plus failure links resolved).
	delta  []uint32
	starts [256]bool
	// shift[b1<<8|b2] is how far scan may skip at the root when a window
	// of win bytes ends with the pair b1 b2 (Wu–Manber): win-1 minus the
	// last index at which the pair ends within some pattern's first win
	// bytes, or win-1 if it ends at none.
	shift *[1 << 16]uint8
	win   int // min(shortest pattern, 256)
	// match[state] is the length of the longest pattern that is a suffix
	// of the state's string (0: none), ref[state] its index in refs.
	match []uint16
	ref   []uint16
	// hold[state] is how many trailing bytes a stream in state must hold
	// back: the state's depth, capped at the longest pattern minus one.
	hold   []uint16
	maxLen int
}

// matchFlag marks a transition into a state that ends an occurrence.
const matchFlag = 1 << 31

// ErrTooLarge is returned by Compile for a pattern set beyond MaxStates.
var ErrTooLarge = errors.New("scrub: pattern set too large")

// Compile builds the matcher of the patterns derived from secrets
// (Patterns). It returns nil, nil when there is nothing to match.
func Compile(secrets []Secret) (*Matcher, error) {
	return compilePatterns(Patterns(secrets))
}

func compilePatterns(ps []Pattern) (*Matcher, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	m := &Matcher{}
	total := 1
	refIdx := map[string]int{}
	for _, p := range ps {
		total += len(p.Bytes)
		m.maxLen = max(m.maxLen, len(p.Bytes))
		if _, ok := refIdx[p.Ref]; !ok {
			refIdx[p.Ref] = len(m.refs)
			m.refs = append(m.refs, p.Ref)
		}
	}
	if total > MaxStates || m.maxLen > 1<<15 {
		return nil, fmt.Errorf("%w: %d states (at most %d)", ErrTooLarge, total, MaxStates)
	}
	// Byte classes: one per byte used by a pattern, column 0 for the rest.
	var used [256]bool
	for _, p := range ps {
		for _, c := range p.Bytes {
			used[c] = true
		}
	}
	m.ncls = 1
	for c := range 256 {
		if used[c] {
			m.class[c] = uint8(m.ncls)
			m.ncls++
		}
	}
	if m.ncls > 256 {
		// 256 used bytes and column 0: fold "unused" into a used column is
		// impossible, so give up on compression (every byte its own class).
		m.ncls = 256
		for c := range 256 {
			m.class[c] = uint8(c)
		}
	}
	// Trie.
	type node struct {
		next  map[int]int
		depth int
		out   int // pattern length ending here, 0 none
		ref   int
	}
	nodes := []node{{next: map[int]int{}}}
	for _, p := range ps {
		s := 0
		for _, c := range p.Bytes {
			k := int(m.class[c])
			n, ok := nodes[s].next[k]
			if !ok {
				n = len(nodes)
				nodes = append(nodes, node{next: map[int]int{}, depth: nodes[s].depth + 1})
				nodes[s].next[k] = n
			}
			s = n
		}
		if nodes[s].out == 0 {
			nodes[s].out, nodes[s].ref = len(p.Bytes), refIdx[p.Ref]
		}
	}
	n := len(nodes)
	delta := make([]uint16, n*m.ncls)
	m.match = make([]uint16, n)
	m.ref = make([]uint16, n)
	m.hold = make([]uint16, n)
	fail := make([]int, n)
	// Breadth-first: failure links and the dense transition table.
	queue := make([]int, 0, n)
	for k := range m.ncls {
		if t, ok := nodes[0].next[k]; ok {
			delta[k] = uint16(t)
			queue = append(queue, t)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		f := fail[s]
		m.match[s], m.ref[s] = uint16(nodes[s].out), uint16(nodes[s].ref)
		if m.match[s] == 0 {
			m.match[s], m.ref[s] = m.match[f], m.ref[f]
		}
		m.hold[s] = uint16(min(nodes[s].depth, m.maxLen-1))
		for k := range m.ncls {
			if t, ok := nodes[s].next[k]; ok {
				fail[t] = int(delta[f*m.ncls+k])
				delta[s*m.ncls+k] = uint16(t)
				queue = append(queue, t)
			} else {
				delta[s*m.ncls+k] = delta[f*m.ncls+k]
			}
		}
	}
	for c := range 256 {
		m.starts[c] = delta[int(m.class[c])] != 0
	}
	m.delta = make([]uint32, len(delta))
	for i, t := range delta {
		m.delta[i] = uint32(t) * uint32(m.ncls)
		if m.match[t] != 0 {
			m.delta[i] |= matchFlag
		}
	}
	m.win = min(m.maxLen, 256)
	for _, p := range ps {
		m.win = min(m.win, len(p.Bytes))
	}
	if m.win >= 3 {
		m.shift = new([1 << 16]uint8)
		for i := range m.shift {
			m.shift[i] = uint8(m.win - 1)
		}
		for _, p := range ps {
			for j := 1; j < m.win; j++ { // the pair ends at index j
				k := uint16(p.Bytes[j-1])<<8 | uint16(p.Bytes[j])
				m.shift[k] = min(m.shift[k], uint8(m.win-1-j))
			}
		}
	}
	return m, nil
}

// MaxLen is the length of the longest pattern.
func (m *Matcher) MaxLen() int { return m.maxLen }

// Refs returns the secret_refs of the patterns, in first-seen order.
func (m *Matcher) Refs() []string { return append([]string(nil), m.refs...) }

// scan runs the automaton from state over b[from:], masks every occurrence
// in b if mask is set (an occurrence may begin before from, in bytes the
// caller kept from earlier scans) and calls sink.hit for each (if sink is
// not nil), with the index
// of its last byte in b, its length and the index of its secret_ref. It
// returns the state after b.
//
// At the root it skips ahead Wu–Manber style: for the window of win bytes
// starting at i, no occurrence can start before i+shift[last two bytes]
// (an occurrence starting there would hold that pair closer to its start
// than any pattern does), and the scan resumes at the root there; a zero
// shift enters the automaton (TestSkipIsExact compares with trying every
// pattern at every position; FuzzStream with the one-shot mask).
func (m *Matcher) scan(state uint32, b []byte, from int, mask bool, sink hitSink) uint32 {
	s := state
	delta, class := m.delta, &m.class
	shift, last := m.shift, m.win-1
	for i := from; i < len(b); i++ {
		if s == 0 {
			if shift != nil {
				for i+last < len(b) {
					d := int(shift[uint16(b[i+last-1])<<8|uint16(b[i+last])])
					if d == 0 {
						break
					}
					i += d
				}
			}
			for i < len(b) && !m.starts[b[i]] {
				i++
			}
			if i == len(b) {
				break
			}
		}
		s = delta[s+uint32(class[b[i]])]
		if s&matchFlag != 0 {
			s &^= matchFlag
			id := s / uint32(m.ncls)
			l := int(m.match[id])
			if mask {
				for j := max(i+1-l, 0); j <= i; j++ {
					b[j] = '*'
				}
			}
			if sink != nil {
				sink.hit(i, l, int(m.ref[id]))
			}
		}
	}
	return s
}

// hitSink receives scan's occurrences: an interface rather than a func so
// that a Reader passes itself without allocating a closure per body.
type hitSink interface{ hit(end, length, ref int) }

// funcSink reports each occurrence's secret_ref to a func.
type funcSink struct {
	m  *Matcher
	fn func(ref string)
}

func (f funcSink) hit(_, _, ref int) { f.fn(f.m.refs[ref]) }

// holdFor is how many trailing bytes a stream in state s holds back.
func (m *Matcher) holdFor(s uint32) int { return int(m.hold[s/uint32(m.ncls)]) }

// Contains reports whether s holds an occurrence, without allocating.
func (m *Matcher) Contains(s string) bool {
	if m == nil {
		return false
	}
	var st uint32
	for i := 0; i < len(s); i++ {
		st = m.delta[st+uint32(m.class[s[i]])]
		if st&matchFlag != 0 {
			return true
		}
	}
	return false
}

// Mask returns s with every occurrence masked, and calls found (if not
// nil) with the secret_ref of each. It returns s itself when nothing
// matched, without allocating.
func (m *Matcher) Mask(s string, found func(ref string)) string {
	if m == nil || len(s) == 0 {
		return s
	}
	// Cheap check first: most header values contain no occurrence.
	if !m.Contains(s) {
		return s
	}
	b := []byte(s)
	var sink hitSink
	if found != nil {
		sink = funcSink{m, found}
	}
	m.scan(0, b, 0, true, sink)
	return string(b)
}
