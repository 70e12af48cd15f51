// Package rewrite injects configured headers, with secret values, into
// requests that a policy rule allows.
//
// Header templates are compiled once, when the configuration is loaded: the
// header name is canonicalised and a template with a secret_ref is split on
// the literal "{value}" placeholder, so that a request only concatenates the
// literal parts and the secret. Apply then works in two phases:
//
//  1. resolve every value from one secret snapshot. A missing secret yields a
//     *MissingSecretError and a filled template that is not a valid header
//     value (CR, LF, NUL, other controls) an *InvalidValueError;
//  2. only if every value resolved, delete every existing value of each
//     configured header, whatever the case of its key (so values smuggled by
//     the client under "authorization" or "AUTHORIZATION" go too), and set
//     exactly one value. The rule's remove_headers are deleted the same way
//     (every value, any case) and never added: the credentials a client may
//     send that the rule does not own (an SDK's dummy key).
//
// On error the header is left untouched, so the caller can fail closed
// (reference: 500, the request is never forwarded without its credential).
//
// Outside package secrets, this is the only package that calls
// secrets.Value.Reveal. Errors and every other output name the header and
// the secret_ref, never the value. The package imports secrets only for the Value type (a documented exception to
// the rule that feature packages do not import each other); it reaches the
// secret store through the small Lookup interface.
//
// The package does not decide whether rewrites apply (package policy does:
// only for a request that a rule allows, never under default allow), does
// not log and does not read secret files.
//
// Typical use:
//
//	set, err := rewrite.CompileRule(rule) // at load: header_rewrites and remove_headers
//	...
//	names, err := set.Apply(out.Header, store.Snapshot()) // per request
package rewrite

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/echo"
	"github.com/botbox/botbox/internal/secrets"
)

// Placeholder is the literal that a template's secret replaces. Every
// occurrence is replaced, in one pass, without escaping.
const Placeholder = config.TemplateValue

// Lookup resolves a secret_ref to its value. *secrets.Snapshot implements it;
// callers pass one snapshot per request so all rewrites see the same
// generation of secrets.
type Lookup interface {
	Lookup(ref string) (secrets.Value, bool)
}

// MissingSecretError reports a rewrite whose secret_ref is absent from the
// secret snapshot. It never carries the value (there is none).
type MissingSecretError struct {
	// Header is the header name as configured.
	Header string
	// Ref is the secret_ref that was not found.
	Ref string
}

func (e *MissingSecretError) Error() string {
	return fmt.Sprintf("secret %q for header %q not found", e.Ref, e.Header)
}

// InvalidValueError reports a filled template that is not a valid header
// field value (RFC 9110: visible ASCII, obs-text, space and tab only). It
// names the header and the secret_ref, never the value.
type InvalidValueError struct {
	// Header is the header name as configured.
	Header string
	// Ref is the secret_ref whose value made the header invalid ("" for a
	// static value, which Compile already refuses).
	Ref string
}

func (e *InvalidValueError) Error() string {
	if e.Ref == "" {
		return fmt.Sprintf("invalid static value for header %q", e.Header)
	}
	return fmt.Sprintf("invalid value for header %q from secret %q", e.Header, e.Ref)
}

// Set is a compiled, immutable list of header rewrites, applied in order,
// with the rule's removals and query rewrites. A nil *Set has no
// rewrites. It is safe for concurrent use.
type Set struct {
	rewrites []compiled
	names    []string // configured names, in order
	refs     []string // sorted, deduplicated secret refs (headers and query)
	// remove holds the canonical keys of the headers deleted and never
	// added (remove_headers), in configured order, without duplicates.
	remove []string
	// queries are the query_rewrites, in configured order (query.go).
	queries []compiledQuery
}

// compiled is one precompiled rewrite.
type compiled struct {
	key  string // canonical header key (textproto.CanonicalMIMEHeaderKey)
	name string // header name as configured, for errors and logs
	ref  string // secret_ref, "" for a static value
	// static is the final value of a rewrite without secret_ref.
	static string
	// parts are the literal pieces of the template around each "{value}"
	// (len = placeholders+1); only set when ref != "".
	parts []string
	// partsLen is the total length of parts.
	partsLen int
	// basic is a {basic:USER} template: the value is "Basic " +
	// base64(basicUser ":" secret); parts is then nil.
	basic     bool
	basicUser string
}

