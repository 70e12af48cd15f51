package scrub

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"
)

// Secrets of real-world shapes, with the header value each is sent in.
var testSecrets = []Secret{
	{Ref: "openai", Value: []byte("sk-proj-Abc123_def456-GHI789jkl012MNO345pqr678"), Header: "Bearer sk-proj-Abc123_def456-GHI789jkl012MNO345pqr678"},
	{Ref: "gh", Value: []byte("ghp_16C7e42F292c6912E7710c838347Ae178B4a"), Header: "token ghp_16C7e42F292c6912E7710c838347Ae178B4a"},
	{Ref: "odd", Value: []byte(`p/a+s s&w<o>r"d\=`), Header: `p/a+s s&w<o>r"d\=`},
	{Ref: "basic", Value: []byte("dXNlcjpodW50ZXIyLXNlY3JldA=="), Header: "Basic dXNlcjpodW50ZXIyLXNlY3JldA=="}, // user:hunter2-secret
}

func mustCompile(t testing.TB, s []Secret) *Matcher {
	t.Helper()
	m, err := Compile(s)
	if err != nil || m == nil {
		t.Fatalf("Compile: %v, %v", m, err)
	}
	return m
}

// leaks reports whether out still holds value in one of the forms an echo
// service writes, checked independently of Patterns: raw, and every
// base64 decoding of every unmasked run at every character offset.
func leaks(out, value []byte) bool {
	if bytes.Contains(out, value) {
		return true
	}
	for _, run := range bytes.Split(out, []byte("*")) {
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			s := strings.TrimRight(string(run), "=")
			for off := range 4 {
				if off > len(s) {
					break
				}
				chunk := s[off:]
				chunk = chunk[:len(chunk)/4*4+min(len(chunk)%4, 3)]
				if len(chunk)%4 == 1 {
					chunk = chunk[:len(chunk)-1]
				}
				if dec, err := enc.DecodeString(chunk); err == nil && bytes.Contains(dec, value) {
					return true
				}
			}
		}
	}
	return false
}

// TestEveryEncodingAndAlignment: each secret and its whole header value,
// reflected in each encoding an echo service uses — raw, URL-encoded
// (query, path, encodeURIComponent, lower-case hex), JSON (Go, HTML-safe,
// PHP's escaped slashes), base64 standard and URL-safe, padded and not, at
// every offset 0..5 inside a larger encoded text — is masked at the same
// length, and no decoding of what is left shows the secret.
func TestEveryEncodingAndAlignment(t *testing.T) {
	m := mustCompile(t, testSecrets)
	for _, s := range testSecrets {
		for _, v := range []string{string(s.Value), s.Header} {
			cases := map[string]string{
				"raw":          "x" + v + "y",
				"query":        "?q=" + url.QueryEscape(v) + "&z",
				"path":         "/p/" + url.PathEscape(v) + "/z",
				"uri-upper":    "a=" + escapeAll(v, "0123456789ABCDEF"),
				"uri-lower":    "a=" + escapeAll(v, "0123456789abcdef") + ";",
				"json-go":      jsonOf(v, true),
				"json-nohtml":  jsonOf(v, false),
				"json-slashes": strings.ReplaceAll(jsonOf(v, false), "/", `\/`),
			}
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
				for pre := range 6 {
					for post := range 3 {
						text := strings.Repeat("P", pre) + v + strings.Repeat("Q", post)
						cases[fmt.Sprintf("b64-%p-pre%d-post%d", enc, pre, post)] = "{" + enc.EncodeToString([]byte(text)) + "}"
					}
				}
				cases[fmt.Sprintf("b64-%p-whole", enc)] = enc.EncodeToString([]byte(v))
			}
			for name, text := range cases {
				var refs []string
				out := m.Mask(text, func(ref string) { refs = append(refs, ref) })
				if len(out) != len(text) {
					t.Fatalf("%s/%s: length %d, want %d", s.Ref, name, len(out), len(text))
				}
				if out == text || len(refs) == 0 {
					t.Errorf("%s/%s: nothing masked in %q", s.Ref, name, text)
				}
				if leaks([]byte(out), s.Value) {
					t.Errorf("%s/%s: %q still shows the secret", s.Ref, name, out)
				}
				if strings.Contains(out, v) || strings.Contains(out, url.QueryEscape(v)) || strings.Contains(out, jsonOf(v, true)) {
					t.Errorf("%s/%s: %q still shows the value", s.Ref, name, out)
				}
				for i := range out {
					if out[i] != text[i] && out[i] != '*' {
						t.Fatalf("%s/%s: byte %d changed to %q, not masked", s.Ref, name, i, out[i])
					}
				}
			}
		}
	}
}

