package placeholder

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/secrets"
)

// testTable holds placeholders of two secrets, one of them with characters
// that encodings change.
func testTable(t *testing.T) (tab *Table, openai, other string) {
	t.Helper()
	var err error
	openai, err = Derive(testKey, "openai-api-key", []byte(formats[0].value))
	if err != nil {
		t.Fatal(err)
	}
	other, err = Derive(testKey, "odd-key", []byte("ab+cd/ef=gh\"ij<kl>mn&op"+rep("q", 8)))
	if err != nil {
		t.Fatal(err)
	}
	return NewTable([]Entry{{Ref: "odd-key", Placeholder: other, Current: true}, {Ref: "openai-api-key", Placeholder: openai, Current: true}}), openai, other
}

func TestFindEveryForm(t *testing.T) {
	t.Parallel()
	tab, openai, other := testTable(t)
	jsonOf := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	type tc struct {
		name, text, ref string
		form            Form
	}
	tests := []tc{
		{"literal", "Authorization: Bearer " + openai, "openai-api-key", FormLiteral},
		{"query escaped", "q=" + url.QueryEscape(other), "odd-key", FormPercent},
		{"path escaped", "/x/" + url.PathEscape(other), "odd-key", FormPercent},
		{"json escaped", `{"k":` + jsonOf(other) + `}`, "odd-key", FormJSON},
	}
	// Base64 at every alignment, standard and URL-safe, padded or not,
	// with text after the placeholder or none: Basic auth is one case.
	for _, p := range []struct{ ref, v string }{{"openai-api-key", openai}, {"odd-key", other}} {
		for _, before := range []string{"", "u", "us", "user:", "x:"} {
			for _, after := range []string{"", "!", "?x", "\n{}"} {
				data := []byte(before + p.v + after)
				for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
					tests = append(tests, tc{"base64 " + before + "|" + after, "Basic " + enc.EncodeToString(data), p.ref, FormBase64})
				}
			}
		}
	}
	for _, tt := range tests {
		ref, form, found := tab.FindString(tt.text, nil)
		if !found || ref != tt.ref {
			t.Errorf("%s: FindString = %q, %v, want %q", tt.name, ref, found, tt.ref)
			continue
		}
		if form != tt.form && !(tt.form == FormBase64 && form == FormBase64) {
			t.Errorf("%s: form = %s, want %s", tt.name, form, tt.form)
		}
		if ref, _, found := tab.Find([]byte(tt.text), nil); !found || ref != tt.ref {
			t.Errorf("%s: Find = %q, %v", tt.name, ref, found)
		}
		// A request allowed to carry the secret is not tripped by it.
		if _, _, found := tab.FindString(tt.text, func(r string) bool { return r == tt.ref }); found {
			t.Errorf("%s: found though allowed", tt.name)
		}
	}
	for _, clean := range []string{"", "Bearer sk-proj-", openai[:len(openai)-1], strings.ToUpper(openai)} {
		if ref, _, found := tab.FindString(clean, nil); found {
			t.Errorf("FindString(%.20q…) found %q", clean, ref)
		}
	}
}

func TestFindURLDecodesOnce(t *testing.T) {
	t.Parallel()
	tab, openai, _ := testTable(t)
	// Every byte percent-encoded: only the decoding finds it.
	var enc strings.Builder
	for i := 0; i < len(openai); i++ {
		enc.WriteString("%" + strings.ToUpper(string("0123456789abcdef"[openai[i]>>4])+string("0123456789abcdef"[openai[i]&15])))
	}
	for _, raw := range []string{"/v1/x?key=" + openai, "/v1/" + openai, "/v1/x?key=" + enc.String(), "/" + enc.String()} {
		u, err := url.ParseRequestURI(raw)
		if err != nil {
			t.Fatal(err)
		}
		if ref, _, found := tab.FindURL(u, nil); !found || ref != "openai-api-key" {
			t.Errorf("FindURL(%.30q…) = %q, %v", raw, ref, found)
		}
	}
	u, _ := url.ParseRequestURI("/v1/chat?stream=true")
	if _, _, found := tab.FindURL(u, nil); found {
		t.Error("clean URL found")
	}
}

func TestInspectName(t *testing.T) {
	t.Parallel()
	tab, openai, _ := testTable(t)
	m := &Manager{}
	m.table.Store(tab)
	for _, name := range []string{openai + ".evil.example", strings.ToLower(openai) + ".evil.example.", "x." + strings.ToUpper(openai)} {
		if ref, found := m.InspectName(name); !found || ref != "openai-api-key" {
			t.Errorf("InspectName(%.20q…) = %q, %v", name, ref, found)
		}
	}
	for _, name := range []string{"api.openai.com", "sk-proj-x.example", openai[:30] + "." + openai[30:]} {
		if ref, found := m.InspectName(name); found {
			t.Errorf("InspectName(%q) found %q", name, ref)
		}
	}
	if _, found := (*Table)(nil).InspectName("x"); found {
		t.Error("nil table found a name")
	}
}

func snapshot(kv ...string) *secrets.Snapshot {
	m := map[string]secrets.Value{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = secrets.NewValue([]byte(kv[i+1]))
	}
	return secrets.NewSnapshot(m)
}

