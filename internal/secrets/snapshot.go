package secrets

import (
	"maps"
	"slices"
)

// Snapshot is an immutable set of secrets as loaded at one point in time.
// It is safe for concurrent use. A nil *Snapshot is empty.
type Snapshot struct {
	values  map[string]Value
	keys    []string // sorted keys of values
	missing []string // sorted required keys absent from values
}

// NewSnapshot returns a snapshot holding a copy of values, with no required
// keys: an in-memory secret source (botbox explain's placeholder values,
// tests) that needs no directory.
func NewSnapshot(values map[string]Value) *Snapshot {
	return newSnapshot(maps.Clone(values), nil)
}

// newSnapshot takes ownership of values. required must be sorted.
func newSnapshot(values map[string]Value, required []string) *Snapshot {
	if values == nil {
		values = map[string]Value{}
	}
	s := &Snapshot{values: values, keys: slices.Sorted(maps.Keys(values))}
	for _, k := range required {
		if _, ok := values[k]; !ok {
			s.missing = append(s.missing, k)
		}
	}
	return s
}

// Lookup returns the secret stored under the exact key ref. Keys are file
// names, so ref cannot traverse paths.
func (s *Snapshot) Lookup(ref string) (Value, bool) {
	if s == nil {
		return Value{}, false
	}
	v, ok := s.values[ref]
	return v, ok
}

// Keys returns the keys in the snapshot, sorted. The caller owns the slice.
func (s *Snapshot) Keys() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.keys)
}
