package rewrite

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/secrets"
)

// fakeSecrets is a Lookup backed by a map.
type fakeSecrets map[string]string

func (f fakeSecrets) Lookup(ref string) (secrets.Value, bool) {
	v, ok := f[ref]
	if !ok {
		return secrets.Value{}, false
	}
	return secrets.NewValue([]byte(v)), true
}

// valueSecrets is a Lookup with prebuilt values, so benchmarks measure
// Apply and not the fake.
type valueSecrets map[string]secrets.Value

func (v valueSecrets) Lookup(ref string) (secrets.Value, bool) {
	sv, ok := v[ref]
	return sv, ok
}

var _ Lookup = fakeSecrets(nil)

// applyCase is one Apply scenario: rewrites applied to a header with the
// given secrets.
type applyCase struct {
	name      string
	rewrites  []config.HeaderRewrite
	secrets   fakeSecrets
	in        http.Header
	want      http.Header // the whole header after Apply; nil means "unchanged"
	wantNames []string
	wantErr   error // compared by type and fields
}

func runApplyCases(t *testing.T, tests []applyCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := Compile(tt.rewrites)
			if err != nil {
				t.Fatalf("Compile() error = %v", err)
			}
			h := tt.in.Clone()
			if h == nil {
				h = http.Header{}
			}
			before := h.Clone()
			names, err := s.Apply(h, tt.secrets)
			if d := cmp.Diff(tt.wantErr, err, cmp.Comparer(sameError)); d != "" {
				t.Errorf("Apply() error (-want +got):\n%s", d)
			}
			want := tt.want
			if want == nil {
				want = before
			}
			if d := cmp.Diff(want, h); d != "" {
				t.Errorf("Apply() header (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantNames, names); d != "" {
				t.Errorf("Apply() names (-want +got):\n%s", d)
			}
		})
	}
}

// sameError compares the package's typed errors by value.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	var am, bm *MissingSecretError
	if errors.As(a, &am) && errors.As(b, &bm) {
		return *am == *bm
	}
	var ai, bi *InvalidValueError
	if errors.As(a, &ai) && errors.As(b, &bi) {
		return *ai == *bi
	}
	return a.Error() == b.Error()
}

func TestBearerFormatString(t *testing.T) {
	runApplyCases(t, []applyCase{{
		name:      "bearer",
		rewrites:  []config.HeaderRewrite{{Name: "Authorization", Value: "Bearer {value}", SecretRef: "openai-api-key"}},
		secrets:   fakeSecrets{"openai-api-key": "sk-12345"},
		in:        http.Header{"Accept": {"*/*"}},
		want:      http.Header{"Accept": {"*/*"}, "Authorization": {"Bearer sk-12345"}},
		wantNames: []string{"Authorization"},
	}, {
		name:      "lowercase configured name is canonicalised, configured name returned",
		rewrites:  []config.HeaderRewrite{{Name: "authorization", Value: "Bearer {value}", SecretRef: "k"}},
		secrets:   fakeSecrets{"k": "sk-12345"},
		want:      http.Header{"Authorization": {"Bearer sk-12345"}},
		wantNames: []string{"authorization"},
	}})
}

func TestPlainValueFormat(t *testing.T) {
	runApplyCases(t, []applyCase{{
		name:      "value only",
		rewrites:  []config.HeaderRewrite{{Name: "x-api-key", Value: "{value}", SecretRef: "anthropic-api-key"}},
		secrets:   fakeSecrets{"anthropic-api-key": "sk-ant-xyz"},
		want:      http.Header{"X-Api-Key": {"sk-ant-xyz"}},
		wantNames: []string{"x-api-key"},
	}, {
		name:      "every placeholder replaced",
		rewrites:  []config.HeaderRewrite{{Name: "X-Twice", Value: "{value}:{value}", SecretRef: "k"}},
		secrets:   fakeSecrets{"k": "s"},
		want:      http.Header{"X-Twice": {"s:s"}},
		wantNames: []string{"X-Twice"},
	}, {
		name:      "placeholder in secret not expanded",
		rewrites:  []config.HeaderRewrite{{Name: "X-K", Value: "<{value}>", SecretRef: "k"}},
		secrets:   fakeSecrets{"k": "{value}"},
		want:      http.Header{"X-K": {"<{value}>"}},
		wantNames: []string{"X-K"},
	}, {
		name:      "empty secret",
		rewrites:  []config.HeaderRewrite{{Name: "X-K", Value: "{value}", SecretRef: "k"}},
		secrets:   fakeSecrets{"k": ""},
		want:      http.Header{"X-K": {""}},
		wantNames: []string{"X-K"},
	}, {
		name:      "obs-text and tab accepted",
		rewrites:  []config.HeaderRewrite{{Name: "X-K", Value: "{value}", SecretRef: "k"}},
		secrets:   fakeSecrets{"k": "a\tb\xffc"},
		want:      http.Header{"X-K": {"a\tb\xffc"}},
		wantNames: []string{"X-K"},
	}})
}

