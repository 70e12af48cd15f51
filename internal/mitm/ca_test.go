package mitm

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLoadCAKeyTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, alg, format string
	}{
		{"ecdsa p256 pkcs8", "p256", "pkcs8"},
		{"ecdsa p256 sec1", "p256", "sec1"},
		{"ecdsa p256 openssl ecparam", "p256", "ecparam"},
		{"ecdsa p384 pkcs8", "p384", "pkcs8"},
		{"ecdsa p384 sec1", "p384", "sec1"},
		{"rsa pkcs1", "rsa2048", "pkcs1"},
		{"rsa pkcs8", "rsa2048", "pkcs8"},
		{"rsa pkcs1 mislabelled as pkcs8", "rsa2048", "pkcs1-as-pkcs8"},
		{"ed25519 pkcs8", "ed25519", "pkcs8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := genKey(t, tt.alg)
			now := time.Now()
			certPath, keyPath := writeCAFiles(t, selfSign(t, caTemplate(now), key), keyPEM(t, key, tt.format), 0o400)
			ca, err := LoadCA(certPath, keyPath, nil)
			if err != nil {
				t.Fatalf("LoadCA: %v", err)
			}
			if got := ca.Certificate().Subject.CommonName; got != "BotBox Test CA" {
				t.Errorf("CA CN = %q", got)
			}
			// The CA can sign with this key type, and the leaf verifies.
			leaf, err := ca.issue("api.openai.com", time.Hour, now)
			if err != nil {
				t.Fatalf("issue: %v", err)
			}
			if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.openai.com", Roots: ca.pool()}); err != nil {
				t.Errorf("leaf does not verify: %v", err)
			}
		})
	}
}

func TestLoadCAErrors(t *testing.T) {
	t.Parallel()
	now := time.Now()
	key := genKey(t, "p256")
	goodKey := keyPEM(t, key, "pkcs8")
	goodCert := selfSign(t, caTemplate(now), key)
	other := genKey(t, "p256")
	rsaSmall := genKey(t, "rsa1024")
	p224 := genKey(t, "p224")

	certWith := func(mut func(*x509.Certificate)) []byte {
		tmpl := caTemplate(now)
		mut(tmpl)
		return selfSign(t, tmpl, key)
	}
	garbageBlock := func(typ string) []byte {
		return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: []byte("not DER at all")})
	}
	encrypted := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Headers: map[string]string{
		"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-128-CBC,00000000000000000000000000000000",
	}, Bytes: []byte("ciphertext")})

	tests := []struct {
		name    string
		cert    []byte // nil: file missing
		key     []byte // nil: file missing
		wantErr []string
	}{
		{"missing cert file", nil, goodKey, []string{"failed to read CA cert from '", "ca.crt': ", "no such file"}},
		{"missing key file", goodCert, nil, []string{"failed to read CA key from '", "ca.key': ", "no such file"}},
		{"garbage cert", []byte("hello"), goodKey, []string{"failed to decode CA cert PEM from '", "ca.crt': no CERTIFICATE block found"}},
		{"key in cert file", goodKey, goodKey, []string{"failed to decode CA cert PEM from '", "ca.crt': no CERTIFICATE block found (the file holds a private key: are ca_cert_path and ca_key_path swapped?)"}},
		{"cert block not DER", garbageBlock("CERTIFICATE"), goodKey, []string{"failed to decode CA cert PEM from '", "ca.crt': parsing certificate"}},
		{"garbage key", goodCert, []byte("hello"), []string{"failed to parse CA key PEM from '", "ca.key': no PRIVATE KEY"}},
		{"cert in key file", goodCert, goodCert, []string{"failed to parse CA key PEM from '", "ca.key': no PRIVATE KEY", "(the file holds a certificate: are ca_cert_path and ca_key_path swapped?)"}},
		{"swapped files", goodKey, goodCert, []string{"(the file holds a private key: are ca_cert_path and ca_key_path swapped?)"}},
		{"key block not DER", goodCert, garbageBlock("PRIVATE KEY"), []string{"failed to parse CA key PEM from '", "ca.key': parsing PRIVATE KEY block"}},
		{"encrypted pkcs8", goodCert, garbageBlock("ENCRYPTED PRIVATE KEY"), []string{"encrypted private keys are not supported"}},
		{"encrypted legacy pem", goodCert, encrypted, []string{"encrypted private keys are not supported"}},
		{"rsa too small", selfSign(t, caTemplate(now), rsaSmall), keyPEM(t, rsaSmall, "pkcs1"), []string{"RSA key has 1024 bits"}},
		{"p224 curve", goodCert, keyPEM(t, p224, "sec1"), []string{"unsupported ECDSA curve P-224"}},
		{"mismatched key", goodCert, keyPEM(t, other, "pkcs8"), []string{"invalid CA certificate '", "private key does not match"}},
		{"not a CA", certWith(func(c *x509.Certificate) { c.IsCA = false; c.MaxPathLenZero = false }), goodKey, []string{"not a CA"}},
		{"no basic constraints", certWith(func(c *x509.Certificate) {
			c.IsCA, c.BasicConstraintsValid, c.MaxPathLenZero = false, false, false
		}), goodKey, []string{"not a CA"}},
		{"no certSign usage", certWith(func(c *x509.Certificate) { c.KeyUsage = x509.KeyUsageDigitalSignature }), goodKey, []string{"keyCertSign"}},
		{"expired", certWith(func(c *x509.Certificate) {
			c.NotBefore, c.NotAfter = now.Add(-48*time.Hour), now.Add(-time.Hour)
		}), goodKey, []string{"certificate expired at"}},
		{"not yet valid", certWith(func(c *x509.Certificate) {
			c.NotBefore, c.NotAfter = now.Add(time.Hour), now.Add(48*time.Hour)
		}), goodKey, []string{"not valid before"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
			if tt.cert != nil {
				if err := os.WriteFile(certPath, tt.cert, 0o444); err != nil {
					t.Fatal(err)
				}
			}
			if tt.key != nil {
				if err := os.WriteFile(keyPath, tt.key, 0o400); err != nil {
					t.Fatal(err)
				}
			}
			ca, err := LoadCA(certPath, keyPath, nil)
			if err == nil {
				t.Fatalf("LoadCA = %v, want error", ca)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("LoadCA error = %q, want it to contain %q", err, want)
				}
			}
			if strings.Contains(tt.wantErr[0], "read CA") {
				wantPath := certPath
				if strings.Contains(tt.wantErr[0], "key") {
					wantPath = keyPath
				}
				if !strings.Contains(err.Error(), wantPath) || !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("LoadCA error = %q, want it to name %s and wrap fs.ErrNotExist", err, wantPath)
				}
			}
			assertNoKeyMaterial(t, err.Error(), tt.key, goodKey)
		})
	}
}

