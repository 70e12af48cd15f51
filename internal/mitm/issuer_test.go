package mitm

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/asn1"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestLeafFields is reference §4.4 / §9.7
// https_interception_leaf_certificate_contains_san_dns_expected_validity_and_ca_issuer,
// checked with crypto/x509 instead of openssl.
func TestLeafFields(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	const ttl = 86400 * time.Second
	for _, host := range []string{"localhost", "api.openai.com", "xn--bcher-kva.example"} {
		t.Run(host, func(t *testing.T) {
			t.Parallel()
			now := time.Now()
			cert, err := ca.issue(host, ttl, now)
			if err != nil {
				t.Fatalf("issue(%q): %v", host, err)
			}
			leaf := cert.Leaf
			if leaf == nil {
				t.Fatal("tls.Certificate.Leaf is nil")
			}
			if len(cert.Certificate) != 2 || !bytes.Equal(cert.Certificate[0], leaf.Raw) || !bytes.Equal(cert.Certificate[1], ca.cert.Raw) {
				t.Fatal("chain is not [leaf, CA]")
			}
			got := struct {
				CN         string
				DNSNames   []string
				IPs        int
				URIs       int
				Emails     int
				IsCA       bool
				BCValid    bool
				KeyUsage   x509.KeyUsage
				ExtKeyUse  []x509.ExtKeyUsage
				SigAlg     x509.SignatureAlgorithm
				PubAlg     x509.PublicKeyAlgorithm
				Issuer     string
				AuthKeyID  []byte
				SubjKeyLen int
			}{leaf.Subject.CommonName, leaf.DNSNames, len(leaf.IPAddresses), len(leaf.URIs), len(leaf.EmailAddresses),
				leaf.IsCA, leaf.BasicConstraintsValid, leaf.KeyUsage, leaf.ExtKeyUsage, leaf.SignatureAlgorithm,
				leaf.PublicKeyAlgorithm, leaf.Issuer.String(), leaf.AuthorityKeyId, len(leaf.SubjectKeyId)}
			want := got
			want.CN, want.DNSNames, want.IPs, want.URIs, want.Emails = host, []string{host}, 0, 0, 0
			want.IsCA, want.BCValid = false, true
			want.KeyUsage, want.ExtKeyUse = x509.KeyUsageDigitalSignature, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			want.SigAlg, want.PubAlg = x509.ECDSAWithSHA256, x509.ECDSA
			want.Issuer, want.AuthKeyID, want.SubjKeyLen = ca.cert.Subject.String(), ca.cert.SubjectKeyId, 20
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("leaf for %q (-want +got):\n%s", host, d)
			}
			if !bytes.Equal(leaf.RawIssuer, ca.cert.RawSubject) {
				t.Error("leaf issuer DN is not the CA subject DN")
			}
			if len(leaf.Subject.Names) != 1 {
				t.Errorf("subject has %d attributes, want only CN", len(leaf.Subject.Names))
			}
			key, ok := cert.PrivateKey.(*ecdsa.PrivateKey)
			if !ok || key.Curve != elliptic.P256() || !key.PublicKey.Equal(leaf.PublicKey) {
				t.Errorf("private key is %T, want the leaf's ECDSA P-256 key", cert.PrivateKey)
			}
			if leaf.SerialNumber.Sign() <= 0 || leaf.SerialNumber.BitLen() > 128 {
				t.Errorf("serial %v is not a positive 128-bit value", leaf.SerialNumber)
			}

			// Validity: ≥ 80000 s left and < 200000 s (reference test), backdated 5 min.
			if left := leaf.NotAfter.Sub(now); left < 80000*time.Second || left >= 200000*time.Second {
				t.Errorf("NotAfter - now = %v, want in [80000s, 200000s)", left)
			}
			if d := now.Add(-5 * time.Minute).Sub(leaf.NotBefore); d < 0 || d >= time.Second {
				t.Errorf("NotBefore = %v, want now-5m (%v) to the second", leaf.NotBefore, now.Add(-5*time.Minute))
			}
			if d := now.Add(ttl).Sub(leaf.NotAfter); d < 0 || d >= time.Second {
				t.Errorf("NotAfter = %v, want now+TTL (%v) to the second", leaf.NotAfter, now.Add(ttl))
			}

			// `openssl verify` equivalent: chains to the CA for serverAuth,
			// also for a client whose clock is 4 minutes behind.
			for _, at := range []time.Time{now, now.Add(-4 * time.Minute), now.Add(ttl - time.Minute)} {
				if _, err := leaf.Verify(x509.VerifyOptions{
					DNSName: host, Roots: ca.pool(), CurrentTime: at,
					KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
				}); err != nil {
					t.Errorf("Verify at %v: %v", at, err)
				}
			}
			if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "other.example", Roots: ca.pool(), CurrentTime: now}); err == nil {
				t.Error("leaf verifies for another host")
			}
			// A leaf cannot sign: pathlen 0 on the CA plus CA:FALSE here.
			if err := leaf.CheckSignatureFrom(leaf); err == nil {
				t.Error("leaf can act as an issuer")
			}
		})
	}
}

func TestLeafSerialsAndKeysAreFresh(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	serials := map[string]bool{}
	keys := map[string]bool{}
	for range 20 {
		c, err := ca.issue("api.openai.com", time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		serials[c.Leaf.SerialNumber.String()] = true
		keys[string(c.Leaf.SubjectKeyId)] = true
	}
	if len(serials) != 20 || len(keys) != 20 {
		t.Errorf("20 issuances gave %d serials and %d keys, want 20 each", len(serials), len(keys))
	}
}

func TestLeafLongHostOmitsCN(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	host := name253()
	c, err := ca.issue(host, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if c.Leaf.Subject.CommonName != "" || len(c.Leaf.DNSNames) != 1 || c.Leaf.DNSNames[0] != host {
		t.Errorf("CN %q, SANs %q", c.Leaf.Subject.CommonName, c.Leaf.DNSNames)
	}
	sanOID := asn1.ObjectIdentifier{2, 5, 29, 17}
	for _, e := range c.Leaf.Extensions {
		if e.Id.Equal(sanOID) && !e.Critical {
			t.Error("SAN is not critical although the subject is empty (RFC 5280 §4.2.1.6)")
		}
	}
	if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: ca.pool()}); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

func TestLeafCappedAtCANotAfter(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	now := ca.cert.NotAfter.Add(-time.Hour)
	c, err := ca.issue("api.openai.com", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Leaf.NotAfter.Equal(ca.cert.NotAfter) {
		t.Errorf("leaf NotAfter %v, want the CA's %v", c.Leaf.NotAfter, ca.cert.NotAfter)
	}
}

func TestIssueWithExpiredCA(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	_, err := ca.issue("api.openai.com", time.Hour, ca.cert.NotAfter.Add(time.Second))
	if err == nil || !strings.Contains(err.Error(), "CA certificate expired") {
		t.Fatalf("issue after CA expiry: err = %v", err)
	}
}
