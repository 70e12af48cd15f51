package hostport

import (
	"errors"
	"github.com/botbox/botbox/internal/echo"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type parseCase struct {
	name    string
	in      string
	want    HostPort
	wantErr string // substring; "" means success
}

var parseCases = []parseCase{
	// Names.
	{name: "plain", in: "example.com", want: HostPort{Host: "example.com"}},
	{name: "uppercase", in: "Example.COM", want: HostPort{Host: "example.com"}},
	{name: "trailing dot", in: "Example.COM.", want: HostPort{Host: "example.com"}},
	{name: "trailing dot with port", in: "blocked.com.:443", want: HostPort{Host: "blocked.com", Port: 443, HasPort: true}},
	{name: "two trailing dots", in: "example.com..", wantErr: "empty label"},
	{name: "only dot", in: ".", wantErr: "empty host"},
	{name: "leading dot", in: ".example.com", wantErr: "empty label"},
	{name: "empty label", in: "a..b", wantErr: "empty label"},
	{name: "single label", in: "localhost", want: HostPort{Host: "localhost"}},
	{name: "surrounding whitespace", in: " \texample.com:8443\t ", want: HostPort{Host: "example.com", Port: 8443, HasPort: true}},
	{name: "port", in: "a.b:8443", want: HostPort{Host: "a.b", Port: 8443, HasPort: true}},
	{name: "port 1", in: "a.b:1", want: HostPort{Host: "a.b", Port: 1, HasPort: true}},
	{name: "port 65535", in: "a.b:65535", want: HostPort{Host: "a.b", Port: 65535, HasPort: true}},
	{name: "hyphens inside", in: "r3---sn-apo3qvuoxuxbt-j5pe.googlevideo.com", want: HostPort{Host: "r3---sn-apo3qvuoxuxbt-j5pe.googlevideo.com"}},
	{name: "double hyphen at 3-4", in: "ab--cd.example", want: HostPort{Host: "ab--cd.example"}},
	{name: "digit label inside", in: "123.example.com", want: HostPort{Host: "123.example.com"}},
	{name: "hex-looking inner label", in: "0x7f.example.com", want: HostPort{Host: "0x7f.example.com"}},
	{name: "label 63", in: strings.Repeat("a", 63) + ".com", want: HostPort{Host: strings.Repeat("a", 63) + ".com"}},
	{name: "label 64", in: strings.Repeat("a", 64) + ".com", wantErr: "label longer than 63"},
	{name: "name 253", in: name253(), want: HostPort{Host: name253()}},
	{name: "name 254", in: "a" + name253(), wantErr: "longer than 253"},
	{name: "leading hyphen", in: "-a.com", wantErr: "starts or ends with '-'"},
	{name: "trailing hyphen", in: "a-.com", wantErr: "starts or ends with '-'"},
	{name: "underscore", in: "a_b.com", wantErr: "not a valid host name"},

	// IDNA.
	{name: "idna", in: "Bücher.example", want: HostPort{Host: "xn--bcher-kva.example"}},
	{name: "idna punycode input", in: "xn--bcher-kva.example", want: HostPort{Host: "xn--bcher-kva.example"}},
	{name: "idna uppercase punycode", in: "XN--BCHER-KVA.example", want: HostPort{Host: "xn--bcher-kva.example"}},
	{name: "idna fullwidth", in: "ｅｘａｍｐｌｅ．ｃｏｍ", want: HostPort{Host: "example.com"}},
	{name: "idna ideographic dot", in: "example。com", want: HostPort{Host: "example.com"}},
	{name: "idna fullwidth digits ip", in: "１２７．０．０．１", want: HostPort{Host: "127.0.0.1"}},
	{name: "idna fullwidth colon", in: "example.com：443", wantErr: "not a valid host name"},
	{name: "idna bad punycode", in: "xn--zz-.example", wantErr: "not a valid host name"},
	{name: "idna ascii-only punycode", in: "xn--abc-.com", wantErr: "not a valid host name"},
	{name: "idna ideographic space", in: "a\u3000b.com", wantErr: "not a valid host name"},
	{name: "sharp s non-transitional", in: "faß.de", want: HostPort{Host: "xn--fa-hia.de"}},

	// IPv4.
	{name: "ipv4", in: "1.2.3.4", want: HostPort{Host: "1.2.3.4"}},
	{name: "ipv4 port", in: "1.2.3.4:80", want: HostPort{Host: "1.2.3.4", Port: 80, HasPort: true}},
	{name: "ipv4 trailing dot", in: "1.2.3.4.", want: HostPort{Host: "1.2.3.4"}},
	{name: "ipv4 short", in: "127.1", wantErr: "numeric name"},
	{name: "ipv4 three parts", in: "1.2.3", wantErr: "numeric name"},
	{name: "ipv4 integer", in: "2130706433", wantErr: "numeric name"},
	{name: "ipv4 hex", in: "0x7f000001", wantErr: "numeric name"},
	{name: "ipv4 hex upper", in: "0X7F000001", wantErr: "numeric name"},
	{name: "ipv4 hex parts", in: "0x7f.1", wantErr: "numeric name"},
	{name: "ipv4 hex last", in: "127.0.0.0x1", wantErr: "numeric name"},
	{name: "ipv4 bare 0x", in: "a.0x", wantErr: "numeric name"},
	{name: "ipv4 octal", in: "017.0.0.1", wantErr: "numeric name"},
	{name: "ipv4 octal whole", in: "0177.0.0.01", wantErr: "numeric name"},
	{name: "ipv4 out of range", in: "256.0.0.1", wantErr: "numeric name"},
	{name: "ipv4 five parts", in: "1.2.3.4.5", wantErr: "numeric name"},
	{name: "numeric tld", in: "example.123", wantErr: "numeric name"},
	{name: "not hex tld", in: "example.0xg", want: HostPort{Host: "example.0xg"}},
	{name: "ipv4 in brackets", in: "[1.2.3.4]", wantErr: "not a valid IPv6"},

	// IPv6.
	{name: "ipv6 brackets", in: "[::1]", want: HostPort{Host: "::1"}},
	{name: "ipv6 port", in: "[::1]:443", want: HostPort{Host: "::1", Port: 443, HasPort: true}},
	{name: "ipv6 canonical", in: "[2001:DB8:0:0::1]:8080", want: HostPort{Host: "2001:db8::1", Port: 8080, HasPort: true}},
	{name: "ipv6 mapped", in: "[::FFFF:1.2.3.4]", want: HostPort{Host: "1.2.3.4"}},
	{name: "ipv6 bare", in: "::1", wantErr: "must be in brackets"},
	{name: "ipv6 unclosed", in: "[::1", wantErr: "missing ']'"},
	{name: "ipv6 zone", in: "[fe80::1%eth0]", wantErr: "zones"},
	{name: "ipv6 junk after", in: "[::1]x", wantErr: "after ']'"},
	{name: "ipv6 empty port", in: "[::1]:", wantErr: "empty port"},
	{name: "ipv6 empty", in: "[]", wantErr: "not a valid IPv6"},
	{name: "ipv6 bad", in: "[::g]", wantErr: "not a valid IPv6"},

	// Ports.
	{name: "empty port", in: "a.b:", wantErr: "empty port"},
	{name: "port 0", in: "a.b:0", wantErr: "1-65535"},
	{name: "port leading zero", in: "a.b:0443", wantErr: "1-65535"},
	{name: "port too big", in: "a.b:65536", wantErr: "1-65535"},
	{name: "port too long", in: "a.b:100000", wantErr: "1-65535"},
	{name: "port plus", in: "a.b:+443", wantErr: "decimal digits"},
	{name: "port minus", in: "a.b:-1", wantErr: "decimal digits"},
	{name: "port letters", in: "a.b:https", wantErr: "decimal digits"},
	{name: "two ports", in: "a.b:1:2", wantErr: "several ports"},
	{name: "only port", in: ":443", wantErr: "empty host"},

	// Refused characters.
	{name: "empty", in: "", wantErr: "empty"},
	{name: "blank", in: " \t ", wantErr: "empty"},
	{name: "userinfo", in: "x@blocked.com", wantErr: "userinfo"},
	{name: "userinfo with port", in: "user:pass@blocked.com:443", wantErr: "userinfo"},
	{name: "inner space", in: "bad host", wantErr: "space"},
	{name: "newline", in: "a.com\nb", wantErr: "control"},
	{name: "nul", in: "a.com\x00", wantErr: "control"},
	{name: "del", in: "a\x7f.com", wantErr: "control"},
	{name: "slash", in: "a.com/x", wantErr: "not allowed"},
	{name: "query", in: "a.com?x", wantErr: "not allowed"},
	{name: "fragment", in: "a.com#x", wantErr: "not allowed"},
	{name: "backslash", in: `a.com\x`, wantErr: "not allowed"},
	{name: "percent", in: "a%2ecom", wantErr: "percent"},
	{name: "asterisk", in: "*", wantErr: "wildcard"},
	{name: "wildcard name", in: "*.example.com", wantErr: "wildcard"},
	{name: "quote", in: `a"b.com`, wantErr: "not a valid host name"},
	{name: "comma", in: "a.com,b.com", wantErr: "not a valid host name"},
	{name: "invalid utf8", in: "a\xff.com", wantErr: "UTF-8"},
}

func name253() string {
	// 4 labels of 62 + 3 dots = 251, plus ".a" = 253.
	l := strings.Repeat("b", 62)
	return l + "." + l + "." + l + "." + l + ".a"
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tt := range parseCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Parse(%q) = %+v, want error containing %q", tt.in, got, tt.wantErr)
				}
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("Parse(%q) error %v does not wrap ErrInvalid", tt.in, err)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Parse(%q) error = %q, want it to contain %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q) error = %v", tt.in, err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("Parse(%q) (-want +got):\n%s", tt.in, d)
			}
		})
	}
}

