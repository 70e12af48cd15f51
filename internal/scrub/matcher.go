package scrub

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
)

// MaxStates bounds the automaton (its trie's nodes): Compile refuses a
// larger set rather than build a table of unbounded size. Fragments of a
// secret take about FragmentLen states per byte of its forms (a few
// thousand for an API key), so dozens of keys fit; a secret whose
// fragments no longer fit is matched whole (Matcher.WholeOnly).
const MaxStates = 1 << 16

// Matcher is an immutable Aho–Corasick automaton over a pattern set, safe
// for concurrent use. Build it with Compile. It skips CR and LF in the
// text: an occurrence broken across lines (base64 wrapped at 64 or 76
// columns, CRLF or LF) matches, and only its other bytes are masked.
type Matcher struct {
	refs []string
	// class maps a byte to its column in delta: bytes no pattern contains
	// share column 0; CR and LF have a column of their own whose
	// transitions loop on every state.
	class [256]uint8
	ncls  int
	// delta[s&stateMask+class] is the next state (see matchFlag), s being
	// a state's id times ncls: the DFA (goto plus failure links resolved).
	delta  []uint32
	starts [256]bool
	// match[state] is the length of the longest pattern that is a suffix
	// of the state's string (0: none), ref[state] its index in refs;
	// depth[state] the length of the state's string.
	match  []uint16
	ref    []uint16
	depth  []uint16
	maxLen int
	// shift[blockHash(b1, b2, b3)] is how far scan may skip when a window
	// of win bytes without CR or LF ends with the block b1 b2 b3
	// (Wu–Manber): win-1 minus the last index at which a block of that
	// hash ends within some pattern's first win bytes, or win-2 if none.
	shift *[1 << 16]uint8
	// blocks holds, for every block of four bytes ending at index 3 to
	// win-1 of some pattern (CR and LF stripped), the bit of its
	// blockBit: a window of win bytes without CR or LF whose last four
	// bytes' bit is clear starts no occurrence in its first win-3 bytes
	// (skipClear). Four bytes rather than shift's three: fewer windows of
	// text hit a pattern's block, for one byte less of stride. Nil with
	// shift.
	blocks *[1 << 16 / 64]uint64
	win    int // min(shortest pattern, 256)
	// wholeOnly lists the refs whose fragments did not fit in MaxStates.
	wholeOnly []string
}

// A transition (delta's entry, and scan's state) is the target state's id
// times ncls in its low bits (at most MaxStates*256 = 1<<24), the target's
// depth (capped at depthMax) above them, and matchFlag when the target
// ends an occurrence.
const (
	matchFlag  = 1 << 31
	depthShift = 24
	depthMax   = 127
	stateMask  = 1<<depthShift - 1
)

// ErrTooLarge is returned by Compile for a pattern set beyond MaxStates.
var ErrTooLarge = errors.New("scrub: pattern set too large")

// Compile builds the matcher of the patterns derived from secrets
// (Patterns). It returns nil, nil when there is nothing to match.
//
// Secrets are added shortest first, each with its fragments
// (FragmentLen-grams of every form); one whose fragments would take the
// automaton beyond MaxStates is added with its whole forms only, and named
// by WholeOnly. ErrTooLarge: even the whole forms do not fit.
func Compile(secrets []Secret) (*Matcher, error) {
	order := slices.Clone(secrets)
	slices.SortStableFunc(order, func(a, b Secret) int { return len(a.Value) - len(b.Value) })
	var groups []patternGroup
	for _, s := range order {
		frag := Patterns([]Secret{s})
		if len(frag) == 0 {
			continue
		}
		groups = append(groups, patternGroup{ref: s.Ref, first: frag, fallback: wholePatterns(s)})
	}
	return compileGroups(groups)
}

// wholePatterns is s's forms, each whole (no fragments).
func wholePatterns(s Secret) []Pattern {
	var out []Pattern
	for _, v := range derivedValues(s) {
		for _, e := range encodings(v) {
			if e = stripLineBreaks(e); len(e) > 0 {
				out = append(out, Pattern{Ref: s.Ref, Bytes: e})
			}
		}
	}
	return out
}

// patternGroup is one secret's patterns: first if they fit, else fallback
// (nil: none).
type patternGroup struct {
	ref             string
	first, fallback []Pattern
}

func compilePatterns(ps []Pattern) (*Matcher, error) {
	return compileGroups([]patternGroup{{first: ps}})
}

// trieNode is a node of the pattern trie Compile builds the DFA from.
type trieNode struct {
	next  map[int]int
	depth int
	out   int // pattern length ending here, 0 none
	ref   int
}