// Compile validates and precompiles the rewrites of one rule.
//
// It refuses an empty or invalid header name, a reserved or hop-by-hop
// header (Host, Connection, Transfer-Encoding, …), a static value that is not a
// valid header value, a template whose literal parts are not valid, and a
// secret_ref whose template has no "{value}" (the secret would be required but
// never sent, which is always a mistake). Errors never echo a value.
func Compile(rs []config.HeaderRewrite) (*Set, error) {
	s := &Set{
		rewrites: make([]compiled, 0, len(rs)),
		names:    make([]string, 0, len(rs)),
	}
	for i, r := range rs {
		c, err := compile(r)
		if err != nil {
			return nil, fmt.Errorf("compiling header rewrite %d: %w", i, err)
		}
		s.rewrites = append(s.rewrites, c)
		s.names = append(s.names, r.Name)
		if r.SecretRef != "" {
			s.refs = append(s.refs, r.SecretRef)
		}
	}
	slices.Sort(s.refs)
	s.refs = slices.Compact(s.refs)
	return s, nil
}

// CompileRule compiles everything a rule does to the headers and the
// query of the requests it allows: its header_rewrites (as Compile), its
// remove_headers and its query_rewrites (CompileQuery's rules). It returns
// nil, nil for a rule with none of them.
//
// A remove_headers name must be a valid header name, not reserved or
// hop-by-hop (as in Compile), and not one that the rule's header_rewrites
// sets (a rewrite already deletes every client value of its header; config
// validation refuses the same list). Duplicates under case folding count
// once.
func CompileRule(r config.Rule) (*Set, error) {
	if len(r.HeaderRewrites) == 0 && len(r.RemoveHeaders) == 0 && len(r.QueryRewrites) == 0 {
		return nil, nil
	}
	s, err := Compile(r.HeaderRewrites)
	if err != nil {
		return nil, err
	}
	if err := s.compileQueries(r.QueryRewrites); err != nil {
		return nil, err
	}
	for i, name := range r.RemoveHeaders {
		switch {
		case name == "":
			return nil, fmt.Errorf("remove_headers[%d]: empty header name", i)
		case !httpguts.ValidHeaderFieldName(name):
			return nil, fmt.Errorf("remove_headers[%d]: invalid header name %q", i, echo.Clip(name))
		case config.ReservedHeader(name):
			return nil, fmt.Errorf("remove_headers[%d]: header %q cannot be removed (reserved/hop-by-hop)", i, name)
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		if slices.ContainsFunc(s.rewrites, func(c compiled) bool { return c.key == key }) {
			return nil, fmt.Errorf("remove_headers[%d]: header %q is also set by header_rewrites", i, name)
		}
		if !slices.Contains(s.remove, key) {
			s.remove = append(s.remove, key)
		}
	}
	return s, nil
}

func compile(r config.HeaderRewrite) (compiled, error) {
	if r.Name == "" {
		return compiled{}, errors.New("empty header name")
	}
	if !httpguts.ValidHeaderFieldName(r.Name) {
		return compiled{}, fmt.Errorf("invalid header name %q", echo.Clip(r.Name))
	}
	// Config validation refuses the same list; checking it here keeps a
	// hand-built Set from injecting Host or a hop-by-hop header.
	if config.ReservedHeader(r.Name) {
		return compiled{}, fmt.Errorf("header %q cannot be used in rewrites (reserved/hop-by-hop)", r.Name)
	}
	c := compiled{
		key:  textproto.CanonicalMIMEHeaderKey(r.Name),
		name: r.Name,
		ref:  r.SecretRef,
	}
	if r.SecretRef == "" {
		// A static value is used literally, "{value}" included (reference).
		if !httpguts.ValidHeaderFieldValue(r.Value) {
			return compiled{}, &InvalidValueError{Header: r.Name}
		}
		c.static = r.Value
		return c, nil
	}
	t, err := config.ParseTemplate(r.Value, true)
	if errors.Is(err, config.ErrNoValueToken) {
		return compiled{}, fmt.Errorf("header %q: value has no %s placeholder for secret %q", r.Name, Placeholder, r.SecretRef)
	}
	if err != nil {
		return compiled{}, fmt.Errorf("header %q, secret %q: %w", r.Name, r.SecretRef, err)
	}
	if t.Basic {
		c.basic, c.basicUser = true, t.BasicUser
		return c, nil
	}
	// Header-value validity is per byte, so valid literal parts plus a valid
	// secret make a valid value; checking the parts here gives a load-time
	// error instead of a 500 on every request.
	if !httpguts.ValidHeaderFieldValue(r.Value) {
		return compiled{}, fmt.Errorf("header %q: invalid characters in value template for secret %q", r.Name, r.SecretRef)
	}
	c.parts = t.Parts
	for _, p := range c.parts {
		c.partsLen += len(p)
	}
	return c, nil
}

// Names returns the configured header names, one per rewrite, in order.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.names)
}

