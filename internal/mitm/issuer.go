package mitm

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"time"
)

// maxCNLength is ub-common-name (RFC 5280 appendix A): a longer CN is
// malformed, so long hosts get only the SAN, which is what clients check.
const maxCNLength = 64

// issue signs a leaf for host (already validated by ValidateSNI) as reference
// §4.4 describes: a fresh ECDSA P-256 key, subject CN = host, exactly one DNS
// SAN = host, keyUsage digitalSignature, extKeyUsage serverAuth, CA:FALSE, a
// random 128-bit serial, NotBefore = now-5m, NotAfter = now+ttl, and the
// chain [leaf, CA].
//
// Two changes from the reference: NotAfter is capped at the CA's NotAfter (a
// leaf outliving its issuer fails verification anyway, and the cache margin
// then sees the real end of life), and an expired CA is an error instead of a
// stream of unverifiable leaves.
func (ca *CA) issue(host string, ttl time.Duration, now time.Time) (*tls.Certificate, error) {
	if !now.Before(ca.cert.NotAfter) {
		return nil, fmt.Errorf("CA certificate expired at %s", ca.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	// A fresh key per leaf: leaves are cheap, and sharing one key across
	// hosts would let one leaked leaf key impersonate every host.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating leaf key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	ski, err := subjectKeyID(key.Public())
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(ttl)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	var subject pkix.Name
	if len(host) <= maxCNLength {
		// Only for old clients: modern ones ignore the CN when a SAN is
		// present. With an empty subject crypto/x509 marks the SAN critical,
		// as RFC 5280 §4.2.1.6 requires.
		subject.CommonName = host
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		// Always a DNS SAN: ValidateSNI refuses IP literals, so a name that
		// looks like an address never gets a DNS SAN (reference §10.3 #14).
		DNSNames:              []string{host},
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
		SubjectKeyId:          ski,
		AuthorityKeyId:        ca.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.signer)
	if err != nil {
		return nil, fmt.Errorf("signing leaf certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing signed leaf certificate: %w", err)
	}
	return &tls.Certificate{
		Certificate: [][]byte{der, ca.cert.Raw},
		PrivateKey:  key,
		Leaf:        leaf,
	}, nil
}
