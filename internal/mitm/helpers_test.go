package mitm

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Test PKI is made inside the tests; no key is ever committed (style.md §3.2).

// genKey returns a fresh key of the given algorithm.
func genKey(t testing.TB, alg string) crypto.Signer {
	t.Helper()
	var (
		k   crypto.Signer
		err error
	)
	switch alg {
	case "p256":
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "p384":
		k, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "p224":
		k, err = ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	case "rsa2048":
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	case "rsa1024":
		k, err = rsa.GenerateKey(rand.Reader, 1024)
	case "ed25519":
		_, k, err = ed25519.GenerateKey(rand.Reader)
	default:
		t.Fatalf("genKey: unknown algorithm %q", alg)
	}
	if err != nil {
		t.Fatalf("genKey(%s): %v", alg, err)
	}
	return k
}

// keyPEM encodes key as "pkcs8", "sec1" (EC only), "pkcs1" (RSA only),
// "ecparam" (openssl ecparam -genkey: EC PARAMETERS + EC PRIVATE KEY) or
// "pkcs1-as-pkcs8" (a PKCS#1 body mislabelled "PRIVATE KEY").
func keyPEM(t testing.TB, key crypto.Signer, format string) []byte {
	t.Helper()
	var (
		typ string
		der []byte
		err error
		pre []byte
	)
	switch format {
	case "pkcs8":
		typ = "PRIVATE KEY"
		der, err = x509.MarshalPKCS8PrivateKey(key)
	case "sec1", "ecparam":
		typ = "EC PRIVATE KEY"
		der, err = x509.MarshalECPrivateKey(key.(*ecdsa.PrivateKey))
		if format == "ecparam" {
			// OID prime256v1, as `openssl ecparam -name prime256v1 -genkey` writes it.
			pre = pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{6, 8, 42, 134, 72, 206, 61, 3, 1, 7}})
		}
	case "pkcs1":
		typ = "RSA PRIVATE KEY"
		der = x509.MarshalPKCS1PrivateKey(key.(*rsa.PrivateKey))
	case "pkcs1-as-pkcs8":
		typ = "PRIVATE KEY"
		der = x509.MarshalPKCS1PrivateKey(key.(*rsa.PrivateKey))
	default:
		t.Fatalf("keyPEM: unknown format %q", format)
	}
	if err != nil {
		t.Fatalf("keyPEM(%s): %v", format, err)
	}
	return append(pre, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})...)
}

// caTemplate is a valid CA template at now; tests mutate it to break it.
func caTemplate(now time.Time) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber:          mustSerial(),
		Subject:               pkix.Name{CommonName: "BotBox Test CA", Organization: []string{"BotBox tests"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(30 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
}

func mustSerial() *big.Int {
	n, err := randomSerial()
	if err != nil {
		panic(err)
	}
	return n
}

// selfSign returns the PEM of tmpl self-signed by key.
func selfSign(t testing.TB, tmpl *x509.Certificate, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatalf("CreateCertificate: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// writeCAFiles writes cert and key PEM into a temp dir; key gets keyMode.
func writeCAFiles(t testing.TB, certPEM, keyPEM []byte, keyMode os.FileMode) (certPath, keyPath string) {
	t.Helper()
	dir := t.TempDir()
	certPath = filepath.Join(dir, "ca.crt")
	keyPath = filepath.Join(dir, "ca.key")
	if err := os.WriteFile(certPath, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, keyPEM, keyMode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(keyPath, keyMode); err != nil { // umask-proof
		t.Fatal(err)
	}
	return certPath, keyPath
}

// newTestCA makes a P-256 CA with NewCA at time.Now() (the fake clock inside
// a synctest bubble) and parses it without touching the file system.
func newTestCA(t testing.TB) *CA {
	t.Helper()
	certPEM, keyPEMBytes, err := NewCA("BotBox Test CA", 30*24*time.Hour, time.Now())
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return caFromPEM(t, certPEM, keyPEMBytes)
}

func caFromPEM(t testing.TB, certPEM, keyPEMBytes []byte) *CA {
	t.Helper()
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := parseKeyPEM(keyPEMBytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkCA(cert, signer, time.Now()); err != nil {
		t.Fatal(err)
	}
	return &CA{cert: cert, signer: signer}
}

func (ca *CA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// counter is an Observer that counts "method/label" keys.
type counter struct {
	mu sync.Mutex
	m  map[string]int
}

var _ Observer = (*counter)(nil)

func newCounter() *counter { return &counter{m: map[string]int{}} }

func (c *counter) inc(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[k]++
}

func (c *counter) CertIssued(r string) { c.inc("issued/" + r) }
func (c *counter) CertError(r string)  { c.inc("error/" + r) }
func (c *counter) CertCache(r string)  { c.inc("cache/" + r) }

// snapshot returns a copy of the counts (zero counts absent).
func (c *counter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// gateSigner wraps a signer: it counts Sign calls, optionally blocks each on
// gate, and fails when fail is set.
type gateSigner struct {
	crypto.Signer
	gate  chan struct{}
	calls atomic.Int32
	fail  bool
}

func (g *gateSigner) Sign(r io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	g.calls.Add(1)
	if g.gate != nil {
		<-g.gate
	}
	if g.fail {
		return nil, errors.New("hsm unavailable")
	}
	return g.Signer.Sign(r, digest, opts)
}

// withSigner returns a copy of ca that signs through s (wrapping ca's key).
func withSigner(ca *CA, s *gateSigner) *CA {
	s.Signer = ca.signer
	return &CA{cert: ca.cert, signer: s}
}

func newInterceptor(t testing.TB, opts Options) *Interceptor {
	t.Helper()
	ic, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return ic
}

// handshakeResult is both sides of one TLS handshake.
type handshakeResult struct {
	client    tls.ConnectionState
	clientErr error
	serverErr error
}

// handshake runs a TLS handshake over loopback TCP between a server using
// serverCfg and a client using clientCfg. After a successful handshake the
// server writes one byte and the client reads it, so that post-handshake
// messages (TLS 1.3 session tickets) are processed and a server-side
// rejection after the client's Finished (TLS 1.3 VerifyConnection) shows up
// as a client error. (Loopback rather than net.Pipe: an unbuffered pipe
// deadlocks when both sides write at once, as they do in that rejection.)
func handshake(t testing.TB, serverCfg, clientCfg *tls.Config) handshakeResult {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	deadline := time.Now().Add(20 * time.Second)
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		_ = c.SetDeadline(deadline)
		srv := tls.Server(c, serverCfg)
		err = srv.Handshake()
		if err == nil {
			_, err = srv.Write([]byte{'x'})
		}
		_ = srv.Close()
		errc <- err
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = cc.SetDeadline(deadline)
	cli := tls.Client(cc, clientCfg)
	var res handshakeResult
	res.clientErr = cli.Handshake()
	if res.clientErr == nil {
		var b [1]byte
		_, res.clientErr = io.ReadFull(cli, b[:])
		res.client = cli.ConnectionState()
	}
	_ = cc.Close()
	res.serverErr = <-errc
	return res
}

// logBuffer returns a logger writing text records into a buffer.
func logBuffer() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), &buf
}
