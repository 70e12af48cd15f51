package scrub

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"io"
	"strings"
	"testing"
	"time"
)

// pipeReader is a Reader over a pipe the test writes chunks into, and a
// goroutine collecting what the Reader releases.
type pipeReader struct {
	pw  *io.PipeWriter
	got chan []byte
}

func startPipe(t *testing.T, newReader func(io.Reader) io.Reader) *pipeReader {
	t.Helper()
	pr, pw := io.Pipe()
	r := newReader(pr)
	p := &pipeReader{pw: pw, got: make(chan []byte, 64)}
	go func() {
		defer close(p.got)
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				p.got <- bytes.Clone(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { _ = pw.Close() })
	return p
}

// send writes one chunk; the pipe returns when the Reader took it.
func (p *pipeReader) send(t *testing.T, b []byte) {
	t.Helper()
	if _, err := p.pw.Write(b); err != nil {
		t.Fatal(err)
	}
}

// released collects what comes out until want bytes arrived or, when the
// source is blocked, until nothing more comes within wait.
func (p *pipeReader) released(want int, wait time.Duration) []byte {
	var out []byte
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(out) < want {
		select {
		case b, ok := <-p.got:
			if !ok {
				return out
			}
			out = append(out, b...)
		case <-timer.C:
			return out
		}
	}
	return out
}

// TestStreamHoldIndependentOfSecret (report §3, the prefix oracle): a
// chunk that ends in the first bytes of a secret and one that ends in a
// wrong guess are released alike — the same bytes at once, the same tail
// after HoldTimeout, in the same order — and only the pause inside the
// secret counts as a stall.
func TestStreamHoldIndependentOfSecret(t *testing.T) {
	m := mustCompile(t, testSecrets)
	secret := string(testSecrets[0].Value)
	for _, guess := range []string{secret[:11], secret[:10] + "Z"} {
		h := &testHooks{}
		p := startPipe(t, func(r io.Reader) io.Reader { return m.NewReader(r, h) })
		chunk := []byte("log line: " + guess)
		p.send(t, chunk)
		first := p.released(len(chunk), 5*HoldTimeout/10)
		if want := len(chunk) - m.Hold(); len(first) != want {
			t.Errorf("guess %q: %d bytes released at once, want %d (all but Hold)", guess, len(first), want)
		}
		rest := p.released(len(chunk)-len(first), 20*HoldTimeout)
		if got := string(first) + string(rest); got != string(chunk) {
			t.Errorf("guess %q: released %q, want the chunk as it was", guess, got)
		}
		wantStalls := 0
		if strings.HasPrefix(secret, guess) {
			wantStalls = 1
		}
		if h.stalls != wantStalls {
			t.Errorf("guess %q: %d stalls, want %d", guess, h.stalls, wantStalls)
		}
		// The rest of the secret masks what was still held and after.
		p.send(t, []byte(secret[11:]+" end"))
		_ = p.pw.Close()
		tail := p.released(1<<20, 20*HoldTimeout)
		if strings.Contains(string(tail), secret[11:]) {
			t.Errorf("guess %q: the rest of the secret went out: %q", guess, tail)
		}
	}
}

// TestStreamReleasesMessagesWhole (review D3, for HTTP): with no timer, a
// finished gRPC message and a finished SSE event are released at their
// end, masked, whatever byte they end in; a plain stream holds exactly
// Hold() bytes until the next chunk.
func TestStreamReleasesMessagesWhole(t *testing.T) {
	m := mustCompile(t, testSecrets)
	secret := testSecrets[0].Value
	grpcMsg := func(payload []byte) []byte {
		b := make([]byte, 5, 5+len(payload))
		binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
		return append(b, payload...)
	}
	for name, tc := range map[string]struct {
		framing Framing
		chunk   []byte // a finished message, ending in 's' (a prefix of "sk-")
	}{
		"grpc":     {FramingGRPC, append(grpcMsg(append([]byte("echo "), secret...)), grpcMsg([]byte("thanks"))...)},
		"grpc-nul": {FramingGRPC, grpcMsg(nil)},
		"sse":      {FramingSSE, []byte("data: " + string(secret) + "\n\ndata: thanks s\n\n")},
		"sse-crlf": {FramingSSE, []byte("data: s\r\n\r\n")},
	} {
		p := startPipe(t, func(r io.Reader) io.Reader {
			z := &Reader{}
			z.Reset(m, r, nil, tc.framing)
			z.timeout = 0
			return z
		})
		p.send(t, tc.chunk)
		got := p.released(len(tc.chunk), 10*HoldTimeout)
		if len(got) != len(tc.chunk) {
			t.Errorf("%s: %d of %d bytes of finished messages released", name, len(got), len(tc.chunk))
		}
		if bytes.Contains(got, secret[:FragmentLen]) {
			t.Errorf("%s: not masked: %q", name, got)
		}
	}
	p := startPipe(t, func(r io.Reader) io.Reader {
		z := m.NewReader(r, nil)
		z.timeout = 0
		return z
	})
	p.send(t, []byte("plain text thanks"))
	if got := p.released(17, 10*HoldTimeout); len(got) != 17-m.Hold() {
		t.Errorf("plain stream: %d bytes released, want %d", len(got), 17-m.Hold())
	}
}

// TestFragmentsMasked (report §2): any run of FragmentLen or more
// characters of a secret, in every form (a truncated quote among them), is
// masked; fewer are not; a short secret is matched whole only.
func TestFragmentsMasked(t *testing.T) {
	long := testSecrets[0].Value
	m := mustCompile(t, append([]Secret{{Ref: "short", Value: []byte("hunter2-x")}}, testSecrets[:2]...))
	for _, tc := range []struct {
		name, text, secretPart string
		masked                 bool
	}{
		{"truncated quote", "invalid key '" + string(long[:30]) + "...'", string(long[:30]), true},
		{"middle run", "x" + string(long[9:21]) + "y", string(long[9:21]), true},
		{"11 chars", "x" + string(long[9:20]) + "y", string(long[9:20]), false},
		{"json fragment", `{"q":"` + string(long[5:40]) + `"}`, string(long[5:40]), true},
		{"base64 fragment", base64.StdEncoding.EncodeToString(long[4:30]), base64.StdEncoding.EncodeToString(long[4:30])[2:30], true},
		{"hex fragment", hex.EncodeToString(long[3:20]), hex.EncodeToString(long[3:20]), true},
		{"short whole", "pw=hunter2-x;", "hunter2-x", true},
		{"short partial", "pw=hunter2;", "hunter2", false},
	} {
		out := m.Mask(tc.text, nil)
		if got := !strings.Contains(out, tc.secretPart); got != tc.masked {
			t.Errorf("%s: masked %v, want %v (%q)", tc.name, got, tc.masked, out)
		}
	}
}

// wrap breaks s into lines of n characters ended by eol.
func wrap(s string, n int, eol string) string {
	var b strings.Builder
	for len(s) > n {
		b.WriteString(s[:n] + eol)
		s = s[n:]
	}
	b.WriteString(s)
	return b.String()
}

// TestWrappedBase64AndHex (report §7): base64 of a text holding the
// secret, wrapped at 76 and 64 columns with CRLF and LF at every offset
// of the secret, and its hex in both cases, are masked; the line breaks
// stay where they were.
func TestWrappedBase64AndHex(t *testing.T) {
	m := mustCompile(t, testSecrets)
	v := testSecrets[0].Value
	for _, cols := range []int{76, 64} {
		for _, eol := range []string{"\r\n", "\n"} {
			for pad := range cols {
				text := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("P", pad) + "Authorization: Bearer " + string(v) + "\r\n"))
				in := wrap(text, cols, eol)
				out := m.Mask(in, nil)
				if strings.Count(out, eol) != strings.Count(in, eol) {
					t.Fatalf("%d/%q/%d: line breaks changed", cols, eol, pad)
				}
				dec, _ := base64.StdEncoding.DecodeString(strings.NewReplacer("\r", "", "\n", "", "*", "A").Replace(out))
				if bytes.Contains(dec, v[FragmentLen:2*FragmentLen]) {
					t.Fatalf("%d/%q/%d: %q decodes to the secret", cols, eol, pad, out)
				}
			}
		}
	}
	for _, h := range []string{hex.EncodeToString(v), strings.ToUpper(hex.EncodeToString(v))} {
		if out := m.Mask("0x"+h, nil); out != "0x"+strings.Repeat("*", len(h)) {
			t.Errorf("hex %q masked as %q", h, out)
		}
	}
}

