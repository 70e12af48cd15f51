// Package scrub masks the secret values BotBox holds wherever an origin
// reflects them in its response, before the agent sees them.
//
// The proxy hands Compile every secret of its current snapshot (not only
// those injected into the request: a value the agent made an origin store
// through one host can come back through another). Compile derives the
// byte patterns an echo service produces from each (Patterns: raw,
// URL-encoded, JSON-escaped, standard and URL-safe base64 in all three
// alignments, hex in both cases, and for a Basic credential the decoded
// user:pass and password) and builds one Aho–Corasick automaton over them
// (a dense DFA on compressed byte classes). For a secret of FragmentLen
// (12) bytes or more, the patterns are the FragmentLen-grams of each form,
// so any run of 12 consecutive characters of it is masked (a truncated
// quote, a piece of a longer text); a shorter secret is matched whole.
//
// Guarantees, for a Matcher m:
//   - masking keeps lengths: each byte of every occurrence becomes '*', so a
//     Content-Length, a WebSocket frame length or a gRPC message length stays
//     true (FuzzStream);
//   - CR and LF are skipped inside an occurrence, so base64 wrapped in lines
//     (64 or 76 columns, CRLF or LF) is masked; the line breaks stay
//     (TestWrappedBase64AndHex, FuzzFragments);
//   - Mask finds every occurrence in a complete string (a header value);
//   - a Reader finds every occurrence in a byte stream however it is split
//     into writes (TestStreamEverySplit); what it holds back is the same
//     whatever the bytes are: the last Hold() bytes of each chunk, until the
//     next chunk or HoldTimeout (TestStreamHoldIndependentOfSecret), and
//     nothing at the end of a gRPC message, an SSE event or a WebSocket
//     message (FIN): a finished message never waits for later bytes
//     (TestStreamReleasesMessagesWhole, TestFrameReaderReleasesAtFIN and the
//     liveness properties of FuzzStreamLiveness and FuzzFrameReader).
//
// What it does not do: find a value the origin transformed otherwise
// (hashed, encoded twice, split by bytes other than CR and LF, fewer than
// FragmentLen consecutive characters of it, compressed — the proxy decodes
// the content codings it knows and refuses the others; compressed gRPC
// messages are scanned as they are). A fragment that is masked tells the
// reader that its 12 characters belong to a secret: whoever knows 11
// consecutive characters of one can test candidates for the next (see
// docs/containment.md). The package neither logs nor counts; it reports
// each occurrence to its caller (Found names the secret_ref, never the
// value) and each stall (Stalled).
//
// Typical use (the proxy keeps one matcher per secret snapshot in a
// Cache):
//
//	m, err := scrub.Compile(all)             // nil, nil: nothing to mask
//	v = m.Mask(v, found)                     // a header value
//	z.Reset(m, resp.Body, hooks, scrub.FramingOf(contentType))
package scrub

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
)

// Secret is one injected credential of a request.
type Secret struct {
	// Ref is the secret_ref (the only name reported).
	Ref string
	// Value is the secret's bytes.
	Value []byte
	// Header is the whole header value sent with it ("Bearer <value>");
	// "" or equal to Value when the template is just "{value}".
	Header string
}

// Pattern is one byte string to mask and the secret_ref it derives from.
type Pattern struct {
	Ref   string
	Bytes []byte
}

// FragmentLen is the shortest run of a secret's characters that is masked
// on its own: every run of FragmentLen or more consecutive characters of a
// secret of at least FragmentLen bytes, in any of its forms, is masked
// (a quote truncated by the origin, a piece of a wrapped line). A shorter
// secret is matched whole, in every form.
const FragmentLen = 12

// Patterns derives every pattern of secrets, deduplicated (the first
// secret's ref wins on a tie). Empty values give none.
//
// For each value (the secret, a Basic credential's user:pass and
// password) and each of its forms (encodings): a form of
// FragmentLen bytes or more gives its FragmentLen-grams (so any run of
// FragmentLen consecutive bytes of it matches, and the whole form is
// masked because each of its windows is); a shorter one is a pattern
// whole. CR and LF are removed from every form: the matcher skips them
// in the text (line-wrapped base64, a PEM value), so no pattern holds
// them. The automaton thus stays bounded by about FragmentLen states per
// byte of form text, and no pattern is longer than the longest short
// form.
func Patterns(secrets []Secret) []Pattern {
	var out []Pattern
	seen := map[string]bool{}
	add := func(ref string, b []byte) {
		if len(b) == 0 || seen[string(b)] {
			return
		}
		seen[string(b)] = true
		out = append(out, Pattern{Ref: ref, Bytes: b})
	}
	for _, s := range secrets {
		for _, v := range derivedValues(s) {
			for _, e := range encodings(v) {
				e = stripLineBreaks(e)
				if len(e) < FragmentLen {
					add(s.Ref, e)
					continue
				}
				for i := 0; i+FragmentLen <= len(e); i++ {
					add(s.Ref, e[i:i+FragmentLen:i+FragmentLen])
				}
			}
		}
	}
	return out
}