// trie is the pattern trie, with what lets it undo the last group.
type trie struct {
	nodes []trieNode
	// added: edges (parent, class) created since mark; outs: nodes whose
	// out was set since mark.
	added [][2]int
	outs  []int
	mark  int
}

func (t *trie) begin() { t.mark, t.added, t.outs = len(t.nodes), t.added[:0], t.outs[:0] }

// undo removes everything added since begin.
func (t *trie) undo() {
	for _, e := range t.added {
		delete(t.nodes[e[0]].next, e[1])
	}
	for _, n := range t.outs {
		if n < t.mark {
			t.nodes[n].out, t.nodes[n].ref = 0, 0
		}
	}
	t.nodes = t.nodes[:t.mark]
}

func (t *trie) insert(m *Matcher, p []byte, ref int) {
	s, l := 0, 0
	for _, c := range p {
		if isLineBreak(c) {
			continue // the matcher skips them in the text
		}
		l++
		k := int(m.class[c])
		n, ok := t.nodes[s].next[k]
		if !ok {
			n = len(t.nodes)
			t.nodes = append(t.nodes, trieNode{next: map[int]int{}, depth: t.nodes[s].depth + 1})
			t.nodes[s].next[k] = n
			t.added = append(t.added, [2]int{s, k})
		}
		s = n
	}
	if s != 0 && t.nodes[s].out == 0 {
		t.nodes[s].out, t.nodes[s].ref = l, ref
		t.outs = append(t.outs, s)
	}
}

func compileGroups(groups []patternGroup) (*Matcher, error) {
	m := &Matcher{}
	refIdx := map[string]int{}
	var used [256]bool
	for _, g := range groups {
		for _, ps := range [][]Pattern{g.first, g.fallback} {
			for _, p := range ps {
				if _, ok := refIdx[p.Ref]; !ok {
					refIdx[p.Ref] = len(m.refs)
					m.refs = append(m.refs, p.Ref)
				}
				for _, c := range p.Bytes {
					used[c] = true
				}
			}
		}
	}
	if len(m.refs) == 0 {
		return nil, nil
	}
	if len(m.refs) > 1<<16 {
		return nil, fmt.Errorf("%w: %d secrets", ErrTooLarge, len(m.refs))
	}
	// Byte classes: one per byte used by a pattern, one for CR and LF, and
	// column 0 for the rest.
	used['\r'], used['\n'] = false, false
	m.ncls = 2
	m.class['\r'], m.class['\n'] = 1, 1
	for c := range 256 {
		if used[c] {
			if m.ncls == 256 {
				return nil, fmt.Errorf("%w: patterns use every byte value", ErrTooLarge)
			}
			m.class[c] = uint8(m.ncls)
			m.ncls++
		}
	}
	t := &trie{nodes: []trieNode{{next: map[int]int{}}}}
	var placedPs []Pattern // the patterns placed
	for _, g := range groups {
		placed := false
		for i, ps := range [][]Pattern{g.first, g.fallback} {
			if placed || len(ps) == 0 || !allShort(ps) {
				continue
			}
			t.begin()
			for _, p := range ps {
				t.insert(m, p.Bytes, refIdx[p.Ref])
				if len(t.nodes) > MaxStates {
					break
				}
			}
			if len(t.nodes) > MaxStates {
				t.undo()
				continue
			}
			placed = true
			placedPs = append(placedPs, ps...)
			if i == 1 {
				m.wholeOnly = append(m.wholeOnly, g.ref)
			}
			for _, p := range ps {
				m.maxLen = max(m.maxLen, len(p.Bytes))
			}
		}
		if !placed {
			return nil, fmt.Errorf("%w: more than %d states", ErrTooLarge, MaxStates)
		}
	}
	nodes := t.nodes
	n := len(nodes)
	delta := make([]uint16, n*m.ncls)
	m.match = make([]uint16, n)
	m.ref = make([]uint16, n)
	m.depth = make([]uint16, n)
	fail := make([]int, n)
	// Breadth-first: failure links and the dense transition table. CR and
	// LF (column 1) loop on every state.
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
		m.depth[s] = uint16(nodes[s].depth)
		// A missing transition is the failure state's; children override.
		row := delta[s*m.ncls : (s+1)*m.ncls]
		copy(row, delta[f*m.ncls:(f+1)*m.ncls])
		for k, t := range nodes[s].next {
			fail[t] = int(row[k])
			row[k] = uint16(t)
			queue = append(queue, t)
		}
		row[1] = uint16(s)
	}
	for c := range 256 {
		m.starts[c] = delta[int(m.class[c])] != 0
	}
	m.delta = make([]uint32, len(delta))
	for i, t := range delta {
		m.delta[i] = uint32(t)*uint32(m.ncls) | uint32(min(m.depth[t], depthMax))<<depthShift
		if m.match[t] != 0 {
			// Also on the CR/LF loop of a match state: the run goes on
			// (masking again the bytes already masked).
			m.delta[i] |= matchFlag
		}
	}
	m.win = min(m.maxLen, 256)
	for _, p := range placedPs {
		m.win = min(m.win, len(stripLineBreaks(p.Bytes)))
	}
	if m.win >= 4 {
		m.shift = new([1 << 16]uint8)
		m.blocks = new([1 << 16 / 64]uint64)
		for i := range m.shift {
			m.shift[i] = uint8(m.win - 2)
		}
		for _, p := range placedPs {
			b := stripLineBreaks(p.Bytes)
			for j := 2; j < m.win; j++ { // the triple ends at index j
				k := blockHash(b[j-2], b[j-1], b[j])
				m.shift[k] = min(m.shift[k], uint8(m.win-1-j))
			}
			for j := 3; j < m.win; j++ { // the block of four ends at index j
				h := blockBit(b[j-3], b[j-2], b[j-1], b[j])
				m.blocks[h/64] |= 1 << (h % 64)
			}
		}
	}
	return m, nil
}

