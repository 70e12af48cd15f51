package rewrite

// Injected is one secret a Set puts into a request: what response
// scrubbing (package scrub) must mask.
type Injected struct {
	// Ref is the secret_ref.
	Ref string
	// Secret is the secret's bytes (shared with the snapshot: do not
	// modify).
	Secret []byte
	// Header is the whole header value sent ("Bearer <secret>"), or, for
	// a query rewrite, the filled template before query-escaping.
	Header string
}

// Injected returns, for each header rewrite with a secret_ref, in order,
// the secret and the header value Apply sends with lookup, then the same
// for each query rewrite (ApplyQuery); a secret lookup
// does not find is left out (Apply then fails and nothing is sent). Like
// Apply, it is the only other place the secret bytes are read.
// TestInjectedMatchesApply holds that the header values are Apply's.
func (s *Set) Injected(lookup Lookup) []Injected {
	if s == nil {
		return nil
	}
	var out []Injected
	for i := range s.rewrites {
		c := &s.rewrites[i]
		if c.ref == "" || lookup == nil {
			continue
		}
		v, err := c.fill(lookup)
		if err != nil {
			continue
		}
		sv, _ := lookup.Lookup(c.ref)
		out = append(out, Injected{Ref: c.ref, Secret: sv.Reveal(), Header: v})
	}
	for i := range s.queries {
		q := &s.queries[i]
		v, err := q.fill(lookup)
		if err != nil {
			continue
		}
		sv, _ := lookup.Lookup(q.ref)
		out = append(out, Injected{Ref: q.ref, Secret: sv.Reveal(), Header: v})
	}
	return out
}
