package broker

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/credential"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/testutil/tokenserver"
	"github.com/botbox/botbox/internal/upstream"
)

// TestNewClientRefusesRedirectsAndCleartext: a token request carries the
// client secret or a signed assertion; the client follows no redirect and
// speaks only https, and every dial carries the dial policy.
func TestNewClientRefusesRedirectsAndCleartext(t *testing.T) {
	t.Parallel()
	elsewhere := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the redirect was followed")
	}))
	defer elsewhere.Close()
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/token", http.StatusTemporaryRedirect)
	}))
	defer ts.Close()
	var hosts []string
	c := NewClient(ts.Client().Transport, func(host string) upstream.DialPolicy {
		hosts = append(hosts, host)
		return upstream.DialPolicy{Host: host}
	})
	resp, err := c.Post(ts.URL+"/token", "application/x-www-form-urlencoded", strings.NewReader("client_secret=s"))
	if err == nil {
		resp.Body.Close()
		t.Fatal("a redirect of a token request was followed")
	}
	if len(hosts) != 1 || hosts[0] != "127.0.0.1" {
		t.Errorf("dial policies asked for %v, want the endpoint's host once", hosts)
	}
	if _, err := c.Get("http://127.0.0.1:1/token"); err == nil || !strings.Contains(err.Error(), "not https") {
		t.Errorf("cleartext token endpoint: %v", err)
	}
}

// TestBrokerReadyAndTokens: readiness waits for the first token of every
// minted credential; Injected lists every minted token, the same set
// until one changes; Run revokes at its end.
func TestBrokerReadyAndTokens(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	gh := &tokenserver.Server{AppID: 1, InstallationID: 2}
	gh.AcceptKey(&key.PublicKey)
	ts := httptest.NewTLSServer(gh)
	defer ts.Close()
	snap := secrets.NewSnapshot(map[string]secrets.Value{
		"k": secrets.NewValue(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})),
	})
	b, err := New(Options{
		Credentials: []config.Credential{
			{Name: "gh", Type: config.CredentialGitHubApp, AppID: 1, InstallationID: 2, PrivateKeyRef: "k", APIURL: ts.URL},
			{Name: "aws", Type: config.CredentialAWSSigV4, AccessKeyIDRef: "a", SecretAccessKeyRef: "s", Region: "us-east-1", Service: "s3"},
		},
		Secrets: func() credential.Lookup { return snap },
		Client:  ts.Client(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if b.Ready() || b.Injected() != nil {
		t.Fatal("ready, or tokens, before the first mint")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !b.Ready() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	inj := b.Injected()
	if !b.Ready() || inj == nil || len(inj.Values) != 1 || inj.Refs[0] != "gh" || b.Injected() != inj {
		t.Fatalf("ready %v, tokens %v", b.Ready(), inj)
	}
	if c, ok := b.Credential("aws"); !ok || c.Type() != "aws_sigv4" {
		t.Fatal("the aws credential is missing")
	}
	cancel()
	if err := <-done; err != nil || gh.Revocations.Load() != 1 {
		t.Fatalf("Run: %v, %d revocations", err, gh.Revocations.Load())
	}
}
