package rewrite

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/botbox/botbox/internal/config"
)

// TestApplyRemovesHeaders: remove_headers delete every value of the header
// under any spelling of its key, add nothing, leave other headers alone, and
// (like the rewrites) only take effect when every rewrite resolved.
func TestApplyRemovesHeaders(t *testing.T) {
	bearer := []config.HeaderRewrite{{Name: "x-api-key", Value: "{value}", SecretRef: "k"}}
	tests := []struct {
		name      string
		rule      config.Rule
		secrets   fakeSecrets
		in        http.Header
		want      http.Header // nil: unchanged
		wantNames []string
		wantErr   error
	}{
		{
			name: "canonical key, several values",
			rule: config.Rule{RemoveHeaders: []string{"Authorization"}},
			in:   http.Header{"Authorization": {"Bearer sk-dummy", "Basic eA=="}, "Accept": {"*/*"}},
			want: http.Header{"Accept": {"*/*"}},
		},
		{
			name: "configured in lower case, client spelled it in every case",
			rule: config.Rule{RemoveHeaders: []string{"authorization", "api-key"}},
			in: http.Header{
				"Authorization": {"Bearer a"}, "authorization": {"Bearer b"}, "AUTHORIZATION": {"Bearer c"},
				"Api-Key": {"k1"}, "api-key": {"k2"}, "API-KEY": {"k3", "k4"},
				"X-Unrelated": {"kept"},
			},
			want: http.Header{"X-Unrelated": {"kept"}},
		},
		{
			name: "absent headers: nothing added",
			rule: config.Rule{RemoveHeaders: []string{"Authorization", "X-Api-Key"}},
			in:   http.Header{"Accept": {"*/*"}},
			want: http.Header{"Accept": {"*/*"}},
		},
		{
			name:      "removal and injection together (the Anthropic rule)",
			rule:      config.Rule{HeaderRewrites: bearer, RemoveHeaders: []string{"Authorization", "Api-Key"}},
			secrets:   fakeSecrets{"k": "real"},
			in:        http.Header{"Authorization": {"Bearer sk-dummy"}, "X-Api-Key": {"sk-dummy"}, "x-api-key": {"smuggled"}, "Anthropic-Version": {"2026-10-21"}},
			want:      http.Header{"X-Api-Key": {"real"}, "Anthropic-Version": {"2026-10-21"}},
			wantNames: []string{"x-api-key"},
		},
		{
			name:    "missing secret: nothing removed either",
			rule:    config.Rule{HeaderRewrites: bearer, RemoveHeaders: []string{"Authorization"}},
			in:      http.Header{"Authorization": {"Bearer sk-dummy"}},
			wantErr: &MissingSecretError{Header: "x-api-key", Ref: "k"},
		},
		{
			name: "duplicates under case folding count once",
			rule: config.Rule{RemoveHeaders: []string{"X-A", "x-a"}},
			in:   http.Header{"X-A": {"1"}, "X-B": {"2"}},
			want: http.Header{"X-B": {"2"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := CompileRule(tt.rule)
			if err != nil {
				t.Fatalf("CompileRule() error = %v", err)
			}
			h := tt.in.Clone()
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

func TestCompileRule(t *testing.T) {
	t.Parallel()
	if s, err := CompileRule(config.Rule{Host: "a.example"}); s != nil || err != nil {
		t.Errorf("CompileRule(rule without rewrites or removals) = %v, %v; want nil, nil", s, err)
	}
	s, err := CompileRule(config.Rule{
		HeaderRewrites: []config.HeaderRewrite{{Name: "Authorization", Value: "Bearer {value}", SecretRef: "k"}},
		RemoveHeaders:  []string{"x-api-key", "API-KEY", "X-Api-Key"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"X-Api-Key", "Api-Key"}, s.Removed()); d != "" {
		t.Errorf("Removed() (-want +got):\n%s", d)
	}
	s.Removed()[0] = "mutated"
	if s.Removed()[0] != "X-Api-Key" {
		t.Error("Removed returned a shared slice")
	}
	if d := cmp.Diff([]string{"Authorization"}, s.Names()); d != "" {
		t.Errorf("Names() (-want +got):\n%s", d)
	}
	var nilSet *Set
	if nilSet.Removed() != nil {
		t.Error("nil set removes headers")
	}

	errs := []struct {
		name    string
		rule    config.Rule
		wantErr string
	}{
		{"empty name", config.Rule{RemoveHeaders: []string{"X-A", ""}}, "remove_headers[1]: empty header name"},
		{"invalid name", config.Rule{RemoveHeaders: []string{"X Bad"}}, `remove_headers[0]: invalid header name "X Bad"`},
		{"host", config.Rule{RemoveHeaders: []string{"host"}}, `remove_headers[0]: header "host" cannot be removed (reserved/hop-by-hop)`},
		{"connection", config.Rule{RemoveHeaders: []string{"Connection"}}, `remove_headers[0]: header "Connection" cannot be removed (reserved/hop-by-hop)`},
		{"also rewritten", config.Rule{
			HeaderRewrites: []config.HeaderRewrite{{Name: "X-Api-Key", Value: "{value}", SecretRef: "k"}},
			RemoveHeaders:  []string{"x-api-key"},
		}, `remove_headers[0]: header "x-api-key" is also set by header_rewrites`},
		{"bad rewrite", config.Rule{
			HeaderRewrites: []config.HeaderRewrite{{Name: "Host", Value: "x"}},
			RemoveHeaders:  []string{"X-A"},
		}, `compiling header rewrite 0: header "Host" cannot be used in rewrites (reserved/hop-by-hop)`},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := CompileRule(tt.rule)
			if err == nil {
				t.Fatalf("CompileRule() = %v, want error %q", s, tt.wantErr)
			}
			if got := err.Error(); got != tt.wantErr {
				t.Errorf("CompileRule() error = %q, want %q", got, tt.wantErr)
			}
		})
	}
}

// FuzzApplyRemove: for any removable name, Apply leaves no value of it
// under any spelling of the key, keeps the injected header and an
// unrelated one, and returns exactly the rewrite's name.
func FuzzApplyRemove(f *testing.F) {
	f.Add("Authorization")
	f.Add("x-api-key")
	f.Add("API-KEY")
	f.Add("anthropic-api-key")
	f.Add("X-Unrelated-Fuzz")
	f.Add("X-Injected")
	f.Add("x\xffy")
	f.Add("Host")
	f.Fuzz(func(t *testing.T, name string) {
		s, err := CompileRule(config.Rule{
			HeaderRewrites: []config.HeaderRewrite{{Name: "X-Injected", Value: "{value}", SecretRef: "k"}},
			RemoveHeaders:  []string{name},
		})
		if err != nil {
			return
		}
		key := http.CanonicalHeaderKey(name)
		h := http.Header{
			strings.ToLower(name): {"lower"},
			strings.ToUpper(name): {"upper"},
			key:                   {"client-1", "client-2"},
			"X-Unrelated-Fuzz":    {"kept"},
		}
		names, err := s.Apply(h, fakeSecrets{"k": "secret"})
		if err != nil {
			t.Fatalf("Apply() error = %v", err)
		}
		for k := range h {
			if strings.EqualFold(k, name) {
				t.Fatalf("removed header %q survived as %q: %v", name, k, h[k])
			}
		}
		if d := cmp.Diff([]string{"secret"}, h["X-Injected"]); d != "" {
			t.Fatalf("injected header (-want +got):\n%s", d)
		}
		if !strings.EqualFold(name, "X-Unrelated-Fuzz") {
			if d := cmp.Diff([]string{"kept"}, h["X-Unrelated-Fuzz"]); d != "" {
				t.Fatalf("unrelated header changed (-want +got):\n%s", d)
			}
		}
		if d := cmp.Diff([]string{"X-Injected"}, names); d != "" {
			t.Fatalf("names (-want +got):\n%s", d)
		}
	})
}
