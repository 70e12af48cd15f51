package secrets

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSnapshot(t *testing.T) {
	s := newSnapshot(map[string]Value{
		"b": NewValue([]byte("2")),
		"a": NewValue([]byte("1")),
	}, []string{"a", "c", "d"})
	if d := cmp.Diff([]string{"a", "b"}, s.Keys()); d != "" {
		t.Errorf("Keys() (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"c", "d"}, s.missing); d != "" {
		t.Errorf("missing (-want +got):\n%s", d)
	}
	tests := []struct {
		ref    string
		want   string
		wantOK bool
	}{
		{"a", "1", true},
		{"b", "2", true},
		{"c", "", false},
		{"A", "", false},
		{"../a", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		v, ok := s.Lookup(tt.ref)
		if ok != tt.wantOK || string(v.Reveal()) != tt.want {
			t.Errorf("Lookup(%q) = %q, %v, want %q, %v", tt.ref, v.Reveal(), ok, tt.want, tt.wantOK)
		}
	}

	keys := s.Keys()
	keys[0] = "mutated"
	if got := s.Keys()[0]; got != "a" {
		t.Errorf("Keys() shares its slice: after mutation Keys()[0] = %q", got)
	}
}

func TestNilSnapshot(t *testing.T) {
	var s *Snapshot
	if v, ok := s.Lookup("a"); ok || v.Reveal() != nil {
		t.Errorf("nil Lookup = %q, %v, want nothing", v.Reveal(), ok)
	}
	if got := s.Keys(); got != nil {
		t.Errorf("nil Keys() = %q, want nil", got)
	}
}

func BenchmarkSnapshotLookup(b *testing.B) {
	values := map[string]Value{}
	for _, k := range []string{"openai-api-key", "anthropic-api-key", "github-token", "slack-token"} {
		values[k] = NewValue([]byte("value-of-" + k))
	}
	store := &Store{}
	store.snap.Store(newSnapshot(values, nil))
	ref := "anthropic-api-key"
	b.ReportAllocs()
	for b.Loop() {
		v, ok := store.Snapshot().Lookup(ref)
		if !ok || v.Len() == 0 {
			b.Fatal("lookup failed")
		}
	}
}

func TestSnapshotLookupDoesNotAllocate(t *testing.T) {
	store := &Store{}
	store.snap.Store(newSnapshot(map[string]Value{"k": NewValue([]byte("v"))}, nil))
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := store.Snapshot().Lookup("k"); !ok {
			t.Fatal("lookup failed")
		}
	})
	if allocs != 0 {
		t.Errorf("Snapshot().Lookup allocates %v times, want 0", allocs)
	}
}

func TestNewSnapshotCopies(t *testing.T) {
	values := map[string]Value{"b": NewValue([]byte("2")), "a": NewValue([]byte("1"))}
	s := NewSnapshot(values)
	delete(values, "a")
	if v, ok := s.Lookup("a"); !ok || string(v.Reveal()) != "1" {
		t.Errorf("Lookup(a) = %v, %v after the caller's map changed, want 1", v, ok)
	}
	if got := s.Keys(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("Keys() = %v, want [a b]", got)
	}
}