func TestDeleteThenAddRemovesSmuggledHeaders(t *testing.T) {
	rw := []config.HeaderRewrite{{Name: "Authorization", Value: "Bearer {value}", SecretRef: "k"}}
	runApplyCases(t, []applyCase{{
		name:      "two client values",
		rewrites:  rw,
		secrets:   fakeSecrets{"k": "real"},
		in:        http.Header{"Authorization": {"Bearer evil1", "Bearer evil2"}, "Accept": {"*/*"}},
		want:      http.Header{"Authorization": {"Bearer real"}, "Accept": {"*/*"}},
		wantNames: []string{"Authorization"},
	}, {
		name:     "non-canonical keys planted directly in the map",
		rewrites: rw,
		secrets:  fakeSecrets{"k": "real"},
		in: http.Header{
			"authorization": {"Bearer evil1"},
			"AUTHORIZATION": {"Bearer evil2"},
			"AuThOrIzAtIoN": {"Bearer evil3"},
			"Authorization": {"Bearer evil4"},
			"X-Other":       {"kept"},
		},
		want:      http.Header{"Authorization": {"Bearer real"}, "X-Other": {"kept"}},
		wantNames: []string{"Authorization"},
	}, {
		name:      "only non-canonical key present",
		rewrites:  rw,
		secrets:   fakeSecrets{"k": "real"},
		in:        http.Header{"authorization": {"Bearer evil"}},
		want:      http.Header{"Authorization": {"Bearer real"}},
		wantNames: []string{"Authorization"},
	}, {
		name:      "prefix-sharing headers untouched",
		rewrites:  rw,
		secrets:   fakeSecrets{"k": "real"},
		in:        http.Header{"Authorization-Extra": {"x"}, "Proxy-Authorization": {"y"}},
		want:      http.Header{"Authorization": {"Bearer real"}, "Authorization-Extra": {"x"}, "Proxy-Authorization": {"y"}},
		wantNames: []string{"Authorization"},
	}})
}

func TestMissingSecretReturnsError(t *testing.T) {
	runApplyCases(t, []applyCase{{
		name:     "absent ref",
		rewrites: []config.HeaderRewrite{{Name: "Authorization", Value: "Bearer {value}", SecretRef: "missing"}},
		secrets:  fakeSecrets{"other": "x"},
		in:       http.Header{"Authorization": {"Bearer client"}},
		wantErr:  &MissingSecretError{Header: "Authorization", Ref: "missing"},
	}, {
		name:     "nil lookup",
		rewrites: []config.HeaderRewrite{{Name: "X-K", Value: "{value}", SecretRef: "k"}},
		secrets:  nil,
		wantErr:  &MissingSecretError{Header: "X-K", Ref: "k"},
	}, {
		name: "header untouched when a later rewrite fails",
		rewrites: []config.HeaderRewrite{
			{Name: "X-Static", Value: "v"},
			{Name: "Authorization", Value: "Bearer {value}", SecretRef: "present"},
			{Name: "X-Api-Key", Value: "{value}", SecretRef: "missing"},
		},
		secrets: fakeSecrets{"present": "p"},
		in:      http.Header{"Authorization": {"Bearer client"}, "x-static": {"client"}},
		wantErr: &MissingSecretError{Header: "X-Api-Key", Ref: "missing"},
	}})
}

