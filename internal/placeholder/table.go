package placeholder

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/botbox/botbox/internal/secrets"
)

// Form names the spelling in which a placeholder was found; it is logged
// with a tripwire (never the placeholder itself).
type Form string

// The forms Table.Find recognises.
const (
	// FormLiteral is the placeholder as is.
	FormLiteral Form = "literal"
	// FormPercent is the placeholder percent-encoded as url.QueryEscape or
	// url.PathEscape write it (only where that differs from the literal).
	FormPercent Form = "percent_encoded"
	// FormJSON is the placeholder JSON-escaped (only where that differs).
	FormJSON Form = "json_escaped"
	// FormBase64 is the placeholder inside standard or URL-safe base64 of
	// a longer text, at any of the three byte alignments (Basic auth's
	// user:password, a base64 JSON blob).
	FormBase64 Form = "base64"
)

// Entry is one placeholder the process issued.
type Entry struct {
	// Ref is the secret_ref.
	Ref string
	// Placeholder is the stand-in value.
	Placeholder string
	// Current is true for the placeholder of the secret's current shape,
	// false for one issued before a rotation changed the shape.
	Current bool
}

// pattern is one spelling of one placeholder.
type pattern struct {
	s    string
	b    []byte
	ref  string
	form Form
}

// Table is an immutable set of placeholders, safe for concurrent use. A
// nil *Table holds none.
type Table struct {
	entries  []Entry   // sorted by ref; current first within a ref
	patterns []pattern // every spelling of every entry
	minLen   int       // shortest pattern
}

// NewTable builds the table of entries.
func NewTable(entries []Entry) *Table {
	t := &Table{entries: entries}
	for _, e := range entries {
		for _, sp := range spellings(e.Placeholder) {
			t.patterns = append(t.patterns, pattern{s: sp.s, b: []byte(sp.s), ref: e.Ref, form: sp.form})
			if t.minLen == 0 || len(sp.s) < t.minLen {
				t.minLen = len(sp.s)
			}
		}
	}
	return t
}

type spelling struct {
	s    string
	form Form
}