// assertNoKeyMaterial fails if msg contains any 12-byte run of a key's PEM
// body (base64) or of its DER.
func assertNoKeyMaterial(t *testing.T, msg string, keys ...[]byte) {
	t.Helper()
	for _, k := range keys {
		for rest := k; ; {
			var b *pem.Block
			b, rest = pem.Decode(rest)
			if b == nil {
				break
			}
			lines := strings.Split(string(pem.EncodeToMemory(&pem.Block{Type: "X", Bytes: b.Bytes})), "\n")
			body := strings.Join(lines[1:len(lines)-2], "") // drop BEGIN, END and the final ""
			for i := 0; i+12 <= len(body); i++ {
				if strings.Contains(msg, body[i:i+12]) {
					t.Fatalf("error %q contains key material", msg)
				}
			}
			for i := 0; i+12 <= len(b.Bytes); i++ {
				if strings.Contains(msg, string(b.Bytes[i:i+12])) {
					t.Fatalf("error %q contains raw key bytes", msg)
				}
			}
		}
	}
}

func TestLoadCANotRegularFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := LoadCA(dir, filepath.Join(dir, "ca.key"), nil)
	if err == nil || !strings.Contains(err.Error(), "failed to read CA cert from '"+dir+"': not a regular file") {
		t.Fatalf("LoadCA(dir) error = %v", err)
	}
}

func TestLoadCAWarnsOnReadableKey(t *testing.T) {
	t.Parallel()
	key := genKey(t, "p256")
	certPEM, kp := selfSign(t, caTemplate(time.Now()), key), keyPEM(t, key, "pkcs8")
	tests := []struct {
		mode os.FileMode
		warn bool
	}{
		{0o400, false},
		{0o600, false},
		{0o440, true},
		{0o404, true},
		{0o644, true},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			t.Parallel()
			certPath, keyPath := writeCAFiles(t, certPEM, kp, tt.mode)
			logger, buf := logBuffer()
			if _, err := LoadCA(certPath, keyPath, logger); err != nil {
				t.Fatalf("LoadCA: %v", err)
			}
			out := buf.String()
			warned := strings.Contains(out, "level=WARN") && strings.Contains(out, "readable by group or others")
			if warned != tt.warn {
				t.Fatalf("mode %v: warned = %v, want %v; log:\n%s", tt.mode, warned, tt.warn, out)
			}
			if warned && !strings.Contains(out, keyPath) {
				t.Errorf("warning does not name the key file: %s", out)
			}
		})
	}
}