// TestBasicDecodedAndPassword: a Basic header's user:pass and password are
// masked when an echo service decodes them.
func TestBasicDecodedAndPassword(t *testing.T) {
	m := mustCompile(t, testSecrets[3:])
	for _, text := range []string{`{"user":"user","password":"hunter2-secret"}`, `authenticated as user:hunter2-secret`} {
		out := m.Mask(text, nil)
		if strings.Contains(out, "hunter2-secret") {
			t.Errorf("Mask(%q) = %q", text, out)
		}
	}
}

func jsonOf(v string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	_ = enc.Encode(map[string]string{"Authorization": v})
	return b.String()
}

// TestMaskLeavesOtherTextAlone: no allocation and the same string when
// nothing matches; masking touches only the occurrence.
func TestMaskLeavesOtherTextAlone(t *testing.T) {
	m := mustCompile(t, testSecrets)
	in := "text/html; charset=utf-8"
	if out := m.Mask(in, nil); out != in {
		t.Fatalf("Mask(%q) = %q", in, out)
	}
	if n := testing.AllocsPerRun(100, func() { m.Mask(in, nil) }); n != 0 {
		t.Errorf("Mask without occurrence allocates %v times", n)
	}
	got := m.Mask("a sk-proj-Abc123_def456-GHI789jkl012MNO345pqr678 b", nil)
	if want := "a " + strings.Repeat("*", 46) + " b"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	var nilM *Matcher
	if nilM.Mask(in, nil) != in {
		t.Error("nil matcher changed the text")
	}
}

// chunks is a reader returning its parts one per Read.
type chunks struct{ parts [][]byte }

func (c *chunks) Read(p []byte) (int, error) {
	for len(c.parts) > 0 && len(c.parts[0]) == 0 {
		c.parts = c.parts[1:]
	}
	if len(c.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.parts[0])
	c.parts[0] = c.parts[0][n:]
	return n, nil
}

// TestStreamEverySplit: an occurrence split across two reads at every
// position — and the stream read one byte at a time, and through a
// caller's one-byte buffer — comes out exactly as the whole text masked
// at once.
func TestStreamEverySplit(t *testing.T) {
	m := mustCompile(t, testSecrets)
	v := testSecrets[0].Header
	b64 := base64.StdEncoding.EncodeToString([]byte(`{"h":"` + v + `"}`))
	for _, text := range []string{"data: " + v + "\n\n", "x" + b64 + "y", v + v, "sk-proj-" + v} {
		want := m.Mask(text, nil)
		if want == text {
			t.Fatalf("%q not masked at all", text)
		}
		for i := 0; i <= len(text); i++ {
			r := m.NewReader(&chunks{parts: [][]byte{[]byte(text[:i]), []byte(text[i:])}}, nil)
			got, err := io.ReadAll(r)
			if err != nil || string(got) != want {
				t.Fatalf("split at %d: got %q, %v; want %q", i, got, err, want)
			}
		}
		got, _ := io.ReadAll(m.NewReader(iotest.OneByteReader(strings.NewReader(text)), nil))
		if string(got) != want {
			t.Errorf("byte by byte: got %q, want %q", got, want)
		}
		var out bytes.Buffer
		r := m.NewReader(iotest.HalfReader(strings.NewReader(text)), nil)
		one := make([]byte, 1)
		for {
			n, err := r.Read(one)
			out.Write(one[:n])
			if err != nil {
				break
			}
		}
		if out.String() != want {
			t.Errorf("one-byte buffer: got %q, want %q", out.String(), want)
		}
	}
}

