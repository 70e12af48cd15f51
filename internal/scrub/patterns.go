// Package scrub masks injected secret values that an origin reflects back
// in its response, before the agent sees them.
//
// For one request, the proxy hands Compile the secrets its header rewrites
// injected (package rewrite's Injected: the secret_ref, the secret's bytes
// and the whole header value sent, e.g. "Bearer <value>"). Compile derives
// the byte patterns an echo service produces from them (Patterns: raw,
// URL-encoded, JSON-escaped, standard and URL-safe base64 in all three
// alignments, padded and unpadded, and for a Basic header the decoded
// user:pass and password) and builds one Aho–Corasick automaton over them
// (a dense DFA on compressed byte classes).
//
// Guarantees, for a Matcher m:
//   - masking keeps lengths: each byte of every occurrence becomes '*', so a
//     Content-Length, a WebSocket frame length or a gRPC message length stays
//     true (FuzzStream);
//   - Mask finds every occurrence in a complete string (a header value);
//   - a Stream finds every occurrence in a byte stream however it is split
//     into writes (TestStreamEverySplit), holding back only the bytes that
//     are a proper prefix of some pattern, never more than the longest
//     pattern minus one byte: a stream chunk that does not end inside a
//     possible occurrence is released whole, so an SSE event (which ends in
//     "\n", a byte no pattern contains) is never delayed
//     (TestStreamReleasesEventsWhole).
//
// What it does not do: find a value the origin transformed otherwise
// (hashed, truncated, re-encoded twice, split by other bytes, compressed —
// the proxy decodes the content codings it knows and refuses the others).
// The package neither logs nor counts; Stream reports each occurrence to its
// caller through Found, which names the secret_ref, never the value.
//
// Typical use (the proxy keeps matchers in a Cache keyed by rule and
// secret snapshot):
//
//	m, err := scrub.Compile(injected)       // nil, nil: nothing to mask
//	v = m.Mask(v, found)                     // a header value
//	resp.Body = m.NewReader(resp.Body, found, maskTrailers)
package scrub

import (
	"bytes"
	"encoding/base64"
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

// Patterns derives every pattern of secrets, deduplicated (the first
// secret's ref wins on a tie). Empty values give none.
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
		if len(s.Value) == 0 {
			continue
		}
		values := [][]byte{s.Value}
		if s.Header != "" && s.Header != string(s.Value) {
			values = append(values, []byte(s.Header))
			// Basic auth: the header carries base64(user:pass); an echo
			// service may decode it (httpbin's /basic-auth).
			if scheme, cred, ok := strings.Cut(s.Header, " "); ok && strings.EqualFold(scheme, "Basic") {
				if dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil && len(dec) > 0 {
					values = append(values, dec)
					if _, pass, ok := bytes.Cut(dec, []byte(":")); ok && len(pass) > 0 {
						values = append(values, pass)
					}
				}
			}
		}
		for _, v := range values {
			for _, e := range encodings(v) {
				add(s.Ref, e)
			}
		}
	}
	return out
}

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
