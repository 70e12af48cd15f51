package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
)

// testCA issues serving certificates for 127.0.0.1.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue writes a leaf for 127.0.0.1 with serial n to certFile/keyFile.
func (ca *testCA) issue(t *testing.T, n int64, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: "botbox-webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	// Written to temporary names and renamed, as kubelet's atomic writer does.
	for _, f := range []struct {
		path string
		blk  *pem.Block
	}{{keyFile, &pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}}, {certFile, &pem.Block{Type: "CERTIFICATE", Bytes: der}}} {
		tmp := f.path + ".tmp"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(f.blk), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f.path); err != nil {
			t.Fatal(err)
		}
	}
}

func serial(t *testing.T, c *tls.Certificate) int64 {
	t.Helper()
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.Int64()
}

// TestCertReloader: a renewed pair is served after the next check; a
// broken pair is counted and the previous one kept. The clock is the
// test's, so no test waits for the check interval.
func TestCertReloader(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca := newTestCA(t)
	ca.issue(t, 10, certFile, keyFile)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	r, err := NewCertReloader(certFile, keyFile, slog.New(slog.DiscardHandler), m)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	r.checked = now
	get := func() int64 {
		c, err := r.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return serial(t, c)
	}
	if got := get(); got != 10 {
		t.Fatalf("serial %d, want 10", got)
	}
	ca.issue(t, 11, certFile, keyFile)
	if got := get(); got != 10 {
		t.Errorf("reloaded before the interval: serial %d", got)
	}
	now = now.Add(r.interval)
	if got := get(); got != 11 {
		t.Errorf("after renewal: serial %d, want 11", got)
	}
	if err := os.WriteFile(certFile, []byte("half a PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(r.interval)
	if got := get(); got != 11 {
		t.Errorf("after a broken write: serial %d, want the previous 11", got)
	}
	if f := testutil.ToFloat64(m.reloads.WithLabelValues("failure")); f != 1 {
		t.Errorf("failure reloads %v, want 1", f)
	}
	if s := testutil.ToFloat64(m.reloads.WithLabelValues("success")); s != 1 {
		t.Errorf("successful reloads %v, want 1", s)
	}
}

// TestServe runs the real server on loopback: HTTPS with the files'
// certificate (verified against the test CA), /healthz on both listeners,
// a review, its counter on /metrics, and a clean shutdown.
func TestServe(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca := newTestCA(t)
	ca.issue(t, 20, certFile, keyFile)
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan []net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, Config{Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile,
			Options: testOptions(), Logger: slog.New(slog.DiscardHandler), Ready: func(a []net.Addr) { ready <- a }})
	}()
	var addrs []net.Addr
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatalf("Serve: %v", err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}}}
	get := func(url string) string {
		resp, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", url, resp.Status)
		}
		return string(b)
	}
	get("https://" + addrs[0].String() + PathHealthz)
	get("http://" + addrs[1].String() + PathHealthz)

	_, body := readReview(t, "testdata/create-pod.json")
	resp, err := client.Post("https://"+addrs[0].String()+PathMutate, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var rev admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&rev); err != nil || !rev.Response.Allowed {
		t.Fatalf("review over the real server: %v %+v", err, rev.Response)
	}
	resp.Body.Close()
	metrics := get("http://" + addrs[1].String() + PathMetrics)
	if !strings.Contains(metrics, `botbox_webhook_reviews_total{endpoint="mutate",result="patched"} 1`) {
		t.Errorf("/metrics lacks the review:\n%s", metrics)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve returned %v after cancel", err)
	}
}

// TestServeRefusesBadFiles: a missing or broken certificate is fatal at start.
func TestServeRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, files := range [][2]string{{filepath.Join(dir, "missing"), bad}, {bad, bad}} {
		err := Serve(t.Context(), Config{Listen: "127.0.0.1:0", CertFile: files[0], KeyFile: files[1],
			Options: testOptions(), Logger: slog.New(slog.DiscardHandler)})
		if err == nil || !strings.Contains(err.Error(), "serving certificate") {
			t.Errorf("Serve(%v) = %v, want a serving-certificate error", files, err)
		}
	}
}