func TestLoadCAFollowsSymlinkForMode(t *testing.T) {
	// Kubernetes mounts ca.key -> ..data/ca.key; the mode checked must be the
	// target's, not the link's (0777).
	t.Parallel()
	key := genKey(t, "p256")
	certPath, keyPath := writeCAFiles(t, selfSign(t, caTemplate(time.Now()), key), keyPEM(t, key, "pkcs8"), 0o400)
	link := filepath.Join(t.TempDir(), "ca.key")
	if err := os.Symlink(keyPath, link); err != nil {
		t.Fatal(err)
	}
	logger, buf := logBuffer()
	if _, err := LoadCA(certPath, link, logger); err != nil {
		t.Fatalf("LoadCA: %v", err)
	}
	if buf.Len() != 0 {
		t.Errorf("unexpected log output: %s", buf)
	}
}

func TestNewCA(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name, cn, wantCN string
		validity         time.Duration
	}{
		{"default cn", "", DefaultCACommonName, 365 * 24 * time.Hour},
		{"custom cn", "my dev ca", "my dev ca", 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			certPEM, kp, err := NewCA(tt.cn, tt.validity, now)
			if err != nil {
				t.Fatalf("NewCA: %v", err)
			}
			if !bytes.HasPrefix(kp, []byte("-----BEGIN PRIVATE KEY-----\n")) {
				t.Errorf("key is not PKCS#8 PEM: %.40q", kp)
			}
			ca := caFromPEMAt(t, certPEM, kp, now)
			c := ca.Certificate()
			got := struct {
				CN             string
				IsCA, BCValid  bool
				MaxPathLen     int
				MaxPathLenZero bool
				KeyUsage       x509.KeyUsage
				Alg            x509.PublicKeyAlgorithm
				NotBefore      time.Time
				NotAfter       time.Time
				SelfSigned     bool
			}{c.Subject.CommonName, c.IsCA, c.BasicConstraintsValid, c.MaxPathLen, c.MaxPathLenZero, c.KeyUsage,
				c.PublicKeyAlgorithm, c.NotBefore, c.NotAfter, bytes.Equal(c.RawIssuer, c.RawSubject)}
			want := got
			want.CN, want.IsCA, want.BCValid, want.MaxPathLen, want.MaxPathLenZero = tt.wantCN, true, true, 0, true
			want.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
			want.Alg = x509.ECDSA
			want.NotBefore, want.NotAfter, want.SelfSigned = now.Add(-5*time.Minute), now.Add(tt.validity), true
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("NewCA certificate (-want +got):\n%s", d)
			}
			if len(c.SubjectKeyId) != 20 {
				t.Errorf("SubjectKeyId = %x, want 20 bytes", c.SubjectKeyId)
			}
			if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 {
				t.Errorf("serial %v is not a positive 128-bit value", c.SerialNumber)
			}
			if err := c.CheckSignatureFrom(c); err != nil {
				t.Errorf("self-signature: %v", err)
			}
		})
	}
}

func caFromPEMAt(t *testing.T, certPEM, kp []byte, now time.Time) *CA {
	t.Helper()
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := parseKeyPEM(kp)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkCA(cert, signer, now); err != nil {
		t.Fatal(err)
	}
	return &CA{cert: cert, signer: signer}
}

func TestNewCARejectsBadValidity(t *testing.T) {
	t.Parallel()
	for _, v := range []time.Duration{0, -time.Hour} {
		if _, _, err := NewCA("", v, time.Now()); err == nil {
			t.Errorf("NewCA(validity %v) succeeded", v)
		}
	}
}

