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
		{in: "*.co.uk", wantErr: "public suffix"},
		{in: "*.CO.UK.", wantErr: "public suffix"},
		{in: "*.com.au", wantErr: "public suffix"},
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