// derivedValues returns the values of s that an echo service may reflect:
// the secret, and for a Basic credential (the header's, or the secret
// itself when it is base64 of user:pass) the decoded user:pass and the
// password. The rest of the header value ("Bearer ") is no secret: the
// secret's own patterns mask it inside the header, in every encoding
// (base64 of the header holds the secret's base64 at some alignment).
func derivedValues(s Secret) [][]byte {
	if len(s.Value) == 0 {
		return nil
	}
	values := [][]byte{s.Value}
	basic := string(s.Value)
	if scheme, cred, ok := strings.Cut(s.Header, " "); ok && strings.EqualFold(scheme, "Basic") {
		basic = strings.TrimSpace(cred)
	}
	// Basic auth: the header carries base64(user:pass); an echo service may
	// decode it (httpbin's /basic-auth).
	if dec, err := base64.StdEncoding.DecodeString(basic); err == nil && printable(dec) {
		if _, pass, ok := bytes.Cut(dec, []byte(":")); ok && len(pass) > 0 {
			values = append(values, dec, pass)
		}
	}
	return values
}

// printable reports whether b is non-empty printable ASCII (a user:pass).
func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return len(b) > 0
}

// stripLineBreaks returns b without CR and LF (b itself when it has none).
func stripLineBreaks(b []byte) []byte {
	if !bytes.ContainsAny(b, "\r\n") {
		return b
	}
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if !isLineBreak(c) {
			out = append(out, c)
		}
	}
	return out
}

// isLineBreak reports whether c is CR or LF, the bytes the matcher skips.
func isLineBreak(c byte) bool { return c == '\r' || c == '\n' }

// encodings returns v and the encodings of v an echo service produces.
func encodings(v []byte) [][]byte {
	out := [][]byte{v}
	s := string(v)
	// URL encodings: query (space as '+'), path, and every byte outside the
	// unreserved set escaped (JavaScript's encodeURIComponent, Python's
	// quote(safe="")), with upper- and lower-case hex.
	for _, e := range []string{url.QueryEscape(s), url.PathEscape(s), escapeAll(s, "0123456789ABCDEF"), escapeAll(s, "0123456789abcdef")} {
		out = append(out, []byte(e))
	}
	// JSON string contents: Go's encoder (with and without HTML escaping),
	// and with "/" escaped as "\/" (PHP's json_encode).
	for _, html := range []bool{true, false} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if err := enc.Encode(s); err == nil {
			j := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
			j = j[1 : len(j)-1] // strip the quotes
			out = append(out, bytes.Clone(j), bytes.ReplaceAll(j, []byte("/"), []byte(`\/`)))
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		out = append(out, base64Forms(enc, v)...)
	}
	// Hex, lower and upper case (a hex dump, a digest-style echo). A
	// fragment of v starts at an even offset of its hex form; the
	// FragmentLen-grams of the whole form cover every offset.
	out = append(out, []byte(hex.EncodeToString(v)), []byte(strings.ToUpper(hex.EncodeToString(v))))
	return out
}

// escapeAll percent-encodes every byte of s outside RFC 3986's unreserved
// set, with the given hex digits.
func escapeAll(s, hex string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// base64Forms returns, for encoding enc, the whole encoding of v padded and
// unpadded (v is the whole encoded text), and for each alignment k = 0, 1, 2
// (v starts k bytes after a 3-byte group boundary of a larger encoded
// text) the characters that depend on v's bytes alone: they appear in the
// encoding of any text containing v at that alignment, whatever surrounds
// it.
func base64Forms(enc *base64.Encoding, v []byte) [][]byte {
	full := enc.EncodeToString(v)
	out := [][]byte{[]byte(full), []byte(strings.TrimRight(full, "="))}
	for k := range 3 {
		buf := make([]byte, k+len(v))
		copy(buf[k:], v)
		e := enc.WithPadding(base64.NoPadding).EncodeToString(buf)
		// Character j covers bits [6j, 6j+6) of buf; v occupies bits
		// [8k, 8(k+len(v))).
		first := (8*k + 5) / 6
		last := (8*(k+len(v)))/6 - 1 // inclusive
		if last >= first {
			out = append(out, []byte(e[first:last+1]))
		}
	}
	return slices.DeleteFunc(out, func(b []byte) bool { return len(b) == 0 })
}
