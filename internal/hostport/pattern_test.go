package hostport

import (
	"strings"
	"testing"
)

func TestParseWildcard(t *testing.T) {
	for _, tc := range []struct {
		in, want, wantErr string
	}{
		{in: "*.example.com", want: "*.example.com"},
		{in: "*.EXAMPLE.Com.", want: "*.example.com"},
		{in: "*.bücher.de", want: "*.xn--bcher-kva.de"},
		{in: "*.githubusercontent.com", want: "*.githubusercontent.com"},
		{in: "*.s3.amazonaws.com", want: "*.s3.amazonaws.com"},
		{in: "*.internal.example.com", want: "*.internal.example.com"},
		{in: "*", wantErr: `must be "*." followed by a domain`},
		{in: "*.", wantErr: "empty"},
		{in: "*example.com", wantErr: `must be "*." followed by a domain`},
		{in: "a.*.com", wantErr: `must be "*." followed by a domain`},
		{in: "*.*.example.com", wantErr: "only allowed as the whole first label"},
		{in: "*.ex*.com", wantErr: "only allowed as the whole first label"},
		{in: "**.example.com", wantErr: `must be "*." followed by a domain`},
		{in: "*.com", wantErr: "top-level domain"},
		{in: "*.internal", wantErr: "top-level domain"},
		{in: "*.co.uk", want: "*.co.uk"}, // valid; CheckWildcardAllow refuses it for an allow rule
		{in: "*.Workers.DEV.", want: "*.workers.dev"},
		{in: "*.1.2.3.4", wantErr: "IP address"},
		{in: "*.example.com:443", wantErr: "port"},
		{in: "*.exa_mple.com", wantErr: "not a valid host name"},
		{in: "*.a..com", wantErr: "empty label"},
	} {
		got, suffix, err := ParseWildcard(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseWildcard(%q) = %q, %v; want error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want || WildcardPrefix+suffix != got {
			t.Errorf("ParseWildcard(%q) = %q, %q, %v; want %q", tc.in, got, suffix, err, tc.want)
		}
		// Canonical form is a fixed point.
		if again, _, err := ParseWildcard(got); err != nil || again != got {
			t.Errorf("ParseWildcard(%q) = %q, %v; not a fixed point", got, again, err)
		}
	}
}

// TestCheckWildcardAllow: an allow wildcard over a public suffix of either
// section of the list is refused, naming the suffix (redteam-2026-12-01
// §5: the private-section ones were accepted at ee87e5f); a wildcard
// over an operator's own domain is not.
func TestCheckWildcardAllow(t *testing.T) {
	for _, tc := range []struct{ pattern, section string }{
		{"*.co.uk", "ICANN"},
		{"*.CO.UK.", "ICANN"},
		{"*.com.au", "ICANN"},
		{"*.workers.dev", "private"},
		{"*.vercel.app", "private"},
		{"*.herokuapp.com", "private"},
		{"*.github.io", "private"},
		{"*.githubusercontent.com", "private"},
		{"*.s3.amazonaws.com", "private"},
		{"*.s3.us-east-1.amazonaws.com", "private"},
		{"*.s3.eu-west-1.amazonaws.com", "private"},
		{"*.blogspot.com", "private"},
		{"*.cloudfront.net", "private"},
		{"*.pages.dev", "private"},
		{"*.netlify.app", "private"},
		{"*.web.app", "private"},
		{"*.appspot.com", "private"},
		{"*.azurewebsites.net", "private"},
		{"*.xn--p1ai", "ICANN"},  // .рф: a single label, refused by ParseWildcard already
		{"*.рф", "ICANN"},        // the same in Unicode
		{"*.xn--p1acf", "ICANN"}, // .рус
	} {
		_, suffix, err := ParseWildcard(tc.pattern)
		if err != nil {
			if strings.Contains(err.Error(), "top-level domain") {
				continue
			}
			t.Fatalf("ParseWildcard(%q): %v", tc.pattern, err)
		}
		err = CheckWildcardAllow(suffix)
		if err == nil || !strings.Contains(err.Error(), `"`+suffix+`" is a public suffix`) || !strings.Contains(err.Error(), tc.section) {
			t.Errorf("CheckWildcardAllow(%q) = %v; want a refusal naming %q (%s section)", suffix, err, suffix, tc.section)
		}
	}
	for _, ok := range []string{"example.com", "amazonaws.com", "api.example.co.uk", "fastly.example-cdn.net", "internal.example.com", "github.com", "bücher.example"} {
		suffix, err := ParseHost(ok)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckWildcardAllow(suffix); err != nil {
			t.Errorf("CheckWildcardAllow(%q) = %v; want nil", suffix, err)
		}
	}
}

// TestUnderDeeperPublicSuffix: a name under a public suffix below the
// wildcard's is a tenant's ("bucket.s3.amazonaws.com" under
// "amazonaws.com"); the public suffix itself and the operator's other
// names are not.
func TestUnderDeeperPublicSuffix(t *testing.T) {
	for _, tc := range []struct {
		name, suffix string
		want         bool
	}{
		{"evil.s3.amazonaws.com", "amazonaws.com", true},
		{"evil.s3.us-east-1.amazonaws.com", "amazonaws.com", true},
		{"a.b.s3.us-east-1.amazonaws.com", "us-east-1.amazonaws.com", true},
		{"ec2-1-2-3-4.us-east-1.compute.amazonaws.com", "amazonaws.com", true},
		{"x.evil.workers.dev", "x.evil.workers.dev", false},
		{"s3.amazonaws.com", "amazonaws.com", false},
		{"ec2.amazonaws.com", "amazonaws.com", false},
		{"sts.amazonaws.com", "amazonaws.com", false},
		// AWS lists its regions as public suffixes: a regional endpoint
		// needs its exact host.
		{"sts.us-east-1.amazonaws.com", "amazonaws.com", true},
		{"a.b.example.com", "example.com", false},
		{"api.example.co.uk", "example.co.uk", false},
		{"raw.githubusercontent.com", "githubusercontent.com", false},
		{"storage.googleapis.com", "googleapis.com", false},
	} {
		if got := UnderDeeperPublicSuffix(tc.name, tc.suffix); got != tc.want {
			t.Errorf("UnderDeeperPublicSuffix(%q, %q) = %v, want %v", tc.name, tc.suffix, got, tc.want)
		}
	}
}

func TestParseCIDR(t *testing.T) {
	for _, tc := range []struct {
		in, want, wantErr string
	}{
		{in: "10.0.0.0/8", want: "10.0.0.0/8"},
		{in: "203.0.113.0/24", want: "203.0.113.0/24"},
		{in: "2001:DB8::/32", want: "2001:db8::/32"},
		{in: "1.2.3.4/32", want: "1.2.3.4/32"},
		{in: "10.1.2.3/8", wantErr: "host bits are set (did you mean 10.0.0.0/8?)"},
		{in: "::ffff:10.0.0.0/104", wantErr: "IPv4-mapped"},
		{in: "fe80::%eth0/64", wantErr: "not a valid CIDR"},
		{in: "10.0.0.0/33", wantErr: "not a valid CIDR"},
		{in: "example.com/8", wantErr: "not a valid CIDR"},
		{in: "10.0.0.0", wantErr: "not a valid CIDR"},
	} {
		_, got, err := ParseCIDR(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseCIDR(%q) = %q, %v; want error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseCIDR(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// FuzzParseWildcard: no panic, an accepted pattern is canonical (a fixed
// point) and its suffix is a canonical host.
func FuzzParseWildcard(f *testing.F) {
	for _, s := range []string{"*.example.com", "*.CO.uk", "*", "a.*.b", "*.bücher.de."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, suffix, err := ParseWildcard(in)
		if err != nil {
			return
		}
		if h, err := ParseHost(suffix); err != nil || h != suffix {
			t.Fatalf("suffix %q of %q is not canonical: %q, %v", suffix, in, h, err)
		}
		if again, _, err := ParseWildcard(got); err != nil || again != got {
			t.Fatalf("ParseWildcard(%q) = %q, %v; not a fixed point", got, again, err)
		}
	})
}
