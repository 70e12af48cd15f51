package mitm

import (
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TLS record content types and handshake/alert codes used below (RFC 8446).
const (
	recordAlert      = 21
	recordHandshake  = 22
	typeServerHello  = 2
	alertInternalErr = 80
)

// rawClientHello builds one TLS record holding a ClientHello whose
// server_name extension carries sni byte for byte — including values Go's
// client will not send ("bad_host", "1.2.3.4", 254-byte names). sni == nil
// omits the extension. With tls13 the hello offers only TLS 1.3 (with an
// X25519 key share); otherwise only TLS 1.2 with ECDHE-ECDSA suites.
func rawClientHello(t testing.TB, sni []byte, tls13 bool) []byte {
	t.Helper()
	u16 := func(b []byte, v int) []byte { return binary.BigEndian.AppendUint16(b, uint16(v)) }
	vec16 := func(b, body []byte) []byte { return append(u16(b, len(body)), body...) }
	ext := func(b []byte, typ int, body []byte) []byte { return vec16(u16(b, typ), body) }
	list16 := func(vs ...int) []byte {
		var b []byte
		for _, v := range vs {
			b = u16(b, v)
		}
		return vec16(nil, b)
	}

	var exts []byte
	if sni != nil {
		entry := vec16([]byte{0 /* host_name */}, sni)
		exts = ext(exts, 0x0000, vec16(nil, entry)) // server_name
	}
	exts = ext(exts, 0x000a, list16(0x001d, 0x0017))         // supported_groups: x25519, secp256r1
	exts = ext(exts, 0x000b, []byte{1, 0})                   // ec_point_formats: uncompressed
	exts = ext(exts, 0x000d, list16(0x0403, 0x0804, 0x0401)) // signature_algorithms
	ciphers := list16(0xc02b, 0xc02c, 0xcca9)                // ECDHE-ECDSA AES-GCM / ChaCha20
	if tls13 {
		ciphers = list16(0x1301, 0x1302, 0x1303)
		exts = ext(exts, 0x002b, []byte{2, 0x03, 0x04}) // supported_versions: TLS 1.3
		priv, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		share := vec16(u16(nil, 0x001d), priv.PublicKey().Bytes())
		exts = ext(exts, 0x0033, vec16(nil, share)) // key_share
	}

	body := []byte{3, 3} // legacy_version TLS 1.2
	random := make([]byte, 32)
	_, _ = rand.Read(random)
	body = append(body, random...)
	body = append(body, 0) // empty legacy_session_id
	body = append(body, ciphers...)
	body = append(body, 1, 0) // compression: null
	body = vec16(body, exts)

	hs := append([]byte{1 /* client_hello */, 0}, u16(nil, len(body))...) // 24-bit length
	hs = append(hs, body...)
	return vec16([]byte{recordHandshake, 3, 1}, hs)
}

// probe is what a raw client saw after sending a ClientHello.
type probe struct {
	recordType byte // first record's content type; 0 if the server sent nothing
	first      byte // first body byte: handshake type or alert level
	alert      byte // alert description when recordType == recordAlert
}

// sendHello writes hello to a server using cfg and reports the server's
// first record and its handshake error.
func sendHello(t *testing.T, cfg *tls.Config, hello []byte) (probe, error) {
	t.Helper()
	cc, sc := net.Pipe()
	deadline := time.Now().Add(10 * time.Second)
	_ = cc.SetDeadline(deadline)
	_ = sc.SetDeadline(deadline)
	errc := make(chan error, 1)
	go func() {
		srv := tls.Server(sc, cfg)
		err := srv.Handshake()
		_ = srv.Close()
		errc <- err
	}()
	var p probe
	if _, err := cc.Write(hello); err != nil {
		t.Fatalf("writing ClientHello: %v", err)
	}
	var hdr [7]byte
	if _, err := io.ReadFull(cc, hdr[:5]); err == nil {
		p.recordType = hdr[0]
		n := 1
		if p.recordType == recordAlert {
			n = 2
		}
		if _, err := io.ReadFull(cc, hdr[5:5+n]); err != nil {
			t.Fatalf("reading record body: %v", err)
		}
		p.first, p.alert = hdr[5], hdr[6]
	}
	_ = cc.Close()
	return p, <-errc
}

// TestRawClientHelloSNI is reference §9.7
// https_interception_sni_validation_rejects_invalid_or_oversized_hosts, with
// raw ClientHellos because Go's client refuses to send most of these names.
// The server must abort with an alert before any ServerHello — so before any
// Certificate, in TLS 1.2 as in 1.3.
func TestRawClientHelloSNI(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	tests := []struct {
		name    string
		sni     []byte
		wantErr error // nil: the server answers with a ServerHello
		denied  int   // cert_issued{denied}
	}{
		{"control localhost", []byte("localhost"), nil, 0},
		{"control punycode", []byte("xn--bcher-kva.example"), nil, 0},
		{"control mixed case", []byte("API.OpenAI.com"), nil, 0},
		{"space", []byte("bad host"), ErrInvalidSNI, 1},
		{"underscore", []byte("bad_host"), ErrInvalidSNI, 1},
		{"wildcard", []byte("*.example.com"), ErrInvalidSNI, 1},
		{"254-char label", []byte(strings.Repeat("a", 254)), ErrInvalidSNI, 1},
		{"254-char name", []byte(name253() + "a"), ErrInvalidSNI, 1},
		{"ipv4 literal", []byte("1.2.3.4"), ErrInvalidSNI, 1},
		{"ipv6 literal", []byte("::1"), ErrInvalidSNI, 1},
		{"nul byte", []byte("api.openai.com\x00.evil"), ErrInvalidSNI, 1},
		{"utf-8", []byte("bücher.example"), ErrInvalidSNI, 1},
		{"empty label", []byte("a..example"), ErrInvalidSNI, 1},
		{"no SNI", nil, ErrNoSNI, 0},
	}
	for _, v := range []struct {
		name  string
		tls13 bool
	}{{"tls1.2", false}, {"tls1.3", true}} {
		for _, tt := range tests {
			t.Run(v.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				obs := newCounter()
				ic := newInterceptor(t, Options{CA: ca, CacheTTL: time.Hour, Observer: obs})
				p, err := sendHello(t, ic.TLSConfig(), rawClientHello(t, tt.sni, v.tls13))
				if tt.wantErr == nil {
					if p.recordType != recordHandshake || p.first != typeServerHello {
						t.Fatalf("server answered %+v (handshake error %v), want a ServerHello", p, err)
					}
					if got := obs.snapshot()["issued/issued"]; got != 1 {
						t.Errorf("cert_issued{issued} = %d, want 1", got)
					}
					return
				}
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("server handshake error = %v, want %v", err, tt.wantErr)
				}
				if p.recordType != recordAlert || p.alert != alertInternalErr {
					t.Fatalf("server answered %+v to a refused SNI, want an internal_error alert (%d) first", p, alertInternalErr)
				}
				want := map[string]int{}
				if tt.denied > 0 {
					want["issued/denied"] = tt.denied
				}
				if d := cmp.Diff(want, obs.snapshot()); d != "" {
					t.Errorf("observer counts (-want +got):\n%s", d)
				}
			})
		}
	}
}

// Go's server itself refuses a trailing dot in SNI (RFC 6066) with
// decode_error before GetCertificate runs; documented here so that a change
// in crypto/tls is noticed.
func TestRawClientHelloTrailingDotRefusedByCryptoTLS(t *testing.T) {
	t.Parallel()
	obs := newCounter()
	ic := newInterceptor(t, Options{CA: newTestCA(t), Observer: obs})
	p, err := sendHello(t, ic.TLSConfig(), rawClientHello(t, []byte("localhost."), true))
	if err == nil || p.recordType == recordHandshake {
		t.Fatalf("trailing-dot SNI: server answered %+v, err %v", p, err)
	}
	if len(obs.snapshot()) != 0 {
		t.Errorf("GetCertificate ran: %v", obs.snapshot())
	}
}
