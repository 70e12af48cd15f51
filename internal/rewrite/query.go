package rewrite

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/echo"
)

// compiledQuery is one precompiled query rewrite.
type compiledQuery struct {
	name     string // parameter name, exact
	ref      string
	parts    []string // literal pieces around each {value}
	partsLen int
}

// MissingQuerySecretError reports a query rewrite whose secret_ref is
// absent from the secret snapshot.
type MissingQuerySecretError struct {
	// Param is the parameter name; Ref the secret_ref not found.
	Param, Ref string
}

func (e *MissingQuerySecretError) Error() string {
	return fmt.Sprintf("secret %q for query parameter %q not found", e.Ref, e.Param)
}

// compileQueries validates and precompiles query_rewrites into s. It
// refuses what config validation refuses: a name that is not
// config.ValidQueryParamName, a name set twice, a missing secret_ref, a
// template ParseTemplate refuses (no {basic:...} in a query).
func (s *Set) compileQueries(qs []config.QueryRewrite) error {
	for i, q := range qs {
		switch {
		case !config.ValidQueryParamName(q.Name):
			return fmt.Errorf("query rewrite %d: invalid parameter name %q", i, echo.Clip(q.Name))
		case q.SecretRef == "":
			return fmt.Errorf("query rewrite %d (%s): no secret_ref", i, q.Name)
		case slices.ContainsFunc(s.queries, func(c compiledQuery) bool { return c.name == q.Name }):
			return fmt.Errorf("query rewrite %d: parameter %q is set twice", i, q.Name)
		}
		t, err := config.ParseTemplate(q.Value, false)
		if err != nil {
			return fmt.Errorf("query rewrite %d (%s), secret %q: %w", i, q.Name, q.SecretRef, err)
		}
		c := compiledQuery{name: q.Name, ref: q.SecretRef, parts: t.Parts}
		for _, p := range c.parts {
			c.partsLen += len(p)
		}
		s.queries = append(s.queries, c)
		if !slices.Contains(s.refs, q.SecretRef) {
			s.refs = append(s.refs, q.SecretRef)
		}
	}
	slices.Sort(s.refs)
	return nil
}

// QueryNames returns the query_rewrites' parameter names, in order.
func (s *Set) QueryNames() []string {
	if s == nil {
		return nil
	}
	out := make([]string, len(s.queries))
	for i, q := range s.queries {
		out[i] = q.name
	}
	return out
}

// HeaderAccepts reports whether a request header named name (any case)
// may carry the placeholder of secret ref: one of the set's header
// rewrites replaces that header with a value from ref. Apply deletes
// every value the client sent under that name (any case), so the
// client's bytes never reach the origin. TestHeaderAccepts holds it.
func (s *Set) HeaderAccepts(name, ref string) bool {
	if s == nil {
		return false
	}
	for i := range s.rewrites {
		if c := &s.rewrites[i]; c.ref == ref && strings.EqualFold(c.key, name) {
			return true
		}
	}
	return false
}

// QueryAccepts reports whether a query parameter whose decoded name is
// name may carry the placeholder of secret ref: one of the set's query
// rewrites replaces every parameter of that exact name with a value from
// ref.
func (s *Set) QueryAccepts(name, ref string) bool {
	if s == nil {
		return false
	}
	for _, q := range s.queries {
		if q.ref == ref && q.name == name {
			return true
		}
	}
	return false
}

// QueryParamName returns the decoded name of one '&'-separated piece of a
// raw query (the text before its first '=', query-unescaped as
// url.ParseQuery does: "+" is a space). ok is false when the name does not
// unescape: such a piece matches no query rewrite and is left as sent.
func QueryParamName(piece string) (name string, ok bool) {
	raw, _, _ := strings.Cut(piece, "=")
	n, err := url.QueryUnescape(raw)
	if err != nil {
		return "", false
	}
	return n, true
}

// SplitQuery splits rawQuery into what ApplyQuery keeps — the pieces whose
// decoded name no query rewrite names, '&'-joined in their order, byte
// for byte as sent — and the pieces it deletes, with their decoded names.
// The tripwire reads both: a placeholder may only sit in a deleted piece
// whose rewrite injects that placeholder's secret.
func (s *Set) SplitQuery(rawQuery string) (kept string, deleted []QueryPiece) {
	if s == nil || len(s.queries) == 0 || rawQuery == "" {
		return rawQuery, nil
	}
	var b strings.Builder
	first := true
	for piece := range strings.SplitSeq(rawQuery, "&") {
		if name, ok := QueryParamName(piece); ok && slices.ContainsFunc(s.queries, func(q compiledQuery) bool { return q.name == name }) {
			deleted = append(deleted, QueryPiece{Name: name, Raw: piece})
			continue
		}
		if !first {
			b.WriteByte('&')
		}
		b.WriteString(piece)
		first = false
	}
	return b.String(), deleted
}

// QueryPiece is one parameter of a raw query: its decoded Name and the
// Raw text between the separators.
type QueryPiece struct {
	Name, Raw string
}

// ApplyQuery returns rawQuery with every parameter a query rewrite names
// deleted (compared exactly with each piece's decoded name, every
// occurrence) and then, for each query rewrite in order, one parameter
// "name=<query-escaped filled template>" appended. Every value is
// resolved first: on error (*MissingQuerySecretError) nothing is returned
// and the caller must not send the request. The names added are returned
// in order. A set without query rewrites returns rawQuery unchanged.
// TestApplyQuery and FuzzApplyQuery hold it.
func (s *Set) ApplyQuery(rawQuery string, lookup Lookup) (string, []string, error) {
	if s == nil || len(s.queries) == 0 {
		return rawQuery, nil, nil
	}
	vals := make([]string, len(s.queries))
	for i := range s.queries {
		v, err := s.queries[i].fill(lookup)
		if err != nil {
			return "", nil, err
		}
		vals[i] = v
	}
	kept, _ := s.SplitQuery(rawQuery)
	var b strings.Builder
	b.WriteString(kept)
	for i, q := range s.queries {
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(q.name) // unreserved characters only (config.ValidQueryParamName)
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(vals[i]))
	}
	return b.String(), s.QueryNames(), nil
}

// fill resolves the secret and fills the template (unescaped).
func (q *compiledQuery) fill(lookup Lookup) (string, error) {
	secret, ok := revealSecret(lookup, q.ref)
	if !ok {
		return "", &MissingQuerySecretError{Param: q.name, Ref: q.ref}
	}
	return joinParts(q.parts, q.partsLen, secret), nil
}
