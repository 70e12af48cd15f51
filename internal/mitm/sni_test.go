package mitm

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/botbox/botbox/internal/hostport"
)

var sniTests = []struct {
	name    string
	in      string
	want    string
	wantErr string // substring; "" means success
}{
	// Accepted (reference §9.7 valid ASCII and punycode hosts).
	{name: "localhost", in: "localhost", want: "localhost"},
	{name: "ascii", in: "api.openai.com", want: "api.openai.com"},
	{name: "punycode", in: "xn--bcher-kva.example", want: "xn--bcher-kva.example"},
	{name: "uppercase lowered", in: "API.OpenAI.COM", want: "api.openai.com"},
	{name: "surrounding space trimmed", in: " \tapi.openai.com \n", want: "api.openai.com"},
	{name: "one trailing dot stripped", in: "api.openai.com.", want: "api.openai.com"},
	{name: "digits and hyphens", in: "a-1.b2-c.example", want: "a-1.b2-c.example"},
	{name: "numeric label not last", in: "1.2.3.example", want: "1.2.3.example"},
	{name: "label of 63", in: strings.Repeat("a", 63) + ".example", want: strings.Repeat("a", 63) + ".example"},
	{name: "name of 253", in: name253(), want: name253()},
	{name: "name of 253 plus dot", in: name253() + ".", want: name253()},
	{name: "hex-looking but not hex", in: "example.0xg", want: "example.0xg"},
	{name: "single letter", in: "a", want: "a"},

	// Refused by the reference's rules (§4.3 step 2).
	{name: "empty", in: "", wantErr: "empty name"},
	{name: "only spaces", in: "   ", wantErr: "empty name"},
	{name: "only dot", in: ".", wantErr: "empty name"},
	{name: "space inside", in: "bad host", wantErr: "invalid character ' '"},
	{name: "underscore", in: "bad_host", wantErr: "invalid character '_'"},
	{name: "wildcard", in: "*.example.com", wantErr: "wildcard"},
	{name: "254 chars one label", in: strings.Repeat("a", 254), wantErr: "longer than 253"},
	{name: "254 chars dotted", in: name253() + "a", wantErr: "longer than 253"},
	{name: "colon", in: "example.com:443", wantErr: "invalid character ':'"},
	{name: "ipv6", in: "::1", wantErr: "invalid character ':'"},
	{name: "slash", in: "example.com/x", wantErr: "invalid character '/'"},
	{name: "nul", in: "example.com\x00evil.com", wantErr: "invalid character"},
	{name: "non ascii", in: "bücher.example", wantErr: "non-ASCII byte 0xc3"},
	{name: "kelvin sign does not fold to k", in: "\u212aelvin.example", wantErr: "non-ASCII byte"},

	// Refused beyond the reference.
	{name: "ipv4 literal", in: "1.2.3.4", wantErr: "IP address literal"},
	{name: "ipv4 literal trailing dot", in: "1.2.3.4.", wantErr: "IP address literal"},
	{name: "short ipv4", in: "127.1", wantErr: "numeric name"},
	{name: "integer ipv4", in: "2130706433", wantErr: "numeric name"},
	{name: "hex ipv4", in: "0x7f000001", wantErr: "numeric name"},
	{name: "hex last label", in: "example.0x1F", wantErr: "numeric name"},
	{name: "bare 0x", in: "a.0x", wantErr: "numeric name"},
	{name: "empty label", in: "a..b", wantErr: "empty label"},
	{name: "leading dot", in: ".example.com", wantErr: "empty label"},
	{name: "two trailing dots", in: "example.com..", wantErr: "empty label"},
	{name: "label of 64", in: strings.Repeat("a", 64) + ".example", wantErr: "longer than 63"},
	{name: "leading hyphen", in: "-a.example", wantErr: "starts or ends with '-'"},
	{name: "trailing hyphen", in: "a-.example", wantErr: "starts or ends with '-'"},
	// One grammar with hostport: invalid punycode is refused here too.
	{name: "invalid punycode", in: "xn--a.example", wantErr: "not a valid host name"},
	{name: "uppercase punycode lowered", in: "XN--BCHER-KVA.example", want: "xn--bcher-kva.example"},
}