// TestFindHeaderPerHeader: a placeholder is accepted only in the header
// (any key case) that allowed names for its own secret; the same
// placeholder in another header, the other secret's placeholder in that
// header, and a placeholder in a header name are found.
func TestFindHeaderPerHeader(t *testing.T) {
	t.Parallel()
	tab, openai, other := testTable(t)
	allowed := func(name, ref string) bool {
		return strings.EqualFold(name, "Authorization") && ref == "openai-api-key"
	}
	basic := func(s string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+s))
	}
	tests := []struct {
		name    string
		h       http.Header
		wantRef string // "" for none found
	}{
		{"own header", http.Header{"Authorization": {"Bearer " + openai}}, ""},
		{"own header, Basic", http.Header{"Authorization": {basic(openai)}}, ""},
		{"own header, odd key case", http.Header{"authorization": {openai}}, ""},
		{"another header", http.Header{"X-Api-Key": {openai}}, "openai-api-key"},
		{"another header, Basic", http.Header{"Proxy-Authorization": {basic(openai)}}, "openai-api-key"},
		{"cookie", http.Header{"Cookie": {"a=" + url.QueryEscape(openai)}}, "openai-api-key"},
		{"other secret in own header", http.Header{"Authorization": {"Bearer " + other}}, "odd-key"},
		{"in a header name", http.Header{"X-" + openai: {"1"}}, "openai-api-key"},
	}
	for _, tt := range tests {
		ref, _, found := tab.FindHeader(tt.h, allowed)
		if found != (tt.wantRef != "") || ref != tt.wantRef {
			t.Errorf("%s: FindHeader = %q, %v, want %q", tt.name, ref, found, tt.wantRef)
		}
		if ref, _, found := tab.FindHeader(tt.h, nil); !found || ref == "" {
			t.Errorf("%s: FindHeader(nil) = %q, %v, want found", tt.name, ref, found)
		}
	}
}

// TestFindEncoded: FindEncoded is FindString plus one percent-decoding.
func TestFindEncoded(t *testing.T) {
	t.Parallel()
	tab, openai, _ := testTable(t)
	all := strings.NewReplacer("s", "%73", "k", "%6b").Replace(openai)
	for _, raw := range []string{"key=" + openai, "key=" + all, "%6Bey=" + all} {
		if ref, _, found := tab.FindEncoded(raw, nil); !found || ref != "openai-api-key" {
			t.Errorf("FindEncoded(%.20q…) = %q, %v", raw, ref, found)
		}
		if _, _, found := tab.FindEncoded(raw, func(r string) bool { return r == "openai-api-key" }); found {
			t.Errorf("FindEncoded(%.20q…) found though allowed", raw)
		}
	}
	if _, _, found := tab.FindEncoded("", nil); found {
		t.Error("empty found")
	}
}

// FuzzFind holds that a placeholder is found in any text around it,
// as is and base64-encoded at any alignment.
func FuzzFind(f *testing.F) {
	f.Add(formats[0].value, "user:", "")
	f.Add(formats[7].value, "", "x")
	f.Add("ab+cd/ef=gh\"ij<kl>mn&opqqqqqqqq", "{\"a\":1}", "\x00")
	f.Fuzz(func(t *testing.T, value, before, after string) {
		p, err := Derive(testKey, "r", []byte(value))
		if err != nil {
			return
		}
		tab := NewTable([]Entry{{Ref: "r", Placeholder: p, Current: true}})
		text := before + p + after
		if _, _, found := tab.FindString(text, nil); !found {
			t.Fatal("literal not found")
		}
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
			if _, _, found := tab.FindString(enc.EncodeToString([]byte(text)), nil); !found {
				t.Fatalf("base64 not found (before %d bytes)", len(before))
			}
		}
		if _, _, found := tab.FindString(url.QueryEscape(text), nil); !found {
			t.Fatal("query-escaped not found")
		}
	})
}

// BenchmarkFindRequestHead is the tripwire's per-request cost on a typical
// clean request head (an SDK's headers, a query) with two placeholders in
// the table (docs/performance.md, "Placeholders").
func BenchmarkFindRequestHead(b *testing.B) {
	t := &testing.T{}
	tab, _, _ := testTable(t)
	h := http.Header{
		"Authorization":    {"Bearer client-junk"},
		"User-Agent":       {"OpenAI/Python 1.54.0"},
		"Accept":           {"application/json"},
		"Content-Type":     {"application/json"},
		"X-Stainless-Os":   {"Linux"},
		"X-Stainless-Arch": {"x64"},
		"Openai-Beta":      {"assistants=v2"},
	}
	u, _ := url.ParseRequestURI("/v1/chat/completions?stream=true")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, found := tab.FindHeader(h, nil); found {
			b.Fatal("found")
		}
		if _, _, found := tab.FindURL(u, nil); found {
			b.Fatal("found")
		}
		if _, found := tab.InspectName("api.openai.com"); found {
			b.Fatal("found")
		}
	}
}

// FuzzContainsFold holds containsFold to strings.Contains over lower-cased
// ASCII text.
func FuzzContainsFold(f *testing.F) {
	f.Add("X-Sk-Proj-Abc.example", "sk-proj-abc")
	f.Add("", "a")
	f.Add("ab", "")
	f.Fuzz(func(t *testing.T, s, sub string) {
		for _, x := range []string{s, sub} {
			for i := 0; i < len(x); i++ {
				if x[i] >= 0x80 {
					return // the reference below is ASCII-only
				}
			}
		}
		if got, want := containsFold(s, sub), strings.Contains(strings.ToLower(s), strings.ToLower(sub)); got != want {
			t.Fatalf("containsFold(%q, %q) = %v, want %v", s, sub, got, want)
		}
	})
}
