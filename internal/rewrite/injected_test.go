package rewrite

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/botbox/botbox/internal/config"
)

// TestInjectedMatchesApply: Injected names each secret rewrite's ref,
// secret and the exact header value Apply sends; static values and
// secrets the lookup lacks are left out.
func TestInjectedMatchesApply(t *testing.T) {
	s, err := Compile([]config.HeaderRewrite{
		{Name: "Authorization", Value: "Bearer {value}", SecretRef: "a"},
		{Name: "X-Version", Value: "2023-06-01"},
		{Name: "X-Key", Value: "{value}", SecretRef: "b"},
		{Name: "X-Gone", Value: "{value}", SecretRef: "missing"},
	})
	if err != nil {
		t.Fatal(err)
	}
	lookup := fakeSecrets{"a": "tok-a", "b": "tok-b"}
	got := s.Injected(lookup)
	want := []Injected{{Ref: "a", Secret: []byte("tok-a"), Header: "Bearer tok-a"}, {Ref: "b", Secret: []byte("tok-b"), Header: "tok-b"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Injected (-want +got):\n%s", d)
	}
	s2, _ := Compile([]config.HeaderRewrite{{Name: "Authorization", Value: "Bearer {value}", SecretRef: "a"}})
	h := http.Header{}
	if _, err := s2.Apply(h, lookup); err != nil {
		t.Fatal(err)
	}
	if inj := s2.Injected(lookup); len(inj) != 1 || inj[0].Header != h.Get("Authorization") {
		t.Errorf("Injected %v, Apply sent %q", inj, h.Get("Authorization"))
	}
	var nilSet *Set
	if nilSet.Injected(lookup) != nil {
		t.Error("nil set injects something")
	}
}