func TestStaticValueNoSecretRef(t *testing.T) {
	runApplyCases(t, []applyCase{{
		name:      "literal",
		rewrites:  []config.HeaderRewrite{{Name: "anthropic-version", Value: "2023-06-01"}},
		in:        http.Header{"Anthropic-Version": {"1999-01-01"}},
		want:      http.Header{"Anthropic-Version": {"2023-06-01"}},
		wantNames: []string{"anthropic-version"},
	}, {
		name:      "literal placeholder kept without secret_ref",
		rewrites:  []config.HeaderRewrite{{Name: "X-Literal", Value: "a {value} b"}},
		secrets:   fakeSecrets{"": "never"},
		want:      http.Header{"X-Literal": {"a {value} b"}},
		wantNames: []string{"X-Literal"},
	}})
}

func TestMultipleRewrites(t *testing.T) {
	runApplyCases(t, []applyCase{{
		name: "two rewrites",
		rewrites: []config.HeaderRewrite{
			{Name: "Authorization", Value: "Bearer {value}", SecretRef: "a"},
			{Name: "X-Custom", Value: "custom-{value}-suffix", SecretRef: "b"},
		},
		secrets:   fakeSecrets{"a": "tok-a", "b": "tok-b"},
		want:      http.Header{"Authorization": {"Bearer tok-a"}, "X-Custom": {"custom-tok-b-suffix"}},
		wantNames: []string{"Authorization", "X-Custom"},
	}, {
		name: "later rewrite of the same header overwrites",
		rewrites: []config.HeaderRewrite{
			{Name: "x-api-key", Value: "first-{value}", SecretRef: "a"},
			{Name: "X-API-KEY", Value: "second"},
		},
		secrets:   fakeSecrets{"a": "tok-a"},
		in:        http.Header{"X-Api-Key": {"client"}},
		want:      http.Header{"X-Api-Key": {"second"}},
		wantNames: []string{"x-api-key", "X-API-KEY"},
	}})
}

func TestApplyInvalidValue(t *testing.T) {
	rw := []config.HeaderRewrite{{Name: "Authorization", Value: "Bearer {value}", SecretRef: "k"}}
	in := http.Header{"Authorization": {"Bearer client"}}
	var tests []applyCase
	for _, secret := range []string{"a\r\nX-Injected: 1", "a\nb", "a\rb", "a\x00b", "a\x7fb", "a\x01b"} {
		tests = append(tests, applyCase{
			name:     fmt.Sprintf("%q", secret),
			rewrites: rw,
			secrets:  fakeSecrets{"k": secret},
			in:       in,
			wantErr:  &InvalidValueError{Header: "Authorization", Ref: "k"},
		})
	}
	runApplyCases(t, tests)
}

func TestApplyEmptySet(t *testing.T) {
	h := http.Header{"Authorization": {"x"}}
	for _, s := range []*Set{nil, mustCompile(t, nil)} {
		names, err := s.Apply(h, nil)
		if names != nil || err != nil {
			t.Errorf("Apply() on empty set = %v, %v, want nil, nil", names, err)
		}
	}
	if d := cmp.Diff(http.Header{"Authorization": {"x"}}, h); d != "" {
		t.Errorf("header changed (-want +got):\n%s", d)
	}
}

func TestApplyNilHeader(t *testing.T) {
	s := mustCompile(t, []config.HeaderRewrite{{Name: "X-A", Value: "v"}})
	if _, err := s.Apply(nil, nil); err == nil {
		t.Error("Apply(nil header) error = nil, want error")
	}
}