func TestParseHost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    string
		wantErr string
	}{
		{in: "API.OpenAI.com.", want: "api.openai.com"},
		{in: "::1", want: "::1"},
		{in: "2001:DB8::1", want: "2001:db8::1"},
		{in: "[::1]", want: "::1"},
		{in: "::ffff:1.2.3.4", want: "1.2.3.4"},
		{in: "1.2.3.4", want: "1.2.3.4"},
		{in: " example.com ", want: "example.com"},
		{in: "bücher.example", want: "xn--bcher-kva.example"},
		{in: "example.com:443", wantErr: "port is not allowed"},
		{in: "[::1]:443", wantErr: "port is not allowed"},
		{in: "fe80::1%eth0", wantErr: "zones"},
		{in: "1:2", wantErr: "port is not allowed"},
		{in: ":::", wantErr: "not a valid IPv6"},
		{in: "a@b", wantErr: "userinfo"},
		{in: "bad host", wantErr: "space"},
		{in: "127.1", wantErr: "numeric name"},
		{in: "", wantErr: "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseHost(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("ParseHost(%q) = %q, %v, want ErrInvalid containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseHost(%q) = %q, %v, want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestMethods(t *testing.T) {
	t.Parallel()
	tests := []struct {
		hp        HostPort
		isIP      bool
		addr      netip.Addr
		portOr443 uint16
		auth443   string
		str       string
	}{
		{HostPort{Host: "example.com"}, false, netip.Addr{}, 443, "example.com", "example.com"},
		{HostPort{Host: "example.com", Port: 443, HasPort: true}, false, netip.Addr{}, 443, "example.com", "example.com:443"},
		{HostPort{Host: "example.com", Port: 8443, HasPort: true}, false, netip.Addr{}, 8443, "example.com:8443", "example.com:8443"},
		{HostPort{Host: "1.2.3.4", Port: 80, HasPort: true}, true, netip.MustParseAddr("1.2.3.4"), 80, "1.2.3.4:80", "1.2.3.4:80"},
		{HostPort{Host: "::1"}, true, netip.MustParseAddr("::1"), 443, "[::1]", "[::1]"},
		{HostPort{Host: "2001:db8::1", Port: 443, HasPort: true}, true, netip.MustParseAddr("2001:db8::1"), 443, "[2001:db8::1]", "[2001:db8::1]:443"},
	}
	for _, tt := range tests {
		t.Run(tt.str, func(t *testing.T) {
			t.Parallel()
			if got := tt.hp.IsIP(); got != tt.isIP {
				t.Errorf("%+v.IsIP() = %v, want %v", tt.hp, got, tt.isIP)
			}
			a, ok := tt.hp.Addr()
			if ok != tt.isIP || a != tt.addr {
				t.Errorf("%+v.Addr() = %v, %v, want %v, %v", tt.hp, a, ok, tt.addr, tt.isIP)
			}
			if got := tt.hp.PortOr(443); got != tt.portOr443 {
				t.Errorf("%+v.PortOr(443) = %d, want %d", tt.hp, got, tt.portOr443)
			}
			if got := tt.hp.Authority(443); got != tt.auth443 {
				t.Errorf("%+v.Authority(443) = %q, want %q", tt.hp, got, tt.auth443)
			}
			if got := tt.hp.String(); got != tt.str {
				t.Errorf("%+v.String() = %q, want %q", tt.hp, got, tt.str)
			}
		})
	}
}

func TestErrorDoesNotEchoLongInput(t *testing.T) {
	t.Parallel()
	secret := "sk-" + strings.Repeat("S", 200)
	for _, in := range []string{secret, "x@" + secret, secret + ":99999", "[" + secret} {
		_, err := Parse(in)
		if err == nil {
			t.Fatalf("Parse(%q) succeeded", in)
		}
		if strings.Contains(err.Error(), strings.Repeat("S", 65)) {
			t.Errorf("Parse error echoes more than 64 bytes: %q", err)
		}
	}
}

// TestParseHostDoesNotAllocate: the common case (an already canonical name)
// skips the IDNA mapping (plainLDH); the proxy parses a Host per request and
// mitm an SNI per handshake.
func TestParseHostDoesNotAllocate(t *testing.T) {
	for _, in := range []string{"api.openai.com", "a-1.b2.example"} {
		if n := testing.AllocsPerRun(100, func() {
			if _, err := ParseHost(in); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("ParseHost(%q) allocates %v times, want 0", in, n)
		}
	}
}

// FuzzPlainLDH: for every string plainLDH lets skip the IDNA mapping, the
// mapping is the identity (or refuses it, and then so does checkName), so
// the shortcut never changes a result.
func FuzzPlainLDH(f *testing.F) {
	for _, s := range []string{"api.openai.com", "a..b", "-a.b", "r3---sn-abc.example", "xn--bcher-kva.example", "axn--b", "a.xn--", "1.2.3.4", "."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !plainLDH(s) {
			return
		}
		got, err := lookup.ToASCII(s)
		if err != nil {
			if checkName(strings.TrimSuffix(s, ".")) == "" {
				if _, perr := netip.ParseAddr(strings.TrimSuffix(s, ".")); perr != nil {
					t.Fatalf("IDNA refuses %q (%v) but the shortcut would accept it", s, err)
				}
			}
			return
		}
		if got != s {
			t.Fatalf("IDNA maps %q to %q; the shortcut would keep it", s, got)
		}
	})
}

func FuzzParse(f *testing.F) {
	for _, tt := range parseCases {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		hp, err := Parse(in)
		checkErr(t, in, err)
		if err == nil {
			checkCanonical(t, in, hp.Host)
			if hp.HasPort && hp.Port == 0 {
				t.Fatalf("Parse(%q) = %+v: HasPort with port 0", in, hp)
			}
			again, err := Parse(hp.String())
			if err != nil {
				t.Fatalf("Parse(%q) = %+v; Parse(%q) error = %v", in, hp, hp.String(), err)
			}
			if again != hp {
				t.Fatalf("Parse(%q) = %+v; Parse(%q) = %+v, want same", in, hp, hp.String(), again)
			}
			h, err := ParseHost(hp.Host)
			if err != nil || h != hp.Host {
				t.Fatalf("ParseHost(%q) = %q, %v, want identity", hp.Host, h, err)
			}
		}
		h, err := ParseHost(in)
		checkErr(t, in, err)
		if err == nil {
			checkCanonical(t, in, h)
			again, err := ParseHost(h)
			if err != nil || again != h {
				t.Fatalf("ParseHost(%q) = %q; ParseHost(%q) = %q, %v, want same", in, h, h, again, err)
			}
		}
	})
}

func checkErr(t *testing.T, in string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Parse(%q) error %v does not wrap ErrInvalid", in, err)
	}
	// Longer than the clip plus its ellipsis: a 65-byte input ending in "."
	// reappears legitimately as its first 64 bytes followed by "...".
	if len(in) > echo.Max+len(echo.Ellipsis) && strings.Contains(err.Error(), in) {
		t.Fatalf("Parse(%q) error echoes the whole long input: %q", in, err)
	}
	// %q may expand each byte to at most 4 (\xNN) or 10 (\UNNNNNNNN) bytes.
	if len(err.Error()) > 200+10*echo.Max {
		t.Fatalf("Parse(%q) error too long: %d bytes", in, len(err.Error()))
	}
}

func checkCanonical(t *testing.T, in, host string) {
	t.Helper()
	if a, err := netip.ParseAddr(host); err == nil {
		if a.String() != host || a.Zone() != "" {
			t.Fatalf("Parse(%q) host %q is not a canonical IP", in, host)
		}
		return
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			t.Fatalf("Parse(%q) host %q contains %q", in, host, c)
		}
	}
	if host == "" || len(host) > 253 || strings.HasSuffix(host, ".") {
		t.Fatalf("Parse(%q) host %q has bad length or trailing dot", in, host)
	}
}
