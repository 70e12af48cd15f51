package rewrite

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/config"
)

func queryRule(qs ...config.QueryRewrite) config.Rule {
	return config.Rule{Host: "maps.example.test", QueryRewrites: qs}
}

func mustCompileRule(t testing.TB, r config.Rule) *Set {
	t.Helper()
	s, err := CompileRule(r)
	if err != nil {
		t.Fatalf("CompileRule: %v", err)
	}
	return s
}

// TestApplyQuery: every parameter whose decoded name is exactly the
// rewrite's is deleted, the rest is kept byte for byte, then one
// parameter with the query-escaped filled template is appended per
// rewrite, in order.
func TestApplyQuery(t *testing.T) {
	set := mustCompileRule(t, queryRule(
		config.QueryRewrite{Name: "key", Value: "{value}", SecretRef: "g"},
		config.QueryRewrite{Name: "sig", Value: "v1.{value}", SecretRef: "s"},
	))
	sec := fakeSecrets{"g": "AIza-real/+&=", "s": "S3"}
	const key = "key=AIza-real%2F%2B%26%3D"
	tests := []struct{ in, want string }{
		{"", key + "&sig=v1.S3"},
		{"a=1", "a=1&" + key + "&sig=v1.S3"},
		{"key=PH&a=1&key=x&sig=old", "a=1&" + key + "&sig=v1.S3"},
		{"%6Bey=PH&a=%zz&b", "a=%zz&b&" + key + "&sig=v1.S3"},                  // escaped name deleted; undecodable kept
		{"KEY=x&key2=y&a;key=z", "KEY=x&key2=y&a;key=z&" + key + "&sig=v1.S3"}, // other names kept as sent
		{"key", key + "&sig=v1.S3"},                                            // a bare name is the parameter too
		{"&&a=1&", "&&a=1&&" + key + "&sig=v1.S3"},
	}
	for _, tt := range tests {
		got, names, err := set.ApplyQuery(tt.in, sec)
		if err != nil || got != tt.want || !slices.Equal(names, []string{"key", "sig"}) {
			t.Errorf("ApplyQuery(%q) = %q, %v, %v; want %q", tt.in, got, names, err, tt.want)
		}
		vals, err := url.ParseQuery(strings.ReplaceAll(got, ";", "%3B"))
		if err == nil && (len(vals["key"]) != 1 || vals["key"][0] != "AIza-real/+&=") {
			t.Errorf("ApplyQuery(%q): key = %q, want exactly the secret", tt.in, vals["key"])
		}
	}
	// A missing secret: an error naming parameter and ref, nothing else.
	_, _, err := set.ApplyQuery("a=1", fakeSecrets{"g": "x"})
	var m *MissingQuerySecretError
	if !errors.As(err, &m) || m.Param != "sig" || m.Ref != "s" {
		t.Fatalf("missing secret: err = %v", err)
	}
	// A set without query rewrites leaves the query alone.
	hdr := mustCompileRule(t, config.Rule{HeaderRewrites: []config.HeaderRewrite{{Name: "X", Value: "{value}", SecretRef: "g"}}})
	if got, names, err := hdr.ApplyQuery("key=1", sec); got != "key=1" || names != nil || err != nil {
		t.Errorf("header-only set: %q %v %v", got, names, err)
	}
	if got, _, _ := (*Set)(nil).ApplyQuery("key=1", sec); got != "key=1" {
		t.Errorf("nil set: %q", got)
	}
}

// TestSplitQuery: what SplitQuery keeps is what ApplyQuery keeps, and the
// deleted pieces carry their decoded names.
func TestSplitQuery(t *testing.T) {
	set := mustCompileRule(t, queryRule(config.QueryRewrite{Name: "key", Value: "{value}", SecretRef: "g"}))
	kept, del := set.SplitQuery("a=1&key=P&%6Bey=Q&b=2")
	if kept != "a=1&b=2" || len(del) != 2 || del[0] != (QueryPiece{"key", "key=P"}) || del[1] != (QueryPiece{"key", "%6Bey=Q"}) {
		t.Fatalf("SplitQuery = %q, %v", kept, del)
	}
}

// TestAccepts: HeaderAccepts names the headers a rewrite with that secret
// replaces (any case); QueryAccepts the parameters (exact name).
func TestAccepts(t *testing.T) {
	set := mustCompileRule(t, config.Rule{
		HeaderRewrites: []config.HeaderRewrite{
			{Name: "Authorization", Value: "{basic:x-access-token}", SecretRef: "gh"},
			{Name: "X-Static", Value: "s"},
		},
		RemoveHeaders: []string{"X-Api-Key"},
		QueryRewrites: []config.QueryRewrite{{Name: "key", Value: "{value}", SecretRef: "g"}},
	})
	for _, tt := range []struct {
		name, ref string
		want      bool
	}{
		{"Authorization", "gh", true}, {"authorization", "gh", true}, {"Authorization", "g", false},
		{"X-Static", "gh", false}, {"X-Api-Key", "gh", false}, {"Cookie", "gh", false},
	} {
		if got := set.HeaderAccepts(tt.name, tt.ref); got != tt.want {
			t.Errorf("HeaderAccepts(%q, %q) = %v", tt.name, tt.ref, got)
		}
	}
	for _, tt := range []struct {
		name, ref string
		want      bool
	}{{"key", "g", true}, {"KEY", "g", false}, {"key", "gh", false}, {"k", "g", false}} {
		if got := set.QueryAccepts(tt.name, tt.ref); got != tt.want {
			t.Errorf("QueryAccepts(%q, %q) = %v", tt.name, tt.ref, got)
		}
	}
	if (*Set)(nil).HeaderAccepts("Authorization", "gh") || (*Set)(nil).QueryAccepts("key", "g") {
		t.Error("nil set accepts")
	}
	if got := set.SecretRefs(); !slices.Equal(got, []string{"g", "gh"}) {
		t.Errorf("SecretRefs = %v", got)
	}
}