// spellings lists the forms of p that Find looks for, without duplicates.
func spellings(p string) []spelling {
	out := []spelling{{p, FormLiteral}}
	add := func(s string, f Form) {
		if s == "" {
			return
		}
		for _, o := range out {
			if o.s == s {
				return
			}
		}
		out = append(out, spelling{s, f})
	}
	add(url.QueryEscape(p), FormPercent)
	add(url.PathEscape(p), FormPercent)
	if j, err := json.Marshal(p); err == nil {
		add(string(j[1:len(j)-1]), FormJSON)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(p) == nil {
		j := bytes.TrimSpace(buf.Bytes())
		add(string(j[1:len(j)-1]), FormJSON)
	}
	// Base64 of a text holding p at byte offset o: the groups that lie
	// wholly inside p start at p[skip] with skip = (3 - o%3) % 3, whatever
	// surrounds p. Those characters are the core of that alignment.
	for skip := range 3 {
		n := (len(p) - skip) / 3 * 3
		if n < 3 {
			continue
		}
		core := p[skip : skip+n]
		add(base64.RawStdEncoding.EncodeToString([]byte(core)), FormBase64)
		add(base64.RawURLEncoding.EncodeToString([]byte(core)), FormBase64)
	}
	return out
}

// MaxLen is the length of the longest spelling Find looks for: a scan
// over a stream keeps MaxLen-1 bytes across reads.
func (t *Table) MaxLen() int {
	n := 0
	if t != nil {
		for _, p := range t.patterns {
			n = max(n, len(p.s))
		}
	}
	return n
}

// Entries returns the table's placeholders (the caller must not modify
// them), sorted by secret_ref, the current one first.
func (t *Table) Entries() []Entry {
	if t == nil {
		return nil
	}
	return t.entries
}

// Len is the number of placeholders.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// Lookup returns the current placeholder of ref.
func (t *Table) Lookup(ref string) (string, bool) {
	if t == nil {
		return "", false
	}
	for _, e := range t.entries {
		if e.Ref == ref && e.Current {
			return e.Placeholder, true
		}
	}
	return "", false
}

// Allowed reports whether a request may carry the placeholders of
// secret_ref ref (a rule that allowed it references the secret).
type Allowed func(ref string) bool

// FindString is Find for a string.
func (t *Table) FindString(s string, allowed Allowed) (ref string, form Form, found bool) {
	if t == nil || len(s) < t.minLen {
		return "", "", false
	}
	for i := range t.patterns {
		p := &t.patterns[i]
		if allowed != nil && allowed(p.ref) {
			continue
		}
		if strings.Contains(s, p.s) {
			return p.ref, p.form, true
		}
	}
	return "", "", false
}

// Find reports the first placeholder in b, in any Form, of a secret_ref
// that allowed does not accept (nil accepts none), and its form.
func (t *Table) Find(b []byte, allowed Allowed) (ref string, form Form, found bool) {
	if t == nil || len(b) < t.minLen {
		return "", "", false
	}
	for i := range t.patterns {
		p := &t.patterns[i]
		if allowed != nil && allowed(p.ref) {
			continue
		}
		if bytes.Contains(b, p.b) {
			return p.ref, p.form, true
		}
	}
	return "", "", false
}

// HeaderAllowed reports whether the header named name (as the request
// map keys it) may carry the placeholders of secret_ref ref: the header is
// one a rewrite of the request's rule replaces with that secret.
type HeaderAllowed func(name, ref string) bool

// FindHeader is Find over every header value of h, each judged with
// allowed for its own header (nil accepts none), and over every header
// name as InspectName (a placeholder in a name is never accepted: names
// are case-insensitive, and canonicalised).
func (t *Table) FindHeader(h http.Header, allowed HeaderAllowed) (ref string, form Form, found bool) {
	if t.Len() == 0 {
		return "", "", false
	}
	for k, vs := range h {
		if len(k) >= t.minLen {
			if ref, found = t.InspectName(k); found {
				return ref, FormLiteral, true
			}
		}
		var accept Allowed
		if allowed != nil {
			accept = func(ref string) bool { return allowed(k, ref) }
		}
		for _, v := range vs {
			if ref, form, found = t.FindString(v, accept); found {
				return ref, form, true
			}
		}
	}
	return "", "", false
}

// FindURL is Find over a request target's escaped path, raw query, opaque
// part, fragment and userinfo, each as sent and percent-decoded once (a
// placeholder spelled %73k-… is found). allowed applies to every part
// (nil accepts none): the proxy passes nil, and judges the parameters a
// query rewrite replaces on their own (FindEncoded).
func (t *Table) FindURL(u *url.URL, allowed Allowed) (ref string, form Form, found bool) {
	if t.Len() == 0 || u == nil {
		return "", "", false
	}
	for _, raw := range [...]string{u.EscapedPath(), u.RawQuery, u.Opaque, u.RawFragment} {
		if ref, form, found = t.FindEncoded(raw, allowed); found {
			return ref, form, true
		}
	}
	if u.User != nil {
		return t.FindEncoded(u.User.String(), allowed)
	}
	return "", "", false
}

// FindEncoded is FindString over raw as sent and, when raw holds a '%',
// percent-decoded once (FormPercent).
func (t *Table) FindEncoded(raw string, allowed Allowed) (ref string, form Form, found bool) {
	if raw == "" {
		return "", "", false
	}
	if ref, form, found = t.FindString(raw, allowed); found {
		return ref, form, true
	}
	if strings.IndexByte(raw, '%') >= 0 {
		if dec, err := url.PathUnescape(raw); err == nil {
			if ref, _, found = t.FindString(dec, allowed); found {
				return ref, FormPercent, true
			}
		}
	}
	return "", "", false
}

// InspectName reports whether name — a host name, a DNS query name —
// carries a placeholder, compared without regard to ASCII case (DNS names
// are case-insensitive, hosts are canonicalised to lower case). It is the
// hook of a DNS guard: every placeholder trips there, as no name may carry
// one. Only the literal form is recognised: base64 and percent-encoding do
// not survive in a host name.
func (t *Table) InspectName(name string) (secretRef string, found bool) {
	if t == nil {
		return "", false
	}
	for _, e := range t.entries {
		if containsFold(name, e.Placeholder) {
			return e.Ref, true
		}
	}
	return "", false
}

// containsFold reports whether sub is in s under ASCII case folding,
// without allocating (names and placeholders are short).
func containsFold(s, sub string) bool {
	if len(sub) == 0 || len(sub) > len(s) {
		return len(sub) == 0
	}
	first := lowerASCII(sub[0])
	for i := 0; i+len(sub) <= len(s); i++ {
		if lowerASCII(s[i]) == first && strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

func lowerASCII(b byte) byte {
	if b >= 'A' && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// Lookup resolves a secret_ref to its value (*secrets.Snapshot): the
// Manager learns each value's shape through it.
type Lookup interface {
	Lookup(ref string) (secrets.Value, bool)
}

// Issued reports whether s is exactly a placeholder the process issued for
// ref, current or retired: what a credential that owns ref accepts in the
// place it replaces (package credential/awssig: the access key ID the app
// signs with).
func (t *Table) Issued(ref, s string) bool {
	if t == nil || s == "" {
		return false
	}
	for _, e := range t.entries {
		if e.Ref == ref && e.Placeholder == s {
			return true
		}
	}
	return false
}