// name253 is a valid 253-byte name: 3×63 + 61 with dots.
func name253() string {
	l := strings.Repeat("a", 63)
	return l + "." + l + "." + l + "." + strings.Repeat("b", 61)
}

func TestValidateSNI(t *testing.T) {
	t.Parallel()
	if n := len(name253()); n != 253 {
		t.Fatalf("name253 has %d bytes", n)
	}
	for _, tt := range sniTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ValidateSNI(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ValidateSNI(%q) = %q, want error containing %q", tt.in, got, tt.wantErr)
				}
				if !errors.Is(err, ErrInvalidSNI) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ValidateSNI(%q) error = %v, want ErrInvalidSNI containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ValidateSNI(%q) = %q, %v, want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestValidateSNIErrorIsBounded(t *testing.T) {
	t.Parallel()
	in := strings.Repeat("x", 1000) + " SECRET-TAIL"
	_, err := ValidateSNI(in)
	if err == nil {
		t.Fatal("ValidateSNI accepted a 1012-byte name")
	}
	if strings.Contains(err.Error(), "SECRET-TAIL") || len(err.Error()) > 200 {
		t.Errorf("error echoes too much input (%d bytes): %v", len(err.Error()), err)
	}
}

func TestValidateSNIDoesNotAllocateForCanonicalInput(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := ValidateSNI("api.openai.com"); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("ValidateSNI allocates %v times per call, want 0", allocs)
	}
}

// FuzzValidateSNIMatchesHostport: ValidateSNI accepts exactly the ASCII
// names that hostport.Parse (the Host header parser the proxy compares the
// SNI with) reads as a host without port that is not an IP literal, and
// returns the same canonical host.
func FuzzValidateSNIMatchesHostport(f *testing.F) {
	for _, tt := range sniTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s := strings.TrimSpace(in)
		got, err := ValidateSNI(in)
		ascii := true
		for i := 0; i < len(s); i++ {
			if s[i] >= 0x80 {
				ascii = false
			}
		}
		hp, herr := hostport.Parse(s)
		want := ascii && herr == nil && !hp.HasPort && !hp.IsIP() && !strings.ContainsAny(s, "[]")
		if want != (err == nil) {
			t.Fatalf("ValidateSNI(%q) = %q, %v; hostport.Parse = %+v, %v", in, got, err, hp, herr)
		}
		if err == nil && got != hp.Host {
			t.Fatalf("ValidateSNI(%q) = %q, hostport.Parse host %q", in, got, hp.Host)
		}
	})
}

func FuzzValidateSNI(f *testing.F) {
	for _, tt := range sniTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ValidateSNI(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidSNI) {
				t.Fatalf("ValidateSNI(%q) error %v does not wrap ErrInvalidSNI", in, err)
			}
			return
		}
		if got == "" || len(got) > 253 {
			t.Fatalf("ValidateSNI(%q) = %q: bad length %d", in, got, len(got))
		}
		for i := 0; i < len(got); i++ {
			c := got[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
				t.Fatalf("ValidateSNI(%q) = %q: byte %q outside [a-z0-9.-]", in, got, c)
			}
		}
		for l := range strings.SplitSeq(got, ".") {
			if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
				t.Fatalf("ValidateSNI(%q) = %q: bad label %q", in, got, l)
			}
		}
		if _, err := netip.ParseAddr(got); err == nil {
			t.Fatalf("ValidateSNI(%q) = %q: accepted an IP literal", in, got)
		}
		again, err := ValidateSNI(got)
		if err != nil || again != got {
			t.Fatalf("ValidateSNI(%q) = %q, %v: not a fixed point of %q", got, again, err, in)
		}
		if !strings.EqualFold(strings.TrimSuffix(strings.TrimSpace(in), "."), got) {
			t.Fatalf("ValidateSNI(%q) = %q: not the input up to case, space and one dot", in, got)
		}
	})
}