func TestWriteCA(t *testing.T) {
	t.Parallel()
	certPEM, kp, err := NewCA("", 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "sub", "ca")
	if err := WriteCA(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile), certPEM, kp); err != nil {
		t.Fatalf("WriteCA: %v", err)
	}
	for _, f := range []struct {
		name string
		mode os.FileMode
		data []byte
	}{{CACertFile, 0o444, certPEM}, {CAKeyFile, 0o400, kp}} {
		p := filepath.Join(dir, f.name)
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != f.mode {
			t.Errorf("%s mode = %v, want %v", f.name, fi.Mode(), f.mode)
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, f.data) {
			t.Errorf("%s content differs (err %v)", f.name, err)
		}
	}
	// What `botbox ca new` writes is what `botbox serve` loads, silently.
	logger, buf := logBuffer()
	if _, err := LoadCA(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile), logger); err != nil {
		t.Fatalf("LoadCA of written CA: %v", err)
	}
	if buf.Len() != 0 {
		t.Errorf("LoadCA logged for a 0400 key: %s", buf)
	}

	// Never overwrite.
	other, otherKey, err := NewCA("", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	err = WriteCA(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile), other, otherKey)
	var ee *ExistError
	if !errors.As(err, &ee) || !errors.Is(err, fs.ErrExist) || len(ee.Existing) != 2 || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("second WriteCA error = %v, want an *ExistError naming both files", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, CAKeyFile)); !bytes.Equal(got, kp) {
		t.Error("second WriteCA changed the key")
	}
}

func TestWriteCARefusesPartialExisting(t *testing.T) {
	t.Parallel()
	tests := []struct{ existing, untouched string }{
		{CAKeyFile, CACertFile},
		{CACertFile, CAKeyFile},
	}
	for _, tt := range tests {
		t.Run(tt.existing, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, tt.existing), []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := WriteCA(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile), []byte("cert"), []byte("key"))
			var ee *ExistError
			if !errors.As(err, &ee) || len(ee.Existing) != 1 || ee.Existing[0] != filepath.Join(dir, tt.existing) {
				t.Fatalf("WriteCA over an existing %s: %v, want an *ExistError naming it", tt.existing, err)
			}
			if _, err := os.Lstat(filepath.Join(dir, tt.untouched)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("WriteCA created %s after refusing: %v", tt.untouched, err)
			}
		})
	}
}

func TestWriteCARefusesDanglingSymlink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Symlink(target, filepath.Join(dir, CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if err := WriteCA(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile), []byte("cert"), []byte("key")); err == nil {
		t.Fatal("WriteCA wrote through a symlink")
	}
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("symlink target was created: %v", err)
	}
}

func TestWriteCARejectsEmpty(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := WriteCA(filepath.Join(dir, "c"), filepath.Join(dir, "k"), nil, []byte("k")); err == nil {
		t.Error("WriteCA accepted an empty certificate")
	}
	if err := WriteCA(filepath.Join(dir, "same"), filepath.Join(dir, ".", "same"), []byte("c"), []byte("k")); err == nil {
		t.Error("WriteCA accepted one path for certificate and key")
	}
}

// TestWriteCARemovesPartialFiles: when the certificate cannot be written
// after the key was, the key is removed: no key without its certificate.
func TestWriteCARemovesPartialFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "a", CACertFile), filepath.Join(dir, "b", CAKeyFile)
	failCert := func(name string, flag int, perm fs.FileMode) (*os.File, error) {
		if name == certPath {
			return nil, errors.New("injected failure")
		}
		return os.OpenFile(name, flag, perm)
	}
	err := writeCA(certPath, keyPath, []byte("cert"), []byte("key"), failCert)
	if err == nil || !strings.Contains(err.Error(), "injected failure") || !strings.Contains(err.Error(), certPath) {
		t.Fatalf("writeCA error = %v, want the injected failure naming the certificate path", err)
	}
	for _, p := range []string{certPath, keyPath} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left behind after a failed write: %v", p, err)
		}
	}
}

// FuzzParsePEM: the CA file parsers and the swapped-files hint never panic
// on operator input, and parse errors never repeat the file's bytes.
func FuzzParsePEM(f *testing.F) {
	certPEM, keyPEM, err := NewCA("", time.Hour, time.Now())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(certPEM)
	f.Add(keyPEM)
	f.Add(append(append([]byte{}, certPEM...), keyPEM...))
	f.Add([]byte("-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, err := range []error{
			func() error { _, err := parseCertPEM(data); return err }(),
			func() error { _, err := parseKeyPEM(slices.Clone(data)); return err }(),
		} {
			if err != nil && len(data) >= 16 && strings.Contains(err.Error(), string(data)) {
				t.Fatalf("error repeats the input: %v", err)
			}
		}
		_ = swapHint(data, "PRIVATE KEY", "a private key")
	})
}
