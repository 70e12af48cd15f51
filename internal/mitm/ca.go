package mitm

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const (
	// DefaultCACommonName is the subject CN NewCA uses when given "".
	DefaultCACommonName = "botbox-pod-ca"
	// CACertFile and CAKeyFile are the file names `botbox ca new --out DIR`
	// writes in DIR.
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"

	// backdate is subtracted from "now" for NotBefore of every certificate
	// made here, so that a client whose clock is a little behind ours does
	// not see a certificate from the future.
	backdate = 5 * time.Minute

	// maxPEMFile bounds what LoadCA reads; a CA file is a few KiB.
	maxPEMFile = 1 << 20

	minRSABits = 2048
)

// CA is a loaded, checked interception CA: its certificate and the signer for
// its key. It is immutable and safe for concurrent use.
type CA struct {
	cert   *x509.Certificate
	signer crypto.Signer
}

// Certificate returns the CA certificate (for trust pools in tests and for
// logging its subject). Callers must not modify it.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// LoadCA reads the interception CA at start-up and fails fast on anything
// that would only show up later as broken handshakes.
//
// certPath holds PEM; the first CERTIFICATE block is the CA (other blocks are
// ignored). keyPath holds a PEM private key in PKCS#8 ("PRIVATE KEY"), PKCS#1
// ("RSA PRIVATE KEY") or SEC1 ("EC PRIVATE KEY") form — mislabelled blocks are
// tried in the other forms too, and openssl's "EC PARAMETERS" block is
// skipped. Supported keys: ECDSA P-256/P-384/P-521, RSA ≥ 2048 bits, Ed25519.
// Encrypted keys are refused.
//
// Unlike the reference, LoadCA also checks that the key matches the
// certificate, that the certificate is a CA (basicConstraints CA:TRUE, and
// keyCertSign when a key usage is present) and that it is valid now. A key
// file readable by group or others is logged at WARN (it still loads: the
// file may be on a read-only volume the process cannot fix).
//
// Error messages name the file and never contain key material.
func LoadCA(certPath, keyPath string, logger *slog.Logger) (*CA, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	certPEM, _, err := readPEMFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("failed to read CA cert from '%s': %w", certPath, err)
	}
	keyPEM, mode, err := readPEMFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("failed to read CA key from '%s': %w", keyPath, err)
	}
	defer clear(keyPEM)
	if mode.Perm()&0o044 != 0 {
		logger.Warn("HTTPS interception CA key file is readable by group or others; mount it with mode 0400 and only into BotBox",
			"path", keyPath, "mode", fmt.Sprintf("%#o", mode.Perm()))
	}

	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("failed to decode CA cert PEM from '%s': %w%s", certPath, err, swapHint(certPEM, "PRIVATE KEY", "a private key"))
	}
	signer, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("failed to parse CA key PEM from '%s': %w%s", keyPath, err, swapHint(keyPEM, "CERTIFICATE", "a certificate"))
	}
	if err := checkCA(cert, signer, time.Now()); err != nil {
		return nil, fmt.Errorf("invalid CA certificate '%s' with key '%s': %w", certPath, keyPath, err)
	}
	return &CA{cert: cert, signer: signer}, nil
}

// swapHint returns a hint when data holds a PEM block whose type ends in
// wantSuffix although it was given as the other file of the pair (the
// certificate and key paths swapped), else "". It reads block types only.
func swapHint(data []byte, wantSuffix, what string) string {
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return ""
		}
		clear(block.Bytes)
		if strings.HasSuffix(block.Type, wantSuffix) {
			return " (the file holds " + what + ": are ca_cert_path and ca_key_path swapped?)"
		}
	}
}

// readPEMFile reads a (small) file and returns its mode, taken from the open
// descriptor so that it describes the file actually read (Kubernetes mounts
// secrets through symlinks).
func readPEMFile(path string) ([]byte, fs.FileMode, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("not a regular file (mode %s)", fi.Mode())
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPEMFile+1))
	if err != nil {
		return nil, 0, err
	}
	if len(data) > maxPEMFile {
		clear(data)
		return nil, 0, fmt.Errorf("file is larger than %d bytes", maxPEMFile)
	}
	return data, fi.Mode(), nil
}