// FuzzStreamLiveness: gRPC messages of any payloads, cut into chunks of
// any size and sent into a source that then blocks, are released whole
// with no timer (nothing of a finished message waits for later bytes),
// masked exactly as each payload on its own.
func FuzzStreamLiveness(f *testing.F) {
	f.Add([]byte("thanks"), []byte("sk-fuzz-0001-abcdef s"), 3)
	f.Add([]byte(""), []byte("s"), 1)
	secret := []byte("sk-fuzz-0001-abcdefghij")
	m := mustCompile(f, []Secret{{Ref: "r", Value: secret}})
	f.Fuzz(func(t *testing.T, a, b []byte, chunk int) {
		if len(a)+len(b) > 1<<16 {
			return
		}
		chunk = abs(chunk)%23 + 1
		var stream, want []byte
		for _, payload := range [][]byte{a, b} {
			var prefix [5]byte
			binary.BigEndian.PutUint32(prefix[1:], uint32(len(payload)))
			stream = append(append(stream, prefix[:]...), payload...)
			want = append(append(want, prefix[:]...), m.Mask(string(payload), nil)...)
		}
		p := startPipe(t, func(r io.Reader) io.Reader {
			z := &Reader{}
			z.Reset(m, r, nil, FramingGRPC)
			z.timeout = 0
			return z
		})
		for in := stream; len(in) > 0; {
			n := min(chunk, len(in))
			p.send(t, in[:n])
			in = in[n:]
		}
		if got := p.released(len(stream), time.Second); !bytes.Equal(got, want) {
			t.Fatalf("released %q, want %q", got, want)
		}
	})
}

