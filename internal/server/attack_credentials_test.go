package server

// Outside attacks on credential brokering through the whole server
// (attack playbook): each test fails when the hole it names is open.

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/botbox/botbox/internal/testutil/tokenserver"
)

// startGitHub starts a harness whose api.example.test is a verifying
// GitHub token server, with the App key in place and the first token
// minted.
func startGitHub(t *testing.T) (*harness, *tokenserver.Server) {
	t.Helper()
	gh := &tokenserver.Server{AppID: 42, InstallationID: 7, Repositories: []string{"app"}, Permissions: map[string]string{"contents": "read"}}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	gh.AcceptKey(&key.PublicKey)
	h := start(t, harnessOpts{extraYAML: githubCredential, rules: githubRule, origin: gh})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(filepath.Join(h.secretDir, "github-app-key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	h.waitHealth(http.StatusOK)
	return h, gh
}

// Confused deputy on the token endpoint, availability (threat c): the
// rule's host is the GitHub API, which is also where the installation
// token is revoked. An agent that sends DELETE /installation/token
// through the rule has BotBox attach the token to its own revocation:
// every later request of the Pod fails with 401 until BotBox's next
// refresh, up to an hour later. BotBox must refuse it (403
// credential_refused) in every spelling GitHub, or a proxy in front of
// GitHub Enterprise, may route to the same endpoint, and the token must
// stay live.
func TestAttackAgentCannotRevokeTheToken(t *testing.T) {
	t.Parallel()
	h, gh := startGitHub(t)
	if code := status(h.githubGet(t)); code != http.StatusOK {
		t.Fatalf("before: %d", code)
	}
	for _, tc := range []struct{ method, path string }{
		{http.MethodDelete, "/installation/token"},
		{http.MethodDelete, "/installation/token/"},
		{http.MethodDelete, "/Installation/Token"},
		{http.MethodDelete, "//installation//token"},
		{http.MethodDelete, "/installation/./token"},
		{http.MethodDelete, "/x/../installation/token"},
		{http.MethodDelete, "/installation%2Ftoken"},
		{http.MethodDelete, "/installation/%74oken"},
		{http.MethodDelete, "/installation/token.json"},
		{http.MethodDelete, "/installation/token;x=1"},
		{http.MethodPost, "/installation/token"}, // any method: GitHub has nothing else there
	} {
		req, _ := http.NewRequestWithContext(context.Background(), tc.method, "http://"+h.addrs.Proxy[0].String()+tc.path, nil)
		req.Host = "api.example.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusNoContent || gh.Revocations.Load() != 0 {
			t.Fatalf("%s %s revoked BotBox's token (%d revocations, status %d)", tc.method, tc.path, gh.Revocations.Load(), resp.StatusCode)
		}
		if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s %s: status %d (%s), want it refused before the origin", tc.method, tc.path, resp.StatusCode, resp.Header.Get("X-Botbox-Reason"))
		}
	}
	if toks := gh.Issued(); len(toks) != 1 {
		t.Fatalf("%d live tokens, want the one BotBox minted", len(toks))
	}
	if code := status(h.githubGet(t)); code != http.StatusOK {
		t.Fatalf("after the attempts the Pod's requests fail: %d", code)
	}
	// The API's other paths still carry the token.
	if code := status(h.hostGet(t, "api.example.test", "/installation/repositories")); code != http.StatusOK {
		t.Fatalf("GET /installation/repositories: %d", code)
	}
}

// status drains and closes resp and returns its status code.
func status(resp *http.Response) int {
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