// parseCertPEM returns the first CERTIFICATE block of data.
func parseCertPEM(data []byte) (*x509.Certificate, error) {
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no CERTIFICATE block found")
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing certificate: %w", err)
		}
		return cert, nil
	}
}

// parseKeyPEM returns the first private key block of data as a signer. Errors
// come from crypto/x509 and encoding/asn1, which describe structure, never
// the bytes; the block contents are zeroed after parsing.
func parseKeyPEM(data []byte) (crypto.Signer, error) {
	// A block is tried with its own label's parser first and then with the
	// others, because mislabelled keys (PKCS#1 under "PRIVATE KEY") are
	// common in hand-made CAs.
	keyParsers := [...]struct {
		label string
		parse func([]byte) (any, error)
	}{
		{"PRIVATE KEY", x509.ParsePKCS8PrivateKey},
		{"EC PRIVATE KEY", func(b []byte) (any, error) { return x509.ParseECPrivateKey(b) }},
		{"RSA PRIVATE KEY", func(b []byte) (any, error) { return x509.ParsePKCS1PrivateKey(b) }},
	}
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY block found")
		}
		if block.Type == "ENCRYPTED PRIVATE KEY" || block.Headers["Proc-Type"] != "" {
			clear(block.Bytes)
			return nil, errors.New("encrypted private keys are not supported; decrypt it (openssl pkey -in enc.key -out ca.key)")
		}
		first := -1
		for i, p := range keyParsers {
			if p.label == block.Type {
				first = i
			}
		}
		if first < 0 {
			continue // e.g. "EC PARAMETERS" written by `openssl ecparam -genkey`
		}
		key, err := keyParsers[first].parse(block.Bytes)
		for i := 0; err != nil && i < len(keyParsers); i++ {
			if i == first {
				continue
			}
			if k, err2 := keyParsers[i].parse(block.Bytes); err2 == nil {
				key, err = k, nil
			}
		}
		clear(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing %s block (tried PKCS#8, SEC1 and PKCS#1): %w", block.Type, err)
		}
		return checkKey(key)
	}
}

// checkKey accepts the key types the issuer can sign with.
func checkKey(key any) (crypto.Signer, error) {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return k, nil
		}
		return nil, fmt.Errorf("unsupported ECDSA curve %s", k.Curve.Params().Name)
	case *rsa.PrivateKey:
		if n := k.N.BitLen(); n < minRSABits {
			return nil, fmt.Errorf("RSA key has %d bits, fewer than %d", n, minRSABits)
		}
		return k, nil
	case ed25519.PrivateKey:
		return k, nil
	default:
		return nil, fmt.Errorf("unsupported key type %T (want ECDSA, RSA or Ed25519)", key)
	}
}