// allShort reports whether every pattern fits the automaton's uint16
// lengths.
func allShort(ps []Pattern) bool {
	for _, p := range ps {
		if len(p.Bytes) > 1<<15 {
			return false
		}
	}
	return true
}

// MaxLen is the length of the longest pattern.
func (m *Matcher) MaxLen() int { return m.maxLen }

// Refs returns the secret_refs of the patterns, in first-seen order.
func (m *Matcher) Refs() []string { return append([]string(nil), m.refs...) }

// It skips ahead Wu–Manber style: for the window of win bytes starting at
// p, where the partial occurrence in progress (if any) starts, when the
// window holds no CR or LF, no occurrence can start before
// p+shift[last three bytes] (an occurrence starting there would hold that
// block closer to its start than any pattern does); past the current byte,
// the scan resumes at the root there (TestScanIsExact compares with trying
// every pattern at every position). At the root it first skips by
// skipRoot: windows at a fixed stride against blocks, then the shift of
// the window where that stops (TestScanIsExactSparse).
//
// scan runs the automaton from state over b[from:], masks every occurrence
// in b if mask is set (an occurrence may begin before from, in bytes the
// caller kept from earlier scans; bytes before b are not touched) and calls
// sink.hit for each (if sink is not nil), with the index of its last byte
// in b, its length in bytes other than CR and LF, and the index of its
// secret_ref, and whether it starts a run (the first of overlapping or
// adjacent fragments: one occurrence to report). It
// returns the state after b. CR and LF inside an occurrence are skipped and
// left as they are.
func (m *Matcher) scan(state uint32, b []byte, from int, mask bool, sink hitSink) uint32 {
	s := state
	delta, class := m.delta, &m.class
	// inRun: the last transition ended an occurrence. The windows of one
	// run of fragments follow each other, each from a match state (CR and
	// LF keep it): the run is one occurrence to report.
	inRun := m.match[(s&stateMask)/uint32(m.ncls)] != 0
	shift, last := m.shift, m.win-1
	lineBreak := -1 // index of the next CR or LF at or after p (len(b): none)
	for i := from; i < len(b); i++ {
		if shift != nil && s != 0 {
			// The partial occurrence in progress starts at p; if the
			// window of win bytes there has no line break and its last
			// pair says no occurrence starts before p+d, with d beyond
			// i, nothing in progress can complete: go on at p+d, at the
			// root.
			if k := int(s >> depthShift); k <= last {
				if p := i - k; p >= 0 && p+last < len(b) && last >= 2 {
					if lineBreak < p {
						lineBreak = nextLineBreak(b, p)
					}
					if p+last < lineBreak {
						if d := int(shift[blockHash(b[p+last-2], b[p+last-1], b[p+last])]); d > k {
							i, s, inRun = p+d-1, 0, false
							continue
						}
					}
				}
			}
		}
		if s == 0 {
			if shift != nil {
				i = m.skipRoot(b, i, &lineBreak)
			}
			for i < len(b) && !m.starts[b[i]] {
				i++
			}
			if i == len(b) {
				break
			}
		}
		s = delta[(s&stateMask)+uint32(class[b[i]])]
		if s&matchFlag == 0 {
			inRun = false
			continue
		}
		s &^= matchFlag
		id := (s & stateMask) / uint32(m.ncls)
		l := int(m.match[id])
		if mask {
			maskBack(b, i, l)
		}
		if sink != nil {
			sink.hit(i, l, int(m.ref[id]), !inRun)
		}
		inRun = true
	}
	return s
}

