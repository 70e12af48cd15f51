package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/testutil/testpki"
)

func TestRootPoolAddsCAFile(t *testing.T) {
	ca := testpki.NewCA(t, "extra-root")
	dir := t.TempDir()
	certPath, _ := ca.WriteFiles(t, dir)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.Proto) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, "127.0.0.1")}}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()

	tr, err := NewTransport(Options{CAFile: certPath})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatalf("origin signed by upstream_ca_file not trusted: %v", err)
	}
	defer resp.Body.Close()
	if resp.Proto != "HTTP/2.0" {
		t.Errorf("proto %s, want HTTP/2.0 when the origin offers h2", resp.Proto)
	}

	// Without the extra root the same origin is refused: verification is on.
	tr2, err := NewTransport(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr2.CloseIdleConnections()
	if _, err := (&http.Client{Transport: tr2}).Get(srv.URL); err == nil {
		t.Error("origin with an unknown CA accepted")
	}
}

func TestRootPoolErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "missing.pem"), garbage} {
		_, err := RootPool(p)
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("RootPool(%s) = %v, want an error naming the file", p, err)
		}
	}
}

func TestNoProxyFromEnvironment(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
	tr, err := NewTransport(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.base.Proxy != nil {
		t.Error("the upstream transport must not honour proxy variables: BotBox is the egress point")
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestIsTimeout(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("wrapped: %w", timeoutErr{}), true},
		{&net.OpError{Op: "dial", Err: timeoutErr{}}, true},
		{errors.New("connection refused"), false},
		{context.Canceled, false},
	}
	for _, tt := range tests {
		if got := IsTimeout(tt.err); got != tt.want {
			t.Errorf("IsTimeout(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestResponseHeaderTimeoutIsATimeout(t *testing.T) {
	ca := testpki.NewCA(t, "rht")
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, "127.0.0.1")}}
	srv.StartTLS()
	defer srv.Close()
	defer close(release)
	tr, err := NewTransport(Options{RootCAs: ca.Pool(), ResponseHeaderTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	_, err = (&http.Client{Transport: tr}).Get(srv.URL)
	if err == nil || !IsTimeout(err) {
		t.Fatalf("err = %v, want a timeout", err)
	}
}