// checkCA verifies what the reference leaves to chance: key and certificate
// belong together, the certificate may sign certificates, and it is valid at
// now.
func checkCA(cert *x509.Certificate, signer crypto.Signer, now time.Time) error {
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return errors.New("private key does not match the certificate's public key")
	}
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return errors.New("certificate is not a CA (basicConstraints CA:TRUE missing)")
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return errors.New("certificate key usage does not include keyCertSign")
	}
	if now.Before(cert.NotBefore) {
		return fmt.Errorf("certificate is not valid before %s", cert.NotBefore.UTC().Format(time.RFC3339))
	}
	if now.After(cert.NotAfter) {
		return fmt.Errorf("certificate expired at %s", cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// NewCA creates a development interception CA (for `botbox ca new`): an
// ECDSA P-256 key and a self-signed certificate with subject CN commonName
// (DefaultCACommonName when empty), valid from now-5m for validity.
//
// The certificate has basicConstraints CA:TRUE with pathlen 0 (MaxPathLenZero:
// it may sign leaves but no intermediate, so a stolen key cannot mint a
// sub-CA that clients would accept), key usage keyCertSign|cRLSign, a
// SubjectKeyId (leaves point at it through AuthorityKeyId) and a random
// 128-bit serial. keyPEM is PKCS#8 ("PRIVATE KEY").
func NewCA(commonName string, validity time.Duration, now time.Time) (certPEM, keyPEM []byte, err error) {
	if validity <= 0 {
		return nil, nil, fmt.Errorf("creating CA: validity %s is not positive", validity)
	}
	if commonName == "" {
		commonName = DefaultCACommonName
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("creating CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, fmt.Errorf("creating CA: %w", err)
	}
	ski, err := subjectKeyID(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("creating CA: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		SubjectKeyId:          ski,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding CA key: %w", err)
	}
	defer clear(pkcs8)
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
	return certPEM, keyPEM, nil
}

// WriteCA writes certPEM to certPath (mode 0444) and keyPEM to keyPath
// (mode 0400), creating missing parent directories (0755). It is what
// `botbox ca new` uses.
//
// It refuses to overwrite: if either file exists (even as a dangling
// symlink) it writes nothing and returns an *ExistError, which wraps
// fs.ErrExist. Replacing a CA silently would break every client that trusts
// the old one, and an O_EXCL create never follows a planted symlink. Each
// file is fsynced, with its directory, before WriteCA returns. The key is
// written first; if anything fails, the files written so far are removed,
// so a failed call leaves neither a certificate without its key nor a
// partial file.
func WriteCA(certPath, keyPath string, certPEM, keyPEM []byte) error {
	return writeCA(certPath, keyPath, certPEM, keyPEM, os.OpenFile)
}

// ExistError is WriteCA's refusal to overwrite. Existing lists the paths
// that exist (one or both).
type ExistError struct {
	Existing []string
}

func (e *ExistError) Error() string {
	return fmt.Sprintf("writing CA: refusing to overwrite existing %s", strings.Join(e.Existing, " and "))
}

// Unwrap makes errors.Is(err, fs.ErrExist) true.
func (e *ExistError) Unwrap() error { return fs.ErrExist }

// openFunc is os.OpenFile; tests inject failures through it.
type openFunc func(name string, flag int, perm fs.FileMode) (*os.File, error)

func writeCA(certPath, keyPath string, certPEM, keyPEM []byte, open openFunc) error {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return errors.New("writing CA: empty certificate or key")
	}
	if filepath.Clean(certPath) == filepath.Clean(keyPath) {
		return fmt.Errorf("writing CA: certificate and key paths are the same (%s)", certPath)
	}
	var existing []string
	for _, p := range []string{certPath, keyPath} {
		if _, err := os.Lstat(p); err == nil {
			existing = append(existing, p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("writing CA: %w", err)
		}
	}
	if len(existing) > 0 {
		return &ExistError{Existing: existing}
	}
	for _, p := range []string{certPath, keyPath} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("writing CA: creating directory: %w", err)
		}
	}
	if err := writeExclusive(keyPath, keyPEM, 0o400, open); err != nil {
		return fmt.Errorf("writing CA key %s: %w", keyPath, err)
	}
	if err := writeExclusive(certPath, certPEM, 0o444, open); err != nil {
		_ = os.Remove(keyPath)
		return fmt.Errorf("writing CA certificate %s: %w", certPath, err)
	}
	for _, dir := range []string{filepath.Dir(keyPath), filepath.Dir(certPath)} {
		if err := syncDir(dir); err != nil {
			_ = os.Remove(certPath)
			_ = os.Remove(keyPath)
			return fmt.Errorf("writing CA: %w", err)
		}
	}
	return nil
}

// writeExclusive creates path (failing if it exists), writes data, sets
// mode explicitly so that the umask cannot change it, and fsyncs. On error
// the file is removed.
func writeExclusive(path string, data []byte, mode fs.FileMode, open openFunc) (err error) {
	f, err := open(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	return f.Sync()
}

// syncDir fsyncs a directory so that the new entries in it survive a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// randomSerial returns a random serial in [1, 2^128): 128 random bits (the
// CA/B Forum asks for at least 64 bits of entropy; RFC 5280 allows up to 20
// octets, and a positive 128-bit value always fits).
func randomSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("generating serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// subjectKeyID is RFC 7093 §2 method 1: the leftmost 160 bits of the SHA-256
// of the subjectPublicKey BIT STRING.
func subjectKeyID(pub crypto.PublicKey) ([]byte, error) {
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encoding public key: %w", err)
	}
	var info struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(spki, &info); err != nil {
		return nil, fmt.Errorf("decoding public key: %w", err)
	}
	sum := sha256.Sum256(info.PublicKey.Bytes)
	return sum[:20], nil
}