type testHooks struct {
	refs   []string
	done   int
	stalls int
}

func (h *testHooks) Found(ref string) { h.refs = append(h.refs, ref) }
func (h *testHooks) Done()            { h.done++ }
func (h *testHooks) Stalled()         { h.stalls++ }

// TestStreamFoundAndEOF: Found names the secret_ref once per occurrence;
// Done runs at the end of the stream and again at Close.
func TestStreamFoundAndEOF(t *testing.T) {
	m := mustCompile(t, testSecrets)
	h := &testHooks{}
	text := "a " + string(testSecrets[1].Value) + " b " + testSecrets[0].Header
	r := m.NewReader(io.NopCloser(strings.NewReader(text)), h)
	_, err := io.ReadAll(r)
	if err != nil || h.done != 1 {
		t.Fatalf("err %v, Done ran %d times at EOF", err, h.done)
	}
	if strings.Join(h.refs, ",") != "gh,openai" {
		t.Errorf("found %v, want [gh openai]", h.refs)
	}
	if err := r.Close(); err != nil || h.done != 2 {
		t.Errorf("Close: %v, Done ran %d times in all, want 2", err, h.done)
	}
}

// TestCompileBounds: nothing to match gives nil; a secret whose fragments
// do not fit in MaxStates is matched whole (WholeOnly names it), while a
// smaller one keeps its fragments; a set beyond MaxStates even whole is
// refused (the proxy then fails closed).
func TestCompileBounds(t *testing.T) {
	if m, err := Compile(nil); m != nil || err != nil {
		t.Errorf("Compile(nil) = %v, %v", m, err)
	}
	if m, err := Compile([]Secret{{Ref: "e"}}); m != nil || err != nil {
		t.Errorf("empty value: %v, %v", m, err)
	}
	big := randomAlnum(1500, 7)
	m, err := Compile([]Secret{{Ref: "big", Value: big}, testSecrets[1]})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.WholeOnly(); len(got) != 1 || got[0] != "big" {
		t.Fatalf("WholeOnly = %v, want [big]", got)
	}
	if out := m.Mask("x"+string(big)+"y", nil); out != "x"+strings.Repeat("*", len(big))+"y" {
		t.Error("the whole big secret is not masked")
	}
	if out := m.Mask("q "+string(testSecrets[1].Value[3:20]), nil); strings.Contains(out, string(testSecrets[1].Value[3:20])) {
		t.Errorf("the small secret lost its fragments: %q", out)
	}
	if _, err := Compile([]Secret{{Ref: "huge", Value: randomAlnum(40000, 8)}}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("huge secret: %v, want ErrTooLarge", err)
	}
}

// randomAlnum returns n pseudo-random letters and digits from seed.
func randomAlnum(n int, seed uint64) []byte {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		seed = seed*6364136223846793005 + 1442695040888963407
		b[i] = alnum[(seed>>33)%uint64(len(alnum))]
	}
	return b
}