// FuzzFragments: for any secret of FragmentLen bytes or more, any run of
// FragmentLen or more of its characters, raw, in hex or in base64
// (wrapped at 76 or 64 columns with CRLF or LF), inside any text, comes
// out with no FragmentLen consecutive characters of that form left, the
// same length, and only '*' changed.
func FuzzFragments(f *testing.F) {
	f.Add([]byte("sk-proj-0123456789abcdefXYZ"), []byte("before "), []byte(" after"), 2, 20, 0)
	f.Add([]byte("ghp_16C7e42F292c6912E7710c838347Ae178B4a"), []byte(""), []byte("\n"), 0, 40, 5)
	f.Fuzz(func(t *testing.T, secret, pre, post []byte, from, n, form int) {
		if len(secret) < FragmentLen || len(secret) > 200 || bytes.ContainsAny(secret, "*\r\n") || len(pre)+len(post) > 1000 {
			return
		}
		m, err := Compile([]Secret{{Ref: "r", Value: secret}})
		if err != nil {
			t.Fatal(err)
		}
		from = abs(from) % (len(secret) - FragmentLen + 1)
		n = FragmentLen + abs(n)%(len(secret)-from-FragmentLen+1)
		run := secret[from : from+n]
		var enc string
		switch abs(form) % 6 {
		case 0:
			enc = string(run)
		case 1:
			enc = hex.EncodeToString(run)
		case 2:
			enc = strings.ToUpper(hex.EncodeToString(run))
		case 3:
			enc = wrap(base64.StdEncoding.EncodeToString(append(bytes.Clone(pre), run...)), 76, "\r\n")
		case 4:
			enc = wrap(base64.StdEncoding.EncodeToString(append(bytes.Clone(pre), run...)), 64, "\n")
		case 5:
			enc = base64.URLEncoding.EncodeToString(run)
		}
		text := string(pre) + enc + string(post)
		out := m.Mask(text, nil)
		if len(out) != len(text) {
			t.Fatalf("length %d, want %d", len(out), len(text))
		}
		for i := range out {
			if out[i] != text[i] && out[i] != '*' {
				t.Fatalf("byte %d changed to %q", i, out[i])
			}
		}
		bare := strings.NewReplacer("\r", "", "\n", "").Replace(out)
		switch abs(form) % 6 {
		case 0, 1, 2:
			for i := 0; i+FragmentLen <= len(enc); i++ {
				if strings.Contains(bare, enc[i:i+FragmentLen]) {
					t.Fatalf("%q survives in %q", enc[i:i+FragmentLen], out)
				}
			}
		default:
			// Base64: the characters that depend on the run's bytes only
			// are masked; decode what is left and look for the run.
			s := strings.ReplaceAll(bare, "*", "A")
			for _, e := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
				for off := range 4 {
					if off >= len(s) {
						break
					}
					c := strings.TrimRight(s[off:], "=")
					c = c[:len(c)/4*4]
					if dec, err := e.DecodeString(c); err == nil && bytes.Contains(dec, run[:FragmentLen]) {
						t.Fatalf("%q decodes to the run", out)
					}
				}
			}
		}
	})
}
