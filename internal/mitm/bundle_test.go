package mitm

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// TestTrustBundle: every unconstrained embedded root, then the CA last;
// every block parses; a constrained root is never written without its
// constraint.
func TestTrustBundle(t *testing.T) {
	certPEM, _, err := NewCA("test", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	data, err := TrustBundle(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	var ders [][]byte
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			t.Fatalf("block %d: %v", len(ders), err)
		}
		ders = append(ders, b.Bytes)
	}
	want, constrained := 0, 0
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			constrained++
			for _, d := range ders {
				if bytes.Equal(d, r.Certificate) {
					t.Error("a constrained root was written without its constraint")
				}
			}
			continue
		}
		want++
	}
	if len(ders) != want+1 || want < 100 {
		t.Fatalf("%d certificates, want %d roots + the CA", len(ders), want)
	}
	caBlock, _ := pem.Decode(certPEM)
	if !bytes.Equal(ders[len(ders)-1], caBlock.Bytes) {
		t.Error("the CA is not the bundle's last certificate")
	}
	if _, err := TrustBundle([]byte("not a certificate")); err == nil {
		t.Error("TrustBundle accepted a non-certificate")
	}
	t.Logf("%d roots, %d constrained left out", want, constrained)
}

// TestWriteTrustBundle: mode 0444, replaced on a second run (a read-only
// previous bundle is no obstacle), no temporary file left behind.
func TestWriteTrustBundle(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "key", "ca.key")
	out := filepath.Join(dir, "ca-bundle.crt")
	for i := range 2 {
		certPEM, keyPEM, err := NewCA("test", time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(certPath)
		os.Remove(keyPath)
		if err := WriteCA(certPath, keyPath, certPEM, keyPEM); err != nil {
			t.Fatal(err)
		}
		if err := WriteTrustBundle(out, certPath); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		data, _ := os.ReadFile(out)
		if !bytes.HasSuffix(data, append(bytes.TrimSpace(certPEM), '\n')) {
			t.Errorf("run %d: the bundle does not end with the current CA", i)
		}
		if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o444 {
			t.Errorf("mode %v, want 0444", fi.Mode().Perm())
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Errorf("directory holds %d entries, want ca.crt, key/, ca-bundle.crt", len(entries))
	}
	if err := WriteTrustBundle(out, filepath.Join(dir, "missing.crt")); err == nil {
		t.Error("no error for a missing CA certificate")
	}
}