// TestBasicTemplate: {basic:USER} sends Basic base64(USER:secret), for
// any secret bytes (':' included), and Injected reports that header.
func TestBasicTemplate(t *testing.T) {
	for _, user := range []string{"x-access-token", ""} {
		set := mustCompile(t, []config.HeaderRewrite{{Name: "Authorization", Value: "{basic:" + user + "}", SecretRef: "gh"}})
		h := http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("x:placeholder"))}}
		sec := fakeSecrets{"gh": "ghp_a:b"}
		if _, err := set.Apply(h, sec); err != nil {
			t.Fatal(err)
		}
		want := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":ghp_a:b"))
		if got := h.Values("Authorization"); len(got) != 1 || got[0] != want {
			t.Errorf("user %q: Authorization = %q, want %q", user, got, want)
		}
		if inj := set.Injected(sec); len(inj) != 1 || inj[0].Header != want || string(inj[0].Secret) != "ghp_a:b" {
			t.Errorf("user %q: Injected = %+v", user, inj)
		}
	}
}

// TestCompileQueryErrors: CompileRule refuses what config validation
// refuses, never quoting a value.
func TestCompileQueryErrors(t *testing.T) {
	for _, q := range [][]config.QueryRewrite{
		{{Name: "", Value: "{value}", SecretRef: "g"}},
		{{Name: "a&b", Value: "{value}", SecretRef: "g"}},
		{{Name: "key", Value: "{value}"}},
		{{Name: "key", Value: "secret-literal", SecretRef: "g"}},
		{{Name: "key", Value: "{basic:u}", SecretRef: "g"}},
		{{Name: "key", Value: "{value}", SecretRef: "g"}, {Name: "key", Value: "{value}", SecretRef: "h"}},
	} {
		_, err := CompileRule(queryRule(q...))
		if err == nil {
			t.Errorf("CompileRule(%+v) succeeded", q)
		} else if strings.Contains(err.Error(), "secret-literal") {
			t.Errorf("error quotes the value: %v", err)
		}
	}
}

// TestInjectedQuery: Injected lists query rewrites after header rewrites.
func TestInjectedQuery(t *testing.T) {
	set := mustCompileRule(t, config.Rule{
		HeaderRewrites: []config.HeaderRewrite{{Name: "X-A", Value: "{value}", SecretRef: "a"}},
		QueryRewrites:  []config.QueryRewrite{{Name: "key", Value: "p-{value}", SecretRef: "g"}},
	})
	inj := set.Injected(fakeSecrets{"a": "AAA", "g": "GGG"})
	if len(inj) != 2 || inj[1].Ref != "g" || string(inj[1].Secret) != "GGG" || inj[1].Header != "p-GGG" {
		t.Fatalf("Injected = %+v", inj)
	}
}

// FuzzApplyQuery holds, for any raw query: the result keeps the pieces
// whose decoded name is not "key" in order and byte for byte, ends with
// exactly one "key" parameter carrying the secret, and has no other.
func FuzzApplyQuery(f *testing.F) {
	for _, s := range []string{"", "key=1", "a=1&key=2&KEY=3", "%6Bey=x&%zz", "&&", "key&key=&=key", "a;key=1"} {
		f.Add(s)
	}
	set := mustCompileRule(f, queryRule(config.QueryRewrite{Name: "key", Value: "{value}", SecretRef: "g"}))
	sec := fakeSecrets{"g": "s&=+%"}
	f.Fuzz(func(t *testing.T, raw string) {
		got, _, err := set.ApplyQuery(raw, sec)
		if err != nil {
			t.Fatal(err)
		}
		pieces := strings.Split(got, "&")
		if last := pieces[len(pieces)-1]; last != "key="+url.QueryEscape("s&=+%") {
			t.Fatalf("last piece %q", last)
		}
		var kept []string
		if raw != "" {
			for p := range strings.SplitSeq(raw, "&") {
				if n, ok := QueryParamName(p); !ok || n != "key" {
					kept = append(kept, p)
				}
			}
		}
		if strings.Join(pieces[:len(pieces)-1], "&") != strings.Join(kept, "&") {
			t.Fatalf("kept %q, want %q", pieces[:len(pieces)-1], kept)
		}
		for _, p := range pieces[:len(pieces)-1] {
			if n, ok := QueryParamName(p); ok && n == "key" {
				t.Fatalf("a %q piece survived", p)
			}
		}
	})
}