// skipRoot returns the first index at or after i where an occurrence may
// start, at the root: skipClear, then the shift of the window there, until
// neither moves. lineBreak is scan's.
func (m *Matcher) skipRoot(b []byte, i int, lineBreak *int) int {
	last := m.win - 1
	for {
		if *lineBreak < i {
			*lineBreak = nextLineBreak(b, i)
		}
		i = m.skipClear(b, i, *lineBreak)
		e := i + last
		if e >= *lineBreak || e >= len(b) {
			return i
		}
		d := int(m.shift[blockHash(b[e-2], b[e-1], b[e])])
		if d == 0 {
			return i
		}
		i += d
	}
}

// skipClear returns the first index at or after i where an occurrence
// may start, as far as the windows of win bytes from i that end before
// end (at most len(b); a CR or LF there) tell: it tries the window
// ending every win-3 bytes, and stops at the first whose last four bytes
// are a block in blocks. An occurrence starting at q in a window's first
// win-3 bytes would hold that window's last four bytes at index 3 to
// win-1 of its first win bytes (the window has no CR or LF), so their bit
// would be set (TestScanIsExactSparse, FuzzScanExact).
// The windows' positions do not depend on what they hold: the loads run
// ahead of the tests (no shift read between them).
func (m *Matcher) skipClear(b []byte, i, end int) int {
	last, stride := m.win-1, m.win-3
	end = min(end, len(b))
	e := i + last
	for ; e < end; e += stride {
		h := blockBit(b[e-3], b[e-2], b[e-1], b[e])
		if m.blocks[h/64]&(1<<(h%64)) != 0 {
			break
		}
	}
	return e - last
}

// blockBit is the blocks bit of a block of four bytes (a multiplicative
// hash; collisions only stop a skip).
func blockBit(a, b, c, d byte) uint16 {
	return uint16((uint32(a) | uint32(b)<<8 | uint32(c)<<16 | uint32(d)<<24) * 0x9E3779B1 >> 16)
}

// blockHash is the shift table's index of a block of three bytes
// (collisions only shorten a skip).
func blockHash(a, b, c byte) uint16 { return uint16(a)<<9 ^ uint16(b)<<4 ^ uint16(c) }

// nextLineBreak returns the index of the first CR or LF in b at or after
// from, or len(b).
func nextLineBreak(b []byte, from int) int {
	n := len(b)
	if i := bytes.IndexByte(b[from:], '\n'); i >= 0 {
		n = from + i
	}
	if i := bytes.IndexByte(b[from:n], '\r'); i >= 0 {
		n = from + i
	}
	return n
}

// maskBack masks the l bytes other than CR and LF that end at b[end],
// going back no further than b[0].
func maskBack(b []byte, end, l int) {
	for j := end; j >= 0 && l > 0; j-- {
		if !isLineBreak(b[j]) {
			b[j] = '*'
			l--
		}
	}
}

// hitSink receives scan's occurrences: an interface rather than a func so
// that a Reader passes itself without allocating a closure per body.
type hitSink interface {
	hit(end, length, ref int, first bool)
}

// funcSink reports each occurrence's secret_ref to a func.
type funcSink struct {
	m  *Matcher
	fn func(ref string)
}

func (f funcSink) hit(_, _, ref int, first bool) {
	if first {
		f.fn(f.m.refs[ref])
	}
}

// Hold is how many trailing bytes a stream holds back at the end of each
// chunk, whatever they are: the longest pattern minus one, plus two for a
// line break (CRLF) inside an occurrence. A constant, so that what is
// held, and when it is released, tells nothing about the secrets.
func (m *Matcher) Hold() int { return m.maxLen - 1 + 2 }

// depthOf is the length of the partial occurrence a stream in state s is
// inside (0: none).
func (m *Matcher) depthOf(s uint32) int { return int(m.depth[(s&stateMask)/uint32(m.ncls)]) }

// stalledIn reports whether a stream in state s, whose held tail a timer
// released, paused inside a partial occurrence of StallDepth bytes or more
// (or of all but the last byte of the longest pattern, if shorter).
func (m *Matcher) stalledIn(s uint32) bool {
	return s != 0 && m.depthOf(s) >= min(StallDepth, m.maxLen-1)
}

// WholeOnly returns the secret_refs whose fragments did not fit in
// MaxStates: they are matched whole, in every form.
func (m *Matcher) WholeOnly() []string { return slices.Clone(m.wholeOnly) }

// Contains reports whether s holds an occurrence, without allocating.
func (m *Matcher) Contains(s string) bool {
	if m == nil {
		return false
	}
	var st uint32
	for i := 0; i < len(s); i++ {
		st = m.delta[(st&stateMask)+uint32(m.class[s[i]])]
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