// TestErrorsNeverContainSecret is the canary test: no error this package
// returns may carry secret bytes, whichever verb formats it.
func TestErrorsNeverContainSecret(t *testing.T) {
	const canary = "CANARY-7f3c9e1d"
	tests := []struct {
		name     string
		rewrites []config.HeaderRewrite
		secrets  fakeSecrets
	}{
		{"crlf in secret", []config.HeaderRewrite{{Name: "Authorization", Value: "Bearer {value}", SecretRef: "k"}}, fakeSecrets{"k": canary + "\r\nX-Evil: 1"}},
		{"nul in secret", []config.HeaderRewrite{{Name: "X-K", Value: "{value}", SecretRef: "k"}}, fakeSecrets{"k": "\x00" + canary}},
		{"second secret missing", []config.HeaderRewrite{
			{Name: "X-A", Value: "{value}", SecretRef: "a"},
			{Name: "X-B", Value: "{value}", SecretRef: "b"},
		}, fakeSecrets{"a": canary}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := mustCompile(t, tt.rewrites)
			h := http.Header{}
			_, err := s.Apply(h, tt.secrets)
			if err == nil {
				t.Fatal("Apply() error = nil, want error")
			}
			for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
				if got := fmt.Sprintf(verb, err); strings.Contains(got, canary) || strings.Contains(got, fmt.Sprintf("%x", canary)) {
					t.Errorf("Sprintf(%s, err) = %s, contains the secret", verb, got)
				}
			}
			if len(h) != 0 {
				t.Errorf("header modified on error: %v", h)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{&MissingSecretError{Header: "Authorization", Ref: "openai-api-key"}, `secret "openai-api-key" for header "Authorization" not found`},
		{&InvalidValueError{Header: "Authorization", Ref: "openai-api-key"}, `invalid value for header "Authorization" from secret "openai-api-key"`},
		{&InvalidValueError{Header: "X-Static"}, `invalid static value for header "X-Static"`},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name     string
		rewrites []config.HeaderRewrite
		wantErr  string
	}{
		{"empty name", []config.HeaderRewrite{{Name: "", Value: "v"}}, "compiling header rewrite 0: empty header name"},
		{"name with space", []config.HeaderRewrite{{Name: "X Bad", Value: "v"}}, `compiling header rewrite 0: invalid header name "X Bad"`},
		{"name with colon", []config.HeaderRewrite{{Name: "X-A", Value: "v"}, {Name: "X:B", Value: "v"}}, `compiling header rewrite 1: invalid header name "X:B"`},
		{"host", []config.HeaderRewrite{{Name: "Host", Value: "evil.example"}}, `compiling header rewrite 0: header "Host" cannot be used in rewrites (reserved/hop-by-hop)`},
		{"transfer-encoding", []config.HeaderRewrite{{Name: "transfer-ENCODING", Value: "chunked"}}, `compiling header rewrite 0: header "transfer-ENCODING" cannot be used in rewrites (reserved/hop-by-hop)`},
		{"proxy-authorization", []config.HeaderRewrite{{Name: "Proxy-Authorization", Value: "{value}", SecretRef: "k"}}, `compiling header rewrite 0: header "Proxy-Authorization" cannot be used in rewrites (reserved/hop-by-hop)`},
		{"static value with crlf", []config.HeaderRewrite{{Name: "X-A", Value: "a\r\nb"}}, `compiling header rewrite 0: invalid static value for header "X-A"`},
		{"template with lf", []config.HeaderRewrite{{Name: "X-A", Value: "{value}\n", SecretRef: "k"}}, `compiling header rewrite 0: header "X-A": invalid characters in value template for secret "k"`},
		{"secret_ref without placeholder", []config.HeaderRewrite{{Name: "X-A", Value: "Bearer", SecretRef: "k"}}, `compiling header rewrite 0: header "X-A": value has no {value} placeholder for secret "k"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := Compile(tt.rewrites)
			if err == nil {
				t.Fatalf("Compile() = %v, want error %q", s, tt.wantErr)
			}
			if got := err.Error(); got != tt.wantErr {
				t.Errorf("Compile() error = %q, want %q", got, tt.wantErr)
			}
		})
	}
	// The static-value error is typed, so the config layer can match it.
	_, err := Compile([]config.HeaderRewrite{{Name: "X-A", Value: "a\rb"}})
	if _, ok := errors.AsType[*InvalidValueError](err); !ok {
		t.Errorf("Compile() error = %v, want *InvalidValueError", err)
	}
}

func TestNamesAndSecretRefs(t *testing.T) {
	s := mustCompile(t, []config.HeaderRewrite{
		{Name: "Authorization", Value: "Bearer {value}", SecretRef: "b"},
		{Name: "anthropic-version", Value: "2023-06-01"},
		{Name: "X-Api-Key", Value: "{value}", SecretRef: "a"},
		{Name: "X-Again", Value: "{value}", SecretRef: "b"},
	})
	if d := cmp.Diff([]string{"Authorization", "anthropic-version", "X-Api-Key", "X-Again"}, s.Names()); d != "" {
		t.Errorf("Names() (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"a", "b"}, s.SecretRefs()); d != "" {
		t.Errorf("SecretRefs() (-want +got):\n%s", d)
	}
	if got := s.Len(); got != 4 {
		t.Errorf("Len() = %d, want 4", got)
	}
	// Callers get copies.
	s.Names()[0] = "mutated"
	s.SecretRefs()[0] = "mutated"
	if s.Names()[0] != "Authorization" || s.SecretRefs()[0] != "a" {
		t.Error("Names/SecretRefs returned shared slices")
	}
	var nilSet *Set
	if nilSet.Names() != nil || nilSet.SecretRefs() != nil || nilSet.Len() != 0 {
		t.Error("nil set is not empty")
	}
}

// TestApplyResultIndependent checks that the returned names and the header
// values do not alias each other.
func TestApplyResultIndependent(t *testing.T) {
	s := mustCompile(t, []config.HeaderRewrite{{Name: "X-A", Value: "a"}, {Name: "X-B", Value: "b"}})
	h := http.Header{}
	names, err := s.Apply(h, nil)
	if err != nil {
		t.Fatal(err)
	}
	names[0], names[1] = "mutated", "mutated"
	_ = append(names, "x")
	h.Add("X-A", "added")
	want := http.Header{"X-A": {"a", "added"}, "X-B": {"b"}}
	if d := cmp.Diff(want, h); d != "" {
		t.Errorf("header (-want +got):\n%s", d)
	}
}

// TestApplyConcurrent shares one Set between goroutines (run with -race).
func TestApplyConcurrent(t *testing.T) {
	s := mustCompile(t, []config.HeaderRewrite{
		{Name: "Authorization", Value: "Bearer {value}", SecretRef: "k"},
		{Name: "X-Static", Value: "v"},
	})
	lookup := fakeSecrets{"k": "tok"}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				h := http.Header{"authorization": {"evil"}}
				if _, err := s.Apply(h, lookup); err != nil {
					t.Error(err)
					return
				}
				if got := h.Get("Authorization"); got != "Bearer tok" || len(h) != 2 {
					t.Errorf("header after Apply = %v", h)
					return
				}
			}
		})
	}
	wg.Wait()
}

func mustCompile(t testing.TB, rs []config.HeaderRewrite) *Set {
	t.Helper()
	s, err := Compile(rs)
	if err != nil {
		t.Fatalf("Compile() error = %v", err)
	}
	return s
}

// FuzzApply: no panic; errors never carry the secret; on success the header
// has exactly one value, the template with every {value} replaced.
func FuzzApply(f *testing.F) {
	f.Add("Authorization", "Bearer {value}", []byte("sk-12345"))
	f.Add("x-api-key", "{value}", []byte("sk-ant"))
	f.Add("X-Custom", "custom-{value}-suffix", []byte("tok"))
	f.Add("X-Twice", "{value}{value}", []byte("{value}"))
	f.Add("Authorization", "Bearer {value}", []byte("a\r\nX-Injected: 1"))
	f.Add("Authorization", "Bearer {value}", []byte("\x00"))
	f.Add("X-K", "{value}", []byte(""))
	f.Add("X-K", "{val{value}ue}", []byte("\xff\t"))
	f.Add("X K", "{value}", []byte("x"))
	f.Add("X-K", "no placeholder", []byte("x"))
	f.Fuzz(func(t *testing.T, name, template string, secret []byte) {
		const ref = "ref"
		s, err := Compile([]config.HeaderRewrite{{Name: name, Value: template, SecretRef: ref}})
		if err != nil {
			return
		}
		key := http.CanonicalHeaderKey(name)
		h := http.Header{
			strings.ToLower(name): {"smuggled-lower"},
			strings.ToUpper(name): {"smuggled-upper"},
			key:                   {"client-1", "client-2"},
			"X-Unrelated-Fuzz":    {"kept"},
		}
		before := h.Clone()
		names, err := s.Apply(h, fakeSecrets{ref: string(secret)})
		if err != nil {
			var ive *InvalidValueError
			if !errors.As(err, &ive) {
				t.Fatalf("Apply() error = %v (%T), want *InvalidValueError", err, err)
			}
			// The message must be exactly the one built from header and
			// ref alone, so it cannot carry any secret byte.
			want := (&InvalidValueError{Header: name, Ref: ref}).Error()
			if got := err.Error(); got != want {
				t.Fatalf("Apply() error = %q, want %q", got, want)
			}
			if d := cmp.Diff(before, h); d != "" {
				t.Fatalf("header changed on error (-want +got):\n%s", d)
			}
			return
		}
		wantValue := strings.ReplaceAll(template, Placeholder, string(secret))
		if d := cmp.Diff([]string{wantValue}, h[key]); d != "" {
			t.Fatalf("h[%q] (-want +got):\n%s", key, d)
		}
		for k := range h {
			if k != key && strings.EqualFold(k, key) {
				t.Fatalf("key %q survived next to %q", k, key)
			}
		}
		if d := cmp.Diff([]string{"kept"}, h["X-Unrelated-Fuzz"]); d != "" && !strings.EqualFold(key, "X-Unrelated-Fuzz") {
			t.Fatalf("unrelated header changed (-want +got):\n%s", d)
		}
		if d := cmp.Diff([]string{name}, names); d != "" {
			t.Fatalf("names (-want +got):\n%s", d)
		}
	})
}

func BenchmarkApply(b *testing.B) {
	benches := []struct {
		name     string
		rewrites []config.HeaderRewrite
	}{
		{"secret", []config.HeaderRewrite{{Name: "Authorization", Value: "Bearer {value}", SecretRef: "openai-api-key"}}},
		{"static", []config.HeaderRewrite{{Name: "anthropic-version", Value: "2023-06-01"}}},
		{"anthropic", []config.HeaderRewrite{
			{Name: "x-api-key", Value: "{value}", SecretRef: "anthropic-api-key"},
			{Name: "anthropic-version", Value: "2023-06-01"},
		}},
		{"four-secrets", []config.HeaderRewrite{
			{Name: "Authorization", Value: "Bearer {value}", SecretRef: "openai-api-key"},
			{Name: "x-api-key", Value: "{value}", SecretRef: "anthropic-api-key"},
			{Name: "X-Org", Value: "org-{value}", SecretRef: "openai-api-key"},
			{Name: "X-Project", Value: "{value}", SecretRef: "anthropic-api-key"},
		}},
	}
	lookup := valueSecrets{
		"openai-api-key":    secrets.NewValue([]byte("sk-" + strings.Repeat("x", 48))),
		"anthropic-api-key": secrets.NewValue([]byte("sk-ant-" + strings.Repeat("y", 90))),
	}
	smuggled := []string{"Bearer smuggled"}
	for _, bb := range benches {
		b.Run(bb.name, func(b *testing.B) {
			s := mustCompile(b, bb.rewrites)
			h := http.Header{
				"Accept":          {"*/*"},
				"User-Agent":      {"agent/1.0"},
				"Content-Type":    {"application/json"},
				"Accept-Encoding": {"gzip"},
				"Authorization":   {"Bearer client"},
			}
			b.ReportAllocs()
			for b.Loop() {
				h["authorization"] = smuggled // a non-canonical key to delete each time
				if _, err := s.Apply(h, lookup); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(testing.AllocsPerRun(100, func() {
				h["authorization"] = smuggled
				_, _ = s.Apply(h, lookup)
			}))/float64(len(bb.rewrites)), "allocs/rewrite")
		})
	}
}
