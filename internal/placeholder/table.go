package placeholder

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"

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

// FindHeader is Find over every header value of h, and over every header
// name as InspectName (names are case-insensitive, and canonicalised).
func (t *Table) FindHeader(h http.Header, allowed Allowed) (ref string, form Form, found bool) {
	if t.Len() == 0 {
		return "", "", false
	}
	for k, vs := range h {
		if len(k) >= t.minLen {
			if ref, found = t.InspectName(k); found && (allowed == nil || !allowed(ref)) {
				return ref, FormLiteral, true
			}
		}
		for _, v := range vs {
			if ref, form, found = t.FindString(v, allowed); found {
				return ref, form, true
			}
		}
	}
	return "", "", false
}

// FindURL is Find over a request target's escaped path and raw query, as
// sent and percent-decoded once (a placeholder spelled %73k-… is found).
func (t *Table) FindURL(u *url.URL, allowed Allowed) (ref string, form Form, found bool) {
	if t.Len() == 0 || u == nil {
		return "", "", false
	}
	for _, raw := range [...]string{u.EscapedPath(), u.RawQuery, u.Opaque, u.RawFragment} {
		if raw == "" {
			continue
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
	}
	if u.User != nil {
		return t.FindString(u.User.String(), allowed)
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

// Lookup resolves a secret_ref to its value (*secrets.Snapshot).
type Lookup interface {
	Lookup(ref string) (secrets.Value, bool)
}

// SwapError reports a swap that could not be done: the secret is missing,
// or its value is not valid where the placeholder stood. It names the
// secret_ref, never a value.
type SwapError struct {
	Ref    string
	Reason string
	// Missing is true when the secret is not in the snapshot.
	Missing bool
}

func (e *SwapError) Error() string {
	return fmt.Sprintf("swapping the placeholder of secret %q: %s", e.Ref, e.Reason)
}

// swap holds the replacements for the refs a request may carry.
type swap struct {
	old, new []string
}

func (t *Table) swaps(refs []string, lookup Lookup, encode func(string) string) (swap, error) {
	var sw swap
	for _, e := range t.entries {
		if !contains(refs, e.Ref) {
			continue
		}
		var v secrets.Value
		ok := false
		if lookup != nil {
			v, ok = lookup.Lookup(e.Ref)
		}
		if !ok {
			return swap{}, &SwapError{Ref: e.Ref, Reason: "secret not found", Missing: true}
		}
		val := string(v.Reveal())
		sw.old = append(sw.old, e.Placeholder)
		sw.new = append(sw.new, val)
		if encode != nil {
			if ep, ev := encode(e.Placeholder), encode(val); ep != e.Placeholder {
				sw.old = append(sw.old, ep)
				sw.new = append(sw.new, ev)
			}
		}
	}
	return sw, nil
}

func (sw swap) apply(s string) (string, bool) {
	changed := false
	for i, o := range sw.old {
		if strings.Contains(s, o) {
			s = strings.ReplaceAll(s, o, sw.new[i])
			changed = true
		}
	}
	return s, changed
}

func contains(refs []string, ref string) bool {
	for _, r := range refs {
		if r == ref {
			return true
		}
	}
	return false
}

// SwapHeader replaces, in every value of h, each placeholder of the
// secrets refs names by the secret's value, also inside a Basic
// credential (base64 of user:password is decoded, swapped and encoded
// again). Values are resolved only when a placeholder is present. On
// error h may be partly swapped and must not be sent. It returns the
// number of values changed.
func (t *Table) SwapHeader(h http.Header, refs []string, lookup Lookup) (int, error) {
	if t.Len() == 0 || len(refs) == 0 {
		return 0, nil
	}
	var (
		sw     swap
		loaded bool
		n      int
	)
	load := func() error {
		if loaded {
			return nil
		}
		var err error
		sw, err = t.swaps(refs, lookup, nil)
		loaded = true
		return err
	}
	for k, vs := range h {
		for i, v := range vs {
			if !t.carries(v, refs) && !isBasic(v) {
				continue
			}
			if err := load(); err != nil {
				return n, err
			}
			nv, changed := sw.apply(v)
			if !changed && isBasic(v) {
				nv, changed = swapBasic(v, sw)
			}
			if !changed {
				continue
			}
			if !httpguts.ValidHeaderFieldValue(nv) {
				return n, &SwapError{Ref: strings.Join(refs, ","), Reason: fmt.Sprintf("the value is not valid in header %q", k)}
			}
			vs[i] = nv
			n++
		}
	}
	return n, nil
}

// carries reports whether s holds the literal placeholder of one of refs.
func (t *Table) carries(s string, refs []string) bool {
	for _, e := range t.entries {
		if contains(refs, e.Ref) && strings.Contains(s, e.Placeholder) {
			return true
		}
	}
	return false
}

func isBasic(v string) bool {
	return len(v) > 6 && strings.EqualFold(v[:6], "basic ")
}

func swapBasic(v string, sw swap) (string, bool) {
	enc := strings.TrimSpace(v[6:])
	dec, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return v, false
	}
	nd, changed := sw.apply(string(dec))
	if !changed {
		return v, false
	}
	return v[:6] + base64.StdEncoding.EncodeToString([]byte(nd)), true
}

// SwapQuery returns rawQuery with each placeholder of the secrets refs
// names replaced by the secret's value: a literal placeholder by the value
// as is (their bytes differ only in letters and digits), a percent-encoded
// one by the value encoded the same way.
func (t *Table) SwapQuery(rawQuery string, refs []string, lookup Lookup) (string, error) {
	if t.Len() == 0 || len(refs) == 0 || rawQuery == "" {
		return rawQuery, nil
	}
	if _, _, found := t.FindString(rawQuery, func(ref string) bool { return !contains(refs, ref) }); !found {
		return rawQuery, nil
	}
	sw, err := t.swaps(refs, lookup, url.QueryEscape)
	if err != nil {
		return "", err
	}
	q, _ := sw.apply(rawQuery)
	return q, nil
}