// SecretRefs returns the secret refs the set needs, sorted and deduplicated.
func (s *Set) SecretRefs() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.refs)
}

// Removed returns the canonical keys of the headers the set deletes and
// never adds (remove_headers), in configured order.
func (s *Set) Removed() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.remove)
}

// Len is the number of rewrites (removals not counted).
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.rewrites)
}

// Apply performs the rewrites on h with secrets from lookup.
//
// Every value is resolved first; only if all succeed is h modified: for each
// rewrite, in order, every existing value of the header is deleted (the
// canonical key and any other key equal under case folding) and exactly one
// value is set, so a later rewrite of the same header overwrites an earlier
// one. Every value of each removed header (remove_headers) is deleted, under
// any key equal to it under case folding, and nothing is added. On success
// it returns the configured names, one per rewrite, in order (nil when the
// set only removes). On error (*MissingSecretError, *InvalidValueError) h is
// unchanged. TestApplyRemovesHeaders and FuzzApply hold this.
//
// A nil or empty set leaves h alone and returns nil, nil. A nil lookup
// finds no secret.
func (s *Set) Apply(h http.Header, lookup Lookup) (rewritten []string, err error) {
	if s == nil || len(s.rewrites) == 0 && len(s.remove) == 0 {
		return nil, nil
	}
	if h == nil {
		return nil, errors.New("applying header rewrites: nil header")
	}
	n := len(s.rewrites)
	// One allocation holds the resolved values (whose one-element sub-slices
	// become the header values) and the returned names.
	buf := make([]string, 2*n)
	vals, names := buf[:n:n], buf[n:]
	for i := range s.rewrites {
		c := &s.rewrites[i]
		if c.ref == "" {
			vals[i] = c.static
			continue
		}
		v, err := c.fill(lookup)
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}

	// Commit. Drop keys that differ from a canonical key only in case
	// (a client, or a handler that wrote the map directly, can plant them);
	// net/http would send them as extra header lines.
	for k := range h {
		for i := range s.rewrites {
			if key := s.rewrites[i].key; k != key && strings.EqualFold(k, key) {
				delete(h, k)
				break
			}
		}
		for _, key := range s.remove {
			if strings.EqualFold(k, key) {
				delete(h, k)
				break
			}
		}
	}
	if n == 0 {
		return nil, nil
	}
	for i := range s.rewrites {
		h[s.rewrites[i].key] = vals[i : i+1 : i+1]
	}
	copy(names, s.names)
	return names, nil
}

// revealSecret resolves ref through lookup. With the template fills below
// it is the only place the secret bytes are read.
func revealSecret(lookup Lookup, ref string) ([]byte, bool) {
	if lookup == nil {
		return nil, false
	}
	sv, ok := lookup.Lookup(ref)
	if !ok {
		return nil, false
	}
	return sv.Reveal(), true
}

// joinParts fills a "{value}" template split at its tokens into parts
// (partsLen: their total length) with secret.
func joinParts(parts []string, partsLen int, secret []byte) string {
	var b strings.Builder
	b.Grow(partsLen + (len(parts)-1)*len(secret))
	b.WriteString(parts[0])
	for _, p := range parts[1:] {
		b.Write(secret)
		b.WriteString(p)
	}
	return b.String()
}

// fill resolves the secret and fills the header template.
func (c *compiled) fill(lookup Lookup) (string, error) {
	secret, ok := revealSecret(lookup, c.ref)
	if !ok {
		return "", &MissingSecretError{Header: c.name, Ref: c.ref}
	}
	if c.basic {
		// RFC 7617: user-id ":" password, base64 of the bytes as they are.
		cred := make([]byte, 0, len(c.basicUser)+1+len(secret))
		cred = append(append(append(cred, c.basicUser...), ':'), secret...)
		return "Basic " + base64.StdEncoding.EncodeToString(cred), nil
	}
	v := joinParts(c.parts, c.partsLen, secret)
	if !httpguts.ValidHeaderFieldValue(v) {
		return "", &InvalidValueError{Header: c.name, Ref: c.ref}
	}
	return v, nil
}