// FuzzStream: for any secret and any text, split anywhere, the stream
// output has the input's length, differs only by '*', equals the one-shot
// mask, and contains none of the patterns.
func FuzzStream(f *testing.F) {
	f.Add([]byte("sk-test-123456"), []byte("echo: sk-test-123456 and c2stdGVzdC0xMjM0NTY="), 3, 7)
	f.Add([]byte("abcab"), []byte("abcabcabcab"), 1, 2)
	f.Fuzz(func(t *testing.T, secret, text []byte, a, b int) {
		if len(secret) == 0 || len(secret) > 64 || bytes.IndexByte(secret, '*') >= 0 {
			return
		}
		m, err := Compile([]Secret{{Ref: "r", Value: secret, Header: "Bearer " + string(secret)}})
		if err != nil {
			t.Fatal(err)
		}
		want := m.Mask(string(text), nil)
		a, b = abs(a)%(len(text)+1), abs(b)%(len(text)+1)
		if a > b {
			a, b = b, a
		}
		got, err := io.ReadAll(m.NewReader(&chunks{parts: [][]byte{text[:a], text[a:b], text[b:]}}, nil))
		if err != nil || string(got) != want || len(got) != len(text) {
			t.Fatalf("stream %q, one-shot %q (input %d bytes)", got, want, len(text))
		}
		for i := range got {
			if got[i] != text[i] && got[i] != '*' {
				t.Fatalf("byte %d changed to %q", i, got[i])
			}
		}
		ps := Patterns([]Secret{{Ref: "r", Value: secret, Header: "Bearer " + string(secret)}})
		if naive := naiveMask(ps, text); !bytes.Equal(naive, got) {
			t.Fatalf("stream %q, naive %q", got, naive)
		}
		for _, p := range ps {
			if bytes.IndexByte(p.Bytes, '*') < 0 && bytes.Contains(got, p.Bytes) {
				t.Fatalf("pattern %q survives in %q", p.Bytes, got)
			}
		}
	})
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// naiveMask is the reference: every pattern tried at every position of the
// text without its CR and LF, each occurrence masked there (CR and LF
// kept).
func naiveMask(ps []Pattern, text []byte) []byte {
	out := bytes.Clone(text)
	var pos []int // index in text of each byte other than CR and LF
	var bare []byte
	for i, c := range text {
		if c != '\r' && c != '\n' {
			pos = append(pos, i)
			bare = append(bare, c)
		}
	}
	byLen := map[int]map[string]bool{}
	for _, p := range ps {
		if byLen[len(p.Bytes)] == nil {
			byLen[len(p.Bytes)] = map[string]bool{}
		}
		byLen[len(p.Bytes)][string(p.Bytes)] = true
	}
	for i := range bare {
		for l, set := range byLen {
			if i+l <= len(bare) && set[string(bare[i:i+l])] {
				for j := i; j < i+l; j++ {
					out[pos[j]] = '*'
				}
			}
		}
	}
	return out
}

// TestScanIsExact: the automaton masks exactly what trying every pattern
// at every position masks, on texts dense in the patterns' own bytes and
// broken by CR and LF.
func TestScanIsExact(t *testing.T) {
	ps := Patterns(testSecrets)
	m, err := compilePatterns(ps)
	if err != nil {
		t.Fatal(err)
	}
	var alphabet []byte
	for _, p := range ps {
		alphabet = append(alphabet, p.Bytes...)
	}
	alphabet = append(alphabet, '\r', '\n')
	seed := uint64(1)
	next := func() int { seed = seed*6364136223846793005 + 1442695040888963407; return int(seed >> 33) }
	for range 300 {
		var text []byte
		for len(text) < 400 {
			if next()%4 == 0 {
				p := ps[next()%len(ps)].Bytes
				a := next() % len(p)
				text = append(text, p[a:a+next()%(len(p)-a)+1]...)
			} else {
				text = append(text, alphabet[next()%len(alphabet)])
			}
		}
		want := naiveMask(ps, text)
		got := bytes.Clone(text)
		m.scan(0, got, 0, true, nil)
		if !bytes.Equal(got, want) {
			t.Fatalf("scan %q\nwant %q", got, want)
		}
	}
}

// TestCache: a hit does not compile again; the limit starts the map over.
func TestCache(t *testing.T) {
	c := NewCache[int](2)
	calls := 0
	get := func(k int) *Matcher {
		m, err := c.Get(k, func(int) []Secret { calls++; return testSecrets[:1] })
		if err != nil || m == nil {
			t.Fatal(err)
		}
		return m
	}
	a := get(1)
	if get(1) != a || calls != 1 {
		t.Fatalf("hit compiled again (%d calls)", calls)
	}
	get(2)
	get(3) // full: starts over with 3 only
	if get(3); calls != 3 {
		t.Fatalf("%d compilations, want 3", calls)
	}
	get(1)
	if calls != 4 {
		t.Fatalf("evicted key not compiled again (%d calls)", calls)
	}
}

// TestScanIsExactSparse: on long texts with few occurrences (where scan
// skips by the blocks bitset and the shift table), the automaton masks
// exactly what trying every pattern at every position masks: fillers of
// random bytes (CR and LF among them), of the alphabet, of JSON-like text
// and of the patterns' own bytes, with pieces of patterns planted whole,
// cut short, and broken by CR or LF.
func TestScanIsExactSparse(t *testing.T) {
	ps := Patterns(testSecrets)
	m, err := compilePatterns(ps)
	if err != nil {
		t.Fatal(err)
	}
	var patternBytes []byte
	for _, p := range ps {
		patternBytes = append(patternBytes, p.Bytes...)
	}
	seed := uint64(7)
	next := func() int { seed = seed*6364136223846793005 + 1442695040888963407; return int(seed >> 33) }
	const json = `{"id":"chatcmpl-1","choices":[{"delta":{"content":"Hello, world."}}]}` + "\n\n"
	fillers := map[string]func(i int) byte{
		"random":   func(int) byte { return byte(next()) },
		"alphabet": func(i int) byte { return 'a' + byte(i%26) },
		"json":     func(i int) byte { return json[i%len(json)] },
		"patterns": func(int) byte { return patternBytes[next()%len(patternBytes)] },
	}
	for name, fill := range fillers {
		t.Run(name, func(t *testing.T) {
			for range 20 {
				text := make([]byte, 16<<10)
				for i := range text {
					text[i] = fill(i)
				}
				for range 8 {
					p := ps[next()%len(ps)].Bytes
					piece := bytes.Clone(p[:len(p)-next()%3])
					if next()%2 == 0 {
						k := next() % len(piece)
						piece = append(piece[:k], append([]byte{"\r\n"[next()%2]}, piece[k:]...)...)
					}
					at := next() % (len(text) - len(piece))
					copy(text[at:], piece)
				}
				want := naiveMask(ps, text)
				got := bytes.Clone(text)
				m.scan(0, got, 0, true, nil)
				if !bytes.Equal(got, want) {
					for i := range got {
						if got[i] != want[i] {
							t.Fatalf("first difference at %d: got %q want %q", i, got[max(i-20, 0):min(i+20, len(got))], want[max(i-20, 0):min(i+20, len(want))])
						}
					}
				}
			}
		})
	}
}

// FuzzScanExact: scan masks exactly what the naive reference masks, on the
// input placed between runs of filler long enough for the skips.
func FuzzScanExact(f *testing.F) {
	ps := Patterns(testSecrets[:2])
	m, err := compilePatterns(ps)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(testSecrets[0].Value), uint16(100), byte('z'))
	f.Add([]byte("GHI789jk\r\nl012MNO"), uint16(37), byte('\n'))
	f.Add([]byte("abcdefghijklmnopqrstuvwxyz"), uint16(500), byte('a'))
	f.Fuzz(func(t *testing.T, data []byte, pad uint16, filler byte) {
		run := bytes.Repeat([]byte{filler}, int(pad%2048))
		text := append(append(append(bytes.Clone(run), data...), run...), data...)
		want := naiveMask(ps, text)
		got := bytes.Clone(text)
		m.scan(0, got, 0, true, nil)
		if !bytes.Equal(got, want) {
			t.Fatalf("scan %q\nwant %q", got, want)
		}
	})
}
