package main

// The benchmark PKI.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"time"
)

// pki writes a bench CA, the origin's certificate (IP SANs 127.0.0.1 and
// ::1, DNS SAN localhost) and nginx's static interception leaf (localhost),
// all ECDSA P-256 like BotBox's issued leaves.
func (r *runner) pki() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "botbox-bench-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	if err := writePEM(r.path("ca.crt"), "CERTIFICATE", caDER); err != nil {
		return err
	}
	leaf := func(name string, serial int64, ips ...net.IP) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "localhost"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
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
		// nginx serves the chain leaf+CA like a real intercepting proxy would not
		// need to; the leaf alone is what BotBox sends too.
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

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
