package main

// The benchmark PKI: the CA is made by mitm.NewCA, the code behind `botbox ca new`.

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"

	"github.com/botbox/botbox/internal/mitm"
)

// pki writes a bench CA (ca.crt; the key stays in memory), the origin's
// certificate (IP SANs 127.0.0.1 and ::1, DNS SAN localhost) and nginx's
// static interception leaf (localhost), all ECDSA P-256 like BotBox's
// issued leaves.
func (r *runner) pki() error {
	now := time.Now()
	caPEM, caKeyPEM, err := mitm.NewCA("botbox-bench-ca", 48*time.Hour, now)
	if err != nil {
		return err
	}
	caCert, caKey, err := parsePair(caPEM, caKeyPEM)
	if err != nil {
		return fmt.Errorf("bench CA: %w", err)
	}
	if err := os.WriteFile(r.path("ca.crt"), caPEM, 0o600); err != nil {
		return err
	}
	leaf := func(name string, serial int64, ips ...net.IP) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "localhost"},
			NotBefore: now.Add(-time.Minute), NotAfter: now.Add(47 * time.Hour),
			DNSNames: []string{"localhost"}, IPAddresses: ips,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		// The leaf alone, as BotBox sends it: clients trust ca.crt.
		if err := writePEM(r.path(name+".crt"), "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(r.path(name+".key"), "PRIVATE KEY", keyDER)
	}
	if err := leaf("origin", 2, net.ParseIP("127.0.0.1"), net.ParseIP("::1")); err != nil {
		return err
	}
	return leaf("nginx-leaf", 3)
}

// parsePair decodes the PEM certificate and PKCS#8 key that mitm.NewCA returns.
func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("no PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("key type %T cannot sign", k)
	}
	return cert, signer, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
